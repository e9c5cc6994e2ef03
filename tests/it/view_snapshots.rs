//! The runtime's own views resume from their snapshots on
//! `agent.snapshots`: a start after a long registry reads the snapshot and
//! what follows it, not the whole history, and reaches the same state.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use agdx::cards::{LiveAgents, publish_card, worker_card};
use agdx::log::{OutgoingRecord, SharedLog};
use agdx::trust::{KeyKind, QuarantineWatch};
use agdx::view::SNAPSHOT_EVERY;
use agdx::wire::{AgentEnvelope, StatusOperation};
use support::counting::CountingLog;
use support::eventually;
use support::fabric::{Fabric, agent_id, embedded_fabric};
use support::trust::{Keys, record_with_id};

fn counting(fabric: &Fabric) -> Arc<CountingLog> {
    CountingLog::of(fabric.log.clone(), &fabric.topology.registry)
}

/// Fills the registry with more than a snapshot's worth of copies of one
/// card record, in batches.
async fn long_registry(fabric: &Fabric) {
    let card = worker_card(
        &agent_id("echo"),
        None,
        &["hello".to_owned()],
        false,
        Duration::from_secs(3600),
    );
    publish_card(&fabric.producer("echo"), &card, "m1")
        .await
        .expect("publish a card");
    let registry = &fabric.topology.registry;
    // The card's record, not the control fact beside it on the registry.
    let (partition, record) = {
        let mut found = None;
        for partition in 0..registry.partitions.get() {
            let records = fabric
                .log
                .poll(registry, partition, 0, 10, Duration::ZERO)
                .await
                .expect("poll");
            found = found.or(records
                .into_iter()
                .find(|r| {
                    AgentEnvelope::decode(&r.payload).is_ok_and(|e| {
                        e.operation.as_deref() == Some(StatusOperation::Card.as_str())
                    })
                })
                .map(|r| (partition, r)));
        }
        found.expect("the card on the registry")
    };
    for _ in 0..(SNAPSHOT_EVERY / 1000 + 1) {
        let batch = (0..1000)
            .map(|_| OutgoingRecord {
                headers: record.headers.clone(),
                payload: record.payload.clone(),
            })
            .collect();
        fabric
            .log
            .append(registry, partition, batch)
            .await
            .expect("append cards");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quarantine_watch_and_live_cards_resume_from_their_snapshots() {
    let fabric = embedded_fabric("view_snapshots").await;
    let mut keys = Keys::new(fabric.dir.path());
    let ops = keys.enroll("ops", KeyKind::Operator);
    fabric
        .producer("ops")
        .with_signer(ops)
        .status_quarantine(&agent_id("echo"), true, Some("leaking"))
        .await
        .expect("quarantine");
    long_registry(&fabric).await;

    // The first watch folds everything and leaves a snapshot.
    let first = counting(&fabric);
    let watch = QuarantineWatch::start(first.clone(), fabric.topology.clone(), keys.verifier())
        .await
        .expect("first watch");
    assert!(watch.check(&agent_id("echo")).is_err());
    assert!(first.read() > SNAPSHOT_EVERY);
    eventually("the first watch to save its snapshot", || async {
        (!fabric.records(&fabric.topology.snapshots).await.is_empty()).then_some(())
    })
    .await;
    drop(watch);

    // The next one reads the snapshot and nothing of the registry before
    // it, and knows the quarantine all the same: its fact was verified
    // again from the snapshot.
    let second = counting(&fabric);
    let watch = QuarantineWatch::start(second.clone(), fabric.topology.clone(), keys.verifier())
        .await
        .expect("second watch");
    let status = watch
        .check(&agent_id("echo"))
        .expect_err("still quarantined");
    assert!(status.to_string().contains("leaking"), "{status}");
    assert_eq!(second.read(), 0);
    drop(watch);

    // A verifier that no longer trusts the operator's key does not take
    // the snapshot's word for it: it folds the registry again and finds
    // no fact it accepts.
    let strangers = Keys::new(&fabric.dir.path().join("other"));
    let third = counting(&fabric);
    let watch =
        QuarantineWatch::start(third.clone(), fabric.topology.clone(), strangers.verifier())
            .await
            .expect("third watch");
    assert!(watch.check(&agent_id("echo")).is_ok());
    assert!(third.read() > SNAPSHOT_EVERY);

    // Live cards: the first fold saves; the next starts with the member
    // known and reads nothing before the snapshot.
    let log: SharedLog = fabric.log.clone();
    let mut cards = LiveAgents::resume(&log, &fabric.topology).await;
    cards
        .catch_up(&log, &fabric.topology.registry)
        .await
        .expect("fold the registry");
    assert!(
        cards
            .save_if_due(&log, &fabric.topology)
            .await
            .expect("save")
    );
    let reader = counting(&fabric);
    let counted: SharedLog = reader.clone();
    let mut cards = LiveAgents::resume(&counted, &fabric.topology).await;
    assert_eq!(cards.members(), 1);
    cards
        .catch_up(&counted, &fabric.topology.registry)
        .await
        .expect("read on");
    assert_eq!(reader.read(), 0);
    let now = agdx::Clock::now_micros(&agdx::SystemClock);
    assert_eq!(cards.live(now).len(), 1);
}

/// A snapshot keeps only the facts in force whole; of the facts they
/// overrode it keeps the record ids, and that is enough: a captured copy of
/// an overridden fact, published after the snapshot, is still `replayed`
/// for a watch that resumes from it, and the agent stays free.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fact_overridden_before_a_snapshot_stays_replayed_after_it() {
    let fabric = embedded_fabric("view_snapshot_replay").await;
    let mut keys = Keys::new(fabric.dir.path());
    let ops = keys.enroll("ops", KeyKind::Operator);
    let operator = fabric.producer("ops").with_signer(ops);
    let genuine = operator
        .status_quarantine(&agent_id("echo"), true, None)
        .await
        .expect("quarantine");
    operator
        .status_quarantine(&agent_id("echo"), false, None)
        .await
        .expect("lift");
    let registry = fabric.topology.registry.clone();
    let captured = record_with_id(&fabric, &registry, genuine.record.expect("a record id")).await;
    long_registry(&fabric).await;

    let watch =
        QuarantineWatch::start(fabric.log.clone(), fabric.topology.clone(), keys.verifier())
            .await
            .expect("first watch");
    assert!(watch.check(&agent_id("echo")).is_ok());
    eventually("the first watch to save its snapshot", || async {
        (!fabric.records(&fabric.topology.snapshots).await.is_empty()).then_some(())
    })
    .await;
    drop(watch);

    fabric
        .log
        .append(
            &registry,
            captured.position.partition,
            vec![OutgoingRecord {
                headers: captured.headers.clone(),
                payload: captured.payload.clone(),
            }],
        )
        .await
        .expect("publish the captured copy again");
    let reader = counting(&fabric);
    let watch = QuarantineWatch::start(reader.clone(), fabric.topology.clone(), keys.verifier())
        .await
        .expect("second watch");
    assert_eq!(reader.read(), 1, "only the copy after the snapshot is read");
    assert!(
        watch.check(&agent_id("echo")).is_ok(),
        "a replayed copy quarantined the agent again"
    );
    assert_eq!(
        watch.state().ignored_counts().get("replayed"),
        Some(&1),
        "{:?}",
        watch.state().ignored()
    );
}

/// `agdx bench startup` folds a long registry once, then takes turns at
/// next starts of both cases and compares their medians.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_startup_bench_compares_the_medians_of_next_starts() {
    let fabric = embedded_fabric("startup_bench").await;
    let (code, stdout, stderr) = fabric
        .run_agdx(&[
            "bench", "startup", "--cards", "300", "--facts", "3", "--rounds", "3",
        ])
        .await;
    assert_eq!(code, 0, "bench startup failed: {stderr}");
    assert!(
        stdout.contains("registry of 300 cards and 3 facts"),
        "{stdout}"
    );
    for case in ["next starts, empty (ms): ", "next starts, long (ms):  "] {
        let line = stdout
            .lines()
            .find_map(|line| line.trim().strip_prefix(case.trim_start()))
            .unwrap_or_else(|| panic!("no line {case:?} in {stdout}"));
        assert_eq!(line.split(", ").count(), 3, "three starts: {line}");
    }
    assert!(
        stdout.contains("next start, long / empty (medians): "),
        "{stdout}"
    );
}
