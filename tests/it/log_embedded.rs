//! What only the embedded log promises: several processes on one
//! directory, crash safety under `kill -9`, damaged-record detection, and
//! refusing storage that is not an agdx log.
//!
//! The multi-process tests start copies of this test binary running the
//! ignored `child` test (see `support::embedded` for the pattern).

use crate::support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use agdx::log::embedded::{self, EmbeddedLog};
use agdx::log::{Cause, Damage, Log, LogError, SharedLog, TopicInfo};
use support::embedded::{
    Child, ChildTask, damage_payload, database, groups_database, report, tamper,
};
use support::{drain, eventually, record, texts};

/// The child test's name, as the parent passes it to `--exact`.
const CHILD: &str = "log_embedded::child";

const TOPIC: &str = "t";

/// Opens the log in `dir` again and finds the topic the children made.
async fn reopen_children_topic(dir: &Path, stream: &str) -> (EmbeddedLog, TopicInfo) {
    let log = EmbeddedLog::open(dir).expect("open the children's log");
    let topic = log
        .topic(stream, TOPIC)
        .await
        .expect("topic")
        .expect("the children made the topic");
    (log, topic)
}

/// The payload of record `seq` written by the crash test's appender:
/// its number, then filler that depends on it, so a torn or mixed-up
/// payload cannot pass for a good one.
fn crash_payload(seq: u64) -> Vec<u8> {
    let mut payload = format!("{seq:010}:").into_bytes();
    let filler = 1_000 + (seq % 7) as usize * 3_000;
    payload.extend((0..filler).map(|i| (seq as usize * 31 + i) as u8));
    payload
}

