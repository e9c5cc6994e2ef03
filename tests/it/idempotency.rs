//! Exactly-once effects: a processed idempotency key does not run the
//! handler again, also in a worker process that has never seen the key (it
//! rebuilds what was processed from the replies on the log). On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agdx::wire::IdempotencyKey;
use agdx::worker::{HandlerReply, Worker, handler_fn};
use agdx::{Answer, Clock, CommandRequest};
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric, quick_config};

/// A worker for agent `ledger` that counts its handler runs and answers
/// with the body, its state in `state`.
fn ledger(fabric: &Fabric, state: &str, runs: Arc<AtomicU32>) -> Worker {
    let handler = handler_fn(move |request| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok(HandlerReply::raw(request.body)) }
    });
    Worker::new(
        fabric.producer("ledger"),
        quick_config(fabric.dir.path().join(state)),
    )
    .handle("post", handler)
}

async fn post(fabric: &Fabric, source: &str, key: &str, body: &str) -> Vec<u8> {
    let request = CommandRequest::new("post", body.as_bytes().to_vec())
        .to(agent_id("ledger"))
        .idempotency_key(IdempotencyKey::new(key).expect("a valid key"));
    match fabric
        .requester(source)
        .ask(request, ANSWER)
        .await
        .expect("ask")
    {
        Answer::Response(reply) => reply.body.to_vec(),
        other => panic!("expected a response, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_processed_key_gets_the_stored_reply_without_running_the_handler() {
    on_every_fabric("idempotent", |fabric| async move {
        let runs = Arc::new(AtomicU32::new(0));
        let worker = Running::start(ledger(&fabric, "state", runs.clone()));
        assert_eq!(post(&fabric, "shop", "pay-1", "100 EUR").await, b"100 EUR");
        assert_eq!(
            post(&fabric, "shop", "pay-1", "999 EUR").await,
            b"100 EUR",
            "the stored reply, not a new effect"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        // Keys are scoped by source: another source's key of the same name is its own.
        assert_eq!(
            post(&fabric, "other-shop", "pay-1", "5 EUR").await,
            b"5 EUR"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_that_never_saw_a_key_rebuilds_it_from_the_log() {
    on_every_fabric("idempotent-rebuild", |fabric| async move {
        let first_runs = Arc::new(AtomicU32::new(0));
        let first = Running::start(ledger(&fabric, "state-first", first_runs.clone()));
        assert_eq!(post(&fabric, "shop", "pay-2", "42 EUR").await, b"42 EUR");
        first.stop().await;

        // Another process, with a store of its own that has never seen pay-2.
        let second_runs = Arc::new(AtomicU32::new(0));
        let second = Running::start(ledger(&fabric, "state-second", second_runs.clone()));
        assert_eq!(post(&fabric, "shop", "pay-2", "43 EUR").await, b"42 EUR");
        assert_eq!(
            second_runs.load(Ordering::SeqCst),
            0,
            "the handler did not run again"
        );
        assert_eq!(post(&fabric, "shop", "pay-3", "7 EUR").await, b"7 EUR");
        assert_eq!(second_runs.load(Ordering::SeqCst), 1);
        second.stop().await;
        assert_eq!(first_runs.load(Ordering::SeqCst), 1);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_event_has_its_effect_once() {
    on_every_fabric("idempotent-event", |fabric| async move {
        let runs = Arc::new(AtomicU32::new(0));
        let worker = ledger(&fabric, "state", runs.clone());
        let stats = worker.stats();
        let worker = Running::start(worker);
        let producer = fabric.producer("shop");
        for _ in 0..2 {
            let event = agdx::wire::AgentEnvelope::event(
                agdx::new_record_id(),
                agdx::new_conversation_id(),
                agent_id("shop"),
                b"paid".to_vec(),
            )
            .with_operation("post")
            .with_idempotency_key(IdempotencyKey::new("paid-1").expect("a valid key"));
            let commands = fabric.topology.commands.clone();
            producer
                .publish_one(
                    &commands,
                    agdx::Outgoing::new(event, agdx::wire::ContentType::Raw),
                )
                .await
                .expect("publish the event");
        }
        support::eventually("both events to be taken", || async {
            (stats.committed_records.load(Ordering::SeqCst) == 2).then_some(())
        })
        .await;
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "the second event with the key had no effect"
        );
        assert_eq!(stats.deduplicated.load(Ordering::SeqCst), 1);
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_recorded_but_not_yet_answered_when_its_worker_died_does_not_run_again() {
    on_every_fabric("idempotent-crash-window", |fabric| async move {
        let requester = fabric.requester("shop");
        let mut watch = requester
            .send(
                CommandRequest::new("post", b"42 EUR".to_vec())
                    .to(agent_id("ledger"))
                    .idempotency_key(IdempotencyKey::new("pay-9").expect("a valid key")),
            )
            .await
            .expect("send");
        let command = fabric.command_at(watch.sent().partition, 0).await;
        // What a worker killed between recording the key and publishing the
        // reply leaves: the key and its reply in the store, nothing on the
        // reply topic.
        {
            let topology = &fabric.topology;
            let store = agdx::ProcessedKeys::open(
                &fabric.dir.path().join("state"),
                fabric.log.clone(),
                [topology.commands.clone()],
                topology.responses.clone(),
                agdx::KeyRetention::default(),
            )
            .expect("open the store");
            let envelope = agdx::envelope_of(&command).expect("the command");
            let to =
                agdx::ReplyTo::for_command(&envelope, Some(command.position)).expect("a command");
            let reply = fabric.producer("ledger").response_envelope(
                &to,
                b"42 EUR".to_vec(),
                agdx::wire::ContentType::Raw,
            );
            let scope = agdx::KeyScope {
                agent: agent_id("ledger"),
                source: agent_id("shop"),
                key: IdempotencyKey::new("pay-9").expect("a valid key"),
            };
            store
                .put(scope, vec![reply], &command, agdx::SystemClock.now_micros())
                .await
                .expect("record the key");
        }
        let runs = Arc::new(AtomicU32::new(0));
        let worker = Running::start(ledger(&fabric, "state", runs.clone()));
        match watch.next(ANSWER).await.expect("a reply") {
            agdx::ReplyEvent::Response(reply) => assert_eq!(reply.body, &b"42 EUR"[..]),
            other => panic!("expected the stored response, got {other:?}"),
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            0,
            "the handler did not run again"
        );
        worker.stop().await;
    })
    .await;
}
