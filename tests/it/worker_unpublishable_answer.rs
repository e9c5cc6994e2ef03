//! A command whose answer cannot be published does not stall its
//! partition: the worker answers with a small `internal` error where it
//! can, dead-letters the command saying why, commits and goes on to the
//! next command of the same conversation. A handler that panics fails its
//! one command the same way. On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agdx::wire::{AgentId, DeadLetter, DeadLetterReason, ErrorCode};
use agdx::worker::{EchoHandler, HandlerError, HandlerReply, handler_fn};
use agdx::{Answer, AskError, CommandRequest};
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// A handler that counts its calls, then does what `f` says.
fn counted<F, Fut>(calls: &Arc<AtomicU32>, f: F) -> impl agdx::worker::Handler
where
    F: Fn(agdx::worker::Request) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<HandlerReply, HandlerError>> + Send + 'static,
{
    let calls = calls.clone();
    handler_fn(move |request| {
        calls.fetch_add(1, Ordering::SeqCst);
        f(request)
    })
}

/// Asks `operation` in `conversation` as `source`.
async fn ask(
    fabric: &Fabric,
    source: &AgentId,
    conversation: agdx::wire::ConversationId,
    operation: &str,
    body: &[u8],
) -> Result<Answer, AskError> {
    let requester = agdx::Requester::new(agdx::Producer::new(
        fabric.log.clone(),
        fabric.topology.clone(),
        source.clone(),
    ));
    let request = CommandRequest::new(operation, body.to_vec())
        .to(agent_id("worker"))
        .conversation(conversation);
    requester.ask(request, ANSWER).await
}

/// The one dead letter whose payload decodes to a command with `body`.
async fn dead_letter_for(fabric: &Fabric, body: &[u8]) -> DeadLetter {
    eventually("the dead letter", || async {
        let mut found: Vec<DeadLetter> = fabric
            .dead_letters()
            .await
            .into_iter()
            .filter(|d| agdx::wire::AgentEnvelope::decode(&d.payload).is_ok_and(|e| e.body == body))
            .collect();
        assert!(found.len() <= 1, "one command, one dead letter");
        found.pop()
    })
    .await
}

fn internal_error(answer: Result<Answer, AskError>) -> agdx::wire::ErrorBody {
    match answer {
        Err(AskError::Remote(error)) => {
            assert_eq!(error.code, ErrorCode::Internal, "{error:?}");
            error
        }
        other => panic!("expected an internal error reply, got {other:?}"),
    }
}

