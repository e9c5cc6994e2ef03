//! One idempotency key runs its effect once, even when it is asked for
//! several times at once: our producer routes every command of a key to one
//! conversation (so one partition, one owner, in order), and within a
//! process a key is claimed before its handler runs, so a key that arrives
//! in two conversations at once still runs once. On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agdx::wire::{ConversationId, IdempotencyKey};
use agdx::worker::{HandlerReply, handler_fn};
use agdx::{Answer, CommandRequest, conversation_for_key};
use support::eventually;
use support::fabric::{
    ANSWER, Fabric, Running, agent_id, embedded_fabric, lines_of, on_every_fabric, terminate,
};
use tokio::sync::Semaphore;

fn key(text: &str) -> IdempotencyKey {
    IdempotencyKey::new(text).expect("a valid key")
}

/// A new conversation whose records land in `partition` of the commands topic.
fn conversation_in(fabric: &Fabric, partition: u32) -> ConversationId {
    loop {
        let conversation = agdx::new_conversation_id();
        if agdx::routing::partition_of(&fabric.topology.commands, conversation) == partition {
            return conversation;
        }
    }
}

/// `agdx ask` for key `order-42` with `body`.
async fn ask_order_42(fabric: &Fabric, body: &str) -> (i32, String, String) {
    fabric
        .run_agdx(&[
            "ask",
            "--to",
            "ledger",
            "--operation",
            "post",
            "--idempotency-key",
            "order-42",
            "--timeout",
            "30s",
            body,
        ])
        .await
}

/// The handler runs recorded for key `order-42` in `runs`.
fn runs_of_order_42(runs: &std::path::Path) -> usize {
    lines_of(runs)
        .iter()
        .filter(|line| line.starts_with("order-42"))
        .count()
}

