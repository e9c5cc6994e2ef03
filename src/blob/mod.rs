//! Blob stores hold the bytes of claim-checked bodies.
//!
//! A body larger than the claim-check threshold is written to a blob store
//! and the envelope carries a BodyRef (reference, size, SHA-256) instead.
//! Three stores, chosen with a [`BlobSpec`]:
//!
//! - [`DirBlobStore`]: a local directory, content-addressed by SHA-256,
//!   shared by the processes of one machine (the embedded log's default);
//! - [`LogBlobStore`]: chunked records on a blob topic of the same log, so
//!   every host with the log reads them (the default on Iggy and Kafka);
//! - `ObjectBlobStore` (feature `blobs-object-store`): an object store such
//!   as S3, GCS or Azure Blob Storage.

use std::path::PathBuf;

use async_trait::async_trait;

mod dir;
mod log;
#[cfg(feature = "blobs-object-store")]
mod object;
mod spec;

pub use dir::DirBlobStore;
pub use log::{LogBlobRef, LogBlobStore, MAX_BLOB_CHUNK_BYTES, MAX_BLOB_CHUNKS};
#[cfg(feature = "blobs-object-store")]
pub use object::ObjectBlobStore;
pub use spec::{BlobSpec, BlobSpecError};

/// What went wrong storing or fetching a blob.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The reference is not one of the directory store's.
    #[error(
        "blob reference {0:?} is not a reference of this store (expected `blob:sha256:<64 hex digits>`)"
    )]
    UnknownReference(String),
    /// The reference is not one the store can read: the wrong kind, or
    /// malformed.
    #[error("blob reference {reference:?} is not a reference of the {store}: {why}")]
    BadReference {
        /// The reference as given.
        reference: String,
        /// Which store read it, e.g. `log blob store`.
        store: &'static str,
        /// What is wrong and what was expected.
        why: String,
    },
    /// The blob is not in the store.
    #[error(
        "blob {reference} is not in the blob store at {dir}: was the body written to another machine's store?"
    )]
    NotFound {
        /// The reference asked for.
        reference: String,
        /// The store's directory.
        dir: PathBuf,
    },
    /// The blob is not in the object store.
    #[error("blob {reference} is not in {store}: was the body written to another store?")]
    Missing {
        /// The reference asked for.
        reference: String,
        /// The store, e.g. `s3://bucket/prefix`.
        store: String,
    },
    /// The log has no records where the reference points: it was written
    /// to another log.
    #[error(
        "blob {reference} is not on this log ({log}): {why}; was the body written to another log?"
    )]
    NotOnLog {
        /// The reference asked for.
        reference: String,
        /// The log, as it describes itself.
        log: String,
        /// What the log has instead.
        why: String,
    },
    /// The blob's records were on the log and are gone.
    #[error(
        "blob {reference} is no longer on the log (retention?): its records start at offset {first}, and the partition now starts at offset {now_first}"
    )]
    GoneFromLog {
        /// The reference asked for.
        reference: String,
        /// Where the blob's first record was.
        first: u64,
        /// The first offset the partition still holds.
        now_first: u64,
    },
    /// The records where the reference points are not one whole blob.
    #[error("blob {reference} on the log is not a whole blob: {why}")]
    Incomplete {
        /// The reference asked for.
        reference: String,
        /// What is missing or out of place.
        why: String,
    },
    /// A blob larger than the store handles.
    #[error("a blob of {size} bytes is larger than the {store} handles ({limit} bytes)")]
    TooLarge {
        /// The blob's size, in bytes.
        size: u64,
        /// The largest blob the store handles, in bytes.
        limit: u64,
        /// Which store, e.g. `log blob store`.
        store: &'static str,
    },
    /// Reading or writing the store's directory failed.
    #[error("blob store at {dir}: {source}")]
    Io {
        /// The store's directory.
        dir: PathBuf,
        /// What the file system reported.
        #[source]
        source: std::io::Error,
    },
    /// Reading or writing the blob topic failed.
    #[error("blob store on the log, topic {topic}: {source}")]
    Log {
        /// The blob topic.
        topic: String,
        /// What the log reported.
        #[source]
        source: crate::log::LogError,
    },
    /// The object store failed.
    #[cfg(feature = "blobs-object-store")]
    #[error("blob store {store}: {source}")]
    ObjectStore {
        /// The store, e.g. `s3://bucket/prefix`.
        store: String,
        /// What the object store reported.
        #[source]
        source: object_store::Error,
    },
}

impl BlobError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            BlobError::UnknownReference(_) => false,
            BlobError::BadReference { .. } => false,
            BlobError::NotFound { .. } => false,
            BlobError::Missing { .. } => false,
            BlobError::NotOnLog { .. } => false,
            BlobError::GoneFromLog { .. } => false,
            BlobError::Incomplete { .. } => false,
            BlobError::TooLarge { .. } => false,
            BlobError::Io { .. } => true,
            BlobError::Log { source, .. } => source.is_retryable(),
            #[cfg(feature = "blobs-object-store")]
            BlobError::ObjectStore { source, .. } => !matches!(
                source,
                object_store::Error::NotFound { .. }
                    | object_store::Error::InvalidPath { .. }
                    | object_store::Error::PermissionDenied { .. }
                    | object_store::Error::Unauthenticated { .. }
                    | object_store::Error::NotSupported { .. }
                    | object_store::Error::UnknownConfigurationKey { .. }
            ),
        }
    }
}

/// Where claim-checked bodies are kept.
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// Stores `bytes` and returns the reference a BodyRef carries
    /// (1..=1024 bytes of text).
    async fn put(&self, bytes: Vec<u8>, sha256: [u8; 32]) -> Result<String, BlobError>;
    /// Fetches the bytes behind `reference`, unverified (the caller checks
    /// size and digest against the BodyRef).
    async fn get(&self, reference: &str) -> Result<Vec<u8>, BlobError>;
}
