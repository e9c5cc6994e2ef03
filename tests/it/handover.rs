//! A worker pool scaled up and down while keyed commands flow, on every
//! backend: a second worker process joins mid-run and the first one leaves
//! (SIGTERM) later. Each partition changes hands through a handover
//! (docs/runtime.md, "Fencing"): the holder publishes and commits what it
//! handled, then releases the partition, and only then does the newcomer
//! claim and read it. So every command is answered and no handler runs
//! twice, with no crash to excuse a repeat.

use crate::support;

use std::collections::{HashMap, HashSet};

use agdx::wire::Kind;
use support::{eventually, eventually_progressing};
use support::fabric::{Fabric, lines_of, on_every_fabric, terminate};

const COMMANDS: usize = 400;

/// A worker process of agent `keeper` whose handler takes a little while
/// and notes each key it runs for.
fn start(fabric: &Fabric, name: &str) -> tokio::process::Child {
    let runs = fabric.dir.path().join(format!("runs-{name}.log"));
    let state = fabric.dir.path().join(format!("state-{name}"));
    let exec = format!(
        "echo \"$AGDX_IDEMPOTENCY_KEY\" >> '{}'; sleep 0.01; cat",
        runs.display()
    );
    fabric.spawn_worker_process(&[
        "--agent",
        "keeper",
        "--state-dir",
        &state.display().to_string(),
        "--exec",
        &exec,
    ])
}

/// Keys answered by `keeper`.
async fn answered(fabric: &Fabric) -> HashSet<String> {
    fabric
        .responses()
        .await
        .into_iter()
        .filter(|e| e.kind == Kind::Response && e.source.as_str() == "keeper")
        .filter_map(|e| e.idempotency_key.map(|k| k.to_string()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_commands_run_once_while_workers_join_and_leave() {
    on_every_fabric("handover", |fabric| async move {
        let runs = |name: &str| lines_of(&fabric.dir.path().join(format!("runs-{name}.log")));
        let handled = || runs("first").len() + runs("second").len();
        let input = fabric.dir.path().join("commands.jsonl");
        let lines: Vec<String> = (0..COMMANDS)
            .map(|i| {
                format!(
                    r#"{{"to":"keeper","operation":"keep","body":"n-{i}","idempotency_key":"key-{i}"}}"#
                )
            })
            .collect();
        std::fs::write(&input, lines.join("\n")).expect("write the commands");
        let (code, _, stderr) = fabric
            .run_agdx(&["send", "--jsonl", &input.display().to_string()])
            .await;
        assert_eq!(code, 0, "send --jsonl failed: {stderr}");

        let mut first = start(&fabric, "first");
        eventually("the first worker to be under way", || async {
            (handled() >= COMMANDS / 8).then_some(())
        })
        .await;
        let mut second = start(&fabric, "second");
        eventually("the pool to be half-way", || async {
            (!runs("second").is_empty() && handled() >= COMMANDS / 2).then_some(())
        })
        .await;
        terminate(&mut first).await;
        let done = eventually_progressing("every command to be answered", || async {
            let done = answered(&fabric).await;
            if done.len() == COMMANDS {
                Ok(done)
            } else {
                Err(done.len())
            }
        })
        .await;
        terminate(&mut second).await;

        let all: HashSet<String> = (0..COMMANDS).map(|i| format!("key-{i}")).collect();
        assert_eq!(done, all);
        let mut runs_per_key: HashMap<String, usize> = HashMap::new();
        for key in runs("first").into_iter().chain(runs("second")) {
            *runs_per_key.entry(key).or_default() += 1;
        }
        let repeated: Vec<_> = runs_per_key.iter().filter(|(_, n)| **n > 1).collect();
        assert!(
            repeated.is_empty(),
            "handlers ran again across the rebalances: {repeated:?}"
        );
        assert_eq!(runs_per_key.len(), COMMANDS, "every handler ran");
        assert!(
            runs("first").len() < COMMANDS && runs("second").len() < COMMANDS,
            "both workers took a share"
        );
    })
    .await;
}
