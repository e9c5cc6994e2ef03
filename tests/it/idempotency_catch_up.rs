//! Catching up with processed keys reads only the reply partitions the
//! keyed commands in hand need, each on its own: a reply partition that is
//! slow to read (a long history on first start) holds up only the keyed
//! commands whose replies go there, not every keyed partition of the pool.
//! On every backend.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use agdx::log::{Log, LogDecorator, LogError, LogRecord, SharedLog, TopicInfo};
use agdx::wire::{ConversationId, IdempotencyKey};
use agdx::worker::{EchoHandler, Worker};
use agdx::{Answer, CommandRequest, Producer};
use async_trait::async_trait;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric, quick_config};

/// A log whose polls of one partition of one topic never return, as if
/// that partition held an endless history: everything else is the real log.
struct StalledPartition {
    log: SharedLog,
    topic: TopicInfo,
    partition: u32,
}

#[async_trait]
impl LogDecorator for StalledPartition {
    fn inner(&self) -> &dyn Log {
        self.log.as_ref()
    }
    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        if *topic == self.topic && partition == self.partition {
            std::future::pending::<()>().await;
        }
        self.log.poll(topic, partition, from, max, wait).await
    }
}

/// A new conversation whose records land in `partition` (of every topic:
/// they all have the same partition count).
fn conversation_in(fabric: &Fabric, partition: u32) -> ConversationId {
    loop {
        let conversation = agdx::new_conversation_id();
        if agdx::routing::partition_of(&fabric.topology.responses, conversation) == partition {
            return conversation;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reply_partition_holds_up_only_the_keyed_commands_that_need_it() {
    on_every_fabric("catch-up-per-partition", |fabric| async move {
        // Reply partition 0 has a history the worker cannot finish reading.
        let responses = fabric.topology.responses.clone();
        fabric
            .producer("ledger")
            .respond(
                &agdx::ReplyTo {
                    conversation: conversation_in(&fabric, 0),
                    correlation: agdx::new_correlation_id(),
                    cause: None,
                    cause_at: None,
                    target: agent_id("shop"),
                    idempotency_key: Some(IdempotencyKey::new("old").expect("a key")),
                    fence: None,
                    task_states: false,
                },
                b"history".to_vec(),
                agdx::wire::ContentType::Raw,
            )
            .await
            .expect("a reply in partition 0");
        let stalled: SharedLog = Arc::new(StalledPartition {
            log: fabric.log.clone(),
            topic: responses,
            partition: 0,
        });
        let producer = Producer::new(stalled, fabric.topology.clone(), agent_id("ledger"));
        let worker = Running::start(
            Worker::new(producer, quick_config(fabric.dir.path().join("state")))
                .handle("post", EchoHandler),
        );
        // A keyed command whose replies go to partition 1.
        let request = CommandRequest::new("post", b"100 EUR".to_vec())
            .to(agent_id("ledger"))
            .idempotency_key(IdempotencyKey::new("pay-1").expect("a key"))
            .conversation(conversation_in(&fabric, 1));
        match fabric.requester("shop").ask(request, ANSWER).await {
            Ok(Answer::Response(reply)) => assert_eq!(reply.body, &b"100 EUR"[..]),
            other => panic!("the keyed command in partition 1 is answered: {other:?}"),
        }
        worker.stop().await;
    })
    .await;
}
