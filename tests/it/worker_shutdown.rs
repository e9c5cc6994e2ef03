//! Graceful shutdown: a worker told to stop finishes the record in hand,
//! publishes its reply, commits it, leaves the rest for the next reader, and
//! leaves the group. On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use agdx::worker::{HandlerReply, handler_fn};
use agdx::{CommandRequest, ReplyEvent, new_conversation_id};
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric};
use tokio::sync::mpsc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_finishes_the_record_in_hand_commits_it_and_leaves_the_rest() {
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
        // Three commands in one conversation: one partition, handled in order.
        let conversation = new_conversation_id();
        let mut watches = Vec::new();
        for body in ["first", "second", "third"] {
            let request = CommandRequest::new("work", body.as_bytes().to_vec())
                .to(agent_id("slow"))
                .conversation(conversation);
            watches.push(requester.send(request).await.expect("send"));
        }
        tokio::time::timeout(ANSWER, handler_started.recv())
            .await
            .expect("the handler to start");
        worker.stop().await;

        match watches[0].next(ANSWER).await.expect("the reply") {
            ReplyEvent::Response(reply) => assert_eq!(reply.body, &b"first"[..]),
            other => panic!("expected the response, got {other:?}"),
        }
        let partition = watches[0].sent().partition;
        let committed = fabric
            .log
            .committed_offset(&fabric.topology.commands, "slow", partition)
            .await
            .expect("read the offset");
        assert_eq!(
            committed,
            Some(0),
            "the record in hand was committed, the others were not"
        );
        let answered = fabric
            .responses()
            .await
            .into_iter()
            .filter(|e| e.conversation == conversation)
            .count();
        assert_eq!(
            answered, 1,
            "the stopped worker answered only the record in hand"
        );

        // The next worker takes up where the first stopped.
        let runs = Arc::new(AtomicU32::new(0));
        let counted = runs.clone();
        let quick = handler_fn(move |request| {
            counted.fetch_add(1, Ordering::SeqCst);
            async move { Ok(HandlerReply::raw(request.body)) }
        });
        let worker = Running::start(fabric.worker("slow").handle("work", quick));
        for (watch, body) in watches[1..].iter_mut().zip(["second", "third"]) {
            match watch.next(ANSWER).await.expect("the reply") {
                ReplyEvent::Response(reply) => assert_eq!(reply.body, body.as_bytes()),
                other => panic!("expected the response, got {other:?}"),
            }
        }
        assert_eq!(
            runs.load(Ordering::SeqCst),
            2,
            "the first command was not handled again"
        );
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_running_worker_aborts_its_partition_tasks() {
    on_every_fabric("shutdown-drop", |fabric| async move {
        // The handler holds a token: while any partition task lives, so
        // does the handler, and the token has more than one owner.
        let token = Arc::new(());
        let held = token.clone();
        let echo = handler_fn(move |request| {
            let _held = &held;
            async move { Ok(HandlerReply::raw(request.body)) }
        });
        let run = tokio::spawn(
            fabric
                .worker("dropped")
                .handle("work", echo)
                .run(tokio_util::sync::CancellationToken::new()),
        );
        let request = CommandRequest::new("work", b"hello".to_vec()).to(agent_id("dropped"));
        let answer = fabric.requester("asker").ask(request, ANSWER).await;
        assert!(answer.is_ok(), "the worker runs: {answer:?}");
        assert!(Arc::strong_count(&token) > 1);
        // Dropping the `run` future, as a select! or a timeout would.
        run.abort();
        support::eventually("the partition tasks to end", || async {
            (Arc::strong_count(&token) == 1).then_some(())
        })
        .await;
    })
    .await;
}
