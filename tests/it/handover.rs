//! A worker pool scaled up and down while keyed commands flow, on every
//! backend: a second worker process joins mid-run and the first one leaves
//! (SIGTERM) later. Each partition changes hands through a handover
//! (docs/runtime.md, "Fencing"): the holder publishes and commits what it
//! handled, then releases the partition, and only then does the newcomer
//! claim and read it. So every command is answered and no handler runs
//! twice, with no crash to excuse a repeat.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agdx::wire::Kind;
use agdx::worker::{EchoHandler, HandlerReply, Worker, WorkerConfig, handler_fn};
use agdx::{Answer, CommandRequest};
use support::fabric::{
    ANSWER, Fabric, Running, agent_id, embedded_fabric, lines_of, on_every_fabric, quick_config,
    terminate,
};
use support::{eventually, eventually_progressing};

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

/// A conversation whose commands land in `partition` of `agent.commands`.
fn conversation_in(fabric: &Fabric, partition: u32) -> agdx::wire::ConversationId {
    let commands = &fabric.topology.commands;
    // Bounded in practice: one conversation in eight lands in any partition.
    loop {
        let conversation = agdx::new_conversation_id();
        if agdx::routing::partition_of(commands, conversation) == partition {
            return conversation;
        }
    }
}

/// A pool stopped while it is still taking its partitions over leaves no
/// claim unreleased: the next pool, which would wait out a long handover
/// for a claim that was never released, answers on every partition at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_stopped_while_claiming_leaves_every_partition_free() {
    let fabric = embedded_fabric("handover_stop_early").await;
    let worker = |n: usize| {
        let config = WorkerConfig {
            handover_wait: Duration::from_secs(600),
            ..quick_config(fabric.dir.path().join(format!("state-{n}")))
        };
        Worker::new(fabric.producer("early"), config).handle("hello", EchoHandler)
    };
    let requester = fabric.requester("asker");
    for (n, delay_ms) in [0, 1, 3, 5, 10, 20, 40].into_iter().enumerate() {
        let early = Running::start(worker(n));
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        early.stop().await;
        let next = Running::start(worker(100 + n));
        for partition in 0..fabric.topology.commands.partitions.get() {
            let request = CommandRequest::new("hello", b"up?".to_vec())
                .to(agent_id("early"))
                .conversation(conversation_in(&fabric, partition));
            let answer = requester.ask(request, ANSWER).await;
            assert!(
                matches!(answer, Ok(Answer::Response(_))),
                "partition {partition} after a stop {delay_ms} ms into the start: {answer:?}"
            );
        }
        next.stop().await;
    }
}

