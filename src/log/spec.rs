//! Choosing a backend from a log spec (`--log` / `AGDX_LOG`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use super::iggy::{Durability, UnknownDurability, join_durability, split_durability};

/// Which log to use, as written on the command line or in `AGDX_LOG`.
///
/// ```
/// use agdx::log::LogSpec;
/// use agdx::log::iggy::Durability;
/// let spec: LogSpec = "embedded:.agdx".parse().unwrap();
/// assert_eq!(spec, LogSpec::Embedded(".agdx".into()));
/// let spec: LogSpec = "iggy://iggy:iggy@127.0.0.1:8090?durability=server".parse().unwrap();
/// assert_eq!(
///     spec,
///     LogSpec::Iggy {
///         url: "iggy://iggy:iggy@127.0.0.1:8090".into(),
///         durability: Durability::Server,
///     }
/// );
/// assert!("kafka://127.0.0.1:9092,127.0.0.1:9093".parse::<LogSpec>().is_ok());
/// assert!("redis://x".parse::<LogSpec>().is_err());
/// let spec: LogSpec = "iggy://iggy:secret@127.0.0.1:8090".parse().unwrap();
/// assert_eq!(spec.describe(), "iggy://127.0.0.1:8090");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSpec {
    /// The embedded log in a local directory.
    Embedded(PathBuf),
    /// An Apache Iggy server.
    Iggy {
        /// The `iggy://USER:PASSWORD@HOST:PORT[?options]` connection string
        /// with the options of the Iggy client, without `durability`.
        url: String,
        /// What an append waits for (the `durability` option).
        durability: Durability,
    },
    /// A Kafka-protocol cluster, by its `kafka://HOST:PORT[,HOST:PORT...]` connection string.
    Kafka(String),
}

/// The default log: the embedded log in `./.agdx`.
pub const DEFAULT_LOG: &str = "embedded:.agdx";

/// A log spec that names no log agdx can open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogSpecError {
    /// None of `embedded:PATH`, `iggy://...` and `kafka://...`.
    #[error(
        "unknown log {0:?}: use `embedded:PATH` (a local directory, e.g. embedded:.agdx), `iggy://USER:PASSWORD@HOST:PORT` (e.g. iggy://iggy:iggy@127.0.0.1:8090) or `kafka://HOST:PORT[,HOST:PORT...]` (e.g. kafka://127.0.0.1:9092)"
    )]
    Unknown(String),
    /// An Iggy connection string with a `durability` option that names no mode.
    #[error(transparent)]
    Durability(#[from] UnknownDurability),
}

impl FromStr for LogSpec {
    type Err = LogSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("embedded:") {
            if path.is_empty() {
                return Err(LogSpecError::Unknown(s.to_owned()));
            }
            Ok(LogSpec::Embedded(PathBuf::from(path)))
        } else if s.starts_with("iggy://") {
            let (url, durability) = split_durability(s)?;
            Ok(LogSpec::Iggy { url, durability })
        } else if s.starts_with("kafka://") {
            Ok(LogSpec::Kafka(s.to_owned()))
        } else {
            Err(LogSpecError::Unknown(s.to_owned()))
        }
    }
}

impl fmt::Display for LogSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogSpec::Embedded(path) => write!(f, "embedded:{}", path.display()),
            LogSpec::Iggy { url, durability } => f.write_str(&join_durability(url, *durability)),
            LogSpec::Kafka(url) => f.write_str(url),
        }
    }
}

impl LogSpec {
    /// The same log with appends waiting for `durability` (Iggy only; the
    /// embedded log and Kafka are always durable on return).
    pub fn with_durability(self, durability: Durability) -> Self {
        match self {
            LogSpec::Iggy { url, .. } => LogSpec::Iggy { url, durability },
            other => other,
        }
    }

    /// The log for people: without the credentials or secret options a
    /// connection string may hold, as [`super::Log::describe`] says it.
    pub fn describe(&self) -> String {
        match self {
            LogSpec::Embedded(_) => self.to_string(),
            LogSpec::Iggy { url, .. } => super::iggy::IggyTarget::parse(url)
                .map_or_else(|_| "an Iggy server".to_owned(), |t| t.describe()),
            LogSpec::Kafka(url) => super::kafka::KafkaTarget::parse(url)
                .map_or_else(|_| "a Kafka cluster".to_owned(), |t| t.describe()),
        }
    }

    /// Opens the log this spec names only if it exists: an embedded log
    /// whose directory holds no log is [`LogError::NoLog`](super::LogError::NoLog)
    /// and is not created. A server's log (Iggy, Kafka) is connected to as
    /// by [`LogSpec::open_within`]. For tools that only read a log, so a mistyped
    /// path or another working directory is said, not answered from an
    /// empty log made for the occasion.
    pub async fn open_existing(
        &self,
        limit: std::time::Duration,
    ) -> Result<super::SharedLog, super::LogError> {
        match self {
            LogSpec::Embedded(path) => {
                Ok(Arc::new(super::embedded::EmbeddedLog::open_existing(path)?))
            }
            _ => self.open_within(limit).await,
        }
    }

    /// Opens the log this spec names, connecting to a server within
    /// [`super::DEFAULT_CONNECT_TIMEOUT`].
    pub async fn open(&self) -> Result<super::SharedLog, super::LogError> {
        self.open_within(super::DEFAULT_CONNECT_TIMEOUT).await
    }

    /// Opens the log this spec names; connecting to a server fails with
    /// [`super::LogError::Unavailable`] when it takes longer than `limit`.
    pub async fn open_within(
        &self,
        limit: std::time::Duration,
    ) -> Result<super::SharedLog, super::LogError> {
        Ok(match self {
            LogSpec::Embedded(path) => Arc::new(super::embedded::EmbeddedLog::open(path)?),
            LogSpec::Iggy { .. } => {
                Arc::new(super::iggy::IggyLog::connect_within(&self.to_string(), limit).await?)
            }
            LogSpec::Kafka(url) => {
                Arc::new(super::kafka::KafkaLog::connect_within(url, limit).await?)
            }
        })
    }
}
