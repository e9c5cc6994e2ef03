//! A processed-key store belongs to the log it was built from: pointed at
//! another log (another server, stream or directory, or a log recreated at
//! the same address), a worker never answers from the old log's history;
//! the keys run afresh there. On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agdx::log::SharedLog;
use agdx::log::embedded::EmbeddedLog;
use agdx::wire::IdempotencyKey;
use agdx::worker::{HandlerReply, Worker, handler_fn};
use agdx::{Answer, CommandRequest, Producer, Requester, Topology, TopologyConfig};
use support::fabric::{ANSWER, PARTITIONS, Running, agent_id, fabrics, quick_config};

/// A `ledger` worker on `log` whose store is in `state`, counting its runs.
fn ledger(
    log: &SharedLog,
    topology: &Topology,
    state: &std::path::Path,
    runs: &Arc<AtomicU32>,
) -> Running {
    let runs = runs.clone();
    let handler = handler_fn(move |request| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok(HandlerReply::raw(request.body)) }
    });
    let producer = Producer::new(log.clone(), topology.clone(), agent_id("ledger"));
    Running::start(Worker::new(producer, quick_config(state.to_owned())).handle("post", handler))
}

/// Asks `ledger` to post `body` under `key`, as `shop`; the reply's body.
fn post(
    log: &SharedLog,
    topology: &Topology,
    key: &'static str,
    body: &'static str,
) -> impl std::future::Future<Output = Vec<u8>> + Send + 'static {
    let requester = Requester::new(Producer::new(
        log.clone(),
        topology.clone(),
        agent_id("shop"),
    ));
    async move {
        let request = CommandRequest::new("post", body.as_bytes().to_vec())
            .to(agent_id("ledger"))
            .idempotency_key(IdempotencyKey::new(key).expect("a valid key"));
        match requester.ask(request, ANSWER).await.expect("ask") {
            Answer::Response(reply) => reply.body.to_vec(),
            other => panic!("expected a response, got {other:?}"),
        }
    }
}

async fn topology(log: &SharedLog, stream: &str) -> Topology {
    TopologyConfig::new(stream)
        .with_partitions(PARTITIONS)
        .ensure(log.as_ref())
        .await
        .expect("the topology")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_state_directory_from_another_log_never_answers_for_this_one() {
    for fabric in fabrics("key-other-log").await {
        // Another log for the same state directory: on the embedded backend
        // another directory, on Iggy another stream of the same server.
        let (other_log, keep): (SharedLog, Option<tempfile::TempDir>) = match fabric.backend {
            "embedded" => {
                let (dir, _, log) = support::embedded::fresh_embedded_log();
                (log, Some(dir))
            }
            _ => (fabric.log.clone(), None),
        };
        let other = topology(&other_log, &support::unique_stream("key-other-log")).await;
        let backend = fabric.backend;
        let check = async move {
            let _keep = keep;
            let state = fabric.dir.path().join("state");
            let runs = Arc::new(AtomicU32::new(0));
            let first = ledger(&fabric.log, &fabric.topology, &state, &runs);
            assert_eq!(
                post(&fabric.log, &fabric.topology, "pay-1", "100 EUR").await,
                b"100 EUR"
            );
            first.stop().await;

            let second = ledger(&other_log, &other, &state, &runs);
            assert_eq!(
                post(&other_log, &other, "pay-1", "5 EUR").await,
                b"5 EUR",
                "a key this log never saw runs, whatever the state directory remembers"
            );
            assert_eq!(runs.load(Ordering::SeqCst), 2);
            // And on this log the key is processed now.
            assert_eq!(post(&other_log, &other, "pay-1", "6 EUR").await, b"5 EUR");
            assert_eq!(runs.load(Ordering::SeqCst), 2);
            second.stop().await;
        };
        support::naming_backend("key-other-log", backend, check).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_log_recreated_at_the_same_path_starts_its_keys_afresh() {
    // Same path, same stream name: the same address and ids as before, so
    // only the replies on the log can tell the two apart.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("log");
    let state = dir.path().join("state");
    let open =
        || -> SharedLog { Arc::new(EmbeddedLog::open(&path).expect("open the embedded log")) };
    let runs = Arc::new(AtomicU32::new(0));
    {
        let log = open();
        let topology = topology(&log, "agents").await;
        let worker = ledger(&log, &topology, &state, &runs);
        assert_eq!(post(&log, &topology, "pay-1", "100 EUR").await, b"100 EUR");
        assert_eq!(post(&log, &topology, "pay-1", "100 EUR").await, b"100 EUR");
        assert_eq!(post(&log, &topology, "pay-2", "7 EUR").await, b"7 EUR");
        worker.stop().await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }
    std::fs::remove_dir_all(&path).expect("remove the log");

    let log = open();
    let topology = topology(&log, "agents").await;
    let worker = ledger(&log, &topology, &state, &runs);
    assert_eq!(post(&log, &topology, "pay-1", "5 EUR").await, b"5 EUR");
    assert_eq!(post(&log, &topology, "pay-2", "6 EUR").await, b"6 EUR");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        4,
        "both keys ran again on the new log"
    );
    worker.stop().await;
}
