//! The log conformance harness: every check runs against every backend
//! available here.
//!
//! The embedded log (in a fresh temporary directory) is always available;
//! Apache Iggy is added when [`iggy::iggy_log`] finds a server, and a
//! Kafka-protocol broker when [`kafka::kafka_log`] finds one. For each one
//! missing, the harness prints one line, `iggy: skipped (<test>): <reason>`
//! or `kafka: skipped (<test>): <reason>`, and goes on without it. Every check gets a stream name of its
//! own, so runs against a shared Iggy server never collide, and a failing
//! check is reported with the backend it failed on.
#![allow(
    dead_code,
    reason = "each test binary uses its own part of the shared support"
)]

pub mod agents;
pub mod ax_ipc;
pub mod axon;
pub mod balancer;
pub mod embedded;
pub mod fabric;
pub mod iggy;
pub mod ioa;
pub mod kafka;
pub mod postgres;
pub mod trust;

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use agdx::log::{GroupMember, Log, LogRecord, OutgoingRecord, SharedLog, TopicInfo};

/// A log opened anew on the same storage (embedded: the same directory;
/// Iggy: a new client connection to the same server), with whatever keeps
/// it alive.
pub struct Opened {
    pub log: SharedLog,
    _keep: Box<dyn Any + Send>,
}

impl Opened {
    pub fn new(log: SharedLog, keep: impl Any + Send) -> Self {
        Opened {
            log,
            _keep: Box::new(keep),
        }
    }
}

/// Opens the backend's storage again, as a restarted process would.
pub type Reopen = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Opened> + Send>> + Send + Sync>;

/// One backend under test.
pub struct TestLog {
    /// `embedded`, `iggy` or `kafka`.
    pub backend: &'static str,
    pub log: SharedLog,
    pub reopen: Reopen,
    _keep: Box<dyn Any + Send>,
}

impl TestLog {
    pub fn new(
        backend: &'static str,
        log: SharedLog,
        reopen: Reopen,
        keep: impl Any + Send,
    ) -> Self {
        TestLog {
            backend,
            log,
            reopen,
            _keep: Box::new(keep),
        }
    }
}

/// The backends to test: embedded always, Iggy when a server is there.
pub async fn backends() -> Vec<TestLog> {
    let mut all = vec![embedded::embedded_log()];
    match iggy::iggy_log().await {
        Ok(first) => {
            let log = first.log.clone();
            let reopen: Reopen = Arc::new(|| {
                Box::pin(async {
                    let again = iggy::iggy_log().await.unwrap_or_else(|reason| {
                        panic!("cannot reconnect to the Iggy test server: {reason}")
                    });
                    Opened::new(again.log.clone(), again)
                })
            });
            all.push(TestLog::new("iggy", log, reopen, first));
        }
        Err(reason) => iggy::say_skipped(&reason),
    }
    match kafka::kafka_log().await {
        Ok(first) => {
            let log = first.log.clone();
            let url = first.url.clone();
            let reopen: Reopen = Arc::new(move || {
                let url = url.clone();
                Box::pin(async move {
                    let log: SharedLog = Arc::new(
                        agdx::log::kafka::KafkaLog::connect(&url)
                            .await
                            .unwrap_or_else(|e| panic!("cannot reconnect to {url}: {e}")),
                    );
                    Opened::new(log, ())
                })
            });
            all.push(TestLog::new("kafka", log, reopen, first));
        }
        Err(reason) => kafka::say_skipped(&reason),
    }
    all
}

