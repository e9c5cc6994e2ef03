//! Task states as a command asks for them: `submitted` and `working` when
//! its handler starts, then `completed` or `failed` before its answer; a
//! command that does not ask gets none (a plain ask costs nothing more).
//! On every backend; `agdx ask --follow` prints them.

use agdx::wire::{Kind, TaskState};
use agdx::worker::{HandlerError, HandlerReply, handler_fn};
use agdx::{CommandRequest, ReplyEvent, ReplyWatch};
use std::sync::Arc;
use tokio::sync::Notify;

use crate::support;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// A pool for agent `tasks`: `work` answers, `break` fails, `wait`
/// answers once `go` is notified.
fn tasks_waiting_for(fabric: &Fabric, go: Arc<Notify>) -> Running {
    Running::start(
        fabric
            .worker("tasks")
            .handle(
                "wait",
                handler_fn(move |_| {
                    let go = go.clone();
                    async move {
                        go.notified().await;
                        Ok(HandlerReply::raw("waited"))
                    }
                }),
            )
            .handle(
                "work",
                handler_fn(|_| async move { Ok(HandlerReply::raw("done")) }),
            )
            .handle(
                "break",
                handler_fn(|_| async move { Err(HandlerError::fatal("it broke")) }),
            ),
    )
}

fn tasks(fabric: &Fabric) -> Running {
    tasks_waiting_for(fabric, Arc::new(Notify::new()))
}

