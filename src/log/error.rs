//! Errors of the log port. Each message says what went wrong and what to
//! do about it, in the terms of the library: a program that runs it (the
//! `agdx` command line) adds its own advice. A failure that comes from
//! another library's error keeps it as its source ([`Cause`]).

use std::sync::Arc;

use super::Damage;

/// The error a [`LogError`] comes from, as the library underneath the log
/// reported it. Its text is part of the log error's message already; it is
/// kept for a program that looks at the cause itself (through
/// [`std::error::Error::source`]). A backend's own errors are here only when
/// its Cargo feature builds it in. Each is shared (an [`Arc`]), so a log
/// error stays small and cheap to clone: one failed group commit answers
/// every write it held.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Cause {
    /// SQLite's error, from the embedded log's database files.
    #[cfg(feature = "embedded")]
    #[error(transparent)]
    Sqlite(Arc<rusqlite::Error>),
    /// The operating system's error: a file, a directory or a thread.
    #[error(transparent)]
    Io(Arc<std::io::Error>),
    /// A blocking call that panicked or was cancelled.
    #[error(transparent)]
    Task(Arc<tokio::task::JoinError>),
    /// The Apache Iggy client's error.
    #[cfg(feature = "iggy")]
    #[error(transparent)]
    Iggy(Arc<iggy::prelude::IggyError>),
    /// librdkafka's error, from the Kafka backend.
    #[cfg(feature = "kafka")]
    #[error(transparent)]
    Kafka(Arc<rdkafka::error::KafkaError>),
}

#[cfg(feature = "embedded")]
impl From<rusqlite::Error> for Cause {
    fn from(error: rusqlite::Error) -> Self {
        Cause::Sqlite(Arc::new(error))
    }
}

impl From<std::io::Error> for Cause {
    fn from(error: std::io::Error) -> Self {
        Cause::Io(Arc::new(error))
    }
}

impl From<tokio::task::JoinError> for Cause {
    fn from(error: tokio::task::JoinError) -> Self {
        Cause::Task(Arc::new(error))
    }
}

#[cfg(feature = "iggy")]
impl From<iggy::prelude::IggyError> for Cause {
    fn from(error: iggy::prelude::IggyError) -> Self {
        Cause::Iggy(Arc::new(error))
    }
}

#[cfg(feature = "kafka")]
impl From<rdkafka::error::KafkaError> for Cause {
    fn from(error: rdkafka::error::KafkaError) -> Self {
        Cause::Kafka(Arc::new(error))
    }
}