/// Plays the role its parent asked for; does nothing in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of the multi-process tests, which start it themselves"]
async fn child() {
    let Some(task) = ChildTask::from_env() else {
        return;
    };
    let log = task.open();
    match task.role.as_str() {
        // Appends `arg` = "<tag>:<count>" records "<tag>:<n>" to partition 0
        // in batches of 1 to 7.
        "appender" => {
            let topic = log
                .ensure_topic(&task.stream, TOPIC, 2)
                .await
                .expect("ensure_topic");
            let (tag, count) = task.arg.split_once(':').expect("tag:count");
            let count: usize = count.parse().expect("count");
            let mut n = 0;
            while n < count {
                let size = (1 + n % 7).min(count - n);
                let batch = (n..n + size)
                    .map(|i| record(format!("{tag}:{i}")))
                    .collect();
                log.append(&topic, 0, batch).await.expect("append");
                n += size;
            }
            report("done");
        }
        // Appends crash payloads until killed, reporting each acknowledged one.
        "crash-appender" => {
            let topic = log
                .ensure_topic(&task.stream, TOPIC, 1)
                .await
                .expect("ensure_topic");
            let mut seq = 0u64;
            loop {
                let size = 1 + seq % 4;
                let batch = (seq..seq + size)
                    .map(|s| record(crash_payload(s)))
                    .collect();
                log.append(&topic, 0, batch).await.expect("append");
                seq += size;
                report(&format!("ack {}", seq - 1));
            }
        }
        // Joins the group and reports its partitions whenever they change.
        "member" => {
            let topic = log
                .ensure_topic(&task.stream, TOPIC, 4)
                .await
                .expect("ensure_topic");
            let member = log.join_group(&topic, "workers").await.expect("join_group");
            let mut last = None;
            loop {
                let owned = member.assigned().await.expect("assigned");
                if last.as_ref() != Some(&owned) {
                    let list: Vec<String> = owned.iter().map(u32::to_string).collect();
                    report(&format!("owns {}", list.join(",")));
                    last = Some(owned);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
        // Waits for one record on partition 0 and reports it.
        "reader" => {
            let topic = log
                .ensure_topic(&task.stream, TOPIC, 1)
                .await
                .expect("ensure_topic");
            report("waiting");
            let got = log
                .poll(&topic, 0, 0, 10, Duration::from_secs(60))
                .await
                .expect("poll");
            report(&format!("got {}", texts(&got).join(",")));
        }
        other => panic!("unknown child role {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_processes_append_without_losing_or_interleaving() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stream = support::unique_stream("appenders");
    let (processes, per_process) = (4, 150);
    let mut children: Vec<Child> = (0..processes)
        .map(|p| {
            Child::spawn(
                CHILD,
                "appender",
                dir.path(),
                &stream,
                &format!("c{p}:{per_process}"),
            )
        })
        .collect();
    for child in &mut children {
        assert_eq!(child.line().await, "done");
        child.succeeds().await;
    }

    let (log, topic) = reopen_children_topic(dir.path(), &stream).await;
    let records = drain(&log, &topic, 0, 0, 500).await;
    assert_eq!(
        records.len(),
        processes * per_process,
        "every record is there once"
    );
    let mut next: BTreeMap<String, usize> = BTreeMap::new();
    for (offset, r) in records.iter().enumerate() {
        assert_eq!(r.position.offset, offset as u64, "offsets are contiguous");
        let text = std::str::from_utf8(&r.payload).expect("utf-8");
        let (tag, n) = text.split_once(':').expect("tag:n");
        let expected = next.entry(tag.to_owned()).or_default();
        assert_eq!(
            n.parse::<usize>().expect("n"),
            *expected,
            "{tag}'s records keep their order"
        );
        *expected += 1;
    }
    assert!(next.values().all(|&n| n == per_process));
    assert!(
        log.last_offset(&topic, 1)
            .await
            .expect("last_offset")
            .is_none()
    );
}

#[test]
fn handles_opened_at_once_on_a_new_directory_all_open() {
    // Opening a new directory switches its databases to WAL mode; openers
    // racing to do it can deadlock, and SQLite then fails one at once.
    for _ in 0..30 {
        let dir = tempfile::tempdir().expect("temp dir");
        let start = Arc::new(std::sync::Barrier::new(8));
        let openers: Vec<_> = (0..8)
            .map(|_| {
                let (path, start) = (dir.path().to_owned(), start.clone());
                std::thread::spawn(move || {
                    start.wait();
                    EmbeddedLog::open(&path).map(drop)
                })
            })
            .collect();
        for opener in openers {
            opener
                .join()
                .expect("an opener thread")
                .expect("open a new directory while others open it");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_loses_no_acknowledged_record() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stream = support::unique_stream("crash");
    let mut appender = Child::spawn(CHILD, "crash-appender", dir.path(), &stream, "");
    let acked = |line: String| -> u64 {
        let seq = line.strip_prefix("ack ").expect("an ack");
        seq.parse().expect("seq")
    };
    let mut acknowledged = acked(appender.line().await);
    // About 35 MiB: past the WAL sizes at which the checkpoint thread runs
    // and the writer starts the WAL over, so the kill can meet either.
    while acknowledged < 3_000 {
        acknowledged = acked(appender.line().await);
    }
    appender.kill().await;
    for line in appender.remaining_lines().await {
        acknowledged = acked(line);
    }

    let (log, topic) = reopen_children_topic(dir.path(), &stream).await;
    let records = drain(&log, &topic, 0, 0, 500).await;
    assert!(
        records.len() as u64 > acknowledged,
        "{} records survived, but {acknowledged} was acknowledged",
        records.len()
    );
    for (seq, r) in records.iter().enumerate() {
        assert_eq!(r.position.offset, seq as u64);
        assert!(
            r.payload == crash_payload(seq as u64),
            "record {seq} is intact"
        );
    }
    // The log takes appends again after the crash.
    log.append(&topic, 0, vec![record("after")])
        .await
        .expect("append after the crash");
    assert_eq!(
        log.last_offset(&topic, 0).await.expect("last_offset"),
        Some(records.len() as u64)
    );
}

/// The partitions in the child's next ownership report ("owns 0,1").
async fn owned_by(child: &mut Child) -> BTreeSet<u32> {
    let line = child.line().await;
    let list = line.strip_prefix("owns ").expect("an ownership report");
    list.split(',')
        .filter(|s| !s.is_empty())
        .map(|p| p.parse().expect("partition"))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_process_loses_its_partitions_to_the_other() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stream = support::unique_stream("members");
    let all: BTreeSet<u32> = (0..4).collect();
    let mut first = Child::spawn(CHILD, "member", dir.path(), &stream, "");
    assert_eq!(
        owned_by(&mut first).await,
        all,
        "a lone member owns every partition"
    );
    let mut second = Child::spawn(CHILD, "member", dir.path(), &stream, "");

    // Both report every change; follow them until the split is visible.
    let (mut a, mut b) = (all.clone(), BTreeSet::new());
    let split = |a: &BTreeSet<u32>, b: &BTreeSet<u32>| {
        !a.is_empty()
            && !b.is_empty()
            && a.is_disjoint(b)
            && a.union(b).copied().collect::<BTreeSet<_>>() == all
    };
    while !split(&a, &b) {
        tokio::select! {
            owned = owned_by(&mut first) => a = owned,
            owned = owned_by(&mut second) => b = owned,
        }
    }

    // A process that owns no partition cannot commit for the group's owners.
    let (log, topic) = reopen_children_topic(dir.path(), &stream).await;
    let refused = log.store_offset(&topic, "workers", 0, 0).await;
    assert!(
        matches!(refused, Err(LogError::NotOwner { partition: 0, .. })),
        "commit for another process's partition: {refused:?}"
    );
    log.store_offset(&topic, "nobody", 0, 0)
        .await
        .expect("a group without members takes commits");

    second.kill().await;
    while a != all {
        a = owned_by(&mut first).await;
    }
    first.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_waiting_in_one_process_sees_an_append_from_another() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stream = support::unique_stream("reader");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log
        .ensure_topic(&stream, TOPIC, 1)
        .await
        .expect("ensure_topic");
    let mut reader = Child::spawn(CHILD, "reader", dir.path(), &stream, "");
    assert_eq!(reader.line().await, "waiting");
    tokio::time::sleep(Duration::from_millis(300)).await;
    log.append(&topic, 0, vec![record("hello")])
        .await
        .expect("append");
    assert_eq!(reader.line().await, "got hello");
    reader.succeeds().await;
}

/// Other processes' watchers learn of a commit from the directory's bell
/// (`appends.bell`), not from the WAL's writes: every append must ring it,
/// or a poll waiting elsewhere sees it only at its watcher's timed check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_append_rings_the_directory_bell() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 1).await.expect("ensure_topic");
    let bell = dir.path().join("appends.bell");
    let rung = || std::fs::metadata(&bell).and_then(|m| m.modified()).ok();
    let mut last = None;
    for n in 0..3 {
        log.append(&topic, 0, vec![record(format!("r{n}"))])
            .await
            .expect("append");
        let now = rung();
        assert!(
            now.is_some(),
            "append {n} left no bell at {}",
            bell.display()
        );
        assert!(now > last, "append {n} did not ring the bell");
        last = now;
        // Past the file system's timestamp granularity.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The watcher tells other processes' commits from this one's by what this
/// process's writers see; with two handles (two writers) open, a commit from
/// elsewhere must still wake a waiting poll (unwoken, it would end its wait
/// with nothing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_in_a_process_with_two_handles_sees_an_append_from_another() {
    let dir = tempfile::tempdir().expect("temp dir");
    let stream = support::unique_stream("two-handles");
    let first = EmbeddedLog::open(dir.path()).expect("open");
    let second = EmbeddedLog::open(dir.path()).expect("open again");
    let topic = first
        .ensure_topic(&stream, TOPIC, 2)
        .await
        .expect("ensure_topic");
    // This process's own commits (through both handles) before and while
    // the poll waits must not leave the watcher deaf to the child's.
    first
        .append(&topic, 1, vec![record("ours")])
        .await
        .expect("append");
    let poller = {
        let topic = topic.clone();
        tokio::spawn(async move { second.poll(&topic, 0, 0, 10, Duration::from_secs(20)).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    first
        .append(&topic, 1, vec![record("ours again")])
        .await
        .expect("append");
    let mut appender = Child::spawn(CHILD, "appender", dir.path(), &stream, "theirs:1");
    assert_eq!(appender.line().await, "done");
    appender.succeeds().await;
    let got = poller.await.expect("task").expect("poll");
    assert_eq!(texts(&got), ["theirs:0"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_on_one_directory_wake_each_other() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first: SharedLog = Arc::new(EmbeddedLog::open(dir.path()).expect("open"));
    let second: SharedLog = Arc::new(EmbeddedLog::open(dir.path()).expect("open again"));
    let topic = first.ensure_topic("s", "t", 1).await.expect("ensure_topic");
    assert_eq!(
        second.topic("s", "t").await.expect("topic"),
        Some(topic.clone())
    );
    let poller = {
        let (log, topic) = (first.clone(), topic.clone());
        tokio::spawn(async move { log.poll(&topic, 0, 0, 10, Duration::from_secs(30)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    second
        .append(&topic, 0, vec![record("across handles")])
        .await
        .expect("append");
    assert_eq!(
        texts(&poller.await.expect("task").expect("poll")),
        ["across handles"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ids_count_from_one_and_describe_names_the_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log =
        EmbeddedLog::open(&dir.path().join("nested/dir")).expect("open creates the directory");
    assert_eq!(
        log.describe(),
        format!("embedded:{}", dir.path().join("nested/dir").display())
    );
    let a = log.ensure_topic("s1", "a", 1).await.expect("ensure_topic");
    let b = log.ensure_topic("s1", "b", 1).await.expect("ensure_topic");
    let c = log.ensure_topic("s2", "a", 1).await.expect("ensure_topic");
    assert_eq!((a.stream_id, a.topic_id), (1, 1));
    assert_eq!((b.stream_id, b.topic_id), (1, 2));
    assert_eq!((c.stream_id, c.topic_id), (2, 1));
    let zero = log.ensure_topic("s1", "z", 0).await;
    assert!(matches!(zero, Err(LogError::InvalidInput(_))), "{zero:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_record_is_reported_never_returned() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 1).await.expect("ensure_topic");
    log.append(&topic, 0, (0..4).map(|n| record(format!("r{n}"))).collect())
        .await
        .expect("append");

    damage_payload(dir.path(), &topic, 0, 1);
    tamper(dir.path(), &topic, 0, 2, "headers = x'05'");

    let before = log
        .poll(&topic, 0, 0, 10, Duration::ZERO)
        .await
        .expect("records before the damage");
    assert_eq!(texts(&before), ["r0"]);
    for offset in [1, 2] {
        match log.poll(&topic, 0, offset, 10, Duration::ZERO).await {
            Err(LogError::Corrupt(damage)) => {
                assert_eq!(damage.position, topic.position(0, offset));
                assert_eq!(damage.count(), 1, "{damage}");
            }
            other => panic!("damaged record {offset}: {other:?}"),
        }
    }
    let after = log
        .poll(&topic, 0, 3, 10, Duration::ZERO)
        .await
        .expect("records after the damage");
    assert_eq!(texts(&after), ["r3"]);
    assert!(!LogError::Corrupt(Damage::record(topic.position(0, 1), "")).is_retryable());
}

#[tokio::test]
async fn another_programs_database_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    database(dir.path())
        .execute("CREATE TABLE mine (x)", [])
        .expect("create a table");
    match EmbeddedLog::open(dir.path()) {
        Err(LogError::Incompatible { .. }) => {}
        Err(other) => panic!("wrong error: {other}"),
        Ok(_) => panic!("opened another program's database"),
    }
}

#[tokio::test]
async fn a_log_directory_that_cannot_be_made_says_why_and_keeps_the_systems_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"not a directory").expect("write");
    let refused = match EmbeddedLog::open(&file.join("log")) {
        Ok(_) => panic!("a log opened under a regular file"),
        Err(error) => error,
    };
    let message = refused.to_string();
    assert!(matches!(refused, LogError::Storage { .. }), "{refused:?}");
    assert!(message.contains("a-file"), "{message}");
    for foreign in ["Iggy", "Kafka", "free space"] {
        assert!(!message.contains(foreign), "{message}");
    }
    match std::error::Error::source(&refused).and_then(|c| c.downcast_ref::<Cause>()) {
        Some(Cause::Io(error)) => {
            assert_eq!(error.kind(), std::io::ErrorKind::NotADirectory, "{error}")
        }
        other => panic!("{refused:?} keeps no system error: {other:?}"),
    }
    assert!(refused.is_retryable(), "storage failures stay retryable");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_member_keeps_its_partitions_until_its_lease_expires() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 2).await.expect("ensure_topic");
    let gone = log.join_group(&topic, "g").await.expect("join");
    assert_eq!(gone.assigned().await.expect("assigned"), [0, 1]);
    let member = gone.member_id();
    drop(gone);
    // A renewal under way when the handle went may still write the lease.
    // A handle's renewals take turns on one connection, so once another
    // member has joined through it, no such write is left to come.
    log.join_group(&topic, "barrier")
        .await
        .expect("join")
        .leave()
        .await
        .expect("leave");

    // Push the lease an hour ahead, so that no stall of a loaded machine
    // can run it out before the heir asks.
    let db = groups_database(dir.path());
    let lease_until: i64 = db
        .query_row(
            "SELECT lease_until FROM group_members WHERE member = ?1",
            [&member],
            |row| row.get(0),
        )
        .expect("the dropped member's lease is still there");
    let set_lease = |until: i64| {
        db.execute(
            "UPDATE group_members SET lease_until = ?1 WHERE member = ?2",
            rusqlite::params![until, member],
        )
        .expect("set the lease");
    };
    set_lease(lease_until + 3_600_000_000);
    let heir = log.join_group(&topic, "g").await.expect("join");
    assert_eq!(
        heir.assigned().await.expect("assigned"),
        Vec::<u32>::new(),
        "a live lease still holds them"
    );

    // Give the lease back its own end: it runs out with nobody renewing it.
    set_lease(lease_until);
    eventually("the expired lease to free the partitions", || async {
        (heir.assigned().await.expect("assigned") == [0, 1]).then_some(())
    })
    .await;
}

/// The stored key of `topic` in the log in `dir`.
fn topic_key(dir: &Path, topic: &TopicInfo) -> i64 {
    database(dir)
        .query_row(
            "SELECT topic_key FROM topics WHERE stream_id = ?1 AND id = ?2",
            rusqlite::params![topic.stream_id, topic.topic_id],
            |row| row.get(0),
        )
        .expect("the topic's key")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_made_with_the_leases_inside_is_upgraded_when_opened() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 1).await.expect("ensure_topic");
    log.append(&topic, 0, vec![record("kept")])
        .await
        .expect("append");
    log.store_offset(&topic, "g", 0, 0).await.expect("commit");
    drop(log);
    // Format 1 kept the group leases in the records' database.
    database(dir.path())
        .execute_batch(
            "CREATE TABLE group_members (topic_key INTEGER, grp TEXT, member TEXT, pid INTEGER, lease_until INTEGER);
             CREATE TABLE group_owners (topic_key INTEGER, grp TEXT, part INTEGER, member TEXT);
             DROP TABLE retention; DROP TABLE low_water; DROP TABLE holds;
             PRAGMA user_version = 1;",
        )
        .expect("make it a format 1 log");

    let log = EmbeddedLog::open(dir.path()).expect("open the old log");
    assert_eq!(texts(&drain(&log, &topic, 0, 0, 10).await), ["kept"]);
    assert_eq!(
        log.committed_offset(&topic, "g", 0).await.expect("read"),
        Some(0)
    );
    let db = database(dir.path());
    let version: i32 = db
        .query_row("PRAGMA user_version", [], |row| row.get(0))
        .expect("version");
    assert_eq!(version, 3);
    let old_tables: i64 = db
        .query_row(
            "SELECT count(*) FROM sqlite_schema WHERE name IN ('group_members', 'group_owners')",
            [],
            |row| row.get(0),
        )
        .expect("count");
    assert_eq!(old_tables, 0, "the leases left the records' database");
    let member = log.join_group(&topic, "g").await.expect("join");
    assert_eq!(member.assigned().await.expect("assigned"), [0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_of_another_process_with_this_process_id_keeps_its_partition() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 2).await.expect("ensure_topic");
    // A live member of another process that has the same process id as
    // this one (two containers sharing the directory are both pid 1) owns
    // partition 0.
    let key = topic_key(dir.path(), &topic);
    let until = i64::MAX / 2;
    let groups = groups_database(dir.path());
    groups
        .execute(
            "INSERT INTO group_members (topic_key, grp, member, process, lease_until) VALUES (?1, 'g', 'other', ?2, ?3)",
            rusqlite::params![key, std::process::id(), until],
        )
        .expect("register the other member");
    groups
        .execute(
            "INSERT INTO group_owners (topic_key, grp, part, member) VALUES (?1, 'g', 0, 'other')",
            [key],
        )
        .expect("give it partition 0");

    let refused = log.store_offset(&topic, "g", 0, 3).await;
    assert!(
        matches!(refused, Err(LogError::NotOwner { partition: 0, .. })),
        "a commit for the other process's partition: {refused:?}"
    );
    assert_eq!(
        log.committed_offset(&topic, "g", 0).await.expect("read"),
        None
    );

    let member = log.join_group(&topic, "g").await.expect("join");
    assert_eq!(member.assigned().await.expect("assigned"), [1]);
    log.store_offset(&topic, "g", 1, 3)
        .await
        .expect("a commit for this process's partition");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_holding_the_log_longer_than_a_lease_does_not_stop_renewals() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 2).await.expect("ensure_topic");
    let member = log.join_group(&topic, "g").await.expect("join");
    assert_eq!(member.assigned().await.expect("assigned"), [0, 1]);

    // Another process's long write holds the records' write lock, up to
    // longer than a lease.
    let (held, holding) = std::sync::mpsc::channel();
    let (release, released) = std::sync::mpsc::channel::<()>();
    let path = dir.path().to_owned();
    let writer = std::thread::spawn(move || {
        let db = database(&path);
        db.execute_batch("BEGIN IMMEDIATE")
            .expect("take the write lock");
        held.send(()).expect("tell the test");
        let timed_out = released
            .recv_timeout(embedded::LEASE + Duration::from_secs(1))
            .is_err();
        db.execute_batch("COMMIT")
            .expect("let go of the write lock");
        timed_out
    });
    holding.recv().expect("the lock is held");

    let owned = member.assigned().await.expect("a renewal");
    // The writer is gone already when it held the lock to the end.
    let _ = release.send(());
    let waited_for_the_writer = writer.join().expect("the writer thread");
    assert!(
        !waited_for_the_writer,
        "the renewal waited until the long write let go of the lock"
    );
    assert_eq!(owned, [0, 1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_hands_the_partitions_over_by_the_next_call() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 4).await.expect("ensure_topic");
    let stays = log.join_group(&topic, "g").await.expect("join");
    let leaves = log.join_group(&topic, "g").await.expect("join");
    support::wait_for_split(stays.as_ref(), leaves.as_ref(), 4).await;
    leaves.leave().await.expect("leave");
    // The next renewal reads the rows `leave` deleted: no lease has to
    // run out first, and no timing is involved.
    assert_eq!(stays.assigned().await.expect("assigned"), [0, 1, 2, 3]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_topic_without_partitions_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 2).await.expect("ensure_topic");
    database(dir.path())
        .execute("UPDATE topics SET partitions = 0", [])
        .expect("empty the topic's partitions");
    let reopened = EmbeddedLog::open(dir.path()).expect("open again");
    for log in [&log, &reopened] {
        let found = log.topic("s", "t").await;
        assert!(
            matches!(&found, Err(LogError::NoPartitions { stream, topic }) if stream == "s" && topic == "t"),
            "{found:?}"
        );
        let ensured = log.ensure_topic("s", "t", 2).await;
        assert!(
            matches!(ensured, Err(LogError::NoPartitions { .. })),
            "{ensured:?}"
        );
    }
    let err = reopened.append(&topic, 0, vec![record("x")]).await;
    assert!(matches!(err, Err(LogError::NoPartitions { .. })), "{err:?}");
    let err = err.unwrap_err();
    assert!(!err.is_retryable());
    assert!(err.to_string().contains("create it again"), "{err}");
}

/// The writer leaves checkpoints to a thread of the log's own, yet the WAL
/// stays bounded: a process appending far more than fits in it keeps a
/// WAL smaller than what it appended (it starts over past 32 MiB).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_keep_the_wal_small_while_a_thread_checkpoints_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = EmbeddedLog::open(dir.path()).expect("open");
    let topic = log.ensure_topic("s", "t", 2).await.expect("ensure_topic");
    const BATCHES: usize = 48;
    for batch in 0..BATCHES {
        // 1 MiB a batch: 100 records of 10 KiB.
        let records = (0..100)
            .map(|n| record(vec![(batch + n) as u8; 10 * 1024]))
            .collect();
        log.append(&topic, (batch % 2) as u32, records)
            .await
            .expect("append");
    }
    let wal = std::fs::metadata(dir.path().join("log.sqlite3-wal"))
        .expect("the WAL file")
        .len();
    assert!(
        wal < 40 << 20,
        "the WAL grew to {wal} bytes for {BATCHES} MiB appended: it never started over"
    );
    for partition in 0..2 {
        let last = log
            .last_offset(&topic, partition)
            .await
            .expect("last offset");
        assert_eq!(
            last,
            Some((BATCHES as u64 / 2) * 100 - 1),
            "partition {partition}"
        );
    }
}
