//! Graceful shutdown: a worker told to stop finishes the record in hand,
//! publishes its reply, commits, and leaves the group. On every backend.

mod support;

use std::time::Duration;

use agdx::worker::{HandlerReply, handler_fn};
use agdx::{CommandRequest, ReplyEvent};
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric};
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_finishes_the_record_in_hand_and_commits_it() {
    on_every_fabric("shutdown", |fabric| async move {
        let (started, mut handler_started) = mpsc::unbounded_channel();
        let slow = handler_fn(move |request| {
            let started = started.clone();
            async move {
                let _ = started.send(());
                tokio::time::sleep(Duration::from_millis(300)).await;
                Ok(HandlerReply::raw(request.body))
            }
        });
        let worker = Running::start(fabric.worker("slow").handle("work", slow));
        let requester = fabric.requester("asker");
        let mut watch = requester
            .send(CommandRequest::new("work", b"in hand".to_vec()).to(agent_id("slow")))
            .await
            .expect("send");
        tokio::time::timeout(ANSWER, handler_started.recv())
            .await
            .expect("the handler to start");
        worker.stop().await;

        match watch.next(ANSWER).await.expect("the reply") {
            ReplyEvent::Response(reply) => assert_eq!(reply.body, b"in hand"),
            other => panic!("expected the response, got {other:?}"),
        }
        let sent = watch.sent();
        let committed = fabric
            .log
            .committed_offset(&fabric.topology.commands, "slow", sent.partition)
            .await
            .expect("read the offset");
        assert_eq!(
            committed,
            Some(0),
            "the record in hand was committed before the worker left"
        );
    })
    .await;
}
