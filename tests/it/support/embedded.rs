//! The embedded backend for the tests, and child processes for the tests
//! that need several processes on one log directory.
//!
//! A multi-process test starts copies of its own test binary
//! (`std::env::current_exe()`) that run just one test, `child`, marked
//! `#[ignore]` so a normal run skips it. The role the child plays and its
//! arguments come in environment variables; without them `child` does
//! nothing, so `--include-ignored` runs stay harmless. This keeps the child
//! code next to the test that uses it, needs no extra binary and no hidden
//! command in the agdx CLI. A child reports to its parent through stdout
//! lines starting with `@` (libtest's own output is ignored), and exits when
//! its stdin closes, so no child outlives its parent.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

use agdx::log::embedded::EmbeddedLog;
use agdx::log::{SharedLog, TopicInfo};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc;

use super::{Opened, PATIENCE, Reopen, TestLog};

/// An embedded log in the `log` folder of a fresh temporary directory: the
/// directory (removed when dropped), the log's path, and the log.
pub fn fresh_embedded_log() -> (tempfile::TempDir, PathBuf, SharedLog) {
    let dir = tempfile::tempdir().expect("create a temporary directory");
    let path = dir.path().join("log");
    let log: SharedLog = Arc::new(EmbeddedLog::open(&path).expect("open the embedded log"));
    (dir, path, log)
}

/// An embedded log in a fresh temporary directory.
pub fn embedded_log() -> TestLog {
    let (dir, path, log) = fresh_embedded_log();
    let reopen: Reopen = Arc::new(move || {
        let path = path.clone();
        Box::pin(async move {
            let log: SharedLog =
                Arc::new(EmbeddedLog::open(&path).expect("reopen the embedded log"));
            Opened::new(log, ())
        })
    });
    TestLog::new("embedded", log, reopen, dir)
}

/// The embedded log's database files inside its directory: records and
/// offsets, and group leases.
const DB_FILE: &str = "log.sqlite3";
const GROUPS_FILE: &str = "groups.sqlite3";

/// The records database of the embedded log in `dir` (created when
/// missing), opened directly to change what the log stores behind its back.
pub fn database(dir: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join(DB_FILE)).expect("open the log's database")
}

/// The group lease database of the embedded log in `dir`, opened directly.
pub fn groups_database(dir: &Path) -> rusqlite::Connection {
    rusqlite::Connection::open(dir.join(GROUPS_FILE)).expect("open the log's lease database")
}

/// Rewrites the stored record at `offset` of `partition` with the SQL
/// assignment `set` (say `headers = x'05'`), behind the log's back.
pub fn tamper(dir: &Path, topic: &TopicInfo, partition: u32, offset: u64, set: &str) {
    let changed = database(dir)
        .execute(
            &format!(
                "UPDATE records SET {set} WHERE part = ?3 AND off = ?4 AND topic_key =
                 (SELECT topic_key FROM topics WHERE stream_id = ?1 AND id = ?2)"
            ),
            rusqlite::params![topic.stream_id, topic.topic_id, partition, offset],
        )
        .expect("tamper with a stored record");
    assert_eq!(changed, 1, "no stored record at {partition}/{offset}");
}

/// Damages the stored payload of one record so that its checksum no longer
/// matches: reading it reports `LogError::Corrupt`.
pub fn damage_payload(dir: &Path, topic: &TopicInfo, partition: u32, offset: u64) {
    tamper(dir, topic, partition, offset, "payload = payload || x'ff'");
}

/// The records database file of the embedded log in `dir`.
pub fn database_file(dir: &Path) -> PathBuf {
    dir.join(DB_FILE)
}

/// Moves everything in the WAL of the log in `dir` into its database file
/// (no process may have the log open), so the file holds every record.
pub fn checkpoint(dir: &Path) {
    let (busy, _, _): (i64, i64, i64) = database(dir)
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |row| {
            Ok((row.get(0)?, row.get(1)?, row.get(2)?))
        })
        .expect("checkpoint the log's WAL");
    assert_eq!(busy, 0, "nothing else may hold the log open");
}

/// Where `marker` occurs in `file`.
pub fn occurrences(file: &Path, marker: &[u8]) -> Vec<usize> {
    let bytes = std::fs::read(file).expect("read the file");
    bytes
        .windows(marker.len())
        .enumerate()
        .filter(|(_, window)| *window == marker)
        .map(|(at, _)| at)
        .collect()
}