/// What went wrong talking to the log.
#[derive(Debug, Clone, thiserror::Error)]
pub enum LogError {
    /// The log could not be reached or the connection broke.
    #[error("cannot reach the log at {target}: {reason}")]
    Unavailable {
        /// The log, as [`super::Log::describe`] names it.
        target: String,
        /// What failed, and how to get a log running there.
        reason: String,
        /// The error the failure comes from, if any.
        #[source]
        source: Option<Cause>,
    },
    /// The topic does not exist; ensure it ([`super::Log::ensure_topic`])
    /// first.
    #[error("topic '{stream}/{topic}' does not exist; create it first")]
    NoSuchTopic {
        /// The stream's name.
        stream: String,
        /// The topic's name.
        topic: String,
    },
    /// A log opened only if it exists ([`super::LogSpec::open_existing`])
    /// is not there: nothing was created.
    #[error("there is no log at {spec} ({} holds none)", path.display())]
    NoLog {
        /// The log as it was named, e.g. `embedded:.agdx`.
        spec: String,
        /// Where it was looked for, as an absolute path.
        path: std::path::PathBuf,
    },
    /// The topic exists but has no partitions (another client of a log
    /// server can create or leave one like that), so nothing can be
    /// appended or read.
    #[error(
        "topic '{stream}/{topic}' has no partitions, so nothing can be appended to it or read from it; add as many partitions as the stream's other topics have, or delete the topic and create it again"
    )]
    NoPartitions {
        /// The stream's name.
        stream: String,
        /// The topic's name.
        topic: String,
    },
    /// The partition id is outside the topic's partitions.
    #[error(
        "partition {partition} does not exist in '{stream}/{topic}', which has {partitions} partitions; use a partition from 0 to {partitions} - 1 (partition_for_key picks one)"
    )]
    NoSuchPartition {
        /// The stream's name.
        stream: String,
        /// The topic's name.
        topic: String,
        /// The partition asked for.
        partition: u32,
        /// How many partitions the topic has.
        partitions: u32,
    },
    /// An existing topic has another partition count than asked for.
    #[error(
        "topic '{stream}/{topic}' already exists with {existing} partitions, not {wanted}; ask for {existing} partitions or use a new stream name"
    )]
    PartitionMismatch {
        /// The stream's name.
        stream: String,
        /// The topic's name.
        topic: String,
        /// The partitions the topic has.
        existing: u32,
        /// The partitions asked for.
        wanted: u32,
    },
    /// A record is larger than the log accepts.
    #[error(
        "a record of {size} bytes exceeds the log's limit of {limit} bytes; send large bodies as a claim check (BodyRef)"
    )]
    RecordTooLarge {
        /// The record's payload size, in bytes.
        size: usize,
        /// The largest payload the log accepts, in bytes.
        limit: usize,
    },
    /// A request the log cannot carry out as asked (an empty batch or
    /// payload, headers over the limits, a bad name); the message says what
    /// to change.
    #[error("{0}")]
    InvalidInput(String),
    /// The backend's storage failed (disk, database) for a reason other
    /// than space ([`LogError::StorageFull`]) or damage
    /// ([`LogError::Damaged`]).
    #[error("log storage failed: {reason}")]
    Storage {
        /// What failed, naming the file or directory.
        reason: String,
        /// The error the failure comes from, if any.
        #[source]
        source: Option<Cause>,
    },
    /// The disk holding the log has no space left.
    #[error("the disk holding the log is full ({reason}); free space on it, then try again")]
    StorageFull {
        /// What could not be written, naming the file or directory.
        reason: String,
        /// The error the failure comes from, if any.
        #[source]
        source: Option<Cause>,
    },
    /// The log's storage is damaged: it cannot serve records it
    /// acknowledged (the embedded log found its database holding fewer
    /// records than it acknowledged, or SQLite reports the file malformed).
    /// Damage confined to some records is [`LogError::Corrupt`] instead.
    #[error("the log at {location} is damaged: {reason}")]
    Damaged {
        /// The storage: the log as the user named it, or the file found
        /// damaged.
        location: String,
        /// What is damaged, naming the ranges of records it affects.
        reason: String,
        /// The error the damage was found by, if any.
        #[source]
        source: Option<Cause>,
    },
    /// The backend answered with an error not covered by another variant.
    #[error(
        "the log refused the request: {reason}; try again, and if it keeps failing look at the log server's own log"
    )]
    Backend {
        /// What was asked, and what the log answered.
        reason: String,
        /// The error the failure comes from, if any.
        #[source]
        source: Option<Cause>,
    },
    /// Records a poll cannot return (see [`Damage`]): records before them
    /// are still readable, and a consumer steps over them by reading on
    /// from [`Damage::next_offset`] (committing [`Damage::last`] for a
    /// group).
    #[error(
        "{0}; step over it by reading on from offset {next} (a consumer group commits offset {last}: a worker does that and dead-letters it), or restore the log from a backup to get it back",
        next = .0.next_offset(),
        last = .0.last
    )]
    Corrupt(Damage),
    /// The storage exists but is not a log this version can use (another
    /// program's file, or a newer on-disk format).
    #[error("{location} is not a log this agdx can open: {reason}")]
    Incompatible {
        /// The storage, as the user named it.
        location: String,
        /// Why it cannot be used, and what to use instead.
        reason: String,
    },
    /// The log refused the credentials or the user lacks a permission.
    #[error("the log at {target} denied access: {reason}")]
    AccessDenied {
        /// The log, as [`super::Log::describe`] names it.
        target: String,
        /// What was refused, and which credentials or permissions to check.
        reason: String,
        /// The error the refusal came as, if any.
        #[source]
        source: Option<Cause>,
    },
    /// An offset commit for a partition that a live member of another
    /// process (or another Iggy client) owns; see [`super::Log::store_offset`].
    #[error(
        "partition {partition} of '{stream}/{topic}' is assigned to another member of consumer group '{group}'; only the member that owns a partition can commit its offset (call assigned() again: the assignment has changed)"
    )]
    NotOwner {
        /// The stream's name.
        stream: String,
        /// The topic's name.
        topic: String,
        /// The consumer group.
        group: String,
        /// The partition whose offset was to be committed.
        partition: u32,
    },
}

