//! Cancelling a command: a cancel record on the command's topic stops its
//! running handler, or keeps a command not yet started from running; either
//! way the command is answered `cancelled` (a `status` `task` `canceled`,
//! then an `error` `cancelled`), and a keyed command remembers it. On every
//! backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use agdx::wire::{ErrorCode, IdempotencyKey, TaskState};
use agdx::worker::{HandlerReply, handler_fn};
use agdx::{AskError, CommandRequest, ReplyEvent, ReplyWatch};

use crate::support;
use support::eventually;
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric};

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
        let (started, stopped) = (
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (starts, stops) = (started.clone(), stopped.clone());
        let worker = fabric.worker("slow").handle(
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
        let (started, heeded) = (
            Arc::new(AtomicU32::new(0)),
            Arc::new(AtomicBool::new(false)),
        );
        let (starts, heeds) = (started.clone(), heeded.clone());
        let mut config = support::fabric::quick_config(fabric.dir.path().join("state"));
        // Far longer than the test waits: the handler must end by itself.
        config.cancel_grace = Duration::from_secs(3600);
        let worker = agdx::worker::Worker::new(fabric.producer("careful"), config).handle(
            "think",
            handler_fn(move |request| {
                let (starts, heeds) = (starts.clone(), heeds.clone());
                async move {
                    starts.fetch_add(1, Ordering::SeqCst);
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_secs(600)) => {}
                        () = request.cancelled() => {
                            heeds.store(request.is_cancelled(), Ordering::SeqCst);
                        }
                    }
                    Ok(HandlerReply::raw(b"stopped early".to_vec()))
                }
            }),
        );
        let running = Running::start(worker);
        let requester = fabric.requester("asker");
        let mut watch = requester
            .send(CommandRequest::new("think", b"hard".to_vec()).to(agent_id("careful")))
            .await
            .expect("send");
        eventually("the handler to start", || async {
            (started.load(Ordering::SeqCst) == 1).then_some(())
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
        assert!(heeded.load(Ordering::SeqCst), "the handler was told");
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
            Ok(ReplyEvent::Response(reply)) => assert_eq!(reply.body, b"posted"),
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
