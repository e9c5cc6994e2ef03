//! A log that refuses a pool's flushes for a while: the worker tries again
//! with the same replies until one passes, so each command is answered
//! once and committed once. On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use agdx::log::{Append, Log, LogDecorator, LogError, OffsetCommit, SharedLog};
use agdx::worker::{EchoHandler, Worker};
use agdx::{Answer, CommandRequest, Producer};
use async_trait::async_trait;
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric, quick_config};

/// A log whose first `refusals` appends-and-commits fail as a log that is
/// down does, writing nothing.
struct RefusingFlushes {
    log: SharedLog,
    refusals: AtomicU32,
    refused: AtomicU32,
}

#[async_trait]
impl LogDecorator for RefusingFlushes {
    fn inner(&self) -> &dyn Log {
        self.log.as_ref()
    }

    async fn append_and_commit(
        &self,
        appends: Vec<Append>,
        commit: OffsetCommit,
    ) -> Result<(), LogError> {
        let refusing = self
            .refusals
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if refusing {
            self.refused.fetch_add(1, Ordering::SeqCst);
            return Err(LogError::Unavailable {
                target: self.log.describe(),
                reason: "refused by the test".to_owned(),
                source: None,
            });
        }
        self.log.append_and_commit(appends, commit).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_flushes_are_tried_again_with_the_same_replies() {
    on_every_fabric("flush-retry", |fabric| async move {
        let refusing = Arc::new(RefusingFlushes {
            log: fabric.log.clone(),
            refusals: AtomicU32::new(2),
            refused: AtomicU32::new(0),
        });
        let log: SharedLog = refusing.clone();
        let producer = Producer::new(log, fabric.topology.clone(), agent_id("ledger"));
        let worker = Worker::new(producer, quick_config(fabric.dir.path().join("state")))
            .handle("post", EchoHandler);
        let stats = worker.stats();
        let worker = Running::start(worker);
        let request = CommandRequest::new("post", b"100 EUR".to_vec()).to(agent_id("ledger"));
        match fabric.requester("shop").ask(request, ANSWER).await {
            Ok(Answer::Response(reply)) => assert_eq!(reply.body, &b"100 EUR"[..]),
            other => panic!("the command is answered once the log takes the flush: {other:?}"),
        }
        worker.stop().await;
        assert_eq!(
            refusing.refused.load(Ordering::SeqCst),
            2,
            "two flushes refused"
        );
        let answers = fabric
            .responses()
            .await
            .into_iter()
            .filter(|reply| reply.body == b"100 EUR"[..])
            .count();
        assert_eq!(answers, 1, "one reply on the log");
        assert_eq!(
            stats.committed_records.load(Ordering::SeqCst),
            1,
            "one commit"
        );
    })
    .await;
}
