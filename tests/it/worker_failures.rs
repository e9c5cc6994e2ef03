//! What a worker does with commands it cannot or will not handle: each ends
//! with an `error` reply, and the poison ones with a dead-letter capsule
//! that keeps the original bytes verbatim. On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agdx::wire::{DeadLetter, DeadLetterReason, ErrorBody, ErrorCode};
use agdx::worker::{EchoHandler, HandlerError, handler_fn};
use agdx::{AskError, Clock, CommandRequest, SystemClock};
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// A new conversation whose records land in `partition` of the commands topic.
fn conversation_in(fabric: &Fabric, partition: u32) -> agdx::wire::ConversationId {
    loop {
        let conversation = agdx::new_conversation_id();
        if agdx::routing::partition_of(&fabric.topology.commands, conversation) == partition {
            return conversation;
        }
    }
}

/// Asks and expects an error reply.
async fn ask_for_error(fabric: &Fabric, request: CommandRequest) -> ErrorBody {
    match fabric.requester("asker").ask(request, ANSWER).await {
        Err(AskError::Remote(error)) => error,
        other => panic!("expected an error reply, got {other:?}"),
    }
}

/// The one dead letter whose payload is the command sent with `body`, once it is there.
async fn dead_letter_for(fabric: &Fabric, body: &[u8]) -> DeadLetter {
    eventually("the dead-letter capsule", || async {
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

/// The capsule's payload is byte for byte the record at its source position.
async fn assert_verbatim(fabric: &Fabric, capsule: &DeadLetter) {
    let original = fabric
        .command_at(capsule.source.partition, capsule.source.offset)
        .await;
    assert_eq!(
        capsule.payload, original.payload,
        "the dead letter keeps the original bytes"
    );
    assert_eq!(capsule.source, original.position);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_operation_is_answered_unsupported_naming_the_handled_ones() {
    on_every_fabric("unsupported", |fabric| async move {
        let worker = Running::start(
            fabric
                .worker("calendar")
                .handle("list", EchoHandler)
                .handle("add", EchoHandler),
        );
        let error = ask_for_error(
            &fabric,
            CommandRequest::new("delete", b"event 7".to_vec()).to(agent_id("calendar")),
        )
        .await;
        assert_eq!(error.code, ErrorCode::Unsupported);
        assert_eq!(
            error.message.as_deref(),
            Some("no handler for operation 'delete' on agent 'calendar'; it handles: add, list")
        );
        assert!(
            fabric.dead_letters().await.is_empty(),
            "an unsupported operation is not poison"
        );
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_answers_with_an_error_and_dead_letters_the_command_rejected() {
    on_every_fabric("rejected", |fabric| async move {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let refuse = handler_fn(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            async { Err(HandlerError::fatal("order 42 does not exist")) }
        });
        let worker = Running::start(fabric.worker("orders").handle("cancel", refuse));
        let error = ask_for_error(
            &fabric,
            CommandRequest::new("cancel", b"order 42".to_vec()).to(agent_id("orders")),
        )
        .await;
        assert_eq!(error.code, ErrorCode::InvalidRequest);
        assert_eq!(error.message.as_deref(), Some("order 42 does not exist"));
        assert!(!error.retryable);
        let capsule = dead_letter_for(&fabric, b"order 42").await;
        assert_eq!(capsule.reason, DeadLetterReason::Rejected);
        assert_eq!(capsule.attempts, 1);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            1,
            "a non-retryable failure is not retried"
        );
        assert_verbatim(&fabric, &capsule).await;
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retryable_failure_is_retried_then_dead_lettered_with_the_verbatim_payload() {
    on_every_fabric("retry", |fabric| async move {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let flaky = handler_fn(move |request| {
            counted.fetch_add(1, Ordering::SeqCst);
            let attempt = request.attempt;
            async move {
                Err(HandlerError::retryable(format!(
                    "database is down (attempt {attempt})"
                )))
            }
        });
        let worker = Running::start(fabric.worker("store").handle("save", flaky));
        let error = ask_for_error(
            &fabric,
            CommandRequest::new("save", b"order 43".to_vec()).to(agent_id("store")),
        )
        .await;
        assert_eq!(
            error.message.as_deref(),
            Some("database is down (attempt 3)")
        );
        assert!(error.retryable);
        let capsule = dead_letter_for(&fabric, b"order 43").await;
        assert_eq!(capsule.reason, DeadLetterReason::RetryExhausted);
        assert_eq!(capsule.attempts, 3);
        assert_eq!(calls.load(Ordering::SeqCst), 3, "three attempts in all");
        assert_verbatim(&fabric, &capsule).await;
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_past_its_deadline_is_dead_lettered_and_answered_deadline_exceeded() {
    on_every_fabric("deadline", |fabric| async move {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let handler = handler_fn(move |request| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok(agdx::worker::HandlerReply::raw(request.body)) }
        });
        let worker = Running::start(fabric.worker("slow").handle("work", handler));
        let past = SystemClock.now_micros() - 1_000_000;
        let request = CommandRequest::new("work", b"too late".to_vec())
            .to(agent_id("slow"))
            .deadline_micros(past);
        let error = ask_for_error(&fabric, request).await;
        assert_eq!(error.code, ErrorCode::DeadlineExceeded);
        let capsule = dead_letter_for(&fabric, b"too late").await;
        assert_eq!(capsule.reason, DeadLetterReason::DeadlineExceeded);
        assert_verbatim(&fabric, &capsule).await;
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "the handler never sees an expired command"
        );
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_needing_unknown_features_is_rejected_and_answered_unsupported() {
    on_every_fabric("must-understand", |fabric| async move {
        let worker = Running::start(fabric.worker("plain").handle("work", EchoHandler));
        let request = CommandRequest::new("work", b"needs bit 4".to_vec())
            .to(agent_id("plain"))
            .must_understand(0b1_0000);
        let error = ask_for_error(&fabric, request).await;
        assert_eq!(error.code, ErrorCode::Unsupported);
        assert!(
            error
                .message
                .as_deref()
                .is_some_and(|m| m.contains("must_understand")),
            "{error:?}"
        );
        let capsule = dead_letter_for(&fabric, b"needs bit 4").await;
        assert_eq!(capsule.reason, DeadLetterReason::Rejected);
        assert_verbatim(&fabric, &capsule).await;
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undecodable_record_is_dead_lettered_decode_failed_and_the_worker_goes_on() {
    on_every_fabric("decode-failed", |fabric| async move {
        let worker = Running::start(fabric.worker("echo").handle("hello", EchoHandler));
        let garbage = b"\xa1\x64kind\x65bogus trailing".to_vec();
        fabric
            .log
            .append(
                &fabric.topology.commands,
                0,
                vec![agdx::log::OutgoingRecord {
                    headers: Vec::new(),
                    payload: garbage.clone().into(),
                }],
            )
            .await
            .expect("append garbage");
        let capsule = eventually("the decode_failed capsule", || async {
            fabric
                .dead_letters()
                .await
                .into_iter()
                .find(|d| d.payload == garbage)
        })
        .await;
        assert_eq!(capsule.reason, DeadLetterReason::DecodeFailed);
        assert!(
            capsule.detail.is_some(),
            "the capsule says why it did not decode"
        );
        assert_verbatim(&fabric, &capsule).await;
        // The partition is not stuck behind the poison record.
        let request = CommandRequest::new("hello", b"still here".to_vec())
            .to(agent_id("echo"))
            .conversation(conversation_in(&fabric, 0));
        let answer = fabric.requester("asker").ask(request, ANSWER).await;
        assert!(answer.is_ok(), "{answer:?}");
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_for_another_agent_is_skipped_and_committed() {
    on_every_fabric("target", |fabric| async move {
        let calls = Arc::new(AtomicU32::new(0));
        let counted = calls.clone();
        let handler = handler_fn(move |request| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok(agdx::worker::HandlerReply::raw(request.body)) }
        });
        let worker = fabric.worker("alpha").handle("work", handler);
        let stats = worker.stats();
        let running = Running::start(worker);
        fabric
            .producer("asker")
            .command(CommandRequest::new("work", b"for beta".to_vec()).to(agent_id("beta")))
            .await
            .expect("send");
        eventually("the worker to skip the command", || async {
            (stats.skipped.load(Ordering::SeqCst) == 1).then_some(())
        })
        .await;
        eventually("the skip to be committed", || async {
            (stats.committed_records.load(Ordering::SeqCst) >= 1).then_some(())
        })
        .await;
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        assert!(
            fabric.responses().await.is_empty(),
            "no reply for a command to someone else"
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_reply_from_a_handler_becomes_an_error_reply_and_the_partition_goes_on() {
    on_every_fabric("invalid-reply", |fabric| async move {
        // A response needs a body; an empty one cannot be published.
        let empty = handler_fn(|_| async { Ok(agdx::worker::HandlerReply::raw(Vec::new())) });
        let worker = Running::start(
            fabric
                .worker("blank")
                .handle("say", empty)
                .handle("echo", EchoHandler),
        );
        let conversation = conversation_in(&fabric, 1);
        let error = ask_for_error(
            &fabric,
            CommandRequest::new("say", b"nothing".to_vec())
                .to(agent_id("blank"))
                .conversation(conversation),
        )
        .await;
        assert_eq!(error.code, ErrorCode::Internal);
        assert!(
            error
                .message
                .as_deref()
                .is_some_and(|m| m.contains("not a valid response")),
            "{error:?}"
        );
        let capsule = dead_letter_for(&fabric, b"nothing").await;
        assert_eq!(capsule.reason, DeadLetterReason::Rejected);
        let next = CommandRequest::new("echo", b"next".to_vec())
            .to(agent_id("blank"))
            .conversation(conversation);
        let answer = fabric.requester("asker").ask(next, ANSWER).await;
        assert!(answer.is_ok(), "the partition is not stuck: {answer:?}");
        worker.stop().await;
    })
    .await;
}
