//! The embedded log: a durable, multi-process log in one local directory.

use std::path::Path;

use super::LogError;

/// The embedded log backend.
pub struct EmbeddedLog;

impl EmbeddedLog {
    /// Opens (creating when needed) the embedded log in directory `path`.
    pub fn open(_path: &Path) -> Result<Self, LogError> {
        Err(LogError::Storage("the embedded log is not built yet".into()))
    }
}