/// The task states `watch` reports, and whether its answer was a response.
async fn states_and_answer(watch: &mut ReplyWatch) -> (Vec<TaskState>, bool) {
    let mut states = Vec::new();
    loop {
        match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Status(status) => states.extend(status.envelope.task_state),
            ReplyEvent::Response(_) => return (states, true),
            ReplyEvent::Error(_) => return (states, false),
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_asks_gets_its_task_states_and_others_none() {
    on_every_fabric("task-states", |fabric| async move {
        let running = tasks(&fabric);
        let requester = fabric.requester("asker");
        let send = |operation: &str, states: bool| {
            let request = CommandRequest::new(operation, b"x".to_vec()).to(agent_id("tasks"));
            let request = if states {
                request.task_states()
            } else {
                request
            };
            requester.send(request)
        };
        use TaskState::*;
        let mut watch = send("work", true).await.expect("send");
        assert_eq!(
            states_and_answer(&mut watch).await,
            (vec![Submitted, Working, Completed], true)
        );
        let mut watch = send("break", true).await.expect("send");
        assert_eq!(
            states_and_answer(&mut watch).await,
            (vec![Submitted, Working, Failed], false)
        );
        // Refused before any handler ran (its deadline had passed): rejected.
        let mut late = requester
            .send(
                CommandRequest::new("work", b"x".to_vec())
                    .to(agent_id("tasks"))
                    .deadline_micros(1)
                    .task_states(),
            )
            .await
            .expect("send");
        assert_eq!(states_and_answer(&mut late).await, (vec![Rejected], false));
        let mut plain = send("work", false).await.expect("send");
        assert_eq!(states_and_answer(&mut plain).await, (vec![], true));
        let correlation = plain.sent().correlation;
        let statuses = fabric
            .responses()
            .await
            .into_iter()
            .filter(|e| e.kind == Kind::Status && e.correlation == correlation)
            .count();
        assert_eq!(statuses, 0, "a plain ask gets no task states");
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_still_running_is_reported_working() {
    on_every_fabric("task-states-working", |fabric| async move {
        let go = Arc::new(Notify::new());
        let running = tasks_waiting_for(&fabric, go.clone());
        let requester = fabric.requester("asker");
        let mut watch = requester
            .send(
                CommandRequest::new("wait", b"x".to_vec())
                    .to(agent_id("tasks"))
                    .task_states(),
            )
            .await
            .expect("send");
        // The handler waits for `go`: these come while it runs.
        let mut states = Vec::new();
        while states.last() != Some(&TaskState::Working) {
            match watch.next(ANSWER).await.expect("a reply") {
                ReplyEvent::Status(status) => states.extend(status.envelope.task_state),
                other => panic!("expected the task's states first, got {other:?}"),
            }
        }
        assert_eq!(states, [TaskState::Submitted, TaskState::Working]);
        go.notify_one();
        assert_eq!(
            states_and_answer(&mut watch).await,
            (vec![TaskState::Completed], true)
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_ask_follow_prints_the_task_states() {
    let fabric = support::fabric::embedded_fabric("task-states-cli").await;
    let running = tasks(&fabric);
    let (code, stdout, stderr) = fabric
        .run_agdx(&[
            "ask",
            "--to",
            "tasks",
            "--operation",
            "work",
            "--follow",
            "x",
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "done\n");
    let states: Vec<&str> = stderr
        .lines()
        .filter_map(|line| line.strip_prefix("… task "))
        .filter_map(|rest| rest.split_whitespace().next())
        .collect();
    assert_eq!(states, ["submitted", "working", "completed"], "{stderr}");
    running.stop().await;
}

/// A pool for agent `desk`: `book` asks its caller which day, then books.
fn desk(fabric: &Fabric) -> (Running, Arc<agdx::worker::WorkerStats>) {
    let worker = fabric
        .worker("desk")
        .handle("book", support::agents::booking(ANSWER));
    let stats = worker.stats();
    (Running::start(worker), stats)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_asks_its_caller_for_input_and_goes_on() {
    on_every_fabric("task-states-input", |fabric| async move {
        let (running, stats) = desk(&fabric);
        let requester = fabric.requester("asker");
        let mut watch = requester
            .send(CommandRequest::new("book", b"a room".to_vec()).to(agent_id("desk")))
            .await
            .expect("send");
        let mut states = Vec::new();
        let reply = loop {
            match watch.next(ANSWER).await.expect("a reply") {
                ReplyEvent::Status(status) => {
                    states.extend(status.envelope.task_state);
                    if status.envelope.task_state == Some(TaskState::InputRequired) {
                        assert_eq!(status.body, &b"which day?"[..]);
                        watch
                            .provide_input(&status, b"monday".to_vec())
                            .await
                            .expect("answer the prompt");
                    }
                }
                ReplyEvent::Response(reply) => break reply,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(reply.body, &b"booked for monday"[..]);
        assert_eq!(states, [TaskState::InputRequired, TaskState::Working]);
        // The input was the handler's: the pool skipped it.
        support::eventually("the input to be skipped", || async {
            (stats.skipped.load(std::sync::atomic::Ordering::Relaxed) >= 1).then_some(())
        })
        .await;
        assert_eq!(stats.handled.load(std::sync::atomic::Ordering::Relaxed), 1);
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_ask_prompts_on_a_terminal() {
    let fabric = support::fabric::embedded_fabric("task-states-prompt").await;
    let (running, _) = desk(&fabric);
    // `script` gives the ask a terminal; the typed line comes on its stdin.
    let ask = format!(
        "{} --log {} --stream {} ask --to desk --operation book 'a room'",
        env!("CARGO_BIN_EXE_agdx"),
        fabric.spec,
        fabric.stream
    );
    let mut script = tokio::process::Command::new("script");
    script
        .args(["-qec", &ask, "/dev/null"])
        .current_dir(fabric.dir.path())
        .env_remove("AGDX_LOG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let Ok(mut child) = script.spawn() else {
        eprintln!("skipping: `script` (util-linux) is not installed, so no terminal for agdx ask");
        running.stop().await;
        return;
    };
    let mut stdin = child.stdin.take().expect("script's stdin");
    use tokio::io::AsyncWriteExt;
    // Typed once the prompt is up; a terminal keeps it until read.
    stdin.write_all(b"friday\n").await.expect("type the answer");
    let out = tokio::time::timeout(ANSWER, child.wait_with_output())
        .await
        .expect("the ask ends")
        .expect("wait for script");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(text.contains("which day?"), "{text}");
    assert!(text.contains("booked for friday"), "{text}");
    drop(stdin);
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_task_state_alone_is_the_outcome_of_an_ask() {
    on_every_fabric("task-states-outcome", |fabric| async move {
        let state_only = |state: TaskState| {
            handler_fn(move |request| async move {
                request
                    .status(state)
                    .await
                    .map_err(|e| HandlerError::retryable(e.to_string()))?;
                Ok(HandlerReply::Nothing)
            })
        };
        let running = Running::start(
            fabric
                .worker("clerk")
                .handle("settle", state_only(TaskState::Completed))
                .handle("refuse", state_only(TaskState::Rejected)),
        );
        let requester = fabric.requester("asker");
        let ask = |operation: &str| {
            requester.ask(
                CommandRequest::new(operation, b"x".to_vec()).to(agent_id("clerk")),
                ANSWER,
            )
        };
        match ask("settle").await {
            Ok(agdx::Answer::Response(status)) => {
                assert_eq!(status.envelope.kind, Kind::Status);
                assert_eq!(status.envelope.task_state, Some(TaskState::Completed));
            }
            other => panic!("expected the completed task, got {other:?}"),
        }
        match ask("refuse").await {
            Err(agdx::AskError::Remote(error)) => {
                assert_eq!(error.code, agdx::wire::ErrorCode::InvalidRequest);
                assert!(
                    error.message.unwrap_or_default().contains("ended rejected"),
                    "the state is named"
                );
            }
            other => panic!("expected the rejected task's error, got {other:?}"),
        }
        let (code, _, stderr) = fabric
            .run_agdx(&["ask", "--to", "clerk", "--operation", "refuse", "x"])
            .await;
        assert_eq!(code, 3, "{stderr}");
        assert!(stderr.contains("the task ended rejected"), "{stderr}");
        let (code, stdout, stderr) = fabric
            .run_agdx(&["ask", "--to", "clerk", "--operation", "settle", "x"])
            .await;
        assert_eq!((code, stdout.as_str()), (0, ""), "{stderr}");
        running.stop().await;
    })
    .await;
}
