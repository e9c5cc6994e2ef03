//! IOA's errors: the categories of IOA's protocol (`not_found`,
//! `invalid_input`, `internal`) with the HTTP statuses the reference server
//! answers them with, plus the authentication refusals of its middleware.

use crate::ProduceError;
use crate::log::LogError;

/// Why an IOA request was refused or failed. The message is IOA's
/// `detail`, shown to the client as is.
#[derive(Debug, thiserror::Error)]
pub enum IoaError {
    /// A node, space or message that does not exist (404).
    #[error("{0}")]
    NotFound(String),
    /// The request breaks IOA's rules (422).
    #[error("{0}")]
    InvalidInput(String),
    /// No credentials, or credentials this bridge does not know (401).
    #[error("{0}")]
    Unauthorized(String),
    /// Credentials that do not allow this (403).
    #[error("{0}")]
    Forbidden(String),
    /// A request body over the bridge's limit (413).
    #[error("{0}")]
    TooLarge(String),
    /// Writing to the log failed; nothing was written (500, or 422 when the
    /// record breaks the wire rules).
    #[error("the log refused the record: {0}")]
    Produce(#[from] ProduceError),
    /// The log cannot be read (503 on the health checks, 500 elsewhere).
    #[error("the log cannot be read: {0}")]
    Log(#[from] LogError),
    /// The record was written but has not come back from the log in time,
    /// so the bridge cannot show it yet (500).
    #[error(
        "record {0} was written to the log but has not been read back within {1:?}; it will show up once the log serves it (read again later)"
    )]
    NotReadBack(agdx_wire::RecordId, std::time::Duration),
}

impl IoaError {
    /// The HTTP status the reference answers this with.
    pub fn status(&self) -> u16 {
        match self {
            IoaError::NotFound(_) => 404,
            IoaError::InvalidInput(_) => 422,
            IoaError::Unauthorized(_) => 401,
            IoaError::Forbidden(_) => 403,
            IoaError::TooLarge(_) => 413,
            IoaError::Produce(ProduceError::Invalid(_) | ProduceError::Headers(_)) => 422,
            IoaError::Produce(ProduceError::Log(LogError::RecordTooLarge { .. })) => 413,
            IoaError::Produce(_) => 500,
            IoaError::Log(_) => 500,
            IoaError::NotReadBack(..) => 500,
        }
    }

    /// Whether the same request may succeed later.
    pub fn is_retryable(&self) -> bool {
        match self {
            IoaError::NotFound(_) => false,
            IoaError::InvalidInput(_) => false,
            IoaError::Unauthorized(_) => false,
            IoaError::Forbidden(_) => false,
            IoaError::TooLarge(_) => false,
            IoaError::Produce(e) => e.is_retryable(),
            IoaError::Log(e) => e.is_retryable(),
            IoaError::NotReadBack(..) => true,
        }
    }
}