fn echoed(answer: Result<Answer, AskError>, body: &[u8]) {
    match answer {
        Ok(Answer::Response(reply)) => assert_eq!(reply.body, body),
        other => panic!("expected the echo of {body:?}, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_too_long_for_a_header_value_still_gets_its_answer() {
    on_every_fabric("long-source", |fabric| async move {
        let worker = Running::start(fabric.worker("worker").handle("echo", EchoHandler));
        // A legal agent id of 256 bytes: the reply's `agdx.to` routing hint
        // cannot carry it (header values hold 255), the envelope can.
        let source = agent_id(&"s".repeat(256));
        let conversation = agdx::new_conversation_id();
        echoed(
            ask(&fabric, &source, conversation, "echo", b"one").await,
            b"one",
        );
        echoed(
            ask(&fabric, &source, conversation, "echo", b"two").await,
            b"two",
        );
        let responses = fabric.responses().await;
        assert_eq!(responses.len(), 2, "each command answered once");
        assert!(responses.iter().all(|r| r.target.as_ref() == Some(&source)));
        assert!(fabric.dead_letters().await.is_empty());
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_over_the_record_limit_becomes_an_internal_error_and_the_conversation_goes_on() {
    on_every_fabric("huge-reply", |fabric| async move {
        let calls = Arc::new(AtomicU32::new(0));
        let limit = fabric.log.max_record_bytes();
        let huge = counted(&calls, move |_| async move {
            Ok(HandlerReply::raw(vec![b'x'; limit + 1]))
        });
        let worker = Running::start(
            fabric
                .worker("worker")
                .handle("huge", huge)
                .handle("echo", EchoHandler),
        );
        let source = agent_id("asker");
        let conversation = agdx::new_conversation_id();
        let error = internal_error(ask(&fabric, &source, conversation, "huge", b"big one").await);
        let message = error.message.unwrap_or_default();
        assert!(message.contains("could not publish"), "{message}");
        assert!(message.contains("exceeds the log's limit"), "{message}");
        echoed(
            ask(&fabric, &source, conversation, "echo", b"next").await,
            b"next",
        );
        let capsule = dead_letter_for(&fabric, b"big one").await;
        assert_eq!(capsule.reason, DeadLetterReason::Rejected);
        assert!(
            capsule
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("exceeds the log's limit")),
            "{capsule:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "the handler ran once");
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enormous_failure_message_is_cut_to_a_note_in_the_reply_and_the_dead_letter() {
    on_every_fabric("huge-failure", |fabric| async move {
        let calls = Arc::new(AtomicU32::new(0));
        let limit = fabric.log.max_record_bytes();
        // Like the whole stderr of an `--exec` handler: more than a record holds.
        let fail = counted(&calls, move |_| async move {
            Err(HandlerError::fatal("e".repeat(limit + 1)))
        });
        let worker = Running::start(
            fabric
                .worker("worker")
                .handle("fail", fail)
                .handle("echo", EchoHandler),
        );
        let source = agent_id("asker");
        let conversation = agdx::new_conversation_id();
        let error = match ask(&fabric, &source, conversation, "fail", b"doomed").await {
            Err(AskError::Remote(error)) => error,
            other => panic!("expected an error reply, got {other:?}"),
        };
        assert_eq!(
            error.code,
            ErrorCode::InvalidRequest,
            "the handler's own code"
        );
        let message = error.message.unwrap_or_default();
        assert!(message.len() <= agdx::MAX_DETAIL_BYTES, "{}", message.len());
        assert!(message.starts_with("eeee") && message.ends_with("more bytes cut]"));
        echoed(
            ask(&fabric, &source, conversation, "echo", b"next").await,
            b"next",
        );
        let capsule = dead_letter_for(&fabric, b"doomed").await;
        assert!(capsule.detail.unwrap_or_default().len() <= agdx::MAX_DETAIL_BYTES);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_fails_its_command_once_and_the_conversation_goes_on() {
    on_every_fabric("panic", |fabric| async move {
        let calls = Arc::new(AtomicU32::new(0));
        let boom = counted(&calls, |_| async { panic!("the ledger is inconsistent") });
        let worker = Running::start(
            fabric
                .worker("worker")
                .handle("boom", boom)
                .handle("echo", EchoHandler),
        );
        let source = agent_id("asker");
        let conversation = agdx::new_conversation_id();
        echoed(
            ask(&fabric, &source, conversation, "echo", b"before").await,
            b"before",
        );
        let error = internal_error(ask(&fabric, &source, conversation, "boom", b"explode").await);
        assert_eq!(
            error.message.as_deref(),
            Some("the handler panicked: the ledger is inconsistent")
        );
        assert!(!error.retryable);
        echoed(
            ask(&fabric, &source, conversation, "echo", b"after").await,
            b"after",
        );
        let capsule = dead_letter_for(&fabric, b"explode").await;
        assert_eq!(capsule.reason, DeadLetterReason::Rejected);
        assert!(
            capsule
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("the handler panicked: the ledger is inconsistent")),
            "{capsule:?}"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1, "a panic is not retried");
        let responses = fabric.responses().await;
        assert_eq!(responses.len(), 3, "nothing handled twice: {responses:?}");
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_too_large_to_carry_in_a_dead_letter_is_set_aside_without_its_bytes() {
    on_every_fabric("huge-poison", |fabric| async move {
        let worker = Running::start(fabric.worker("worker").handle("echo", EchoHandler));
        // Undecodable bytes of exactly the largest record the log takes: the
        // capsule around them (position, reason, detail) cannot fit.
        let limit = fabric.log.max_record_bytes();
        let garbage = vec![0xff; limit];
        let conversation = agdx::new_conversation_id();
        let partition = agdx::routing::partition_of(&fabric.topology.commands, conversation);
        fabric
            .log
            .append(
                &fabric.topology.commands,
                partition,
                vec![agdx::log::OutgoingRecord {
                    headers: Vec::new(),
                    payload: garbage.into(),
                }],
            )
            .await
            .expect("append the poison record");
        echoed(
            ask(
                &fabric,
                &agent_id("asker"),
                conversation,
                "echo",
                b"behind it",
            )
            .await,
            b"behind it",
        );
        // The reply and the dead letter go out in one flush, to two topics:
        // the reply can be read first.
        let capsules = eventually("the dead letter", || async {
            let capsules = fabric.dead_letters().await;
            (!capsules.is_empty()).then_some(capsules)
        })
        .await;
        assert_eq!(capsules.len(), 1);
        let capsule = &capsules[0];
        assert_eq!(capsule.reason, DeadLetterReason::DecodeFailed);
        assert!(capsule.payload.is_empty());
        let detail = capsule.detail.as_deref().unwrap_or_default();
        assert!(
            detail.contains(&format!("the original record ({limit} bytes) is too large")),
            "{detail}"
        );
        assert!(
            detail.contains(&capsule.source.to_string()),
            "says where to read it: {detail}"
        );
        worker.stop().await;
    })
    .await;
}
