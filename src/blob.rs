//! Blob stores hold the bytes of claim-checked bodies.
//!
//! A body larger than the claim-check threshold is written to a blob store
//! and the envelope carries a BodyRef (reference, size, SHA-256) instead. The
//! default store is a local directory, content-addressed by SHA-256, shared by
//! every process on the machine that uses the same directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

/// What went wrong storing or fetching a blob.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// The reference is not one this store understands.
    #[error(
        "blob reference {0:?} is not a reference of this store (expected `blob:sha256:<64 hex digits>`)"
    )]
    UnknownReference(String),
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
    /// Reading or writing the store failed.
    #[error("blob store at {dir}: {source}")]
    Io {
        /// The store's directory.
        dir: PathBuf,
        /// What the file system reported.
        #[source]
        source: std::io::Error,
    },
}

impl BlobError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            BlobError::UnknownReference(_) => false,
            BlobError::NotFound { .. } => false,
            BlobError::Io { .. } => true,
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

/// A blob store in a local directory: one file per blob, named by its SHA-256.
///
/// Writes go to a temporary file that is synced and renamed into place, so a
/// crash never leaves a half-written blob under a real name.
#[derive(Debug, Clone)]
pub struct DirBlobStore {
    dir: PathBuf,
}

const REFERENCE_PREFIX: &str = "blob:sha256:";

impl DirBlobStore {
    /// A store in `dir` (created on first write).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory the blobs are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file behind a reference, when the reference is well-formed.
    pub fn path_of(&self, reference: &str) -> Result<PathBuf, BlobError> {
        let hex = reference
            .strip_prefix(REFERENCE_PREFIX)
            .filter(|h| {
                h.len() == 64
                    && h.bytes()
                        .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
            })
            .ok_or_else(|| BlobError::UnknownReference(reference.to_owned()))?;
        Ok(self.dir.join(hex))
    }

    fn io(&self, source: std::io::Error) -> BlobError {
        BlobError::Io {
            dir: self.dir.clone(),
            source,
        }
    }
}

#[async_trait]
impl BlobStore for DirBlobStore {
    async fn put(&self, bytes: Vec<u8>, sha256: [u8; 32]) -> Result<String, BlobError> {
        let reference = format!("{REFERENCE_PREFIX}{}", hex::encode(sha256));
        let path = self.path_of(&reference)?;
        let dir = self.dir.clone();
        tokio::task::spawn_blocking(move || -> std::io::Result<()> {
            if path.exists() {
                return Ok(());
            }
            std::fs::create_dir_all(&dir)?;
            // A temporary file is removed if anything below fails.
            let mut tmp = tempfile::NamedTempFile::new_in(&dir)?;
            tmp.write_all(&bytes)?;
            tmp.as_file().sync_all()?;
            tmp.persist(&path).map_err(|e| e.error)?;
            // The rename is durable only once the directory is synced.
            std::fs::File::open(&dir)?.sync_all()
        })
        .await
        .map_err(|e| self.io(std::io::Error::other(e)))?
        .map_err(|e| self.io(e))?;
        Ok(reference)
    }

    async fn get(&self, reference: &str) -> Result<Vec<u8>, BlobError> {
        let path = self.path_of(reference)?;
        match tokio::fs::read(&path).await {
            Ok(bytes) => Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(BlobError::NotFound {
                reference: reference.to_owned(),
                dir: self.dir.clone(),
            }),
            Err(e) => Err(self.io(e)),
        }
    }
}
