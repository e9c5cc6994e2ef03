//! A requester with no ask in flight stops reading the log, and reads again
//! when the next ask is sent. On every backend.

use crate::support;

use std::time::Duration;

use agdx::log::SharedLog;
use agdx::worker::EchoHandler;
use agdx::{Answer, CommandRequest, Producer, Requester};
use support::counting::CountingLog;
use support::eventually;
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric};

async fn ask(requester: &Requester, body: &str) {
    let request = CommandRequest::new("hello", body.as_bytes().to_vec()).to(agent_id("echo"));
    match requester.ask(request, ANSWER).await.expect("ask") {
        Answer::Response(reply) => assert_eq!(reply.body, body.as_bytes()),
        other => panic!("expected a response, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_requester_stops_polling_and_resumes_with_the_next_ask() {
    on_every_fabric("ask-idle", |fabric| async move {
        let worker = Running::start(fabric.worker("echo").handle("hello", EchoHandler));
        let counting = CountingLog::all(fabric.log.clone());
        let log: SharedLog = counting.clone();
        let requester = Requester::new(Producer::new(
            log,
            fabric.topology.clone(),
            agent_id("asker"),
        ));
        ask(&requester, "one").await;
        eventually("the requester to stop polling", || async {
            let before = counting.polls();
            tokio::time::sleep(Duration::from_millis(800)).await;
            (counting.polls() == before).then_some(())
        })
        .await;
        ask(&requester, "two").await;
        worker.stop().await;
    })
    .await;
}
