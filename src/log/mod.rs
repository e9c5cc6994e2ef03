//! The substrate port: the one log interface the runtime uses.
//!
//! Three backends implement [`Log`]: the embedded log (a local SQLite-backed
//! directory, the zero-setup default), Apache Iggy (production, one node)
//! and Kafka-protocol clusters (several brokers), each built in by the
//! Cargo feature of its module's name. Nothing above this module
//! knows which one it has. Records are addressed exactly
//! like Iggy addresses them: numeric stream id, topic id, partition id
//! (0-based) and per-partition offset from 0, each with a server-side
//! timestamp and typed headers.
//!
//! The port offers only what AGDX needs: ensure a stream/topic (and list a
//! stream's topics), append a
//! batch to one partition, poll a partition from an offset, read the last
//! offset, join/leave a consumer group and learn the assigned partitions, and
//! store/read a group's committed offset. Acknowledgement **is** an offset
//! commit; there is no ack, nack or visibility timeout.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use agdx_wire::{Headers, LogPosition};
use async_trait::async_trait;
use bytes::Bytes;

pub mod check;
mod damage;
mod decorator;
#[cfg(feature = "embedded")]
pub mod embedded;
mod error;
mod headers;
#[cfg(feature = "iggy")]
pub mod iggy;
#[cfg(feature = "kafka")]
pub mod kafka;
mod precondition;
mod retention;
#[cfg(any(feature = "embedded", feature = "iggy", feature = "kafka"))]
mod spec;

pub use damage::Damage;
pub use decorator::LogDecorator;
pub use error::{Cause, LogError};
pub use precondition::{check_append, check_poll};
pub use retention::Retention;
#[cfg(feature = "embedded")]
pub use spec::DEFAULT_LOG;
#[cfg(any(feature = "embedded", feature = "iggy", feature = "kafka"))]
pub use spec::{LogSpec, LogSpecError};

/// A resolved topic: names and the numeric ids the log gave them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicInfo {
    /// The stream's name.
    pub stream: String,
    /// The topic's name within its stream.
    pub topic: String,
    /// The stream's number, given by the log.
    pub stream_id: u32,
    /// The topic's number within its stream, given by the log.
    pub topic_id: u32,
    /// How many partitions the topic has, numbered from 0: at least one,
    /// so every key has a partition
    /// ([`partition_for_key`](crate::routing::partition_for_key)).
    ///
    /// ```compile_fail,E0308
    /// # use agdx::log::TopicInfo;
    /// let empty = TopicInfo {
    ///     stream: "s".into(),
    ///     topic: "t".into(),
    ///     stream_id: 1,
    ///     topic_id: 1,
    ///     partitions: 0,
    /// };
    /// ```
    pub partitions: NonZeroU32,
}

impl TopicInfo {
    /// The topic as a log reports it, refused as
    /// [`LogError::NoPartitions`] when it has no partitions (another client
    /// of a server can make one): nothing could be appended to it.
    #[cfg(any(feature = "embedded", feature = "iggy", feature = "kafka"))]
    pub(crate) fn resolved(
        stream: String,
        topic: String,
        stream_id: u32,
        topic_id: u32,
        partitions: u32,
    ) -> Result<Self, LogError> {
        match NonZeroU32::new(partitions) {
            Some(partitions) => Ok(Self {
                stream,
                topic,
                stream_id,
                topic_id,
                partitions,
            }),
            None => Err(LogError::NoPartitions { stream, topic }),
        }
    }

    /// Refuses a partition outside the topic.
    pub(crate) fn check_partition(&self, partition: u32) -> Result<(), LogError> {
        if partition < self.partitions.get() {
            return Ok(());
        }
        Err(LogError::NoSuchPartition {
            stream: self.stream.clone(),
            topic: self.topic.clone(),
            partition,
            partitions: self.partitions.get(),
        })
    }

    /// The position of `offset` in `partition` of this topic.
    pub fn position(&self, partition: u32, offset: u64) -> LogPosition {
        LogPosition {
            stream: self.stream_id,
            topic: self.topic_id,
            partition,
            offset,
        }
    }
}

/// A record to append: typed headers and the payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutgoingRecord {
    /// Typed headers, each name at most once; names and values of 1 to 255
    /// bytes (Iggy's limits, which both backends enforce).
    pub headers: Headers,
    /// The payload, at least one byte and at most
    /// [`Log::max_record_bytes`]. Shared, so a batch kept for another
    /// attempt costs no copy.
    pub payload: Bytes,
}

/// One partition's batch of an [`Log::append_and_commit`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Append {
    /// The topic appended to.
    pub topic: TopicInfo,
    /// The partition appended to.
    pub partition: u32,
    /// The records, in order.
    pub records: Vec<OutgoingRecord>,
}

/// The offset an [`Log::append_and_commit`] stores once its records are
/// durable: as [`Log::store_offset`] takes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommit {
    /// The topic the group reads.
    pub topic: TopicInfo,
    /// The consumer group.
    pub group: String,
    /// The partition whose offset moves.
    pub partition: u32,
    /// The offset of the last record processed.
    pub offset: u64,
}

