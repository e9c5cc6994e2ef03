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
