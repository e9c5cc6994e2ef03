//! Damage to the embedded log's files is never silent: bytes flipped in a
//! record, in a page of the database file or in its WAL (with no process
//! running) are found and named — by the log (a damaged record or range,
//! or a refusal to open a log that lost records it acknowledged), by `agdx
//! check`, by the readers (`agdx tail`, `agdx timeline`), which go on past
//! them, and by a worker, which dead-letters them and answers the rest.
//!
//! The WAL test starts a copy of this test binary running the ignored
//! `child` test (see `support::embedded` for the pattern).

use crate::support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use agdx::log::embedded::EmbeddedLog;
use agdx::log::{Cause, Damage, Log, LogError, SharedLog, TopicInfo};
use agdx::wire::{ConversationId, DeadLetter};
use agdx::{CommandRequest, Producer, Topology, TopologyConfig};
use support::embedded::{
    Child, ChildTask, checkpoint, database_file, flip_byte, occurrences, report,
};
use support::{eventually, record};

/// The child test's name, as the parent passes it to `--exact`.
const CHILD: &str = "log_embedded_damage::child";

/// Commands put on the log by [`commands_log`].
const COMMANDS: usize = 300;

/// A log with [`COMMANDS`] commands to `echo` in one conversation, closed
/// and checkpointed, so that its database file holds every record.
struct Damageable {
    _dir: tempfile::TempDir,
    path: PathBuf,
    stream: String,
    conversation: ConversationId,
    partition: u32,
}

/// The body of command `n`: a marker to find it by in the file.
fn body(n: usize) -> String {
    format!("command-{n:05}-of-the-damage-test")
}

async fn commands_log(test: &str) -> Damageable {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("log");
    let stream = support::unique_stream(test);
    let conversation = agdx::new_conversation_id();
    let partition = {
        let log: SharedLog = Arc::new(EmbeddedLog::open(&path).expect("open"));
        let topology = TopologyConfig::new(&stream)
            .with_partitions(2)
            .ensure(log.as_ref())
            .await
            .expect("topology");
        let requests = (0..COMMANDS)
            .map(|n| {
                CommandRequest::new("hello", body(n).into_bytes())
                    .to(agdx::wire::AgentId::new("echo").expect("a name"))
                    .conversation(conversation)
            })
            .collect();
        Producer::new(
            log,
            topology.clone(),
            agdx::wire::AgentId::new("asker").expect("a name"),
        )
        .commands(requests)
        .await
        .expect("send the commands");
        agdx::routing::partition_of(&topology.commands, conversation)
    };
    checkpoint(&path);
    Damageable {
        _dir: dir,
        path,
        stream,
        conversation,
        partition,
    }
}

impl Damageable {
    fn spec(&self) -> String {
        format!("embedded:{}", self.path.display())
    }

    /// The log opened again, and its agent topics.
    async fn open(&self) -> (SharedLog, Topology) {
        let log: SharedLog = Arc::new(EmbeddedLog::open(&self.path).expect("open"));
        let topology = TopologyConfig::new(&self.stream)
            .open(log.as_ref())
            .await
            .expect("topology");
        (log, topology)
    }

    /// Runs `agdx ARGS` on this log: (exit code, stdout, stderr).
    async fn agdx(&self, args: &[&str]) -> (i32, String, String) {
        agdx_on(&self.spec(), &self.stream, args).await
    }
}

