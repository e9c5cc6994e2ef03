//! Feeding the [`View`] from the log: every partition of the topics that
//! hold IOA records, read once to the end before the bridge serves, then
//! followed for as long as it runs (records written by this bridge, by
//! another bridge on the same log, or by any agent).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::log::{LogError, SharedLog, TopicInfo, lock};

use super::records;
use super::view::View;

/// Records one poll asks for.
const BATCH: u32 = 1000;
/// How long a following poll waits for a record before asking again.
const FOLLOW_WAIT: Duration = Duration::from_secs(1);
/// Pause after the log failed, before reading again.
const RETRY_PAUSE: Duration = Duration::from_millis(500);

/// The view and a counter bumped each time it took something in.
pub(crate) struct Shared {
    pub view: Mutex<View>,
    pub changed: watch::Sender<u64>,
}

impl Shared {
    pub fn new() -> Self {
        Self {
            view: Mutex::new(View::default()),
            changed: watch::channel(0).0,
        }
    }

    /// Reads `view` under the lock.
    pub fn read<T>(&self, f: impl FnOnce(&View) -> T) -> T {
        f(&lock(&self.view))
    }
}

/// One partition's reader: the next offset to read.
struct Partition {
    log: SharedLog,
    topic: TopicInfo,
    partition: u32,
    next: u64,
}

impl Partition {
    /// Reads one batch (waiting up to `wait` when there is none) into the
    /// view; how many records it read. A damaged record is stepped over.
    async fn step(&mut self, shared: &Shared, wait: Duration) -> Result<usize, LogError> {
        let records = match self
            .log
            .poll(&self.topic, self.partition, self.next, BATCH, wait)
            .await
        {
            Ok(records) => records,
            Err(LogError::Corrupt(damage)) => {
                tracing::warn!(%damage, "ioa: stepping over damaged records");
                self.next = damage.next_offset();
                return Ok(1);
            }
            Err(error) => return Err(error),
        };
        let count = records.len();
        if let Some(last) = records.last() {
            self.next = last.position.offset + 1;
        }
        let facts: Vec<_> = records
            .into_iter()
            .filter_map(|r| records::read(&self.topic.topic, r))
            .collect();
        if !facts.is_empty() {
            let mut view = lock(&shared.view);
            for fact in facts {
                view.apply(fact);
            }
            drop(view);
            shared.changed.send_modify(|n| *n += 1);
        }
        Ok(count)
    }
}

/// Reads every partition of `topics` to its end into `shared`, then follows
/// each in a task of its own; the tasks run until aborted.
pub(crate) async fn load_and_follow(
    log: &SharedLog,
    topics: &[&TopicInfo],
    shared: &Arc<Shared>,
) -> Result<Vec<JoinHandle<()>>, LogError> {
    let mut readers = Vec::new();
    for topic in topics {
        for partition in 0..topic.partitions.get() {
            let mut reader = Partition {
                log: log.clone(),
                topic: (*topic).clone(),
                partition,
                next: 0,
            };
            while reader.step(shared, Duration::ZERO).await? > 0 {}
            readers.push(reader);
        }
    }
    Ok(readers
        .into_iter()
        .map(|mut reader| {
            let shared = shared.clone();
            tokio::spawn(async move {
                loop {
                    if let Err(error) = reader.step(&shared, FOLLOW_WAIT).await {
                        tracing::warn!(
                            topic = %reader.topic.topic,
                            partition = reader.partition,
                            %error,
                            "ioa: reading the log failed; trying again"
                        );
                        tokio::time::sleep(RETRY_PAUSE).await;
                    }
                }
            })
        })
        .collect())
}
