//! Heartbeats on long work: while a handler runs longer than the progress
//! interval, the worker publishes `progress` statuses for the command, and
//! an ask waiting for it starts its wait over on each; a handler past its
//! hard limit is stopped and dead-lettered. On every backend.

use crate::support;

use std::time::Duration;

use agdx::wire::{ErrorCode, Kind, StatusOperation};
use agdx::worker::{HandlerReply, WorkerConfig, handler_fn};
use agdx::{Answer, AskError, CommandRequest};
use support::fabric::{Fabric, Running, agent_id, on_every_fabric, quick_config, terminate};

/// A worker whose `work` handler takes `takes` and beats every `every`.
fn slow_worker(
    fabric: &Fabric,
    takes: Duration,
    every: Duration,
    limit: Option<Duration>,
) -> Running {
    let config = WorkerConfig {
        progress_interval: every,
        handler_limit: limit,
        ..quick_config(fabric.dir.path().join("state"))
    };
    let work = handler_fn(move |_| async move {
        tokio::time::sleep(takes).await;
        Ok(HandlerReply::raw("done"))
    });
    Running::start(agdx::worker::Worker::new(fabric.producer("slow"), config).handle("work", work))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_an_ask_waiting_past_its_timeout() {
    on_every_fabric("heartbeats", |fabric| async move {
        let worker = slow_worker(
            &fabric,
            Duration::from_millis(2500),
            Duration::from_millis(100),
            None,
        );
        let requester = fabric.requester("cli");
        // A worker still joining its group (seconds on Kafka) beats for
        // nothing yet: wait until it answers something.
        let joined = requester
            .ask(
                CommandRequest::new("warm-up", b"x".to_vec()).to(agent_id("slow")),
                Duration::from_secs(30),
            )
            .await;
        assert!(
            !matches!(joined, Err(AskError::Timeout { .. })),
            "the worker never answered: {joined:?}"
        );
        // The timeout is shorter than the work; each heartbeat restarts it.
        let answer = requester
            .ask(
                CommandRequest::new("work", b"x".to_vec()).to(agent_id("slow")),
                Duration::from_millis(1200),
            )
            .await
            .expect("answered despite a timeout shorter than the work");
        let Answer::Response(reply) = answer else {
            panic!("a response")
        };
        assert_eq!(reply.body, &b"done"[..]);
        let command = reply.envelope.cause.expect("the reply names its command");
        let beats: Vec<_> = fabric
            .responses()
            .await
            .into_iter()
            .filter(|e| {
                e.kind == Kind::Status
                    && e.operation.as_deref() == Some(StatusOperation::Progress.as_str())
            })
            .collect();
        assert!(
            beats.len() >= 5,
            "a beat every 100 ms of 2.5 s of work: {}",
            beats.len()
        );
        for beat in &beats {
            assert_eq!(
                beat.correlation, reply.envelope.correlation,
                "same correlation as the command"
            );
            assert_eq!(beat.cause, Some(command));
            assert!(String::from_utf8_lossy(&beat.body).starts_with("{\"elapsed_ms\":"));
        }
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_ask_shows_that_the_worker_is_still_working() {
    on_every_fabric("heartbeats-cli", |fabric| async move {
        let mut worker = fabric.spawn_worker_process(&[
            "--agent",
            "slow",
            "--exec",
            "sleep 2; echo done",
            "--progress-interval",
            "300ms",
        ]);
        // Once the pool answers at all, the short wait below is about the
        // handler alone, not the worker's start.
        let (code, out, stderr) = fabric
            .run_agdx(&[
                "ask",
                "--to",
                "slow",
                "--operation",
                "warm-up",
                "--timeout",
                "60s",
                "x",
            ])
            .await;
        assert_eq!((code, out.as_str()), (0, "done\n"), "{stderr}");
        let (code, out, stderr) = fabric
            .run_agdx(&[
                "ask",
                "--to",
                "slow",
                "--operation",
                "work",
                "--timeout",
                "1500ms",
                "x",
            ])
            .await;
        assert_eq!((code, out.as_str()), (0, "done\n"), "{stderr}");
        assert!(
            stderr
                .lines()
                .any(|l| l.starts_with("… still working (") && l.ends_with(" s)")),
            "{stderr}"
        );
        terminate(&mut worker).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_past_its_limit_is_stopped_and_dead_lettered() {
    on_every_fabric("heartbeats-limit", |fabric| async move {
        let worker = slow_worker(
            &fabric,
            Duration::from_secs(3600),
            Duration::from_millis(100),
            Some(Duration::from_millis(300)),
        );
        let asked = fabric
            .requester("cli")
            .ask(
                CommandRequest::new("work", b"x".to_vec()).to(agent_id("slow")),
                support::fabric::ANSWER,
            )
            .await;
        let Err(AskError::Remote(error)) = asked else {
            panic!("an error reply, got {asked:?}")
        };
        assert_eq!(error.code, ErrorCode::DeadlineExceeded);
        assert!(
            error
                .message
                .as_deref()
                .is_some_and(|m| m.contains("ran longer than its limit")),
            "{error:?}"
        );
        let dead = support::eventually("the dead letter", || async {
            fabric.dead_letters().await.pop()
        })
        .await;
        assert_eq!(dead.reason, agdx::wire::DeadLetterReason::Rejected);
        worker.stop().await;
    })
    .await;
}
