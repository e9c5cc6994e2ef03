//! The directory blob store: one file per blob, content-addressed by
//! SHA-256, shared by every process on the machine that uses the same
//! directory.

use std::io::Write;
use std::path::{Path, PathBuf};

use async_trait::async_trait;

use super::{BlobError, BlobStore};

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
