//! Feeding the [`View`] from the log: every partition of the topics that
//! hold IOA records, read once to the end before the bridge serves, then
//! followed for as long as it runs (records written by this bridge, by
//! another bridge on the same log, or by any agent).
//!
//! The registry's IOA facts (nodes, tokens, identities) and the joins are
//! what must outlive the topics' retention, so the view saves them as a
//! snapshot on `agent.snapshots` ([`view::IOA`]) and a start reads the
//! registry on from it; the commands topic (messages and joins) is read
//! from its first record, so messages last as long as it keeps them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::log::{LogError, SharedLog, TopicInfo, lock};
use crate::topology::Topology;
use crate::view;

use super::records::{self, DurableFact};
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
    /// How far the registry was read into the view, changed with it.
    progress: Mutex<Progress>,
}

/// How far the view read the registry, and when it last saved a snapshot.
struct Progress {
    next: BTreeMap<u32, u64>,
    unsaved: u64,
    resumed: bool,
    saved_at: Instant,
}

impl Shared {
    /// An empty view, or the one a snapshot holds (`resumed`: the durable
    /// facts and where the registry is to be read on from).
    pub fn new(resumed: Option<(Vec<DurableFact>, BTreeMap<u32, u64>)>) -> Self {
        let mut view = View::default();
        let (next, resumed) = match resumed {
            Some((facts, next)) => {
                for fact in facts {
                    view.apply(fact.into_record());
                }
                (next, true)
            }
            None => (BTreeMap::new(), false),
        };
        Self {
            view: Mutex::new(view),
            changed: watch::channel(0).0,
            progress: Mutex::new(Progress {
                next,
                unsaved: 0,
                resumed,
                saved_at: Instant::now(),
            }),
        }
    }

    /// Reads `view` under the lock.
    pub fn read<T>(&self, f: impl FnOnce(&View) -> T) -> T {
        f(&lock(&self.view))
    }

    /// Where the registry's `partition` is to be read from.
    fn registry_next(&self, partition: u32) -> u64 {
        lock(&self.progress)
            .next
            .get(&partition)
            .copied()
            .unwrap_or(0)
    }

    /// The durable facts and how far they reach, when a snapshot is due.
    fn due(&self) -> Option<(Vec<DurableFact>, BTreeMap<u32, u64>)> {
        let view = lock(&self.view);
        let mut progress = lock(&self.progress);
        if !view::snapshot_due(
            progress.unsaved,
            progress.resumed,
            progress.saved_at.elapsed(),
        ) {
            return None;
        }
        progress.unsaved = 0;
        progress.resumed = true;
        progress.saved_at = Instant::now();
        Some((view.durable().to_vec(), progress.next.clone()))
    }

    /// Saves a snapshot of the view when one is due.
    async fn save_if_due(&self, log: &SharedLog, topology: &Topology) {
        let Some((facts, next)) = self.due() else {
            return;
        };
        if let Err(error) =
            view::save(log, topology, &view::IOA, view::IOA.name, &next, &facts).await
        {
            tracing::warn!(%error, "ioa: could not save a snapshot of the view; the next start reads further back");
        }
    }
}

/// The view's snapshot, when there is one that reads.
pub(crate) async fn resume(
    log: &SharedLog,
    topology: &Topology,
) -> Option<(Vec<DurableFact>, BTreeMap<u32, u64>)> {
    match view::resume(log, topology, &view::IOA, view::IOA.name).await {
        Ok(saved) => saved,
        Err(error) => {
            tracing::warn!(%error, "ioa: the view's snapshot cannot be read; reading the registry from its start");
            None
        }
    }
}

/// One partition's reader: the next offset to read.
struct Partition {
    log: SharedLog,
    topic: TopicInfo,
    partition: u32,
    next: u64,
    /// Whether this is a partition of the registry (whose progress a
    /// snapshot records).
    registry: bool,
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
        let took = !facts.is_empty();
        let mut view = lock(&shared.view);
        for fact in facts {
            view.apply(fact);
        }
        if self.registry && count > 0 {
            let mut progress = lock(&shared.progress);
            progress.next.insert(self.partition, self.next);
            progress.unsaved += count as u64;
        }
        drop(view);
        if took {
            shared.changed.send_modify(|n| *n += 1);
        }
        Ok(count)
    }
}

/// How often a following bridge looks whether a snapshot is due.
const SAVE_CHECK: Duration = Duration::from_secs(1);

/// Reads every partition of the registry (from where the view's snapshot
/// got to) and of the commands topic (from its first record) to its end
/// into `shared`, saves a snapshot if one is due, then follows each
/// partition in a task of its own; the tasks run until aborted.
pub(crate) async fn load_and_follow(
    log: &SharedLog,
    topology: &Topology,
    shared: &Arc<Shared>,
) -> Result<Vec<JoinHandle<()>>, LogError> {
    let mut readers = Vec::new();
    for (topic, registry) in [(&topology.registry, true), (&topology.commands, false)] {
        for partition in 0..topic.partitions.get() {
            let next = if registry {
                shared.registry_next(partition)
            } else {
                0
            };
            let mut reader = Partition {
                log: log.clone(),
                topic: topic.clone(),
                partition,
                next,
                registry,
            };
            while reader.step(shared, Duration::ZERO).await? > 0 {}
            readers.push(reader);
        }
    }
    shared.save_if_due(log, topology).await;
    let mut tasks: Vec<JoinHandle<()>> = readers
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
        .collect();
    let (log, topology, saver) = (log.clone(), topology.clone(), shared.clone());
    tasks.push(tokio::spawn(async move {
        loop {
            tokio::time::sleep(SAVE_CHECK).await;
            saver.save_if_due(&log, &topology).await;
        }
    }));
    Ok(tasks)
}
