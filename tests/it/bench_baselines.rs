//! The benches measure agdx against baselines in the same run, and a ratio
//! is only as good as its baseline: a bench that leaves one out, or leaves
//! its files behind in the log's directory, fails here. No figure is
//! asserted, only that each baseline ran over the same work.

use crate::support;

use std::collections::BTreeSet;

use iggy::prelude::{Client, IggyClient, StreamClient};
use support::fabric::{Fabric, embedded_fabric, on_every_fabric};

/// Lines of `stdout` that start with `row` (a table's row name).
fn has_row(stdout: &str, row: &str) -> bool {
    stdout.lines().any(|line| line.starts_with(row))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_bench_on_the_embedded_log_takes_turns_with_plain_sqlite_and_the_disk() {
    let fabric = embedded_fabric("bench_log_baselines").await;
    let (code, stdout, stderr) = fabric
        .run_agdx(&[
            "bench",
            "log",
            "--records",
            "300",
            "--size",
            "1024",
            "--batch",
            "100",
        ])
        .await;
    assert_eq!(code, 0, "bench log failed: {stderr}");
    assert!(
        stdout.contains("taking turns with plain SQLite and disk"),
        "{stdout}"
    );
    for row in [
        "agdx ",
        "plain SQLite ",
        "disk ",
        "agdx/plain SQLite ",
        "agdx/disk ",
    ] {
        assert!(has_row(&stdout, row), "no row {row:?} in\n{stdout}");
    }
    // The baselines' files went with the run; the log's directory holds
    // the log alone: its databases and their bell.
    let dir = fabric
        .spec
        .strip_prefix("embedded:")
        .expect("an embedded spec");
    for entry in std::fs::read_dir(dir).expect("read the log directory") {
        let name = entry.expect("an entry").file_name();
        let name = name.to_string_lossy();
        assert!(
            name.contains(".sqlite3") || name == "appends.bell",
            "left behind: {name}"
        );
    }
}

/// The names of the streams on the Iggy server of `fabric` that start with
/// `prefix`.
async fn iggy_streams(fabric: &Fabric, prefix: &str) -> BTreeSet<String> {
    let client = IggyClient::from_connection_string(&fabric.spec).expect("a connection string");
    client.connect().await.expect("the plain client connects");
    let streams = client.get_streams().await.expect("list the streams");
    client.shutdown().await.expect("the plain client closes");
    streams
        .into_iter()
        .map(|stream| stream.name)
        .filter(|name| name.starts_with(prefix))
        .collect()
}

/// Runs `agdx ARGS` on `fabric`; on Iggy, asserts that it left none of the
/// streams named `prefix...` behind (a bench's records, hundreds of MiB at
/// its defaults, are not left on a server it was pointed at). Returns
/// stdout.
async fn run_bench_leaving_no_stream(fabric: &Fabric, args: &[&str], prefix: &str) -> String {
    let before = match fabric.backend {
        "iggy" => Some(iggy_streams(fabric, prefix).await),
        _ => None,
    };
    let (code, stdout, stderr) = fabric.run_agdx(args).await;
    assert_eq!(code, 0, "{args:?} failed: {stderr}");
    if let Some(before) = before {
        let after = iggy_streams(fabric, prefix).await;
        let left: Vec<_> = after.difference(&before).collect();
        assert!(left.is_empty(), "{args:?} left streams behind: {left:?}");
    }
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_bench_has_a_plain_loop_on_every_backend() {
    on_every_fabric("bench_worker_baselines", |fabric| async move {
        let stdout = run_bench_leaving_no_stream(
            &fabric,
            &["bench", "worker", "--commands", "300", "--members", "1"],
            "bench-worker-",
        )
        .await;
        let runs: Vec<&str> = stdout
            .lines()
            .filter(|line| line.contains("1 member"))
            .collect();
        assert!(!runs.is_empty(), "{stdout}");
        for run in runs {
            assert!(run.contains("; ours/plain "), "no baseline: {run}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pipeline_bench_has_the_plain_client_beside_it_on_iggy() {
    on_every_fabric("bench_pipeline_baselines", |fabric| async move {
        let stdout = run_bench_leaving_no_stream(
            &fabric,
            &["bench", "pipeline", "--commands", "300", "--batch", "100"],
            "bench-pipeline-",
        )
        .await;
        assert!(
            stdout.contains("publish ratio ours/plain") == (fabric.backend == "iggy"),
            "{stdout}"
        );
    })
    .await;
}
