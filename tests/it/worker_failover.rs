//! Two worker processes in one group share the commands; killing one moves
//! its partitions to the other and no command is lost. On every backend.
//!
//! On a Tansu broker (one the harness starts, or one named by
//! `AGDX_TEST_KAFKA_BROKERS` that reports Tansu's cluster id) the member
//! killed is the one that joined second: Tansu 0.6 never re-forms a group
//! whose leader (the first member to join) died. Its heartbeat handling
//! drops the dead leader from the members but keeps it as the leader, so
//! every later SyncGroup is told to wait for that leader. Any other Kafka
//! cluster loses the first member, as the other backends do.

use crate::support;

use std::collections::HashSet;

use agdx::wire::Kind;
use support::fabric::{Fabric, lines_of, on_every_fabric, terminate};
use support::{eventually, eventually_progressing};

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
        // See the module docs: on Tansu the survivor must be the group's leader.
        let tansu = fabric.backend == "kafka" && support::kafka::is_tansu().await;
        let (a_log, b_log) = (
            fabric.dir.path().join("a.log"),
            fabric.dir.path().join("b.log"),
        );
        let input = fabric.dir.path().join("commands.jsonl");
        let lines: Vec<String> = (0..COMMANDS)
            .map(|i| format!(r#"{{"to":"pool","operation":"work","body":"job-{i}"}}"#))
            .collect();
        std::fs::write(&input, lines.join("\n")).expect("write the commands");
        let (code, _, stderr) = fabric
            .run_agdx(&["send", "--jsonl", &input.display().to_string()])
            .await;
        assert_eq!(code, 0, "send --jsonl failed: {stderr}");

        // One after the other, so the first is the group's first member.
        let mut a = start(&fabric, "a");
        eventually("worker a to start working", || async {
            (!lines_of(&a_log).is_empty()).then_some(())
        })
        .await;
        let mut b = start(&fabric, "b");
        eventually("both workers to take a share", || async {
            (!lines_of(&b_log).is_empty()).then_some(())
        })
        .await;
        eventually_progressing("a quarter of the work to be done", || async {
            let done = lines_of(&a_log).len() + lines_of(&b_log).len();
            if done >= COMMANDS / 4 {
                Ok(())
            } else {
                Err(done)
            }
        })
        .await;
        let (victim, victim_log, mut survivor, survivor_log) = if tansu {
            (&mut b, &b_log, a, &a_log)
        } else {
            (&mut a, &a_log, b, &b_log)
        };
        victim.start_kill().expect("SIGKILL a worker");
        victim.wait().await.expect("reap the killed worker");
        let victim_handled: HashSet<String> = lines_of(victim_log).into_iter().collect();
        let survivor_before = lines_of(survivor_log).len();

        let done = eventually_progressing("every command to be answered", || async {
            let done = answered(&fabric).await;
            if done.len() == COMMANDS {
                Ok(done)
            } else {
                Err(done.len())
            }
        })
        .await;
        let survivor_handled: HashSet<String> = lines_of(survivor_log).into_iter().collect();
        assert!(
            lines_of(survivor_log).len() > survivor_before,
            "the survivor went on working"
        );
        let everyone: HashSet<String> = victim_handled.union(&survivor_handled).cloned().collect();
        assert_eq!(
            everyone, done,
            "every answered command was handled by one of the two"
        );
        assert!(
            victim_handled.len() < COMMANDS && !victim_handled.is_empty(),
            "the killed worker had done part of the work"
        );
        terminate(&mut survivor).await;
    })
    .await;
}
