//! A fast reply is not held behind a slow handler: in one conversation, the
//! reply to a quick command queued just before a slow one is published and
//! committed while the slow handler still runs, and the replies stay in
//! order. On every backend.

use crate::support;

use std::sync::Arc;

use agdx::worker::{EchoHandler, HandlerReply, handler_fn};
use agdx::{CommandRequest, ReplyEvent, ReplyWatch};
use support::eventually;
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric};
use tokio::sync::Semaphore;

/// The body of the watched command's response.
async fn response(watch: &mut ReplyWatch) -> Vec<u8> {
    loop {
        match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Status(_) => {}
            ReplyEvent::Response(reply) => return reply.body.to_vec(),
            other => panic!("expected a response, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fast_reply_goes_out_while_a_slow_handler_behind_it_still_runs() {
    on_every_fabric("slow-handler", |fabric| async move {
        // The slow handler waits until the test opens the gate, which it
        // does only once the fast reply has arrived.
        let gate = Arc::new(Semaphore::new(0));
        let slow = {
            let gate = gate.clone();
            handler_fn(move |request| {
                let gate = gate.clone();
                async move {
                    let _open = gate.acquire().await.expect("the gate");
                    Ok(HandlerReply::raw(request.body))
                }
            })
        };
        let requester = fabric.requester("asker");
        let conversation = agdx::new_conversation_id();
        let send = |operation: &str, body: &[u8]| {
            requester.send(
                CommandRequest::new(operation, body.to_vec())
                    .to(agent_id("mixed"))
                    .conversation(conversation),
            )
        };
        // Both wait on the log before the worker starts, so it reads them in
        // one poll: the fast one first.
        let mut fast = send("fast", b"quick").await.expect("send");
        let mut slow_watch = send("slow", b"patient").await.expect("send");
        let partition = fast.sent().partition;

        let worker = Running::start(
            fabric
                .worker("mixed")
                .handle("fast", EchoHandler)
                .handle("slow", slow),
        );
        assert_eq!(
            response(&mut fast).await,
            b"quick",
            "the fast reply arrives while the slow handler is still held"
        );
        eventually("the fast command to be committed", || async {
            let committed = fabric
                .log
                .committed_offset(&fabric.topology.commands, "mixed", partition)
                .await
                .expect("committed_offset");
            (committed == Some(0)).then_some(())
        })
        .await;
        assert_eq!(
            gate.available_permits(),
            0,
            "the slow handler is still held"
        );

        gate.add_permits(1);
        assert_eq!(response(&mut slow_watch).await, b"patient");
        let bodies: Vec<Vec<u8>> = fabric
            .responses()
            .await
            .into_iter()
            .map(|r| r.body.to_vec())
            .collect();
        assert_eq!(
            bodies,
            [b"quick".to_vec(), b"patient".to_vec()],
            "replies in order"
        );
        worker.stop().await;
    })
    .await;
}