impl LogError {
    /// The error this one comes from, when it keeps one: its
    /// [`std::error::Error::source`], as the [`Cause`] it is.
    pub fn cause(&self) -> Option<&Cause> {
        std::error::Error::source(self).and_then(|source| source.downcast_ref())
    }

    /// Whether trying the same call again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            LogError::Unavailable { .. } => true,
            LogError::Storage { .. } => true,
            LogError::StorageFull { .. } => true,
            LogError::Damaged { .. } => false,
            LogError::Backend { .. } => true,
            LogError::NoSuchTopic { .. } => false,
            LogError::NoLog { .. } => false,
            LogError::NoPartitions { .. } => false,
            LogError::NoSuchPartition { .. } => false,
            LogError::PartitionMismatch { .. } => false,
            LogError::RecordTooLarge { .. } => false,
            LogError::InvalidInput(_) => false,
            LogError::AccessDenied { .. } => false,
            LogError::NotOwner { .. } => false,
            LogError::Corrupt(_) => false,
            LogError::Incompatible { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use agdx_wire::LogPosition;

    use super::*;

    /// One error of each kind, with neutral details.
    fn every_kind() -> Vec<LogError> {
        let (stream, topic) = ("s".to_owned(), "t".to_owned());
        let at = LogPosition {
            stream: 1,
            topic: 1,
            partition: 0,
            offset: 4,
        };
        vec![
            LogError::Unavailable {
                target: "log".into(),
                reason: "refused".into(),
                source: None,
            },
            LogError::NoSuchTopic {
                stream: stream.clone(),
                topic: topic.clone(),
            },
            LogError::NoLog {
                spec: "embedded:x".into(),
                path: "/x".into(),
            },
            LogError::NoPartitions {
                stream: stream.clone(),
                topic: topic.clone(),
            },
            LogError::NoSuchPartition {
                stream: stream.clone(),
                topic: topic.clone(),
                partition: 3,
                partitions: 2,
            },
            LogError::PartitionMismatch {
                stream: stream.clone(),
                topic: topic.clone(),
                existing: 2,
                wanted: 3,
            },
            LogError::RecordTooLarge { size: 9, limit: 8 },
            LogError::InvalidInput("bad".into()),
            LogError::Storage {
                reason: "failed".into(),
                source: None,
            },
            LogError::StorageFull {
                reason: "no space".into(),
                source: None,
            },
            LogError::Damaged {
                location: "log".into(),
                reason: "lost".into(),
                source: None,
            },
            LogError::Backend {
                reason: "refused".into(),
                source: None,
            },
            LogError::Corrupt(Damage::record(at, "bad checksum")),
            LogError::Incompatible {
                location: "log".into(),
                reason: "newer".into(),
            },
            LogError::AccessDenied {
                target: "log".into(),
                reason: "no".into(),
                source: None,
            },
            LogError::NotOwner {
                stream,
                topic,
                group: "g".into(),
                partition: 0,
            },
        ]
    }

    /// The port's own words hold on every backend: no backend named, no
    /// command line flag or subcommand (the command line adds those).
    #[test]
    fn the_ports_own_words_name_no_backend_and_no_command_line() {
        for error in every_kind() {
            let text = error.to_string();
            for foreign in [
                "Iggy",
                "iggy",
                "Kafka",
                "kafka",
                "`agdx",
                "agdx init",
                " --",
                "AGDX_",
            ] {
                assert!(
                    !text.contains(foreign),
                    "{error:?} says {foreign:?}: {text}"
                );
            }
        }
    }
}
