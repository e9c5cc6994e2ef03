//! Which blob store to use, as text: `log`, `dir:PATH` (or a plain path),
//! or an object store URL such as `s3://bucket/prefix`.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use super::{BlobStore, DirBlobStore, LogBlobStore};
use crate::log::SharedLog;
use crate::topology::TopologyConfig;

/// The URL schemes of object stores (as the `object_store` crate reads them).
const OBJECT_SCHEMES: &[&str] = &[
    "s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "file",
];

/// A blob store, as `--blobs` (or `AGDX_BLOBS`) names it.
///
/// ```
/// use agdx::BlobSpec;
/// assert_eq!("log".parse::<BlobSpec>().ok(), Some(BlobSpec::Log));
/// assert_eq!("dir:/var/blobs".parse::<BlobSpec>().ok(), Some(BlobSpec::Dir("/var/blobs".into())));
/// assert_eq!("./blobs".parse::<BlobSpec>().ok(), Some(BlobSpec::Dir("./blobs".into())));
/// assert!(matches!("s3://bucket/agdx".parse::<BlobSpec>(), Ok(BlobSpec::Object(_))));
/// assert!("ftp://host/x".parse::<BlobSpec>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BlobSpec {
    /// Chunked records on the blob topic of the log ([`LogBlobStore`]):
    /// every host with the log reads them.
    Log,
    /// A local directory ([`DirBlobStore`]): the processes of one machine.
    Dir(PathBuf),
    /// An object store URL: `s3://bucket/prefix`, `gs://bucket/prefix`,
    /// `az://container/prefix`, `file:///path` (feature
    /// `blobs-object-store`). Settings and credentials come from the
    /// environment: `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`,
    /// `AWS_REGION`, `AWS_ENDPOINT_URL`, `AWS_ALLOW_HTTP` for S3, and the
    /// `GOOGLE_*` and `AZURE_*` variables for the others.
    Object(String),
}

/// A blob store that cannot be named or opened.
#[derive(Debug, thiserror::Error)]
pub enum BlobSpecError {
    /// Not one of the forms.
    #[error(
        "unknown blob store {0:?}: use `log` (records on the log itself, which every host reads), `dir:PATH` or a path (a local directory), or an object store URL (s3://bucket/prefix, gs://bucket/prefix, az://container/prefix, file:///path)"
    )]
    Unknown(String),
    /// An object store URL in a build without object store support.
    #[error(
        "{0:?} is an object store, which this build of agdx leaves out: build agdx with its `blobs-object-store` feature (the `cli` feature includes it)"
    )]
    NotBuiltIn(String),
    /// The object store would not open (a malformed URL, a missing
    /// setting).
    #[cfg(feature = "blobs-object-store")]
    #[error("cannot open the object store {url}: {source}")]
    Object {
        /// The URL as given.
        url: String,
        /// What the object store reported.
        #[source]
        source: object_store::Error,
    },
    /// The local directory of a `file://` store cannot be made.
    #[error("cannot make the blob directory {dir}: {source}")]
    Dir {
        /// The directory.
        dir: PathBuf,
        /// What the file system reported.
        #[source]
        source: std::io::Error,
    },
}

impl BlobSpec {
    /// The store a log uses unless told otherwise: the embedded log keeps
    /// blobs in `blobs/` inside its directory (one machine reads it
    /// anyway); Iggy and Kafka, on their own log ([`BlobSpec::Log`]), so
    /// every host reads them.
    #[cfg(any(feature = "embedded", feature = "iggy", feature = "kafka"))]
    pub fn default_for(log: &crate::log::LogSpec) -> Self {
        match log {
            #[cfg(feature = "embedded")]
            crate::log::LogSpec::Embedded(path) => BlobSpec::Dir(path.join("blobs")),
            #[allow(unreachable_patterns)]
            _ => BlobSpec::Log,
        }
    }

    /// Opens the store on `log`, whose blob topic (for [`BlobSpec::Log`])
    /// is that of `topology`.
    pub fn open(
        &self,
        log: &SharedLog,
        topology: &TopologyConfig,
    ) -> Result<Arc<dyn BlobStore>, BlobSpecError> {
        match self {
            BlobSpec::Log => Ok(Arc::new(LogBlobStore::new(log.clone(), topology))),
            BlobSpec::Dir(dir) => Ok(Arc::new(DirBlobStore::new(dir))),
            #[cfg(feature = "blobs-object-store")]
            BlobSpec::Object(url) => Ok(Arc::new(super::ObjectBlobStore::open(url)?)),
            #[cfg(not(feature = "blobs-object-store"))]
            BlobSpec::Object(url) => Err(BlobSpecError::NotBuiltIn(url.clone())),
        }
    }
}

impl FromStr for BlobSpec {
    type Err = BlobSpecError;

    fn from_str(text: &str) -> Result<Self, BlobSpecError> {
        if text == "log" {
            return Ok(BlobSpec::Log);
        }
        if let Some((scheme, rest)) = text.split_once("://") {
            return if OBJECT_SCHEMES.contains(&scheme) && !rest.is_empty() {
                Ok(BlobSpec::Object(text.to_owned()))
            } else {
                Err(BlobSpecError::Unknown(text.to_owned()))
            };
        }
        let path = text.strip_prefix("dir:").unwrap_or(text);
        if path.is_empty() {
            return Err(BlobSpecError::Unknown(text.to_owned()));
        }
        Ok(BlobSpec::Dir(PathBuf::from(path)))
    }
}

impl fmt::Display for BlobSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BlobSpec::Log => f.write_str("log"),
            BlobSpec::Dir(dir) => write!(f, "dir:{}", dir.display()),
            BlobSpec::Object(url) => f.write_str(url),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_form_reads_back_as_written() {
        for text in [
            "log",
            "dir:/tmp/b",
            "s3://bucket/p",
            "file:///tmp/x",
            "az://c/p",
        ] {
            assert_eq!(text.parse::<BlobSpec>().expect(text).to_string(), text);
        }
        assert_eq!(
            "blobs".parse::<BlobSpec>().expect("a path").to_string(),
            "dir:blobs"
        );
    }

    #[test]
    fn unknown_forms_are_refused_with_the_forms_named() {
        for text in ["", "dir:", "ftp://h/x", "s3://"] {
            let error = text.parse::<BlobSpec>().expect_err(text).to_string();
            assert!(
                error.contains("s3://bucket/prefix") && error.contains("`log`"),
                "{error}"
            );
        }
    }
}