/// An `--exec` handler that records "KEY WORKER-PID" per run, then takes
/// a second before it answers with the body.
fn slow_recording_handler(runs: &std::path::Path) -> String {
    format!(
        "echo \"$AGDX_IDEMPOTENCY_KEY $PPID\" >> '{}'; sleep 1; cat",
        runs.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_command_goes_to_the_conversation_its_key_names_unless_the_caller_names_one() {
    let fabric = embedded_fabric("key-routing").await;
    let producer = fabric.producer("shop");
    let request = || {
        CommandRequest::new("post", b"100 EUR".to_vec())
            .to(agent_id("ledger"))
            .idempotency_key(key("order-42"))
    };
    let first = producer.command(request()).await.expect("send");
    let second = producer.command(request()).await.expect("send");
    let derived = conversation_for_key(
        Some(&agent_id("ledger")),
        &agent_id("shop"),
        &key("order-42"),
    );
    assert_eq!(first.conversation, derived);
    assert_eq!(second.conversation, derived);
    assert_eq!(first.partition, second.partition);
    let other_source = fabric
        .producer("other-shop")
        .command(request())
        .await
        .expect("send");
    assert_ne!(
        other_source.conversation, derived,
        "the source is part of the key's scope"
    );
    let own = agdx::new_conversation_id();
    let kept = producer
        .command(request().conversation(own))
        .await
        .expect("send");
    assert_eq!(
        kept.conversation, own,
        "a caller's own conversation is kept"
    );
    let unkeyed = producer
        .command(CommandRequest::new("post", b"x".to_vec()).to(agent_id("ledger")))
        .await
        .expect("send");
    assert_ne!(
        unkeyed.conversation, derived,
        "a command without a key starts a new conversation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_asks_with_one_key_at_once_run_the_effect_once() {
    on_every_fabric("key-at-once", |fabric| async move {
        let runs = fabric.dir.path().join("runs.log");
        let handler = slow_recording_handler(&runs);
        let mut worker = fabric.spawn_worker_process(&[
            "--agent",
            "ledger",
            "--concurrency",
            "8",
            "--exec",
            &handler,
        ]);
        let (a, b, c) = tokio::join!(
            ask_order_42(&fabric, "100 EUR"),
            ask_order_42(&fabric, "100 EUR"),
            ask_order_42(&fabric, "100 EUR"),
        );
        for (code, stdout, stderr) in [a, b, c] {
            assert_eq!(code, 0, "ask failed: {stderr}");
            assert_eq!(stdout, "100 EUR\n");
        }
        assert_eq!(
            runs_of_order_42(&runs),
            1,
            "the effect ran once: {:?}",
            lines_of(&runs)
        );
        terminate(&mut worker).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_key_in_two_conversations_at_once_runs_once_in_one_process() {
    on_every_fabric("key-two-conversations", |fabric| async move {
        let runs = Arc::new(AtomicU32::new(0));
        let gate = Arc::new(Semaphore::new(0));
        let handler = {
            let (runs, gate) = (runs.clone(), gate.clone());
            handler_fn(move |request| {
                runs.fetch_add(1, Ordering::SeqCst);
                let gate = gate.clone();
                async move {
                    let _open = gate.acquire().await.expect("the gate");
                    Ok(HandlerReply::raw(request.body))
                }
            })
        };
        let requester = fabric.requester("shop");
        // A caller's own conversations, in two partitions: the key's two
        // commands are read by two partition tasks at once.
        let mut watches = Vec::new();
        for (partition, body) in [(0, "100 EUR"), (1, "999 EUR")] {
            let request = CommandRequest::new("post", body.as_bytes().to_vec())
                .to(agent_id("ledger"))
                .idempotency_key(key("order-42"))
                .conversation(conversation_in(&fabric, partition));
            watches.push(requester.send(request).await.expect("send"));
        }
        let mut config = support::fabric::quick_config(fabric.dir.path().join("state"));
        config.concurrency = 8;
        let worker = Running::start(
            agdx::worker::Worker::new(fabric.producer("ledger"), config).handle("post", handler),
        );
        eventually("a handler to start", || async {
            (runs.load(Ordering::SeqCst) >= 1).then_some(())
        })
        .await;
        // Time for a second handler run to start, were the key not claimed.
        tokio::time::sleep(Duration::from_millis(300)).await;
        gate.add_permits(2);
        let mut bodies = Vec::new();
        for watch in &mut watches {
            loop {
                match watch.next(ANSWER).await.expect("a reply") {
                    agdx::ReplyEvent::Response(reply) => break bodies.push(reply.body),
                    agdx::ReplyEvent::Status(_) => {}
                    other => panic!("expected a response, got {other:?}"),
                }
            }
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1, "the effect ran once");
        assert_eq!(bodies[0], bodies[1], "both got the one outcome: {bodies:?}");
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_worker_processes_run_a_key_sent_at_once_from_three_shells_once() {
    on_every_fabric("key-two-processes", |fabric| async move {
        let runs = fabric.dir.path().join("runs.log");
        let handler = slow_recording_handler(&runs);
        let spawn = |state: &str| {
            let state = fabric.dir.path().join(state).display().to_string();
            fabric.spawn_worker_process(&[
                "--agent",
                "ledger",
                "--concurrency",
                "8",
                "--state-dir",
                &state,
                "--exec",
                &handler,
            ])
        };
        let mut first = spawn("state-first");
        let mut second = spawn("state-second");
        let pids: Vec<String> = [&first, &second]
            .iter()
            .map(|child| child.id().expect("a running worker").to_string())
            .collect();
        // Until both processes own partitions: unkeyed probes to every
        // partition, until each process has answered one.
        eventually("both workers to own partitions", || async {
            let probes = (0..support::fabric::PARTITIONS).map(|partition| {
                let request = CommandRequest::new("post", b"probe".to_vec())
                    .to(agent_id("ledger"))
                    .conversation(conversation_in(&fabric, partition));
                let requester = fabric.requester("prober");
                async move { requester.ask(request, ANSWER).await }
            });
            for answer in futures_util::future::join_all(probes).await {
                assert!(matches!(answer, Ok(Answer::Response(_))), "{answer:?}");
            }
            let lines = lines_of(&runs);
            pids.iter()
                .all(|pid| lines.iter().any(|line| line.ends_with(&format!(" {pid}"))))
                .then_some(())
        })
        .await;
        let (a, b, c) = tokio::join!(
            ask_order_42(&fabric, "100 EUR"),
            ask_order_42(&fabric, "100 EUR"),
            ask_order_42(&fabric, "100 EUR"),
        );
        for (code, stdout, stderr) in [a, b, c] {
            assert_eq!(code, 0, "ask failed: {stderr}");
            assert_eq!(stdout, "100 EUR\n");
        }
        assert_eq!(
            runs_of_order_42(&runs),
            1,
            "the effect ran once: {:?}",
            lines_of(&runs)
        );
        terminate(&mut first).await;
        terminate(&mut second).await;
    })
    .await;
}
