//! A worker process killed with SIGKILL in the middle of 2,000 keyed
//! commands, then restarted: every command gets a response, the handler
//! runs more than once only for records in flight at the kill, and a
//! processed key sent again does not run the handler. On every backend.

use crate::support;

use std::collections::{HashMap, HashSet};

use agdx::wire::Kind;
use support::eventually_progressing;
use support::fabric::{Fabric, lines_of, on_every_fabric, terminate};

const COMMANDS: usize = 2_000;
/// Partitions a worker handles at once: at most this many records are in a
/// handler when it is killed.
const CONCURRENCY: usize = 4;

fn worker_args(fabric: &Fabric) -> Vec<String> {
    let runs = fabric.dir.path().join("runs.log");
    let state = fabric.dir.path().join("state");
    vec![
        "--agent".into(),
        "crash".into(),
        "--concurrency".into(),
        CONCURRENCY.to_string(),
        "--state-dir".into(),
        state.display().to_string(),
        "--exec".into(),
        format!(
            "echo \"$AGDX_IDEMPOTENCY_KEY\" >> '{}'; cat",
            runs.display()
        ),
    ]
}

/// The idempotency keys that have at least one response from `crash`.
async fn answered_keys(fabric: &Fabric) -> HashMap<String, Vec<Vec<u8>>> {
    let mut answered: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
    for envelope in fabric.responses().await {
        if envelope.kind == Kind::Response
            && envelope.source.as_str() == "crash"
            && let Some(key) = envelope.idempotency_key
        {
            answered
                .entry(key.to_string())
                .or_default()
                .push(envelope.body.to_vec());
        }
    }
    answered
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_restarts_without_losing_commands_or_repeating_effects() {
    on_every_fabric("crash", |fabric| async move {
        let runs = fabric.dir.path().join("runs.log");
        let input = fabric.dir.path().join("commands.jsonl");
        let lines: Vec<String> = (0..COMMANDS)
            .map(|i| format!(r#"{{"to":"crash","operation":"work","body":"n-{i}","idempotency_key":"key-{i}"}}"#))
            .collect();
        std::fs::write(&input, lines.join("\n")).expect("write the commands");
        let (code, stdout, stderr) = fabric.run_agdx(&["send", "--jsonl", &input.display().to_string()]).await;
        assert_eq!(code, 0, "send --jsonl failed: {stderr}");
        assert_eq!(stdout.trim(), format!("sent {COMMANDS} commands"));

        let args = worker_args(&fabric);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut worker = fabric.spawn_worker_process(&args);
        eventually_progressing("the worker to be part-way through", || async {
            let done = lines_of(&runs).len();
            if done >= 300 { Ok(()) } else { Err(done) }
        })
        .await;
        worker.start_kill().expect("SIGKILL the worker");
        worker.wait().await.expect("reap the worker");
        let at_kill = lines_of(&runs).len();
        assert!(at_kill < COMMANDS, "the kill came after all the work was done; the test needs it in the middle");

        let mut worker = fabric.spawn_worker_process(&args);
        let answered = eventually_progressing("every command to have a response", || async {
            let answered = answered_keys(&fabric).await;
            if answered.len() == COMMANDS { Ok(answered) } else { Err(answered.len()) }
        })
        .await;
        for (key, bodies) in &answered {
            let n = key.trim_start_matches("key-");
            assert!(bodies.iter().all(|b| b == format!("n-{n}").as_bytes()), "{key}: wrong response body");
        }

        let mut runs_per_key: HashMap<String, usize> = HashMap::new();
        for key in lines_of(&runs) {
            *runs_per_key.entry(key).or_default() += 1;
        }
        let all: HashSet<String> = (0..COMMANDS).map(|i| format!("key-{i}")).collect();
        assert_eq!(runs_per_key.keys().cloned().collect::<HashSet<_>>(), all, "every command's handler ran");
        let repeated: usize = runs_per_key.values().map(|n| n - 1).sum();
        assert!(
            repeated <= CONCURRENCY,
            "the handler ran again for {repeated} commands; only those in flight at the kill (at most {CONCURRENCY}) may repeat"
        );

        // A processed key sent again: the stored response, no handler run.
        let before = lines_of(&runs).len();
        let (code, stdout, stderr) =
            fabric.run_agdx(&["ask", "--to", "crash", "--operation", "work", "--idempotency-key", "key-7", "--timeout", "20s", "n-7"]).await;
        assert_eq!(code, 0, "ask failed: {stderr}");
        assert_eq!(stdout, "n-7\n");
        assert_eq!(lines_of(&runs).len(), before, "the handler did not run for a processed key");
        assert_eq!(answered_keys(&fabric).await["key-7"].len(), answered["key-7"].len() + 1);
        terminate(&mut worker).await;
    })
    .await;
}