/// A holder slower to hand over than the handover wait (its keyed handler
/// runs for several waits when a new member asks for the partition) says
/// it is finishing, and the newcomer waits for its release instead of
/// claiming the partition and running the key again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_holder_slower_than_the_wait_is_waited_for() {
    on_every_fabric("handover_slow_holder", |fabric| async move {
        let wait = Duration::from_millis(400);
        let runs: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let worker = |n: usize| {
            let config = WorkerConfig {
                handover_wait: wait,
                concurrency: 8,
                ..quick_config(fabric.dir.path().join(format!("state-{n}")))
            };
            let runs = runs.clone();
            Worker::new(fabric.producer("slowpoke"), config).handle(
                "slow",
                handler_fn(move |request| {
                    let runs = runs.clone();
                    async move {
                        let key = request.envelope.idempotency_key.clone();
                        let key = key.map(|k| k.to_string()).unwrap_or_default();
                        *runs.lock().expect("runs").entry(key).or_default() += 1;
                        tokio::time::sleep(wait * 4).await;
                        Ok(HandlerReply::raw("done"))
                    }
                }),
            )
        };
        let first = Running::start(worker(1));
        let requester = fabric.requester("asker");
        let partitions = fabric.topology.commands.partitions.get();
        let mut watches = Vec::new();
        for partition in 0..partitions {
            let request = CommandRequest::new("slow", b"take your time".to_vec())
                .to(agent_id("slowpoke"))
                .conversation(conversation_in(&fabric, partition))
                .idempotency_key(format!("key-{partition}").parse().expect("a key"));
            watches.push(requester.send(request).await.expect("send"));
        }
        eventually(
            "the first pool to run a handler on every partition",
            || async { (runs.lock().expect("runs").len() == partitions as usize).then_some(()) },
        )
        .await;
        // Joins while every partition has a handler in flight.
        let second = Running::start(worker(2));
        for mut watch in watches {
            loop {
                match watch.next(ANSWER).await.expect("an answer") {
                    agdx::ReplyEvent::Response(reply) => {
                        assert_eq!(reply.body, &b"done"[..]);
                        break;
                    }
                    agdx::ReplyEvent::Status(_) => {}
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
        // Each partition's next command, now on whichever member holds it.
        for partition in 0..partitions {
            let request = CommandRequest::new("slow", b"again".to_vec())
                .to(agent_id("slowpoke"))
                .conversation(conversation_in(&fabric, partition))
                .idempotency_key(format!("after-{partition}").parse().expect("a key"));
            let answer = requester.ask(request, ANSWER).await;
            assert!(matches!(answer, Ok(Answer::Response(_))), "{answer:?}");
        }
        let runs = runs.lock().expect("runs").clone();
        let repeated: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
        assert!(repeated.is_empty(), "keys run more than once: {repeated:?}");
        second.stop().await;
        first.stop().await;
    })
    .await;
}

/// A member that handed a partition over and gets it back before it next
/// reads the group's assignment (the newcomer left at once, as members
/// starting and stopping side by side make the group reassign) claims it
/// at that read, since the newcomer released it; it does not wait out the
/// pause that keeps a fenced member from taking back a partition its
/// newer holder still holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_given_back_is_read_again_at_the_next_assignment() {
    let fabric = embedded_fabric("handover_given_back").await;
    // The first member reads the assignment only this often: the second
    // comes and goes between two of its reads.
    let follow = Duration::from_secs(5);
    let named = |name: &'static str| {
        handler_fn(move |_request| async move { Ok(HandlerReply::raw(name.as_bytes().to_vec())) })
    };
    let first = Running::start(
        Worker::new(
            fabric.producer("giver"),
            WorkerConfig {
                rebalance_every: follow,
                ..quick_config(fabric.dir.path().join("state-first"))
            },
        )
        .handle("who", named("first")),
    );
    let requester = fabric.requester("asker");
    let ask = |partition: u32, patience: Duration| {
        let request = CommandRequest::new("who", b"?".to_vec())
            .to(agent_id("giver"))
            .conversation(conversation_in(&fabric, partition));
        let requester = &requester;
        async move {
            match requester.ask(request, patience).await {
                Ok(Answer::Response(reply)) => String::from_utf8_lossy(&reply.body).into_owned(),
                other => panic!("partition {partition}: {other:?}"),
            }
        }
    };
    let partitions = fabric.topology.commands.partitions.get();
    for partition in 0..partitions {
        assert_eq!(ask(partition, ANSWER).await, "first");
    }
    let second = Running::start(fabric.worker("giver").handle("who", named("second")));
    let taken = eventually("the second member to take a partition over", || async {
        for partition in 0..partitions {
            if ask(partition, ANSWER).await == "second" {
                return Some(partition);
            }
        }
        None
    })
    .await;
    second.stop().await;
    // The first member's next read of the assignment comes within `follow`;
    // the pause it would otherwise wait out is twice that.
    let started = std::time::Instant::now();
    assert_eq!(ask(taken, follow + Duration::from_secs(4)).await, "first");
    assert!(started.elapsed() < follow + Duration::from_secs(4));
    first.stop().await;
}
