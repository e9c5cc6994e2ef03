//! The six envelope kinds.

use std::fmt;
use std::str::FromStr;

/// What an envelope is; decides which fields it must, may and must not carry.
/// The set is closed: any other `kind` text is a decode error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    /// A request that expects a reply (always correlated).
    Command,
    /// The reply to a command.
    Response,
    /// A fact, fire-and-forget.
    Event,
    /// One piece of a stream, grouped by channel and ordered by sequence.
    Chunk,
    /// Task progress, agent cards and control facts.
    Status,
    /// A failed request (or stream), with an `ErrorBody`.
    Error,
}

/// Text that is not one of the six kinds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown envelope kind {0:?}; the kinds are command, response, event, chunk, status and error"
)]
pub struct UnknownKindError(pub String);

impl Kind {
    /// All kinds, in the contract's order.
    pub const ALL: [Kind; 6] = [
        Kind::Command,
        Kind::Response,
        Kind::Event,
        Kind::Chunk,
        Kind::Status,
        Kind::Error,
    ];

    /// The wire text.
    pub const fn as_str(self) -> &'static str {
        match self {
            Kind::Command => "command",
            Kind::Response => "response",
            Kind::Event => "event",
            Kind::Chunk => "chunk",
            Kind::Status => "status",
            Kind::Error => "error",
        }
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Kind {
    type Err = UnknownKindError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Kind::ALL
            .into_iter()
            .find(|k| k.as_str() == s)
            .ok_or_else(|| UnknownKindError(s.to_owned()))
    }
}