/// A record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Where it sits: stream, topic, partition, offset.
    pub position: LogPosition,
    /// When the log accepted it, epoch microseconds (server clock).
    pub timestamp_micros: u64,
    /// The typed headers it was appended with.
    pub headers: Headers,
    /// Shares the buffer the backend read it into, so handing records out
    /// copies no payload.
    pub payload: Bytes,
}

/// The log port. Every method is safe to call concurrently.
#[async_trait]
pub trait Log: Send + Sync + 'static {
    /// A short description for people, e.g. `embedded:.agdx` or `iggy://host:port`.
    fn describe(&self) -> String;

    /// Largest payload one record may carry; larger appends fail with
    /// [`LogError::RecordTooLarge`].
    fn max_record_bytes(&self) -> usize;

    /// Creates the stream and the topic with `partitions` partitions unless
    /// they exist (idempotent), keeping records as the backend does by
    /// default ([`Retention::BackendDefault`]); see
    /// [`Log::ensure_topic_retained`].
    async fn ensure_topic(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
    ) -> Result<TopicInfo, LogError> {
        self.ensure_topic_retained(stream, topic, partitions, Retention::BackendDefault)
            .await
    }

    /// Creates the stream and the topic with `partitions` partitions unless
    /// they exist (idempotent); a topic this call creates keeps its records
    /// as `retention` says, an existing topic keeps the retention it has. An
    /// existing topic with a different partition count is an error
    /// ([`LogError::PartitionMismatch`]).
    async fn ensure_topic_retained(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
        retention: Retention,
    ) -> Result<TopicInfo, LogError>;

    /// Asks the log to keep, for each `(partition, offset)` of `from`, the
    /// partition's records from `offset` on whatever their age, for
    /// `holder` (each holder has one hold per partition; placing it again
    /// moves it). A view resuming from a
    /// snapshot holds the offset it reads on from. The embedded log honours
    /// holds; Iggy and Kafka remove records by age alone, and the default
    /// does nothing.
    async fn hold(
        &self,
        topic: &TopicInfo,
        holder: &str,
        from: &[(u32, u64)],
    ) -> Result<(), LogError> {
        let _ = (topic, holder, from);
        Ok(())
    }

    /// Looks a topic up without creating it.
    async fn topic(&self, stream: &str, topic: &str) -> Result<Option<TopicInfo>, LogError>;

    /// Every topic of `stream`, ascending by name, as [`Log::topic`] would
    /// resolve each; empty when there is no such stream. A topic without
    /// partitions (another client of a server can make one) is left out:
    /// nothing can be appended to it. This is how readers find topics
    /// made while they were not looking, such as the agents' inboxes.
    async fn topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError>;

    /// Appends `records` to one partition as one batch, in order. When this
    /// returns `Ok`, every record is durable (on Iggy with
    /// `durability=server`, as durable as the server's settings make it;
    /// see [`iggy::Durability`]). An error may come after some or all of
    /// the records were appended: appending them again can repeat them.
    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError>;

    /// Reads up to `max` records of a partition from offset `from` on. When
    /// none is there yet, waits up to `wait` for one to be appended (zero:
    /// return at once). `max` must be at least 1.
    ///
    /// Records that cannot be read (damaged, lost by the storage, or with a
    /// malformed header block) are never returned: the poll returns the
    /// records before them, and a poll starting at them fails with
    /// [`LogError::Corrupt`] saying which they are (see [`Damage`]).
    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError>;

    /// A hint that a record is expected on `partition` soon (a reply to a
    /// command just sent): a backend that waits for records by asking again
    /// may ask eagerly for a moment before it backs off. Nothing else
    /// changes; the default ignores it.
    fn expect(&self, topic: &TopicInfo, partition: u32) {
        let _ = (topic, partition);
    }

    /// The offset of the last record in the partition, `None` when it is empty.
    async fn last_offset(&self, topic: &TopicInfo, partition: u32)
    -> Result<Option<u64>, LogError>;

    /// The offset of the first record the partition still holds (retention
    /// may have removed those before it), `None` when it holds none. A
    /// poll from below it reads from it. The default asks for one record
    /// from offset 0; a damaged first record counts as there.
    async fn first_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        match self.poll(topic, partition, 0, 1, Duration::ZERO).await {
            Ok(records) => Ok(records.first().map(|r| r.position.offset)),
            Err(LogError::Corrupt(damage)) => Ok(Some(damage.position.offset)),
            Err(error) => Err(error),
        }
    }

    /// Joins consumer group `group` on `topic` (creating the group when
    /// needed). Partitions are shared among the live members; see
    /// [`GroupMember`].
    async fn join_group(
        &self,
        topic: &TopicInfo,
        group: &str,
    ) -> Result<Box<dyn GroupMember>, LogError>;

    /// Stores the group's committed offset for a partition: the offset of the
    /// last record fully processed (the next read starts at `offset + 1`).
    ///
    /// Ownership is checked per process, not per member: the commit fails
    /// with [`LogError::NotOwner`] when the partition belongs to a live
    /// member of another process (or another Iggy client), and is stored
    /// when its owner is a member in this process or it has no live owner.
    /// This call names no member, so neither backend can tell which local
    /// member commits: Iggy accepts a commit only through the connection of
    /// the member that owns the partition, and the Iggy backend sends it
    /// through whichever local member does. A member that lost a partition
    /// to another member of the same process can therefore still commit
    /// it. That commit can only name a record the old member finished, so
    /// the worst outcome is that the new owner's later records are
    /// delivered again (at least once, as after a crash), never that a
    /// record is skipped. Stop a partition's work as soon as
    /// [`GroupMember::assigned`] no longer lists it to keep such repeats
    /// rare.
    async fn store_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), LogError>;

    /// Appends every batch of `appends`, then stores `commit` as
    /// [`Log::store_offset`] does: the offset is never stored before every
    /// record is durable. A worker answers a run of commands and commits it
    /// this way.
    ///
    /// Every batch is checked ([`check_append`]), and the commit's
    /// partition, before anything is written: a call refused for its input
    /// leaves the log as it was. The embedded log writes all of it in one
    /// transaction (atomic, one fsync instead of two). The default appends
    /// the batches of one topic at once, topic after topic in the order
    /// given (so a reply is on the log before the dead letter that follows
    /// it), then stores the offset; an error may come after some records
    /// were appended (or all, with the offset not stored): trying again can
    /// repeat them, never skip the commit's records.
    async fn append_and_commit(
        &self,
        appends: Vec<Append>,
        commit: OffsetCommit,
    ) -> Result<(), LogError> {
        for append in &appends {
            check_append(
                &append.topic,
                append.partition,
                &append.records,
                self.max_record_bytes(),
            )?;
        }
        commit.topic.check_partition(commit.partition)?;
        let mut appends = appends.into_iter().peekable();
        while let Some(first) = appends.next() {
            let mut same_topic = vec![first];
            while let Some(next) = appends.next_if(|a| a.topic == same_topic[0].topic) {
                same_topic.push(next);
            }
            let batches = same_topic.into_iter().map(|append| async move {
                self.append(&append.topic, append.partition, append.records)
                    .await
            });
            futures_util::future::try_join_all(batches).await?;
        }
        self.store_offset(
            &commit.topic,
            &commit.group,
            commit.partition,
            commit.offset,
        )
        .await
    }

    /// The group's committed offset for a partition, `None` when nothing was
    /// committed yet.
    async fn committed_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
    ) -> Result<Option<u64>, LogError>;
}

