//! Errors of the log port.

use agdx_wire::LogPosition;

/// What went wrong talking to the log.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The log could not be reached or the connection broke.
    #[error("cannot reach the log at {target}: {reason}")]
    Unavailable { target: String, reason: String },
    /// The topic does not exist; run `agdx init` (or ensure it) first.
    #[error("topic '{stream}/{topic}' does not exist; run `agdx init` to create the topology")]
    NoSuchTopic { stream: String, topic: String },
    /// The partition id is outside the topic's partitions.
    #[error(
        "partition {partition} does not exist in '{stream}/{topic}', which has {partitions} partitions (0..{partitions})"
    )]
    NoSuchPartition {
        stream: String,
        topic: String,
        partition: u32,
        partitions: u32,
    },
    /// An existing topic has another partition count than asked for.
    #[error(
        "topic '{stream}/{topic}' already exists with {existing} partitions, not {wanted}; use --partitions {existing} or a new stream name"
    )]
    PartitionMismatch {
        stream: String,
        topic: String,
        existing: u32,
        wanted: u32,
    },
    /// A record is larger than the log accepts.
    #[error(
        "a record of {size} bytes exceeds the log's limit of {limit} bytes; send large bodies as a claim check (BodyRef)"
    )]
    RecordTooLarge { size: usize, limit: usize },
    /// An empty batch or an empty payload.
    #[error("{0}")]
    InvalidInput(String),
    /// The backend's storage failed (disk, database).
    #[error("log storage failed: {0}")]
    Storage(String),
    /// The backend answered with an error.
    #[error("the log refused the request: {0}")]
    Backend(String),
    /// A stored record failed its integrity check (checksum or framing).
    /// Records before it are still readable; the consumer can step over it
    /// by committing its offset.
    #[error("the record at {position} is damaged ({reason}); restore the log from a backup, or skip the record by committing offset {} for the consumer group", position.offset)]
    Corrupt {
        position: LogPosition,
        reason: String,
    },
    /// The storage exists but is not a log this version can use (another
    /// program's file, or a newer on-disk format).
    #[error("{location} is not a log this agdx can open: {reason}")]
    Incompatible { location: String, reason: String },
    /// The log refused the credentials or the user lacks a permission.
    #[error("the log at {target} denied access: {reason}")]
    AccessDenied { target: String, reason: String },
    /// An offset commit for a partition this process's members do not own.
    #[error(
        "partition {partition} of '{stream}/{topic}' is assigned to another member of consumer group '{group}'; only the member that owns a partition can commit its offset (call assigned() again: the assignment has changed)"
    )]
    NotOwner {
        stream: String,
        topic: String,
        group: String,
        partition: u32,
    },
}

impl LogError {
    /// Whether trying the same call again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LogError::Unavailable { .. } => true,
            LogError::Storage(_) => true,
            LogError::Backend(_) => true,
            LogError::NoSuchTopic { .. } => false,
            LogError::NoSuchPartition { .. } => false,
            LogError::PartitionMismatch { .. } => false,
            LogError::RecordTooLarge { .. } => false,
            LogError::InvalidInput(_) => false,
            LogError::AccessDenied { .. } => false,
            LogError::NotOwner { .. } => false,
            LogError::Corrupt { .. } => false,
            LogError::Incompatible { .. } => false,
        }
    }
}
