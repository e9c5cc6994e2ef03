//! Processed keys are kept for a while and up to a number, not forever: a
//! key past its age, or pushed out by newer keys, runs again. On every
//! backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agdx::wire::IdempotencyKey;
use agdx::worker::{HandlerReply, Worker, handler_fn};
use agdx::{Answer, Clock, CommandRequest, KeyRetention, ManualClock, SystemClock};
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric, quick_config};

/// A `ledger` worker keeping keys per `retention`, reading the time from
/// `clock`, counting its runs.
fn ledger(
    fabric: &Fabric,
    retention: KeyRetention,
    clock: Arc<ManualClock>,
    runs: &Arc<AtomicU32>,
) -> Running {
    let runs = runs.clone();
    let handler = handler_fn(move |request| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok(HandlerReply::raw(request.body)) }
    });
    let mut config = quick_config(fabric.dir.path().join("state"));
    config.key_retention = retention;
    Running::start(
        Worker::new(fabric.producer("ledger"), config)
            .with_clock(clock)
            .handle("post", handler),
    )
}

async fn post(fabric: &Fabric, key: &str, body: &str) -> Vec<u8> {
    let request = CommandRequest::new("post", body.as_bytes().to_vec())
        .to(agent_id("ledger"))
        .idempotency_key(IdempotencyKey::new(key).expect("a valid key"));
    match fabric
        .requester("shop")
        .ask(request, ANSWER)
        .await
        .expect("ask")
    {
        Answer::Response(reply) => reply.body.to_vec(),
        other => panic!("expected a response, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_older_than_the_retention_runs_again() {
    on_every_fabric("key-age", |fabric| async move {
        let clock = Arc::new(ManualClock::new(SystemClock.now_micros()));
        let runs = Arc::new(AtomicU32::new(0));
        let retention = KeyRetention {
            max_age: Duration::from_secs(3600),
            ..KeyRetention::default()
        };
        let worker = ledger(&fabric, retention, clock.clone(), &runs);
        assert_eq!(post(&fabric, "pay-1", "100 EUR").await, b"100 EUR");
        assert_eq!(
            post(&fabric, "pay-1", "200 EUR").await,
            b"100 EUR",
            "kept within the hour"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        clock.advance_micros(2 * 3600 * 1_000_000);
        assert_eq!(
            post(&fabric, "pay-1", "300 EUR").await,
            b"300 EUR",
            "two hours on, forgotten"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_oldest_keys_beyond_the_limit_run_again() {
    on_every_fabric("key-count", |fabric| async move {
        let clock = Arc::new(ManualClock::new(SystemClock.now_micros()));
        let runs = Arc::new(AtomicU32::new(0));
        let retention = KeyRetention {
            max_keys: 2,
            ..KeyRetention::default()
        };
        let worker = ledger(&fabric, retention, clock, &runs);
        for key in ["k-1", "k-2", "k-3"] {
            assert_eq!(post(&fabric, key, key).await, key.as_bytes());
        }
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(
            post(&fabric, "k-3", "again").await,
            b"k-3",
            "among the newest two"
        );
        assert_eq!(
            post(&fabric, "k-2", "again").await,
            b"k-2",
            "among the newest two"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        assert_eq!(
            post(&fabric, "k-1", "again").await,
            b"again",
            "the oldest was let go"
        );
        assert_eq!(runs.load(Ordering::SeqCst), 4);
        worker.stop().await;
    })
    .await;
}
