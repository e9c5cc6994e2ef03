//! A log held in memory: every method of the port, nothing on disk, gone
//! when the last handle is dropped.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use tokio::sync::watch;

use crate::log::{
    GroupMember, Log, LogError, LogRecord, OutgoingRecord, POLL_BYTES_BUDGET, TopicInfo,
    check_append, check_poll, lock,
};

/// Largest payload a [`MemoryLog`] record carries.
pub const MEMORY_MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// A [`Log`] in this process's memory, for tests: streams, topics,
/// partitions, consumer groups and committed offsets as the other backends
/// keep them, and no I/O.
///
/// Clones share the same log, so a clone is the log "opened again" after
/// a restart. A group member that is dropped without leaving hands its
/// partitions over at once (a process's members die with it).
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), agdx::log::LogError> {
/// use std::time::Duration;
/// use agdx::log::{Log, OutgoingRecord};
/// use agdx::testing::MemoryLog;
///
/// let log = MemoryLog::new();
/// let topic = log.ensure_topic("agents", "agent.commands", 2).await?;
/// let record = OutgoingRecord { headers: Vec::new(), payload: b"hi".to_vec().into() };
/// log.append(&topic, 1, vec![record]).await?;
/// let read = log.poll(&topic, 1, 0, 10, Duration::ZERO).await?;
/// assert_eq!(&read[0].payload[..], b"hi");
/// # Ok(()) }
/// ```
#[derive(Clone, Default)]
pub struct MemoryLog {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Counts appends, so a waiting poll wakes on each.
    appended: watch::Sender<u64>,
    next_member: AtomicU64,
}

impl Default for Shared {
    fn default() -> Self {
        Self {
            state: Mutex::default(),
            appended: watch::Sender::new(0),
            next_member: AtomicU64::new(0),
        }
    }
}

#[derive(Default)]
struct State {
    streams: Vec<Stream>,
    /// Committed offsets by (stream id, topic id, group, partition).
    committed: HashMap<(u32, u32, String, u32), u64>,
    /// Live members by (stream id, topic id, group), in join order.
    groups: HashMap<(u32, u32, String), Vec<u64>>,
    /// The newest timestamp handed out, so timestamps never go down.
    last_micros: u64,
}

struct Stream {
    name: String,
    topics: Vec<Topic>,
}

struct Topic {
    name: String,
    partitions: Vec<Vec<LogRecord>>,
}

impl MemoryLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// [`Log::ensure_topic`], without waiting.
    pub(crate) fn ensure_now(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
    ) -> Result<TopicInfo, LogError> {
        if partitions == 0 {
            return Err(LogError::InvalidInput(format!(
                "topic '{stream}/{topic}' needs at least one partition"
            )));
        }
        let mut state = lock(&self.shared.state);
        let stream_index = match state.streams.iter().position(|s| s.name == stream) {
            Some(index) => index,
            None => {
                state.streams.push(Stream {
                    name: stream.to_owned(),
                    topics: Vec::new(),
                });
                state.streams.len() - 1
            }
        };
        let topics = &mut state.streams[stream_index].topics;
        let topic_index = match topics.iter().position(|t| t.name == topic) {
            Some(index) => index,
            None => {
                topics.push(Topic {
                    name: topic.to_owned(),
                    partitions: vec![Vec::new(); partitions as usize],
                });
                topics.len() - 1
            }
        };
        let info = info(stream_index, topic_index, stream, &topics[topic_index]);
        if info.partitions.get() != partitions {
            return Err(LogError::PartitionMismatch {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                existing: info.partitions.get(),
                wanted: partitions,
            });
        }
        Ok(info)
    }

    /// The records of `partition` of `topic` from offset `from` on, without
    /// waiting.
    pub(crate) fn read_now(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
    ) -> Result<Vec<LogRecord>, LogError> {
        self.with_partition(topic, partition, |records| {
            let mut out = Vec::new();
            let mut bytes = 0;
            let start = usize::try_from(from).unwrap_or(usize::MAX);
            for record in records.iter().skip(start).take(max as usize) {
                out.push(record.clone());
                bytes += record.payload.len();
                if bytes >= POLL_BYTES_BUDGET {
                    break;
                }
            }
            out
        })
    }

    fn with_partition<T>(
        &self,
        topic: &TopicInfo,
        partition: u32,
        f: impl FnOnce(&mut Vec<LogRecord>) -> T,
    ) -> Result<T, LogError> {
        let mut state = lock(&self.shared.state);
        let found = usize::try_from(topic.stream_id.wrapping_sub(1))
            .ok()
            .and_then(|s| state.streams.get_mut(s))
            .filter(|s| s.name == topic.stream)
            .and_then(|s| s.topics.get_mut(topic.topic_id.wrapping_sub(1) as usize))
            .filter(|t| t.name == topic.topic);
        let Some(found) = found else {
            return Err(LogError::NoSuchTopic {
                stream: topic.stream.clone(),
                topic: topic.topic.clone(),
            });
        };
        match found.partitions.get_mut(partition as usize) {
            Some(records) => Ok(f(records)),
            None => Err(LogError::NoSuchPartition {
                stream: topic.stream.clone(),
                topic: topic.topic.clone(),
                partition,
                partitions: u32::try_from(found.partitions.len()).unwrap_or(u32::MAX),
            }),
        }
    }

    /// The next timestamp: now, or the last one handed out if the clock
    /// went back.
    fn timestamp(&self) -> u64 {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX));
        let mut state = lock(&self.shared.state);
        state.last_micros = state.last_micros.max(now);
        state.last_micros
    }
}

