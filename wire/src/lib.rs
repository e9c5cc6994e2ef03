//! The AGDX wire contract, free of any runtime: ids, the agent envelope,
//! capsules, dictionaries, validation, Iggy headers and the signing input.

mod header;
mod position;

pub use header::{HeaderKind, HeaderValue, Headers};
pub use position::{LOG_POSITION_LEN, LogPosition, PositionError};
