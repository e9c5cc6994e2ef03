//! The Apache Iggy binding of the log port.

use super::LogError;

/// The Iggy backend.
pub struct IggyLog;

impl IggyLog {
    /// Connects to `iggy://USER:PASSWORD@HOST:PORT`.
    pub async fn connect(_url: &str) -> Result<Self, LogError> {
        Err(LogError::Backend("the Iggy binding is not built yet".into()))
    }
}
