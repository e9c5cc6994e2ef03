//! Choosing a backend from a log spec (`--log` / `AGDX_LOG`).

use std::fmt;
#[cfg(feature = "embedded")]
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

#[cfg(feature = "iggy")]
use super::iggy::{Durability, UnknownDurability, join_durability, split_durability};

/// Which log to use, as written on the command line or in `AGDX_LOG`.
///
/// A backend's variant exists when its Cargo feature (`embedded`, `iggy`,
/// `kafka`) is on; a spec naming a backend left out of the build is
/// refused as [`LogSpecError::NotBuiltIn`].
///
/// ```
/// # #[cfg(all(feature = "embedded", feature = "iggy", feature = "kafka"))] {
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
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LogSpec {
    /// The embedded log in a local directory.
    #[cfg(feature = "embedded")]
    Embedded(PathBuf),
    /// An Apache Iggy server.
    #[cfg(feature = "iggy")]
    Iggy {
        /// The `iggy://USER:PASSWORD@HOST:PORT[?options]` connection string
        /// with the options of the Iggy client, without `durability`.
        url: String,
        /// What an append waits for (the `durability` option).
        durability: Durability,
    },
    /// A Kafka-protocol cluster, by its `kafka://HOST:PORT[,HOST:PORT...]` connection string.
    #[cfg(feature = "kafka")]
    Kafka(String),
}

/// The default log: the embedded log in `./.agdx`.
#[cfg(feature = "embedded")]
pub const DEFAULT_LOG: &str = "embedded:.agdx";

/// Each backend's spec prefix, the Cargo feature that builds it in, and
/// what it is called.
const BACKENDS: [(&str, &str, &str); 3] = [
    ("embedded:", "embedded", "the embedded log"),
    ("iggy://", "iggy", "the Apache Iggy backend"),
    ("kafka://", "kafka", "the Kafka backend"),
];

/// A log spec that names no log agdx can open.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LogSpecError {
    /// None of `embedded:PATH`, `iggy://...` and `kafka://...`.
    #[error(
        "unknown log {0:?}: use `embedded:PATH` (a local directory, e.g. embedded:.agdx), `iggy://USER:PASSWORD@HOST:PORT` (e.g. iggy://iggy:iggy@127.0.0.1:8090) or `kafka://HOST:PORT[,HOST:PORT...]` (e.g. kafka://127.0.0.1:9092)"
    )]
    Unknown(String),
    /// A spec naming a backend this build of agdx leaves out.
    #[error(
        "{spec:?} needs {backend}, which this build of agdx leaves out: build agdx with its `{feature}` feature (the default features include it)"
    )]
    NotBuiltIn {
        /// The spec as given.
        spec: String,
        /// The backend it names, e.g. "the Kafka backend".
        backend: &'static str,
        /// The Cargo feature that builds the backend in, e.g. `kafka`.
        feature: &'static str,
    },
    /// An Iggy connection string with a `durability` option that names no mode.
    #[cfg(feature = "iggy")]
    #[error(transparent)]
    Durability(#[from] UnknownDurability),
}

impl FromStr for LogSpec {
    type Err = LogSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        #[cfg(feature = "embedded")]
        if let Some(path) = s.strip_prefix("embedded:") {
            if path.is_empty() {
                return Err(LogSpecError::Unknown(s.to_owned()));
            }
            return Ok(LogSpec::Embedded(PathBuf::from(path)));
        }
        #[cfg(feature = "iggy")]
        if s.starts_with("iggy://") {
            let (url, durability) = split_durability(s)?;
            return Ok(LogSpec::Iggy { url, durability });
        }
        #[cfg(feature = "kafka")]
        if s.starts_with("kafka://") {
            return Ok(LogSpec::Kafka(s.to_owned()));
        }
        // Only a backend left out of the build is still unmatched here.
        match BACKENDS.iter().find(|(prefix, ..)| s.starts_with(prefix)) {
            Some(&(_, feature, backend)) => Err(LogSpecError::NotBuiltIn {
                spec: s.to_owned(),
                backend,
                feature,
            }),
            None => Err(LogSpecError::Unknown(s.to_owned())),
        }
    }
}

