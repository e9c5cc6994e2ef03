//! Large bodies travel as claim checks: the bytes go to the blob store, the
//! log carries a BodyRef, readers get the real bytes after checking size and
//! SHA-256. A tampered blob is rejected. On every backend.

use crate::support;

use std::sync::Arc;

use agdx::wire::{BodyRef, Bytes, ContentType, DeadLetter, DeadLetterReason, ErrorCode};
use agdx::worker::{EchoHandler, Worker};
use agdx::{
    Answer, AskError, ClaimCheck, CommandRequest, DirBlobStore, Requester, content_type_of,
    envelope_of,
};
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric, quick_config};

const THRESHOLD: usize = 1024;

fn claim_check(fabric: &Fabric) -> (ClaimCheck, DirBlobStore) {
    let store = DirBlobStore::new(fabric.dir.path().join("blobs"));
    (ClaimCheck::new(Arc::new(store.clone()), THRESHOLD), store)
}

fn echo_worker(fabric: &Fabric, check: &ClaimCheck) -> Worker {
    Worker::new(
        fabric.producer("echo").with_claim_check(check.clone()),
        quick_config(fabric.dir.path().join("state")),
    )
    .handle("echo", EchoHandler)
}

fn big_body(seed: u8) -> Vec<u8> {
    (0..4096u32)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_body_goes_through_the_blob_store_and_comes_back_intact() {
    on_every_fabric("claim-check", |fabric| async move {
        let (check, _) = claim_check(&fabric);
        let worker = Running::start(echo_worker(&fabric, &check));
        let requester = Requester::new(fabric.producer("asker").with_claim_check(check.clone()));
        let body = big_body(1);
        match requester.ask(CommandRequest::new("echo", body.clone()).to(agent_id("echo")), ANSWER).await.expect("ask") {
            Answer::Response(reply) => {
                assert_eq!(reply.body, body, "the reader gets the real bytes");
                assert!(reply.claim_checked, "the reply itself went as a claim check");
                assert_eq!(reply.content_type, ContentType::Raw, "a raw body resolves as raw");
            }
            other => panic!("expected a response, got {other:?}"),
        }
        let commands = fabric.records(&fabric.topology.commands).await;
        assert_eq!(commands.len(), 1);
        assert_eq!(content_type_of(&commands[0]), ContentType::Ref);
        let body_ref = BodyRef::decode_valid(&envelope_of(&commands[0]).expect("envelope").body).expect("a BodyRef on the log");
        assert_eq!(body_ref.size_bytes, 4096);
        assert!(commands[0].payload.len() < THRESHOLD, "the log holds the reference, not the bytes");
        // Small bodies are not claim-checked.
        let small = requester.ask(CommandRequest::new("echo", b"small".to_vec()).to(agent_id("echo")), ANSWER).await.expect("ask");
        assert!(matches!(small, Answer::Response(reply) if !reply.claim_checked && reply.body == b"small"[..]));
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_claim_checked_command_gets_its_fetched_body_again() {
    on_every_fabric("claim-check-retry", |fabric| async move {
        let (check, _) = claim_check(&fabric);
        // Fails the first attempt; answers the second with what it was given.
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let calls = seen.clone();
        let flaky = agdx::worker::handler_fn(move |request| {
            let call = (
                request.attempt,
                request.body.clone(),
                request.claim_checked,
                request.content_type,
            );
            calls.lock().expect("calls").push(call);
            async move {
                if request.attempt == 1 {
                    return Err(agdx::worker::HandlerError::retryable("not yet"));
                }
                Ok(agdx::worker::HandlerReply::raw(request.body))
            }
        });
        let worker = Running::start(
            Worker::new(
                fabric.producer("echo").with_claim_check(check.clone()),
                quick_config(fabric.dir.path().join("state")),
            )
            .handle("echo", flaky),
        );
        let requester = Requester::new(fabric.producer("asker").with_claim_check(check.clone()));
        let body = big_body(4);
        match requester
            .ask(
                CommandRequest::new("echo", body.clone()).to(agent_id("echo")),
                ANSWER,
            )
            .await
            .expect("ask")
        {
            Answer::Response(reply) => assert_eq!(
                reply.body, body,
                "the retry answered with the fetched bytes"
            ),
            other => panic!("expected a response, got {other:?}"),
        }
        let seen = seen.lock().expect("calls").clone();
        let want = |attempt| (attempt, Bytes::from(body.clone()), true, ContentType::Raw);
        assert_eq!(
            seen,
            vec![want(1), want(2)],
            "both attempts get the fetched body, not the reference"
        );
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_blob_is_rejected_with_a_message_naming_the_mismatch() {
    on_every_fabric("claim-check-tampered", |fabric| async move {
        let (check, store) = claim_check(&fabric);
        let requester = Requester::new(fabric.producer("asker").with_claim_check(check.clone()));
        let mut watch = requester
            .send(CommandRequest::new("echo", big_body(2)).to(agent_id("echo")))
            .await
            .expect("send");
        // Change the blob before any worker reads it.
        let command = fabric.records(&fabric.topology.commands).await.remove(0);
        let body_ref = BodyRef::decode_valid(&envelope_of(&command).expect("envelope").body)
            .expect("a BodyRef");
        let path = store
            .path_of(&body_ref.reference)
            .expect("a reference of this store");
        let mut bytes = std::fs::read(&path).expect("read the blob");
        bytes[100] ^= 0xff;
        std::fs::write(&path, bytes).expect("tamper with the blob");

        let worker = Running::start(echo_worker(&fabric, &check));
        let error = match watch.next(ANSWER).await.expect("a reply") {
            agdx::ReplyEvent::Error(error) => error,
            other => panic!("expected an error, got {other:?}"),
        };
        assert_eq!(error.code, ErrorCode::InvalidRequest);
        let message = error.message.unwrap_or_default();
        assert!(
            message.contains("SHA-256") && message.contains(&body_ref.reference),
            "{message}"
        );
        let record = eventually("the dead letter", || async {
            fabric.records(&fabric.topology.dlq).await.pop()
        })
        .await;
        assert!(
            agdx::fence_of_record(&record).is_some(),
            "the dead letter carries its writer's fence"
        );
        let capsule = DeadLetter::decode_valid(&record.payload).expect("a dead-letter capsule");
        assert_eq!(capsule.reason, DeadLetterReason::Rejected);
        assert_eq!(capsule.payload, command.payload);
        assert!(
            capsule
                .detail
                .as_deref()
                .is_some_and(|d| d.contains("SHA-256"))
        );
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_checked_chunk_reaches_the_reader_as_its_bytes() {
    on_every_fabric("claim-check-chunk", |fabric| async move {
        let (check, _) = claim_check(&fabric);
        let big = big_body(3);
        let chunked = {
            let big = big.clone();
            agdx::worker::handler_fn(move |request| {
                let big = big.clone();
                async move {
                    let mut stream = request
                        .stream(agdx::wire::StreamPurpose::Chat, None)
                        .expect("a command can be answered");
                    stream.send(b"small first, ".to_vec()).await.map_err(fail)?;
                    stream.send(big).await.map_err(fail)?;
                    stream
                        .finish(Vec::new(), Some("stop"), None)
                        .await
                        .map_err(fail)?;
                    Ok(agdx::worker::HandlerReply::Streamed)
                }
            })
        };
        let worker = Running::start(
            Worker::new(
                fabric.producer("writer").with_claim_check(check.clone()),
                quick_config(fabric.dir.path().join("state")),
            )
            .handle("write", chunked),
        );
        let requester = Requester::new(fabric.producer("asker").with_claim_check(check));
        let request = CommandRequest::new("write", b"go".to_vec()).to(agent_id("writer"));
        match requester.ask(request, ANSWER).await.expect("ask") {
            Answer::Streamed { body, .. } => {
                let mut expected = b"small first, ".to_vec();
                expected.extend_from_slice(&big);
                assert_eq!(
                    body, expected,
                    "the chunk over the threshold arrives as its bytes"
                );
            }
            other => panic!("expected a stream, got {other:?}"),
        }
        let refs = fabric
            .records(&fabric.topology.responses)
            .await
            .iter()
            .filter(|r| content_type_of(r) == ContentType::Ref)
            .count();
        assert_eq!(refs, 1, "the big chunk went to the blob store");
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_checked_error_reaches_the_reader_as_its_error_body() {
    on_every_fabric("claim-check-error", |fabric| async move {
        let (check, _) = claim_check(&fabric);
        // An error body over the threshold (well under the 4 KiB a worker
        // keeps of a message).
        let message = "the ledger refused: ".to_owned() + &"x".repeat(2 * THRESHOLD);
        let refuse = {
            let message = message.clone();
            agdx::worker::handler_fn(move |_| {
                let message = message.clone();
                async move { Err(agdx::worker::HandlerError::fatal(message)) }
            })
        };
        let worker = Running::start(
            Worker::new(
                fabric.producer("ledger").with_claim_check(check.clone()),
                quick_config(fabric.dir.path().join("state")),
            )
            .handle("post", refuse),
        );
        let requester = Requester::new(fabric.producer("asker").with_claim_check(check));
        let request = CommandRequest::new("post", b"100 EUR".to_vec()).to(agent_id("ledger"));
        match requester.ask(request, ANSWER).await {
            Err(AskError::Remote(error)) => {
                assert_eq!(error.code, ErrorCode::InvalidRequest);
                assert_eq!(error.message.as_deref(), Some(message.as_str()));
            }
            other => panic!("expected the error reply, got {other:?}"),
        }
        worker.stop().await;
    })
    .await;
}

fn fail(error: agdx::ProduceError) -> agdx::worker::HandlerError {
    agdx::worker::HandlerError::retryable(error.to_string())
}