/// Says, once per test binary and backend, that the backend was skipped and
/// why.
///
/// Written to stderr directly rather than with `eprintln!`, which the test
/// harness captures and hides for passing tests: a skip must show in every
/// run, also in CI.
pub fn say_skipped_once(backend: &str, reason: &str) {
    use std::io::Write;
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if said.iter().any(|b| b == backend) {
        return;
    }
    said.push(backend.to_owned());
    let binary = std::env::current_exe()
        .ok()
        .and_then(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // Test binaries are named `<file>-<hash>`; the file says enough.
    let binary = binary
        .rsplit_once('-')
        .map_or(binary.as_str(), |(name, _)| name);
    let _ = writeln!(std::io::stderr(), "{backend}: skipped ({binary}): {reason}");
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// The last lines of a log file, for error messages.
pub fn tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A stream name no other test run uses: `t-<test>-<ulid>`.
pub fn unique_stream(test: &str) -> String {
    format!("t-{test}-{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// What a check runs against: one backend's log, a way to open its storage
/// again, and a stream name of the check's own.
pub struct Subject {
    pub log: SharedLog,
    pub reopen: Reopen,
    pub stream: String,
}

/// Runs `check` against every backend with a fresh stream name, naming the
/// backend when it fails.
pub async fn on_every_backend<F, Fut>(test: &str, check: F)
where
    F: Fn(Subject) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    for backend in backends().await {
        let subject = Subject {
            log: backend.log.clone(),
            reopen: backend.reopen.clone(),
            stream: unique_stream(test),
        };
        naming_backend(test, backend.backend, check(subject)).await;
    }
}

/// Runs `check` in a task of its own; when it panics, fails the test with
/// the panic's message and the backend's name.
pub async fn naming_backend(
    test: &str,
    backend: &str,
    check: impl Future<Output = ()> + Send + 'static,
) {
    if let Err(error) = tokio::spawn(check).await {
        let message = match error.try_into_panic() {
            Ok(panic) => panic_message(panic),
            Err(error) => error.to_string(),
        };
        panic!("{test} failed on the {backend} backend: {message}");
    }
}

fn panic_message(panic: Box<dyn Any + Send>) -> String {
    match panic.downcast::<String>() {
        Ok(message) => *message,
        Err(panic) => match panic.downcast::<&str>() {
            Ok(message) => (*message).to_owned(),
            Err(_) => "a panic without a message".to_owned(),
        },
    }
}

/// A record with no headers.
pub fn record(payload: impl Into<Vec<u8>>) -> OutgoingRecord {
    OutgoingRecord {
        headers: Vec::new(),
        payload: payload.into(),
    }
}

/// The payloads of `records` as strings.
pub fn texts(records: &[LogRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.payload).into_owned())
        .collect()
}

/// The objects of a command's `--json` output: one JSON object a line.
pub fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(
            |line| match serde_json::from_str::<serde_json::Value>(line) {
                Ok(object) if object.is_object() => object,
                _ => panic!("not a JSON object on its line: {line:?} in {stdout}"),
            },
        )
        .collect()
}

/// The records of a partition from offset `from` on, read `chunk` at a time
/// until a poll comes back empty.
pub async fn drain(
    log: &dyn Log,
    topic: &TopicInfo,
    partition: u32,
    from: u64,
    chunk: u32,
) -> Vec<LogRecord> {
    let mut out = Vec::new();
    loop {
        let next = from + out.len() as u64;
        let got = log
            .poll(topic, partition, next, chunk, Duration::ZERO)
            .await
            .expect("poll");
        assert!(
            got.len() <= chunk as usize,
            "a poll returned more than it was asked for"
        );
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

/// How long a test waits for something that should happen within seconds.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// Calls `probe` every 50 ms until it returns `Some`, failing the test with
/// `what` after [`PATIENCE`].
pub async fn eventually<T, Fut>(what: &str, mut probe: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Like [`eventually`] for long work: calls `probe` every 50 ms until it
/// returns `Ok`, failing the test with `what` only when the progress it
/// reports (`Err(done so far)`) stands still for [`PATIENCE`], so a slow
/// machine that keeps working is not mistaken for a stuck one.
pub async fn eventually_progressing<T, Fut>(what: &str, mut probe: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, usize>>,
{
    let mut best = None;
    let mut deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match probe().await {
            Ok(value) => return value,
            Err(progress) if best.is_none_or(|best| progress > best) => {
                best = Some(progress);
                deadline = tokio::time::Instant::now() + PATIENCE;
            }
            Err(progress) => assert!(
                tokio::time::Instant::now() < deadline,
                "gave up waiting: {what} (stuck at {progress} for {PATIENCE:?})"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The partitions two members own, once they split `partitions` between
/// them: disjoint, together all of them, both non-empty. (The two answers
/// are read one after the other, so a partition moving in between may show
/// up twice for a moment; the wait goes on until the picture is settled.)
pub async fn wait_for_split(
    a: &dyn GroupMember,
    b: &dyn GroupMember,
    partitions: u32,
) -> (Vec<u32>, Vec<u32>) {
    eventually("two members to split the partitions", || async {
        let owned_a = a.assigned().await.expect("member a: assigned");
        let owned_b = b.assigned().await.expect("member b: assigned");
        let disjoint = owned_a.iter().all(|p| !owned_b.contains(p));
        let mut union: Vec<u32> = owned_a.iter().chain(&owned_b).copied().collect();
        union.sort_unstable();
        let split = disjoint
            && !owned_a.is_empty()
            && !owned_b.is_empty()
            && union == (0..partitions).collect::<Vec<_>>();
        split.then_some((owned_a, owned_b))
    })
    .await
}
