//! Two worker processes in one group share the commands; killing one moves
//! its partitions to the other and no command is lost. On every backend,
//! except a Tansu broker started by the harness: with Tansu 0.6 the survivor
//! loses its own partitions when the killed member's session expires and is
//! never assigned any again, so this test runs on Kafka only against a
//! cluster named by `AGDX_TEST_KAFKA_BROKERS`.

mod support;

use std::collections::HashSet;

use agdx::wire::Kind;
use support::eventually;
use support::fabric::{Fabric, lines_of, on_every_fabric, terminate};

const COMMANDS: usize = 400;

/// A worker process of agent `pool` that logs the records it handles to `NAME.log`.
fn start(fabric: &Fabric, name: &str) -> tokio::process::Child {
    let log = fabric.dir.path().join(format!("{name}.log"));
    let state = fabric.dir.path().join(format!("state-{name}"));
    let exec = format!(
        "echo \"$AGDX_RECORD\" >> '{}'; sleep 0.02; cat",
        log.display()
    );
    fabric.spawn_worker_process(&[
        "--agent",
        "pool",
        "--group",
        "pool-workers",
        "--state-dir",
        &state.display().to_string(),
        "--exec",
        &exec,
    ])
}

/// Records of commands that have a response from `pool`.
async fn answered(fabric: &Fabric) -> HashSet<String> {
    fabric
        .responses()
        .await
        .into_iter()
        .filter(|e| e.kind == Kind::Response && e.source.as_str() == "pool")
        .filter_map(|e| e.cause.map(|c| c.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_the_load_and_a_survivor_takes_over_a_killed_ones_partitions() {
    on_every_fabric("failover", |fabric| async move {
        if fabric.backend == "kafka" && std::env::var_os("AGDX_TEST_KAFKA_BROKERS").is_none() {
            return support::say_skipped_once(
                "kafka",
                "Tansu 0.6 leaves the survivor without partitions after a member is killed; set AGDX_TEST_KAFKA_BROKERS to a Kafka or Redpanda cluster to run this test on Kafka",
            );
        }
        let (a_log, b_log) = (
            fabric.dir.path().join("a.log"),
            fabric.dir.path().join("b.log"),
        );
        let mut a = start(&fabric, "a");
        let mut b = start(&fabric, "b");
        let input = fabric.dir.path().join("commands.jsonl");
        let lines: Vec<String> = (0..COMMANDS)
            .map(|i| format!(r#"{{"to":"pool","operation":"work","body":"job-{i}"}}"#))
            .collect();
        std::fs::write(&input, lines.join("\n")).expect("write the commands");
        let (code, _, stderr) = fabric
            .run_agdx(&["send", "--jsonl", &input.display().to_string()])
            .await;
        assert_eq!(code, 0, "send --jsonl failed: {stderr}");

        eventually("both workers to take a share", || async {
            (!lines_of(&a_log).is_empty() && !lines_of(&b_log).is_empty()).then_some(())
        })
        .await;
        eventually("a quarter of the work to be done", || async {
            (lines_of(&a_log).len() + lines_of(&b_log).len() >= COMMANDS / 4).then_some(())
        })
        .await;
        a.start_kill().expect("SIGKILL worker a");
        a.wait().await.expect("reap worker a");
        let a_handled: HashSet<String> = lines_of(&a_log).into_iter().collect();
        let b_before = lines_of(&b_log).len();

        let done = eventually("every command to be answered", || async {
            let done = answered(&fabric).await;
            (done.len() == COMMANDS).then_some(done)
        })
        .await;
        let b_handled: HashSet<String> = lines_of(&b_log).into_iter().collect();
        assert!(
            lines_of(&b_log).len() > b_before,
            "the survivor went on working"
        );
        let everyone: HashSet<String> = a_handled.union(&b_handled).cloned().collect();
        assert_eq!(
            everyone, done,
            "every answered command was handled by one of the two"
        );
        assert!(
            a_handled.len() < COMMANDS && !a_handled.is_empty(),
            "the killed worker had done part of the work"
        );
        terminate(&mut b).await;
    })
    .await;
}
