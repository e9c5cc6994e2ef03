//! Retention: topics keep their records as long as their retention says,
//! a read from before what is left starts at what is left, and the
//! runtime's views keep what they need through their snapshots.

use crate::support;
use bytes::Bytes;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use agdx::cards::{publish_card, worker_card};
use agdx::log::embedded::EmbeddedLog;
use agdx::log::{Log, LogError, OutgoingRecord, Retention, SharedLog};
use agdx::trust::{KeyKind, QuarantineWatch};
use agdx::{Retentions, TopologyConfig};
use support::embedded::database;
use support::eventually;
use support::fabric::{agent_id, embedded_fabric};
use support::trust::Keys;

const HOUR: Duration = Duration::from_secs(3600);

fn record(text: &str) -> OutgoingRecord {
    OutgoingRecord {
        headers: Vec::new(),
        payload: Bytes::copy_from_slice(text.as_bytes()),
    }
}

fn texts(records: &[agdx::log::LogRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.payload).into_owned())
        .collect()
}

fn later(by: Duration) -> SystemTime {
    SystemTime::now() + by
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_records_go_and_a_read_from_before_them_starts_at_the_first_left() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let kept = log
        .ensure_topic_retained("s", "kept", 1, Retention::Forever)
        .await
        .expect("a topic kept forever");
    let aging = log
        .ensure_topic_retained("s", "aging", 2, Retention::For(HOUR))
        .await
        .expect("a topic with an hour's retention");
    let batch = || {
        (0..10)
            .map(|i| record(&format!("r{i}")))
            .collect::<Vec<_>>()
    };
    for topic in [&kept, &aging] {
        log.append(topic, 0, batch()).await.expect("append");
    }

    // Nothing is an hour old yet.
    assert!(
        log.apply_retention(SystemTime::now())
            .await
            .expect("sweep")
            .is_empty()
    );
    // Two hours on, every record of the aging partition but its last goes;
    // the kept topic and the empty partition are left alone.
    let swept = log.apply_retention(later(2 * HOUR)).await.expect("sweep");
    assert_eq!(swept.len(), 1, "{swept:?}");
    assert_eq!(
        (swept[0].partition, swept[0].removed, swept[0].first),
        (0, 9, 9)
    );
    assert_eq!(log.first_offset(&aging, 0).await.expect("first"), Some(9));
    assert_eq!(log.first_offset(&kept, 0).await.expect("first"), Some(0));
    assert_eq!(log.first_offset(&aging, 1).await.expect("first"), None);

    // A read from 0 starts at what is left (no damage is reported), and
    // appends go on from the last offset.
    let read = log
        .poll(&aging, 0, 0, 100, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(texts(&read), ["r9"]);
    assert_eq!(read[0].position.offset, 9);
    log.append(&aging, 0, vec![record("after")])
        .await
        .expect("append");
    let read = log
        .poll(&aging, 0, 3, 100, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(texts(&read), ["r9", "after"]);
    assert_eq!(read[1].position.offset, 10);
    assert_eq!(
        log.poll(&kept, 0, 0, 100, Duration::ZERO)
            .await
            .expect("poll")
            .len(),
        10
    );
    drop(log);

    // The log opens again (its high-water marks still match) and a check
    // of the whole log finds nothing wrong.
    let report = EmbeddedLog::verify(dir.path()).await.expect("verify");
    assert!(report.findings.is_empty(), "{:?}", report.findings);
    EmbeddedLog::open(dir.path()).expect("reopen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hold_keeps_what_retention_would_remove_and_a_gap_after_the_cut_is_damage() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log
        .ensure_topic_retained("s", "t", 1, Retention::For(HOUR))
        .await
        .expect("topic");
    let batch = (0..10).map(|i| record(&format!("r{i}"))).collect();
    log.append(&topic, 0, batch).await.expect("append");
    log.hold(&topic, "reader-a", &[(0, 6)]).await.expect("hold");
    log.hold(&topic, "reader-b", &[(0, 4)]).await.expect("hold");

    log.apply_retention(later(2 * HOUR)).await.expect("sweep");
    assert_eq!(log.first_offset(&topic, 0).await.expect("first"), Some(4));
    // Moving the lower hold on lets the records up to the next one go.
    log.hold(&topic, "reader-b", &[(0, 8)])
        .await
        .expect("move the hold");
    log.apply_retention(later(2 * HOUR)).await.expect("sweep");
    assert_eq!(log.first_offset(&topic, 0).await.expect("first"), Some(6));

    // A record missing after the low-water mark is still damage, named.
    database(dir.path())
        .execute("DELETE FROM records WHERE off = 7", [])
        .expect("lose record 7");
    let read = log
        .poll(&topic, 0, 0, 100, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(texts(&read), ["r6"]);
    match log.poll(&topic, 0, 7, 100, Duration::ZERO).await {
        Err(LogError::Corrupt(damage)) => {
            assert_eq!((damage.position.offset, damage.next_offset()), (7, 8));
        }
        other => panic!("expected damage at offset 7, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_topics_are_created_with_the_retention_table() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log: SharedLog = Arc::new(EmbeddedLog::open(dir.path()).expect("open"));
    let short = Retentions {
        commands: Retention::For(HOUR),
        ..Retentions::default()
    };
    let topology = TopologyConfig::new("agents")
        .with_partitions(1)
        .with_retention(short)
        .ensure(log.as_ref())
        .await
        .expect("topology");
    for topic in [&topology.commands, &topology.snapshots] {
        log.append(topic, 0, vec![record("a"), record("b")])
            .await
            .expect("append");
    }
    let embedded = EmbeddedLog::open(dir.path()).expect("open again");
    let swept = embedded
        .apply_retention(later(2 * HOUR))
        .await
        .expect("sweep");
    let topics: Vec<_> = swept.iter().map(|t| t.topic.topic.as_str()).collect();
    assert_eq!(topics, ["agent.commands"], "snapshots are kept forever");
    // Seven days on, the registry's retention (7 days) is not yet due; the
    // dead letters' (30 days) never came near.
    let swept = embedded
        .apply_retention(later(6 * 24 * HOUR))
        .await
        .expect("sweep");
    assert!(swept.is_empty(), "{swept:?}");
}

/// The registry's retention removes an operator's signed fact, and the
/// quarantine stays in force: the watch's snapshot carries it and held the
/// registry from where it was taken.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quarantine_outlives_its_facts_record_through_the_views_snapshot() {
    let fabric = embedded_fabric("retention_quarantine").await;
    let mut keys = Keys::new(fabric.dir.path());
    let ops = keys.enroll("ops", KeyKind::Operator);
    fabric
        .producer("ops")
        .with_signer(ops)
        .status_quarantine(&agent_id("echo"), true, Some("leaking"))
        .await
        .expect("quarantine");
    let card = worker_card(&agent_id("other"), None, &["hello".to_owned()], false, HOUR);
    for member in ["m1", "m2", "m3"] {
        publish_card(&fabric.producer("other"), &card, member)
            .await
            .expect("publish a card");
    }
    let registry = &fabric.topology.registry;

    // The first watch folds the registry and, having no snapshot to start
    // from, saves one soon after.
    let watch =
        QuarantineWatch::start(fabric.log.clone(), fabric.topology.clone(), keys.verifier())
            .await
            .expect("first watch");
    assert!(watch.check(&agent_id("echo")).is_err());
    eventually("the first watch to save its snapshot", || async {
        (!fabric.records(&fabric.topology.snapshots).await.is_empty()).then_some(())
    })
    .await;
    drop(watch);
    // A card after the snapshot is held by it: the next start reads it.
    publish_card(&fabric.producer("other"), &card, "m4")
        .await
        .expect("publish a card after the snapshot");

    // Eight days on, the registry's records (7 days) before the snapshot go.
    let embedded = EmbeddedLog::open(&fabric.dir.path().join("log")).expect("open the log");
    let swept = embedded
        .apply_retention(later(8 * 24 * HOUR))
        .await
        .expect("sweep");
    assert!(
        swept.iter().any(|t| t.topic == *registry && t.removed > 0),
        "the registry lost its old records: {swept:?}"
    );

    // The fact's record is gone from the log: a reader that cannot use the
    // snapshot (it does not trust the operator) folds what is left, without
    // error, and finds no quarantine.
    let strangers = Keys::new(&fabric.dir.path().join("other"));
    let refolded = QuarantineWatch::start(
        fabric.log.clone(),
        fabric.topology.clone(),
        strangers.verifier(),
    )
    .await
    .expect("a watch folding what is left");
    assert!(refolded.check(&agent_id("echo")).is_ok());
    // The quarantine is still in force for those who trust the operator.
    let watch =
        QuarantineWatch::start(fabric.log.clone(), fabric.topology.clone(), keys.verifier())
            .await
            .expect("next watch");
    let refused = watch
        .check(&agent_id("echo"))
        .expect_err("still quarantined");
    assert!(refused.to_string().contains("leaking"), "{refused}");
}

/// The registry's and the commands topic's retention remove an IOA node's
/// registration, its join and a message; a restarted bridge still knows
/// the node, its token and its space from the view's snapshot, while the
/// message went with the commands topic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ioa_nodes_tokens_and_spaces_outlive_their_records_through_the_views_snapshot() {
    use support::ioa::{Bridge, texts};
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("log");
    let log: SharedLog = Arc::new(EmbeddedLog::open(&path).expect("open"));
    let topology = TopologyConfig::new("ioa")
        .ensure(log.as_ref())
        .await
        .expect("the topics, with the retention table");
    let bridge = Bridge::start(log.clone(), "ioa").await;
    let alice = bridge.register("alice").await;
    let space = alice.space("kept", "owner").await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    alice.say(&space, "old news", &[]).await;
    alice.say(&space, "last news", &[]).await;
    // The bridge saves a snapshot soon after it took in facts it had none of.
    support::eventually("the view's snapshot", || async {
        let mut saved = 0;
        for p in 0..topology.snapshots.partitions.get() {
            saved += log
                .poll(&topology.snapshots, p, 0, 10, Duration::ZERO)
                .await
                .expect("poll")
                .len();
        }
        (saved > 0).then_some(())
    })
    .await;
    // A second token for alice: her first registration is no longer the
    // last record of its partition, so retention can take it.
    bridge.register("alice").await;
    bridge.stop().await;

    let embedded = EmbeddedLog::open(&path).expect("open the log");
    let swept = embedded
        .apply_retention(later(8 * 24 * HOUR))
        .await
        .expect("sweep");
    for topic in [&topology.registry, &topology.commands] {
        assert!(
            swept.iter().any(|t| t.topic == *topic && t.removed > 0),
            "{} lost its old records: {swept:?}",
            topic.topic
        );
    }

    let bridge = Bridge::start(log.clone(), "ioa").await;
    let mut alice = alice.clone();
    alice.url = bridge.url.clone();
    // The join and the first message went with the commands topic's
    // retention (a partition keeps its last record); the space, its member
    // and alice's first token are the snapshot's.
    assert_eq!(texts(&alice.read(&space, "?all=true").await), ["last news"]);
    alice.say(&space, "new news", &[]).await;
    assert_eq!(
        texts(&alice.read(&space, "?all=true").await),
        ["last news", "new news"],
        "the old token still works and the space is still there"
    );
    bridge.stop().await;
}