/// Runs `agdx --log SPEC --stream STREAM ARGS`: (exit code, stdout, stderr).
async fn agdx_on(spec: &str, stream: &str, args: &[&str]) -> (i32, String, String) {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"))
        .args(["--log", spec, "--stream", stream])
        .args(args)
        .env_remove("AGDX_LOG")
        .env_remove("AGDX_STREAM")
        .env_remove("AGDX_KEYS")
        .output()
        .await
        .expect("run agdx");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Every record of a partition read, stepping over damage: the offsets
/// read and the damage met.
async fn read_all(log: &dyn Log, topic: &TopicInfo, partition: u32) -> (Vec<u64>, Vec<Damage>) {
    let (mut offsets, mut damaged, mut from) = (Vec::new(), Vec::new(), 0);
    for _ in 0..COMMANDS * 2 {
        match log.poll(topic, partition, from, 1000, Duration::ZERO).await {
            Ok(records) if records.is_empty() => return (offsets, damaged),
            Ok(records) => {
                from = records.last().expect("records").position.offset + 1;
                offsets.extend(records.iter().map(|r| r.position.offset));
            }
            Err(LogError::Corrupt(damage)) => {
                from = damage.next_offset();
                damaged.push(damage);
            }
            Err(other) => panic!("reading partition {partition}: {other}"),
        }
    }
    panic!("reading partition {partition} did not end");
}

/// The offsets `damage` covers.
fn covered(damage: &[Damage]) -> Vec<u64> {
    damage
        .iter()
        .flat_map(|d| d.position.offset..=d.last)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_whose_bytes_flipped_in_the_file_is_named_and_stepped_over() {
    let log = commands_log("flipped_record").await;
    let file = database_file(&log.path);
    let marker = body(150);
    let found = occurrences(&file, marker.as_bytes());
    assert!(!found.is_empty(), "command 150 is in the database file");
    for at in found {
        flip_byte(&file, at + 3);
    }

    let (shared, topology) = log.open().await;
    let commands = &topology.commands;
    let (offsets, damaged) = read_all(shared.as_ref(), commands, log.partition).await;
    assert_eq!(covered(&damaged), [150], "{damaged:?}");
    assert_eq!(damaged[0].reason, "checksum mismatch");
    assert_eq!(
        offsets.len(),
        COMMANDS - 1,
        "every other command reads back"
    );
    let before = shared
        .poll(commands, log.partition, 149, 1, Duration::ZERO)
        .await
        .expect("command 149");
    let before = agdx::envelope_of(&before[0])
        .expect("an envelope")
        .record
        .expect("a record id")
        .to_string();
    drop(shared);

    let (code, stdout, stderr) = log.agdx(&["tail"]).await;
    assert_eq!(code, 5, "the output misses a record: {stderr}");
    assert_eq!(stdout.lines().count(), COMMANDS - 1, "tail goes on past it");
    let named = format!(
        "'{}/agent.commands' partition {} offset 150: checksum mismatch",
        log.stream, log.partition
    );
    assert!(stderr.contains(&named), "{stderr}");
    assert!(stderr.contains("agdx check"), "says what to do: {stderr}");

    let conversation = log.conversation.to_string();
    let (code, stdout, stderr) = log.agdx(&["timeline", &conversation]).await;
    assert_eq!(code, 5, "{stderr}");
    assert!(stderr.contains(&named), "{stderr}");
    assert!(
        stdout.contains(&body(149)) && stdout.contains(&body(151)),
        "{stdout}"
    );
    assert!(!stdout.contains(&body(150)));

    let (code, stdout, stderr) = log
        .agdx(&["graph", &before, "--conversation", &conversation])
        .await;
    assert_eq!(code, 5, "{stderr}");
    assert!(stdout.contains("◀ start"), "the graph is drawn: {stdout}");
    assert_eq!(stderr.matches(&named).count(), 1, "said once: {stderr}");

    let (code, stdout, stderr) = log.agdx(&["check"]).await;
    assert_eq!(code, 5, "{stdout}{stderr}");
    assert!(stdout.contains(&format!("damaged: {named}")), "{stdout}");
    assert!(
        stdout.contains(&format!("{} records read back intact", COMMANDS - 1)),
        "{stdout}"
    );
}

/// The offset in `file` of the B-tree leaf page holding `marker`, and
/// that page's number (a marker of a row stored in interior pages too is
/// found there as well).
fn leaf_page_of(file: &Path, marker: &str) -> usize {
    const PAGE: usize = 8_192;
    const INDEX_LEAF: u8 = 0x0a;
    let bytes = std::fs::read(file).expect("read the database");
    occurrences(file, marker.as_bytes())
        .into_iter()
        .map(|at| at / PAGE * PAGE)
        .find(|&page| page > 0 && bytes[page] == INDEX_LEAF)
        .expect("a leaf page holds the marker")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_page_is_named_by_the_range_it_held_and_a_worker_goes_past_it() {
    let log = commands_log("flipped_page").await;
    let file = database_file(&log.path);
    // The page header's type byte: SQLite cannot read the page at all.
    flip_byte(&file, leaf_page_of(&file, &body(100)));

    let (shared, topology) = log.open().await;
    let commands = topology.commands.clone();
    let (offsets, damaged) = read_all(shared.as_ref(), &commands, log.partition).await;
    let lost = covered(&damaged);
    assert!(lost.contains(&100), "{damaged:?}");
    assert!(lost.len() < COMMANDS / 2, "one page's records: {damaged:?}");
    assert_eq!(offsets.len() + lost.len(), COMMANDS, "{damaged:?}");
    assert!(
        offsets.contains(&(COMMANDS as u64 - 1)),
        "read on past the page"
    );
    let range = damaged[0].clone();
    assert!(
        range.reason.contains("malformed"),
        "SQLite's word for it: {}",
        range.reason
    );

    let (code, stdout, _) = log.agdx(&["check"]).await;
    assert_eq!(code, 5, "{stdout}");
    let named = format!(
        "damaged: '{}/agent.commands' partition {} offset {}: SQLite cannot read",
        log.stream,
        log.partition,
        range.offsets()
    );
    assert!(stdout.contains(&named), "{named}\n{stdout}");
    assert!(
        stdout.contains("log.sqlite3: SQLite's integrity check"),
        "{stdout}"
    );

    // A worker answers every other command and dead-letters the page's.
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"))
        .args(["--log", &log.spec(), "--stream", &log.stream])
        .args(["worker", "--agent", "echo", "--echo"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start a worker");
    let responses = topology.responses.clone();
    let reply_partition = agdx::routing::partition_of(&responses, log.conversation);
    eventually("every readable command answered", || async {
        let last = shared
            .last_offset(&responses, reply_partition)
            .await
            .expect("last offset");
        (last.map_or(0, |l| l + 1) as usize == offsets.len()).then_some(())
    })
    .await;
    let dlq = &topology.dlq;
    let capsules = eventually("the dead letter", || async {
        let mut capsules = Vec::new();
        for partition in 0..dlq.partitions.get() {
            let records = shared
                .poll(dlq, partition, 0, 10, Duration::ZERO)
                .await
                .expect("poll the dlq");
            capsules.extend(
                records
                    .iter()
                    .map(|r| DeadLetter::decode(&r.payload).expect("a capsule")),
            );
        }
        (!capsules.is_empty()).then_some(capsules)
    })
    .await;
    assert_eq!(capsules.len(), 1, "one dead letter for the range");
    assert_eq!(capsules[0].source, range.position);
    let detail = capsules[0].detail.clone().unwrap_or_default();
    assert!(
        detail.contains(&format!("to offset {}", range.last)),
        "{detail}"
    );
    let committed = shared
        .committed_offset(&commands, "echo", log.partition)
        .await
        .expect("committed offset");
    assert_eq!(
        committed,
        Some(COMMANDS as u64 - 1),
        "committed past it all"
    );

    support::fabric::terminate(&mut worker).await;
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(
        worker.stderr.as_mut().expect("the worker's stderr"),
        &mut stderr,
    )
    .await
    .expect("read the worker's stderr");
    assert!(
        stderr.contains("ERROR") && stderr.contains("stored commands cannot be read"),
        "the worker's log says so: {stderr}"
    );
    assert!(stderr.contains(&range.position.to_string()), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_that_make_sqlite_skip_records_silently_are_named_as_the_gap() {
    let log = commands_log("skipped_rows").await;
    let file = database_file(&log.path);
    let root: usize = support::embedded::database(&log.path)
        .query_row(
            "SELECT rootpage FROM sqlite_schema WHERE name = 'records'",
            [],
            |row| row.get(0),
        )
        .expect("the records' root page");
    // One cell fewer in the root's header: SQLite then scans past the
    // child it pointed to without an error, as if those records were
    // never there.
    const INDEX_INTERIOR: u8 = 0x02;
    let page = (root - 1) * 8_192;
    let mut bytes = std::fs::read(&file).expect("read the database");
    assert_eq!(
        bytes[page], INDEX_INTERIOR,
        "the records span several pages"
    );
    let cells = u16::from_be_bytes([bytes[page + 3], bytes[page + 4]]);
    assert!(cells >= 2, "{cells} cells");
    bytes[page + 3..page + 5].copy_from_slice(&(cells - 1).to_be_bytes());
    std::fs::write(&file, bytes).expect("write the database back");

    let (shared, topology) = log.open().await;
    let (offsets, damaged) = read_all(shared.as_ref(), &topology.commands, log.partition).await;
    let missing = covered(&damaged);
    assert!(!missing.is_empty(), "the skipped records are named");
    assert_eq!(offsets.len() + missing.len(), COMMANDS, "{damaged:?}");
    assert!(damaged[0].reason.starts_with("missing"), "{damaged:?}");
    drop(shared);

    let (code, stdout, stderr) = log.agdx(&["tail"]).await;
    assert_eq!(code, 5, "{stderr}");
    assert_eq!(stdout.lines().count(), offsets.len());
    assert!(stderr.contains(&damaged[0].offsets()), "{stderr}");
    let (code, stdout, _) = log.agdx(&["check"]).await;
    assert_eq!(code, 5, "{stdout}");
    assert!(
        stdout.contains(&format!("offset {}: missing", damaged[0].offsets())),
        "{stdout}"
    );
}

/// Plays the role its parent asked for; does nothing in a normal run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of the WAL test, which starts it itself"]
async fn child() {
    let Some(task) = ChildTask::from_env() else {
        return;
    };
    let log = task.open();
    match task.role.as_str() {
        // Appends `arg` records to partition 0 of topic "t", one per
        // commit, then waits to be killed.
        "one-by-one" => {
            let topic = log
                .ensure_topic(&task.stream, "t", 1)
                .await
                .expect("ensure_topic");
            let count: usize = task.arg.parse().expect("count");
            for n in 0..count {
                log.append(&topic, 0, vec![record(format!("acknowledged {n}"))])
                    .await
                    .expect("append");
            }
            report("done");
            std::future::pending::<()>().await;
        }
        other => panic!("unknown child role {other:?}"),
    }
}

/// The size of a WAL frame's header, and of the WAL's own header.
const WAL_FRAME_HEADER: usize = 24;
const WAL_HEADER: usize = 32;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_flipped_in_the_wal_make_the_log_refuse_to_open_naming_what_it_lost() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("log");
    let stream = support::unique_stream("flipped_wal");
    let mut child = Child::spawn(CHILD, "one-by-one", &path, &stream, "81");
    assert_eq!(child.line().await, "done");
    // Killed, the process leaves its WAL behind, not yet in the database file.
    child.kill().await;
    let wal = path.join("log.sqlite3-wal");
    let size = std::fs::metadata(&wal).expect("the WAL is there").len() as usize;
    let frames = (size - WAL_HEADER) / (WAL_FRAME_HEADER + 8_192);
    assert!(frames > 81, "a frame or more per commit: {frames}");
    let frame = frames / 3;
    flip_byte(
        &wal,
        WAL_HEADER + frame * (WAL_FRAME_HEADER + 8_192) + WAL_FRAME_HEADER + 100,
    );

    let refused = match EmbeddedLog::open(&path) {
        Ok(_) => panic!("a log that lost acknowledged records opened"),
        Err(error) => error,
    };
    let message = refused.to_string();
    assert!(matches!(refused, LogError::Damaged { .. }), "{message}");
    let lost = format!("'{stream}/t' partition 0 lost offsets ");
    assert!(message.contains(&lost), "{message}");
    assert!(message.contains("to 80 ("), "{message}");
    let held: u64 = message[message.find(&lost).expect("named") + lost.len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("the first lost offset");
    assert!(held < 81, "{message}");

    let spec = format!("embedded:{}", path.display());
    let (code, _, stderr) = agdx_on(&spec, &stream, &["tail"]).await;
    assert_eq!(code, 5, "{stderr}");
    assert!(
        stderr.contains(&lost) && stderr.contains("agdx check"),
        "{stderr}"
    );
    assert!(!stderr.contains("free space"), "{stderr}");

    let report = EmbeddedLog::verify(&path).await.expect("verify");
    assert_eq!(report.damaged_records(), 81 - held, "{report:?}");
    let (code, stdout, _) = agdx_on(&spec, &stream, &["check"]).await;
    assert_eq!(code, 5, "{stdout}");
    let named = format!(
        "damaged: '{stream}/t' partition 0 offset {held} to 80 ({} records): lost:",
        81 - held
    );
    assert!(stdout.contains(&named), "{named}\n{stdout}");

    // Giving them up opens the log again; appends go on after what is left.
    let (code, stdout, stderr) = agdx_on(&spec, &stream, &["check", "--accept-loss"]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("given up:"), "{stdout}");
    let log = EmbeddedLog::open(&path).expect("opens once the loss is accepted");
    let topic = log.topic(&stream, "t").await.expect("topic").expect("t");
    assert_eq!(
        log.last_offset(&topic, 0).await.expect("last"),
        held.checked_sub(1)
    );
    log.append(&topic, 0, vec![record("after")])
        .await
        .expect("append");
    assert_eq!(log.last_offset(&topic, 0).await.expect("last"), Some(held));
    drop(log);
    let (code, stdout, _) = agdx_on(&spec, &stream, &["check"]).await;
    assert_eq!(code, 0, "{stdout}");
    assert!(stdout.contains("nothing is damaged"), "{stdout}");
}

#[tokio::test]
async fn a_file_that_is_not_a_database_is_damage_not_a_full_disk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("log");
    std::fs::create_dir_all(&path).expect("mkdir");
    std::fs::write(path.join("log.sqlite3"), vec![b'x'; 8_192]).expect("write");
    let refused = match EmbeddedLog::open(&path) {
        Ok(_) => panic!("garbage opened as a log"),
        Err(error) => error,
    };
    let message = refused.to_string();
    assert!(message.contains("file is not a database"), "{message}");
    assert!(!message.contains("free space"), "{message}");
    // SQLite's own error stays underneath, for a program to look at.
    match std::error::Error::source(&refused).and_then(|c| c.downcast_ref::<Cause>()) {
        Some(Cause::Sqlite(error)) => assert_eq!(
            error.sqlite_error_code(),
            Some(rusqlite::ErrorCode::NotADatabase),
            "{error:?}"
        ),
        other => panic!("{refused:?} keeps no SQLite error: {other:?}"),
    }

    let spec = format!("embedded:{}", path.display());
    let (code, _, stderr) = agdx_on(&spec, "s", &["tail"]).await;
    assert_eq!(code, 5, "{stderr}");
    assert!(stderr.contains("is damaged"), "{stderr}");
    assert!(!stderr.contains("free space"), "{stderr}");
}
