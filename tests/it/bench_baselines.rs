//! The benches measure agdx against baselines in the same run, and a ratio
//! is only as good as its baseline: a bench that leaves one out, or leaves
//! its files behind in the log's directory, fails here. No figure is
//! asserted, only that each baseline ran over the same work.

use crate::support;

use support::fabric::{embedded_fabric, on_every_fabric};

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_worker_bench_has_a_plain_loop_on_every_backend() {
    on_every_fabric("bench_worker_baselines", |fabric| async move {
        let (code, stdout, stderr) = fabric
            .run_agdx(&["bench", "worker", "--commands", "300", "--members", "1"])
            .await;
        assert_eq!(code, 0, "bench worker failed: {stderr}");
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