impl fmt::Display for LogSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            #[cfg(feature = "embedded")]
            LogSpec::Embedded(path) => write!(f, "embedded:{}", path.display()),
            #[cfg(feature = "iggy")]
            LogSpec::Iggy { url, durability } => f.write_str(&join_durability(url, *durability)),
            #[cfg(feature = "kafka")]
            LogSpec::Kafka(url) => f.write_str(url),
        }
    }
}

impl LogSpec {
    /// The same log with appends waiting for `durability` (Iggy only; the
    /// embedded log and Kafka are always durable on return).
    #[cfg(feature = "iggy")]
    pub fn with_durability(self, durability: Durability) -> Self {
        match self {
            LogSpec::Iggy { url, .. } => LogSpec::Iggy { url, durability },
            #[cfg(any(feature = "embedded", feature = "kafka"))]
            other => other,
        }
    }

    /// The log for people: without the credentials or secret options a
    /// connection string may hold, as [`super::Log::describe`] says it.
    pub fn describe(&self) -> String {
        match self {
            #[cfg(feature = "embedded")]
            LogSpec::Embedded(_) => self.to_string(),
            #[cfg(feature = "iggy")]
            LogSpec::Iggy { url, .. } => super::iggy::IggyTarget::parse(url)
                .map_or_else(|_| "an Iggy server".to_owned(), |t| t.describe()),
            #[cfg(feature = "kafka")]
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
            #[cfg(feature = "embedded")]
            LogSpec::Embedded(path) => {
                // A local directory: nothing to connect to within `limit`.
                let _ = limit;
                Ok(Arc::new(super::embedded::EmbeddedLog::open_existing(path)?))
            }
            #[cfg(any(feature = "iggy", feature = "kafka"))]
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
            #[cfg(feature = "embedded")]
            LogSpec::Embedded(path) => {
                // A local directory: nothing to connect to within `limit`.
                let _ = limit;
                Arc::new(super::embedded::EmbeddedLog::open(path)?)
            }
            #[cfg(feature = "iggy")]
            LogSpec::Iggy { .. } => {
                Arc::new(super::iggy::IggyLog::connect_within(&self.to_string(), limit).await?)
            }
            #[cfg(feature = "kafka")]
            LogSpec::Kafka(url) => {
                Arc::new(super::kafka::KafkaLog::connect_within(url, limit).await?)
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whichever features this build has: a spec for a backend built in
    /// parses, one for a backend left out says which feature builds it in.
    #[test]
    fn a_spec_for_a_backend_left_out_names_the_feature_that_builds_it_in() {
        for (spec, feature, built_in) in [
            ("embedded:.agdx", "embedded", cfg!(feature = "embedded")),
            (
                "iggy://iggy:iggy@127.0.0.1:8090",
                "iggy",
                cfg!(feature = "iggy"),
            ),
            ("kafka://127.0.0.1:9092", "kafka", cfg!(feature = "kafka")),
        ] {
            match spec.parse::<LogSpec>() {
                Ok(parsed) => {
                    assert!(built_in, "{spec} parsed without its feature");
                    assert_eq!(parsed.to_string(), spec);
                }
                Err(error @ LogSpecError::NotBuiltIn { .. }) => {
                    assert!(!built_in, "{spec} refused with its feature: {error}");
                    let text = error.to_string();
                    assert!(text.contains(&format!("`{feature}` feature")), "{text}");
                }
                Err(other) => panic!("{spec}: {other}"),
            }
        }
        assert!(matches!(
            "redis://x".parse::<LogSpec>(),
            Err(LogSpecError::Unknown(_))
        ));
    }
}
