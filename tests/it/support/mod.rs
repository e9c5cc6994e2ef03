//! The log conformance harness: every check runs against every backend
//! available here.
//!
//! The embedded log (in a fresh temporary directory) is always available;
//! Apache Iggy is added when [`iggy::iggy_log`] finds a server, and a
//! Kafka-protocol broker when [`kafka::kafka_log`] finds one. For each one
//! missing, the harness prints one line, `iggy: skipped: <reason>`
//! or `kafka: skipped: <reason>`, and goes on without it. Every check gets a stream name of its
//! own, so runs against a shared Iggy server never collide, and a failing
//! check is reported with the backend it failed on.

pub mod agents;
pub mod ax_ipc;
pub mod axon;
pub mod balancer;
pub mod counting;
pub mod embedded;
pub mod fabric;
pub mod iggy;
pub mod ioa;
pub mod kafka;
pub mod netns;
pub mod postgres;
pub mod s3;
pub mod trust;

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agdx::log::SharedLog;
pub use agdx::testing::conformance::{Opened, Reopen, Subject};
pub use agdx::testing::{PATIENCE, drain, eventually, record, texts, wait_for_split};

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

/// Says, once per run and backend, that the backend was skipped and
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
    let _ = writeln!(std::io::stderr(), "{backend}: skipped: {reason}");
}

/// A loopback port nothing listens on right now.
pub fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// Everything a child process writes to `stream` until it closes it, read
/// in the background so the child never blocks on a full pipe.
pub fn read_all(
    stream: impl tokio::io::AsyncRead + Unpin + Send + 'static,
) -> tokio::task::JoinHandle<String> {
    use tokio::io::AsyncReadExt;
    tokio::spawn(async move {
        let mut text = String::new();
        let mut stream = stream;
        let _ = stream.read_to_string(&mut text).await;
        text
    })
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