/// The [`TopicInfo`] of the topic at these indices: ids count from 1.
fn info(stream_index: usize, topic_index: usize, stream: &str, topic: &Topic) -> TopicInfo {
    TopicInfo {
        stream: stream.to_owned(),
        topic: topic.name.clone(),
        stream_id: u32::try_from(stream_index + 1).unwrap_or(u32::MAX),
        topic_id: u32::try_from(topic_index + 1).unwrap_or(u32::MAX),
        // `ensure_now` makes no topic without partitions.
        partitions: std::num::NonZeroU32::new(
            u32::try_from(topic.partitions.len()).unwrap_or(u32::MAX),
        )
        .unwrap_or(std::num::NonZeroU32::MIN),
    }
}

#[async_trait]
impl Log for MemoryLog {
    fn describe(&self) -> String {
        "memory".into()
    }

    fn max_record_bytes(&self) -> usize {
        MEMORY_MAX_RECORD_BYTES
    }

    /// The memory log keeps every record while it lives, whatever the
    /// retention.
    async fn ensure_topic_retained(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
        _retention: crate::log::Retention,
    ) -> Result<TopicInfo, LogError> {
        self.ensure_now(stream, topic, partitions)
    }

    async fn topic(&self, stream: &str, topic: &str) -> Result<Option<TopicInfo>, LogError> {
        let state = lock(&self.shared.state);
        let found = state
            .streams
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == stream)
            .and_then(|(s, found)| {
                let (t, topic) = found
                    .topics
                    .iter()
                    .enumerate()
                    .find(|(_, t)| t.name == topic)?;
                Some(info(s, t, stream, topic))
            });
        Ok(found)
    }

    async fn topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError> {
        let state = lock(&self.shared.state);
        let Some((s, found)) = state
            .streams
            .iter()
            .enumerate()
            .find(|(_, s)| s.name == stream)
        else {
            return Ok(Vec::new());
        };
        let mut topics: Vec<TopicInfo> = found
            .topics
            .iter()
            .enumerate()
            .map(|(t, topic)| info(s, t, stream, topic))
            .collect();
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
        Ok(topics)
    }

    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError> {
        check_append(topic, partition, &records, MEMORY_MAX_RECORD_BYTES)?;
        let timestamp_micros = self.timestamp();
        self.with_partition(topic, partition, |stored| {
            for record in records {
                let offset = stored.len() as u64;
                stored.push(LogRecord {
                    position: topic.position(partition, offset),
                    timestamp_micros,
                    headers: record.headers,
                    payload: record.payload,
                });
            }
        })?;
        self.shared.appended.send_modify(|count| *count += 1);
        Ok(())
    }

    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        check_poll(topic, partition, max)?;
        let deadline = tokio::time::Instant::now() + wait;
        let mut appended = self.shared.appended.subscribe();
        loop {
            // Marked seen before reading, so an append in between wakes the wait.
            appended.borrow_and_update();
            let records = self.read_now(topic, partition, from, max)?;
            if !records.is_empty() {
                return Ok(records);
            }
            match tokio::time::timeout_at(deadline, appended.changed()).await {
                Ok(Ok(())) => {}
                _ => return Ok(records),
            }
        }
    }

    async fn last_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        self.with_partition(topic, partition, |records| {
            (records.len() as u64).checked_sub(1)
        })
    }

    async fn join_group(
        &self,
        topic: &TopicInfo,
        group: &str,
    ) -> Result<Box<dyn GroupMember>, LogError> {
        self.with_partition(topic, 0, |_| ())?;
        let id = self.shared.next_member.fetch_add(1, Ordering::Relaxed);
        let key = (topic.stream_id, topic.topic_id, group.to_owned());
        lock(&self.shared.state)
            .groups
            .entry(key.clone())
            .or_default()
            .push(id);
        Ok(Box::new(MemoryMember {
            log: self.clone(),
            key,
            partitions: topic.partitions.get(),
            id,
        }))
    }

    async fn store_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), LogError> {
        self.with_partition(topic, partition, |_| ())?;
        lock(&self.shared.state).committed.insert(
            (topic.stream_id, topic.topic_id, group.to_owned(), partition),
            offset,
        );
        Ok(())
    }

    async fn committed_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        self.with_partition(topic, partition, |_| ())?;
        Ok(lock(&self.shared.state)
            .committed
            .get(&(topic.stream_id, topic.topic_id, group.to_owned(), partition))
            .copied())
    }
}

/// A member of a [`MemoryLog`] group: partition `p` belongs to the member
/// at `p % members` in join order.
struct MemoryMember {
    log: MemoryLog,
    key: (u32, u32, String),
    partitions: u32,
    id: u64,
}

impl MemoryMember {
    fn remove(&self) {
        if let Some(members) = lock(&self.log.shared.state).groups.get_mut(&self.key) {
            members.retain(|member| *member != self.id);
        }
    }
}

#[async_trait]
impl GroupMember for MemoryMember {
    fn member_id(&self) -> String {
        format!("memory-{}", self.id)
    }

    async fn assigned(&self) -> Result<Vec<u32>, LogError> {
        let state = lock(&self.log.shared.state);
        let members = state.groups.get(&self.key).map_or(&[][..], Vec::as_slice);
        let Some(index) = members.iter().position(|member| *member == self.id) else {
            return Ok(Vec::new());
        };
        Ok((0..self.partitions)
            .filter(|partition| *partition as usize % members.len() == index)
            .collect())
    }

    async fn leave(self: Box<Self>) -> Result<(), LogError> {
        self.remove();
        Ok(())
    }
}

impl Drop for MemoryMember {
    fn drop(&mut self) {
        self.remove();
    }
}
