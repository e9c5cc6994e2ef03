//! Choosing a backend from a log spec (`--log` / `AGDX_LOG`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

/// Which log to use, as written on the command line or in `AGDX_LOG`.
///
/// ```
/// use agdx::log::LogSpec;
/// let spec: LogSpec = "embedded:.agdx".parse().unwrap();
/// assert_eq!(spec, LogSpec::Embedded(".agdx".into()));
/// assert!("iggy://iggy:iggy@127.0.0.1:8090".parse::<LogSpec>().is_ok());
/// assert!("kafka://x".parse::<LogSpec>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogSpec {
    /// The embedded log in a local directory.
    Embedded(PathBuf),
    /// An Apache Iggy server, by its `iggy://USER:PASSWORD@HOST:PORT` connection string.
    Iggy(String),
}

/// The default log: the embedded log in `./.agdx`.
pub const DEFAULT_LOG: &str = "embedded:.agdx";

/// A log spec that is neither `embedded:PATH` nor `iggy://...`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown log {0:?}: use `embedded:PATH` (a local directory, e.g. embedded:.agdx) or `iggy://USER:PASSWORD@HOST:PORT` (e.g. iggy://iggy:iggy@127.0.0.1:8090)"
)]
pub struct LogSpecError(String);

impl FromStr for LogSpec {
    type Err = LogSpecError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(path) = s.strip_prefix("embedded:") {
            if path.is_empty() {
                return Err(LogSpecError(s.to_owned()));
            }
            Ok(LogSpec::Embedded(PathBuf::from(path)))
        } else if s.starts_with("iggy://") {
            Ok(LogSpec::Iggy(s.to_owned()))
        } else {
            Err(LogSpecError(s.to_owned()))
        }
    }
}

impl fmt::Display for LogSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogSpec::Embedded(path) => write!(f, "embedded:{}", path.display()),
            LogSpec::Iggy(url) => f.write_str(url),
        }
    }
}

impl LogSpec {
    /// Opens the log this spec names.
    pub async fn open(&self) -> Result<super::SharedLog, super::LogError> {
        Ok(match self {
            LogSpec::Embedded(path) => {
                std::sync::Arc::new(super::embedded::EmbeddedLog::open(path)?)
            }
            LogSpec::Iggy(url) => Arc::new(super::iggy::IggyLog::connect(url).await?),
        })
    }
}
