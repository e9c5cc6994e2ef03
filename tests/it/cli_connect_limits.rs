//! Time limits hold while connecting: against an address that accepts TCP
//! connections and never answers, `agdx ask --timeout` fails within its
//! timeout and `init`, `send` and `tail` within the connect timeout, each
//! with one line naming the log; a Kafka address that refuses connections
//! gets one clear error, not librdkafka's retries.
//!
//! The bound these tests hold the commands to is generous on purpose (it
//! proves they did not hang, as they did for minutes): speed belongs in
//! `agdx bench`.

use crate::support;

use std::time::Duration;

use tokio::net::TcpListener;

/// Far below the minutes a command hung for, far above what it needs.
const NO_HANG: Duration = Duration::from_secs(90);

/// A loopback listener that accepts every connection and never answers;
/// its address. The connections stay open as long as the test runs.
async fn silent_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind a listener");
    let address = listener.local_addr().expect("its address").to_string();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((connection, _)) = listener.accept().await {
            held.push(connection);
        }
    });
    address
}

/// Runs `agdx --log LOG ARGS` in a temporary directory: (exit code, stderr).
async fn agdx(log: &str, args: &[&str]) -> (i32, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let run = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"))
        .arg("--log")
        .arg(log)
        .args(args)
        .env_remove("AGDX_LOG")
        .env_remove("AGDX_STREAM")
        .env_remove("AGDX_KEYS")
        .env_remove("AGDX_LOG_LEVEL")
        .current_dir(dir.path())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(NO_HANG, run)
        .await
        .unwrap_or_else(|_| panic!("agdx {args:?} on {log} was still running after {NO_HANG:?}"))
        .expect("run agdx");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

const ASK: &[&str] = &[
    "ask",
    "--to",
    "echo",
    "--operation",
    "hello",
    "--timeout",
    "2s",
    "hi",
];

/// The commands besides `ask` that connect, each with what it gets.
const OTHERS: &[&[&str]] = &[
    &["init"],
    &["send", "--to", "echo", "--operation", "hello", "hi"],
    &["tail"],
];

/// Checks that `stderr` is one line saying the log at `described` was not
/// reached or did not answer.
fn one_clear_line(stderr: &str, described: &str, command: &[&str]) {
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "{command:?}: one line, got:\n{stderr}");
    assert!(
        lines[0].starts_with("agdx: ") && lines[0].contains(described),
        "{command:?}: the line names the log {described}: {stderr}"
    );
    assert!(
        lines[0].contains("no answer") || lines[0].contains("cannot reach"),
        "{command:?}: the line says the log did not answer: {stderr}"
    );
}

/// Runs the [`OTHERS`] at once on `log`: each fails (exit 1) with one
/// line naming the log as `described` and the connect timeout `limit`.
async fn others_fail_in_one_line(log: &str, described: &str, limit: &str) {
    let runs = OTHERS.iter().map(|args| agdx(log, args));
    for ((code, stderr), args) in futures_util::future::join_all(runs)
        .await
        .iter()
        .zip(OTHERS)
    {
        assert_eq!(*code, 1, "{args:?}: {stderr}");
        one_clear_line(stderr, described, args);
        assert!(stderr.contains(limit), "{args:?} says its limit: {stderr}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_iggy_address_that_never_answers_fails_within_the_limits() {
    let address = silent_server().await;
    let log = format!("iggy://iggy:secret@{address}");
    let described = format!("iggy://{address}");
    let (code, stderr) = agdx(&log, ASK).await;
    assert_eq!(code, 4, "ask's timeout exit status: {stderr}");
    one_clear_line(&stderr, &described, ASK);
    assert!(stderr.contains("2s"), "ask says its limit: {stderr}");
    assert!(!stderr.contains("secret"), "no password shown: {stderr}");
    others_fail_in_one_line(&log, &described, "10s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_address_that_never_answers_fails_within_the_limits() {
    let address = silent_server().await;
    let log = format!("kafka://{address}");
    let (code, stderr) = agdx(&log, ASK).await;
    assert_eq!(code, 4, "ask's timeout exit status: {stderr}");
    one_clear_line(&stderr, &log, ASK);
    others_fail_in_one_line(&log, &log, "10s").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_address_that_refuses_gets_one_clear_line() {
    let port = support::free_port().expect("a free port");
    let log = format!("kafka://127.0.0.1:{port}");
    for args in [ASK].iter().chain(OTHERS) {
        let (code, stderr) = agdx(&log, args).await;
        assert_ne!(code, 0, "{args:?}: {stderr}");
        one_clear_line(&stderr, &log, args);
        assert!(
            !stderr.contains("librdkafka"),
            "{args:?}: librdkafka's own lines stay at debug level: {stderr}"
        );
    }
}
