//! A requester with no ask in flight stops reading the log, and reads again
//! when the next ask is sent. On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agdx::log::{Log, LogDecorator, LogError, LogRecord, SharedLog, TopicInfo};
use agdx::worker::EchoHandler;
use agdx::{Answer, CommandRequest, Producer, Requester};
use async_trait::async_trait;
use support::eventually;
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric};

/// A log that counts the polls made through it.
struct CountingLog {
    inner: SharedLog,
    polls: AtomicU64,
}

#[async_trait]
impl LogDecorator for CountingLog {
    fn inner(&self) -> &dyn Log {
        self.inner.as_ref()
    }
    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        self.polls.fetch_add(1, Ordering::SeqCst);
        self.inner.poll(topic, partition, from, max, wait).await
    }
}

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
        let counting = Arc::new(CountingLog {
            inner: fabric.log.clone(),
            polls: AtomicU64::new(0),
        });
        let log: SharedLog = counting.clone();
        let requester = Requester::new(Producer::new(
            log,
            fabric.topology.clone(),
            agent_id("asker"),
        ));
        ask(&requester, "one").await;
        eventually("the requester to stop polling", || async {
            let before = counting.polls.load(Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(800)).await;
            (counting.polls.load(Ordering::SeqCst) == before).then_some(())
        })
        .await;
        ask(&requester, "two").await;
        worker.stop().await;
    })
    .await;
}