/// A live membership in a consumer group.
///
/// Each partition is owned by at most one live member at a time. A member
/// that leaves hands its partitions over at once; one that dies loses them
/// to the others within a few seconds. Members learn their share by calling
/// [`GroupMember::assigned`] regularly (it also keeps the membership alive
/// where the backend needs that).
#[async_trait]
pub trait GroupMember: Send + Sync {
    /// An id for this member, unique within the group while it lives.
    fn member_id(&self) -> String;

    /// The partitions this member owns now, ascending.
    async fn assigned(&self) -> Result<Vec<u32>, LogError>;

    /// Reports the partitions this member still has work in hand on:
    /// records read whose replies are not yet published and committed.
    ///
    /// On Kafka, whose cooperative rebalancing waits for a member to give a
    /// partition up, a member that reports holds each partition taken from
    /// it until a report made after [`GroupMember::assigned`] stopped
    /// listing it no longer names it (or the hand-over limit passes), so
    /// its next owner starts after the last commit. A member that never
    /// reports lets partitions go at once. The other backends move
    /// partitions at once and ignore reports.
    async fn working_on(&self, partitions: &[u32]) {
        let _ = partitions;
    }

    /// Leaves the group, handing the partitions over at once.
    async fn leave(self: Box<Self>) -> Result<(), LogError>;
}

/// A shared handle to some log backend.
pub type SharedLog = Arc<dyn Log>;

/// A poll stops adding records once their payloads reach this many bytes
/// (it always returns at least one record when one is there); the same on
/// every backend.
pub const POLL_BYTES_BUDGET: usize = 64 * 1024 * 1024;

/// How long connecting to a log server (Iggy, Kafka) may take unless the
/// caller gives a limit of its own: the TCP connection and the first
/// exchange (Iggy's sign-in, Kafka's metadata request) together. A server
/// that accepts connections and never answers fails within it.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a poll waits by default when nothing is there yet.
pub const DEFAULT_POLL_WAIT: Duration = Duration::from_millis(200);

/// Locks a mutex, going on when a panicking thread held it. Only for values
/// a panic cannot leave half-changed (in the log: SQLite connections, which
/// roll back an unfinished transaction, and plain caches and lists).
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
