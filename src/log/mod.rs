//! The substrate port: the one log interface the runtime uses.
//!
//! Two backends implement [`Log`]: the embedded log (a local SQLite-backed
//! directory, the zero-setup default) and Apache Iggy (production). Nothing
//! above this module knows which one it has. Records are addressed exactly
//! like Iggy addresses them: numeric stream id, topic id, partition id
//! (0-based) and per-partition offset from 0, each with a server-side
//! timestamp and typed headers.
//!
//! The port offers only what AGDX needs: ensure a stream/topic, append a
//! batch to one partition, poll a partition from an offset, read the last
//! offset, join/leave a consumer group and learn the assigned partitions, and
//! store/read a group's committed offset. Acknowledgement **is** an offset
//! commit; there is no ack, nack or visibility timeout.

use std::sync::Arc;
use std::time::Duration;

use agdx_wire::{Headers, LogPosition};
use async_trait::async_trait;
use bytes::Bytes;

pub mod embedded;
mod error;
pub mod iggy;
mod partition;
mod spec;

pub use error::LogError;
pub use partition::partition_for_key;
pub use spec::{DEFAULT_LOG, LogSpec, LogSpecError};

/// A resolved topic: names and the numeric ids the log gave them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicInfo {
    pub stream: String,
    pub topic: String,
    pub stream_id: u32,
    pub topic_id: u32,
    pub partitions: u32,
}

impl TopicInfo {
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
    pub headers: Headers,
    pub payload: Vec<u8>,
}

/// A record read back from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogRecord {
    /// Where it sits: stream, topic, partition, offset.
    pub position: LogPosition,
    /// When the log accepted it, epoch microseconds (server clock).
    pub timestamp_micros: u64,
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
    /// they exist (idempotent). An existing topic with a different partition
    /// count is an error ([`LogError::PartitionMismatch`]).
    async fn ensure_topic(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
    ) -> Result<TopicInfo, LogError>;

    /// Looks a topic up without creating it.
    async fn topic(&self, stream: &str, topic: &str) -> Result<Option<TopicInfo>, LogError>;

    /// Appends `records` to one partition as one batch, in order. When this
    /// returns `Ok`, every record is durable.
    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError>;

    /// Reads up to `max` records of a partition from offset `from` on. When
    /// none is there yet, waits up to `wait` for one to be appended (zero:
    /// return at once).
    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError>;

    /// The offset of the last record in the partition, `None` when it is empty.
    async fn last_offset(&self, topic: &TopicInfo, partition: u32)
    -> Result<Option<u64>, LogError>;

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
    async fn store_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), LogError>;

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

    /// Leaves the group, handing the partitions over at once.
    async fn leave(self: Box<Self>) -> Result<(), LogError>;
}

/// A shared handle to some log backend.
pub type SharedLog = Arc<dyn Log>;

/// How long a poll waits by default when nothing is there yet.
pub const DEFAULT_POLL_WAIT: Duration = Duration::from_millis(200);
