//! Cancelling a command: a cancel record on the command's topic stops its
//! running handler, or keeps a command not yet started from running; either
//! way the command is answered `cancelled` (a `status` `task` `canceled`,
//! then an `error` `cancelled`), and a keyed command remembers it. On every
//! backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use agdx::wire::{ErrorCode, IdempotencyKey, TaskState};
use agdx::worker::{HandlerReply, Worker, WorkerConfig, handler_fn};
use agdx::{AskError, CommandRequest, ReplyEvent, ReplyWatch};

use crate::support;
use support::eventually;
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric, quick_config};

/// Sets its flag when dropped: the handler's future was stopped.
struct Dropped(Arc<AtomicBool>);

impl Drop for Dropped {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// The events of `watch` up to its terminal one: the task states it saw,
/// and the terminal error.
async fn cancelled_answer(watch: &mut ReplyWatch) -> (Vec<TaskState>, agdx::wire::ErrorBody) {
    let mut states = Vec::new();
    loop {
        match watch.next(ANSWER).await {
            Ok(ReplyEvent::Status(status)) => states.extend(status.envelope.task_state),
            Ok(ReplyEvent::Error(error)) | Err(AskError::Remote(error)) => {
                return (states, error);
            }
            other => panic!("expected the cancelled answer, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_handler_is_stopped_and_its_command_answered_cancelled() {
    on_every_fabric("cancel-running", |fabric| async move {
        let (worker, started, stopped, stats) = sleeper(&fabric, "slow");
        let running = Running::start(worker);
        let requester = fabric.requester("asker");
        let mut watch = requester
            .send(CommandRequest::new("think", b"hard".to_vec()).to(agent_id("slow")))
            .await
            .expect("send");
        eventually("the handler to start", || async {
            (started.load(Ordering::SeqCst) == 1).then_some(())
        })
        .await;
        let cancel = watch.cancel().await.expect("cancel");
        assert_eq!(cancel.topic, watch.sent().topic, "on the command's topic");
        assert_eq!(cancel.partition, watch.sent().partition, "in its partition");

        let (states, error) = cancelled_answer(&mut watch).await;
        assert_eq!(error.code, ErrorCode::Cancelled, "{error:?}");
        assert!(states.contains(&TaskState::Canceled), "{states:?}");
        assert!(stopped.load(Ordering::SeqCst), "the handler was stopped");
        assert_eq!(started.load(Ordering::SeqCst), 1);
        running.stop().await;
        assert_eq!(stats.cancelled.load(Ordering::Relaxed), 1);
        assert_eq!(stats.handled.load(Ordering::Relaxed), 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_heeds_the_cancel_ends_by_itself() {
    on_every_fabric("cancel-heeded", |fabric| async move {
        let (handler, heeded) = support::agents::heeding();
        let mut config = support::fabric::quick_config(fabric.dir.path().join("state"));
        // Far longer than the test waits: the handler must end by itself.
        config.cancel_grace = Duration::from_secs(3600);
        let worker =
            agdx::worker::Worker::new(fabric.producer("careful"), config).handle("think", handler);
        let running = Running::start(worker);
        let requester = fabric.requester("asker");
        let mut watch = requester
            .send(CommandRequest::new("think", b"hard".to_vec()).to(agent_id("careful")))
            .await
            .expect("send");
        eventually("the handler to start", || async {
            (heeded.started() == 1).then_some(())
        })
        .await;
        watch.cancel().await.expect("cancel");
        let (states, error) = cancelled_answer(&mut watch).await;
        assert_eq!(
            error.code,
            ErrorCode::Cancelled,
            "whatever the handler returned"
        );
        assert!(states.contains(&TaskState::Canceled), "{states:?}");
        assert!(heeded.told(), "the handler was told");
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cancelled_before_it_starts_is_not_run_and_its_key_remembers() {
    on_every_fabric("cancel-early", |fabric| async move {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let worker = || {
            let counted = counted.clone();
            fabric.worker("ledger").handle(
                "post",
                handler_fn(move |_| {
                    let counted = counted.clone();
                    async move {
                        counted.fetch_add(1, Ordering::SeqCst);
                        Ok(HandlerReply::raw(b"posted".to_vec()))
                    }
                }),
            )
        };
        let requester = fabric.requester("asker");
        let key = IdempotencyKey::new("payment-7").expect("a key");
        let post = || {
            CommandRequest::new("post", b"7 EUR".to_vec())
                .to(agent_id("ledger"))
                .idempotency_key(key.clone())
        };
        // Sent and cancelled while no worker runs.
        let mut watch = requester.send(post()).await.expect("send");
        watch.cancel().await.expect("cancel");
        // Only its sender cancels a command: a stranger's cancel of another
        // one does nothing.
        let mut other = requester
            .send(CommandRequest::new("post", b"9 EUR".to_vec()).to(agent_id("ledger")))
            .await
            .expect("send another");
        fabric
            .requester("mallory")
            .cancel(other.sent(), Some(&agent_id("ledger")))
            .await
            .expect("a stranger's cancel");
        let running = Running::start(worker());
        let (states, error) = cancelled_answer(&mut watch).await;
        assert_eq!(error.code, ErrorCode::Cancelled, "{error:?}");
        assert_eq!(states, [TaskState::Canceled]);
        match other.next(ANSWER).await {
            Ok(ReplyEvent::Response(reply)) => assert_eq!(reply.body, &b"posted"[..]),
            other => panic!("a stranger's cancel stopped a command: {other:?}"),
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            1,
            "only the uncancelled one ran"
        );

        // The key's outcome is the cancellation: sent again, it is answered
        // from the store, and the handler still does not run.
        let mut again = requester.send(post()).await.expect("send again");
        let (_, error) = cancelled_answer(&mut again).await;
        assert_eq!(error.code, ErrorCode::Cancelled);
        assert_eq!(runs.load(Ordering::SeqCst), 1);

        // A command without a cancel runs as usual beside it.
        let answer = requester
            .ask(
                CommandRequest::new("post", b"8 EUR".to_vec()).to(agent_id("ledger")),
                ANSWER,
            )
            .await
            .expect("an uncancelled command is answered");
        assert!(matches!(answer, agdx::Answer::Response(_)), "{answer:?}");
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        running.stop().await;
    })
    .await;
}

/// A command at the end of a full poll is handled at the start of the
/// next one, so the cancel right behind it stops it even when it had not
/// waited long enough for a read ahead of its own; every other command of
/// the backlog runs once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_behind_the_last_command_of_a_full_poll_keeps_it_from_running() {
    on_every_fabric("cancel-boundary", |fabric| async move {
        let ran = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = ran.clone();
        let worker = Worker::new(
            fabric.producer("ledger"),
            WorkerConfig {
                poll_batch: 4,
                ..quick_config(fabric.dir.path().join("state-ledger"))
            },
        )
        .handle(
            "post",
            handler_fn(move |request| {
                let seen = seen.clone();
                async move {
                    seen.lock().expect("runs").push(request.body.clone());
                    Ok(HandlerReply::raw(b"posted".to_vec()))
                }
            }),
        );
        let requester = fabric.requester("asker");
        let conversation = agdx::new_conversation_id();
        let post = |n: usize| {
            CommandRequest::new("post", format!("c{n}").into_bytes())
                .to(agent_id("ledger"))
                .conversation(conversation)
        };
        // One partition: c0..c3 at offsets 0..3, c3's cancel at 4, c4..c8
        // after it. A poll of 4 ends at c3.
        let mut watches = Vec::new();
        for n in 0..4 {
            watches.push(requester.send(post(n)).await.expect("send"));
        }
        watches[3].cancel().await.expect("cancel c3");
        for n in 4..9 {
            watches.push(requester.send(post(n)).await.expect("send"));
        }
        let running = Running::start(worker);
        for (n, watch) in watches.iter_mut().enumerate() {
            if n == 3 {
                let (_, error) = cancelled_answer(watch).await;
                assert_eq!(error.code, ErrorCode::Cancelled, "{error:?}");
                continue;
            }
            match watch.next(ANSWER).await {
                Ok(ReplyEvent::Response(reply)) => assert_eq!(reply.body, &b"posted"[..], "c{n}"),
                other => panic!("c{n} was not answered: {other:?}"),
            }
        }
        let ran: Vec<String> = ran
            .lock()
            .expect("runs")
            .iter()
            .map(|body| String::from_utf8_lossy(body).into_owned())
            .collect();
        assert_eq!(
            ran,
            ["c0", "c1", "c2", "c4", "c5", "c6", "c7", "c8"],
            "each uncancelled command once, in order, and not the cancelled one"
        );
        running.stop().await;
    })
    .await;
}

/// A pool for `agent` whose handler sleeps for ten minutes, counting its
/// starts and its stops (its future dropped); and the pool's stats.
fn sleeper(
    fabric: &support::fabric::Fabric,
    agent: &str,
) -> (
    agdx::worker::Worker,
    Arc<AtomicU32>,
    Arc<AtomicBool>,
    Arc<agdx::worker::WorkerStats>,
) {
    let (started, stopped) = (
        Arc::new(AtomicU32::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let (starts, stops) = (started.clone(), stopped.clone());
    let mut config =
        support::fabric::quick_config(fabric.dir.path().join(format!("state-{agent}")));
    config.cancel_grace = Duration::from_millis(100);
    let worker = agdx::worker::Worker::new(fabric.producer(agent), config).handle(
        "think",
        handler_fn(move |_| {
            let (starts, stops) = (starts.clone(), stops.clone());
            async move {
                let _dropped = Dropped(stops);
                starts.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(600)).await;
                Ok(HandlerReply::raw(b"too late".to_vec()))
            }
        }),
    );
    let stats = worker.stats();
    (worker, started, stopped, stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_that_times_out_or_is_dropped_cancels_its_command() {
    on_every_fabric("cancel-give-up", |fabric| async move {
        let (worker, started, stopped, stats) = sleeper(&fabric, "slow");
        let running = Running::start(worker);
        let requester = fabric.requester("asker");
        let think = || CommandRequest::new("think", b"hard".to_vec()).to(agent_id("slow"));

        let timed_out = requester.ask(think(), Duration::from_secs(2)).await;
        assert!(
            matches!(timed_out, Err(AskError::Timeout { .. })),
            "{timed_out:?}"
        );
        eventually("the timed-out command to be cancelled", || async {
            (stats.cancelled.load(Ordering::Relaxed) == 1).then_some(())
        })
        .await;
        assert_eq!(started.load(Ordering::SeqCst), 1);
        assert!(stopped.load(Ordering::SeqCst), "the handler was stopped");

        // A caller that goes away drops the ask's future.
        let dropped =
            tokio::time::timeout(Duration::from_secs(2), requester.ask(think(), ANSWER)).await;
        assert!(dropped.is_err(), "the ask was still waiting: {dropped:?}");
        eventually("the dropped ask's command to be cancelled", || async {
            (stats.cancelled.load(Ordering::Relaxed) == 2).then_some(())
        })
        .await;
        assert_eq!(stats.handled.load(Ordering::Relaxed), 0);
        running.stop().await;
    })
    .await;
}

/// The `key=value` fields of a line `agdx send` or `agdx cancel` printed.
fn fields(line: &str) -> std::collections::HashMap<String, String> {
    line.split_whitespace()
        .filter_map(|field| field.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_cancel_stops_a_command_by_record_or_by_conversation() {
    let fabric = support::fabric::embedded_fabric("cancel-cli").await;
    let (worker, started, _stopped, stats) = sleeper(&fabric, "slow");
    let running = Running::start(worker);
    let send = |conversation: Option<String>| {
        let mut command = fabric.agdx();
        command.args(["send", "--to", "slow", "--operation", "think", "hard"]);
        if let Some(conversation) = conversation {
            command.args(["--conversation", &conversation]);
        }
        async move {
            let out = command.output().await.expect("run agdx send");
            assert!(out.status.success(), "{out:?}");
            fields(&String::from_utf8_lossy(&out.stdout))
        }
    };
    let first = send(None).await;
    eventually("the handler to start", || async {
        (started.load(Ordering::SeqCst) == 1).then_some(())
    })
    .await;

    // By record alone: the commands topic is searched for it.
    let out = fabric
        .agdx()
        .args(["cancel", &first["record"]])
        .output()
        .await
        .expect("run agdx cancel");
    assert!(out.status.success(), "{out:?}");
    let cancelled = fields(&String::from_utf8_lossy(&out.stdout));
    assert_eq!(cancelled["record"], first["record"]);
    assert_eq!(cancelled["by"], "cli", "as the command's own sender");
    eventually("the command to be answered cancelled", || async {
        (stats.cancelled.load(Ordering::Relaxed) == 1).then_some(())
    })
    .await;
    let error = fabric
        .responses()
        .await
        .into_iter()
        .find(|e| e.kind == agdx::wire::Kind::Error)
        .expect("an error reply");
    assert_eq!(
        agdx::wire::ErrorBody::decode(&error.body).map(|b| b.code),
        Ok(ErrorCode::Cancelled)
    );

    // Answered: a second cancel says so and fails.
    let again = fabric
        .agdx()
        .args(["cancel", &first["record"]])
        .output()
        .await
        .expect("run agdx cancel");
    assert_eq!(again.status.code(), Some(1), "{again:?}");
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("answered or cancelled already"),
        "{again:?}"
    );

    // By conversation: every command of it without an answer.
    let conversation = first["conversation"].clone();
    send(Some(conversation.clone())).await;
    send(Some(conversation.clone())).await;
    let out = fabric
        .agdx()
        .args(["cancel", "--conversation", &conversation])
        .output()
        .await
        .expect("run agdx cancel");
    assert!(out.status.success(), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().count(),
        2,
        "{out:?}"
    );
    eventually("both commands to be answered cancelled", || async {
        (stats.cancelled.load(Ordering::Relaxed) == 3).then_some(())
    })
    .await;
    assert_eq!(stats.handled.load(Ordering::Relaxed), 0);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_ask_cancels_its_command_on_timeout_and_ctrl_c_unless_told_not_to() {
    let fabric = support::fabric::embedded_fabric("cancel-cli-ask").await;
    let (worker, started, _stopped, stats) = sleeper(&fabric, "slow");
    let running = Running::start(worker);
    let ask = |extra: &'static [&'static str]| {
        let mut command = fabric.agdx();
        command.args([
            "ask",
            "--to",
            "slow",
            "--operation",
            "think",
            "--timeout",
            "3s",
        ]);
        command.args(extra).arg("hard");
        async move { command.output().await.expect("run agdx ask") }
    };
    let out = ask(&[]).await;
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cancelled the command"),
        "{out:?}"
    );
    eventually("the command to be cancelled", || async {
        (stats.cancelled.load(Ordering::Relaxed) == 1).then_some(())
    })
    .await;

    // Ctrl-C: the ask exits 130 and cancels its command.
    let interrupted = fabric
        .agdx()
        .args([
            "ask",
            "--to",
            "slow",
            "--operation",
            "think",
            "--timeout",
            "1m",
            "hard",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start agdx ask");
    eventually("the second handler to start", || async {
        (started.load(Ordering::SeqCst) == 2).then_some(())
    })
    .await;
    let pid = interrupted.id().expect("a running ask");
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success());
    let out = tokio::time::timeout(ANSWER, interrupted.wait_with_output())
        .await
        .expect("the interrupted ask exits")
        .expect("wait for agdx ask");
    assert_eq!(out.status.code(), Some(130), "{out:?}");
    eventually("the interrupted ask's command to be cancelled", || async {
        (stats.cancelled.load(Ordering::Relaxed) == 2).then_some(())
    })
    .await;

    let out = ask(&["--no-cancel"]).await;
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(
        !String::from_utf8_lossy(&out.stderr).contains("cancelled the command"),
        "{out:?}"
    );
    // Its handler runs on: no cancel is on the log for it.
    assert_eq!(started.load(Ordering::SeqCst), 3);
    let cancels = fabric
        .records(&fabric.topology.commands)
        .await
        .iter()
        .filter_map(|r| agdx::envelope_of(r).ok())
        .filter(|e| e.kind == agdx::wire::Kind::Status)
        .count();
    assert_eq!(cancels, 2, "the ask with --no-cancel cancelled nothing");
    // The handler still sleeps; the test's runtime ends it.
    drop(running);
}