/// Flips every bit of the byte at `offset` of `file`, as a failing disk
/// or a stray write would change it.
pub fn flip_byte(file: &Path, offset: usize) {
    let mut bytes = std::fs::read(file).expect("read the file");
    bytes[offset] ^= 0xff;
    std::fs::write(file, bytes).expect("write the file back");
}

/// Environment variable naming the role a child process plays.
const CHILD_ROLE: &str = "AGDX_TEST_CHILD";
/// Environment variable with the child's log directory.
const CHILD_DIR: &str = "AGDX_TEST_LOG_DIR";
/// Environment variable with the child's stream name.
const CHILD_STREAM: &str = "AGDX_TEST_STREAM";
/// Environment variable with the role's own argument.
const CHILD_ARG: &str = "AGDX_TEST_ARG";

/// What a child process was asked to do.
pub struct ChildTask {
    pub role: String,
    pub dir: PathBuf,
    pub stream: String,
    pub arg: String,
}

impl ChildTask {
    /// The task of this process when it is a child, `None` otherwise.
    pub fn from_env() -> Option<ChildTask> {
        let role = std::env::var(CHILD_ROLE).ok()?;
        let var = |name: &str| {
            std::env::var(name).unwrap_or_else(|_| panic!("child process without {name}"))
        };
        let task = ChildTask {
            role,
            dir: var(CHILD_DIR).into(),
            stream: var(CHILD_STREAM),
            arg: var(CHILD_ARG),
        };
        // The parent holds our stdin open; when it goes away, so do we.
        std::thread::spawn(|| {
            let _ = std::io::copy(&mut std::io::stdin(), &mut std::io::sink());
            std::process::exit(0);
        });
        Some(task)
    }

    /// Opens the log directory.
    pub fn open(&self) -> SharedLog {
        Arc::new(EmbeddedLog::open(&self.dir).expect("child: open the embedded log"))
    }
}

/// Reports a line to the parent.
pub fn report(line: &str) {
    println!("@{line}");
}

/// A running child process and the lines it reported.
pub struct Child {
    process: tokio::process::Child,
    lines: mpsc::UnboundedReceiver<String>,
}

impl Child {
    /// Starts this test binary's `child_test` as a child playing `role`.
    pub fn spawn(child_test: &str, role: &str, dir: &Path, stream: &str, arg: &str) -> Child {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut process = tokio::process::Command::new(exe)
            .args([
                "--exact",
                child_test,
                "--ignored",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env(CHILD_ROLE, role)
            .env(CHILD_DIR, dir)
            .env(CHILD_STREAM, stream)
            .env(CHILD_ARG, arg)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start a child process");
        let stdout = process.stdout.take().expect("the child's stdout");
        let (sender, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                if let Some(report) = line.strip_prefix('@')
                    && sender.send(report.to_owned()).is_err()
                {
                    return;
                }
            }
        });
        Child { process, lines }
    }

    /// The next reported line; `None` once the child has exited and every
    /// line was read. Fails the test when nothing comes within [`PATIENCE`].
    pub async fn next_line(&mut self) -> Option<String> {
        tokio::time::timeout(PATIENCE, self.lines.recv())
            .await
            .expect("a child process went silent")
    }

    /// The next reported line, which must exist.
    pub async fn line(&mut self) -> String {
        self.next_line()
            .await
            .expect("a child process exited early")
    }

    /// Kills the child with SIGKILL and waits for it to be gone.
    pub async fn kill(&mut self) {
        self.process.start_kill().expect("kill the child process");
        self.process.wait().await.expect("reap the child process");
    }

    /// Every line the child reports until its stdout closes.
    pub async fn remaining_lines(&mut self) -> Vec<String> {
        let mut lines = Vec::new();
        while let Some(line) = self.next_line().await {
            lines.push(line);
        }
        lines
    }

    /// Waits for the child to exit and checks that it succeeded.
    pub async fn succeeds(&mut self) {
        let status = tokio::time::timeout(PATIENCE * 3, self.process.wait())
            .await
            .expect("a child process did not finish")
            .expect("wait for a child process");
        assert!(status.success(), "a child process failed: {status}");
    }
}
