//! Closing an Iggy connection in a process that goes on running is quiet:
//! no error or warning is logged afterwards (the `iggy` client's own
//! heartbeat logged an error for its first ping after the shutdown).
//!
//! The check runs in a child process of its own (this test binary, running
//! only [`child`]): it installs the process-wide tracing subscriber, which
//! in the shared test process would also hear every other test.

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agdx::log::iggy::IggyLog;
use support::iggy::{iggy_log, say_skipped};

/// Collects what the subscriber writes.
#[derive(Clone, Default)]
struct Written(Arc<Mutex<Vec<u8>>>);

impl Write for Written {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("the buffer").extend_from_slice(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_closed_connection_logs_nothing_afterwards() {
    let exe = std::env::current_exe().expect("the test binary's path");
    let output = std::process::Command::new(exe)
        .args([
            "--exact",
            "iggy_quiet_close::child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
            "-q",
        ])
        .output()
        .expect("run the child test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // A skip line of the child reaches this run's stderr too.
    eprint!(
        "{}",
        stderr
            .lines()
            .filter(|l| l.starts_with("iggy: skipped"))
            .map(|l| format!("{l}\n"))
            .collect::<String>()
    );
    assert!(
        output.status.success() && stdout.contains("1 passed"),
        "the child test failed:\n{stdout}\n{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a child process of a_closed_connection_logs_nothing_afterwards, which starts it itself"]
async fn child() {
    let written = Written::default();
    let sink = written.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || sink.clone())
        .init();
    let server = match iggy_log().await {
        Ok(server) => server,
        Err(reason) => {
            say_skipped(&reason);
            return;
        }
    };
    // Heartbeats every 200 ms, so that several are due while the test waits.
    let url = format!("{}?heartbeat_interval=200ms", server.url);
    let log = IggyLog::connect(&url).await.expect("connect");
    tokio::time::sleep(Duration::from_millis(500)).await;
    drop(log);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = String::from_utf8_lossy(&written.0.lock().expect("the buffer")).into_owned();
    assert_eq!(text, "", "logged after the connection was closed");
}
