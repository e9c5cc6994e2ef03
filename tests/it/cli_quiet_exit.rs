//! `agdx ask` and `agdx bench ask` end without a word on stderr when all
//! went well: stopping (readers cancelled mid-poll, connections closed)
//! is not reported as a failure. On every backend.

use crate::support;

use agdx::cards::worker_seen;
use agdx::system_clock;
use support::eventually;
use support::fabric::{Running, agent_id, on_every_fabric};

/// How many times each command runs: what goes wrong at exit goes wrong
/// only now and then.
const RUNS: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_and_bench_ask_exit_without_noise() {
    on_every_fabric("quiet-exit", |fabric| async move {
        let worker = Running::start(fabric.worker("echo").fallback(agdx::worker::EchoHandler));
        // Asked before its card is out, ask rightly warns that no worker
        // was seen: that is not the noise this test looks for.
        eventually("the echo worker's card", || async {
            worker_seen(
                &fabric.log,
                &fabric.topology,
                &agent_id("echo"),
                &system_clock(),
            )
            .await
            .is_ok_and(|seen| seen.is_live())
            .then_some(())
        })
        .await;
        for _ in 0..RUNS {
            let (code, stdout, stderr) = fabric
                .run_agdx(&[
                    "ask",
                    "--to",
                    "echo",
                    "--operation",
                    "hello",
                    "--timeout",
                    "20s",
                    "hi",
                ])
                .await;
            assert_eq!(code, 0, "ask failed: {stderr}");
            assert_eq!(stdout, "hi\n");
            assert_eq!(stderr, "", "agdx ask wrote to stderr");
        }
        for _ in 0..RUNS {
            let (code, stdout, stderr) = fabric
                .run_agdx(&[
                    "bench",
                    "ask",
                    "--requests",
                    "40",
                    "--partitions",
                    "4",
                    "--rounds",
                    "1",
                    "--idle",
                    "0s",
                ])
                .await;
            assert_eq!(code, 0, "bench ask failed: {stderr}");
            assert!(stdout.contains("requests/s"), "{stdout}");
            assert_eq!(stderr, "", "agdx bench ask wrote to stderr");
        }
        worker.stop().await;
    })
    .await;
}
