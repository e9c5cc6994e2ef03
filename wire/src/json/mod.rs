//! The JSON view of wire payloads (feature `json`), as `agdx wire decode` /
//! `encode` print and read it.
//!
//! Ids are their 26-character text, log positions `stream/topic/partition/
//! offset`, dictionaries their names (a number when the code is unknown).
//!
//! Whether bytes print as text or hex is decided by the field, never guessed
//! from the value alone, so JSON → payload → JSON and payload → JSON →
//! payload are both exact:
//! - digests and keys (a signature's `key_id` and `bytes`, a BodyRef's
//!   `sha256`) are always a lowercase hex string;
//! - opaque content (an envelope `body`, a dead letter's `payload`, a
//!   snapshot's `state`) is a JSON string when it is UTF-8 text without
//!   control characters other than tab, newline and carriage return, and
//!   `{"hex": "..."}` otherwise; a string reads back as its UTF-8 bytes.
//!
//! A dead letter's payload and an error envelope's body are shown decoded
//! when they decode and re-encode to the same bytes. Objects keep their key
//! order (`serde_json` with `preserve_order`), so metadata order, and thus
//! the bytes, survives a round trip; [`from_str`] refuses a key repeated in
//! one object rather than keep one of its values.
//!
//! ```
//! use agdx_wire::json::{JsonCodec, from_str};
//! use agdx_wire::{AgentEnvelope, AgentId, ConversationId, RecordId};
//! let event = AgentEnvelope::event(
//!     RecordId::from_u128(1),
//!     ConversationId::from_u128(2),
//!     AgentId::new("ledger")?,
//!     b"paid".to_vec(),
//! );
//! let text = serde_json::to_string(&event.to_json())?;
//! assert!(text.starts_with(r#"{"kind":"event","record":"#));
//! assert_eq!(AgentEnvelope::from_json(from_str(&text)?)?, event);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod error;
pub(crate) mod scalar;
mod strict;
pub(crate) mod value;

pub use error::JsonError;
pub use serde_json::{Map, Value};
pub use strict::{from_slice, from_str};

use crate::payload::WirePayload;

/// A payload with a JSON view: the envelope and every capsule.
pub trait JsonCodec: WirePayload {
    /// The JSON view of the payload.
    fn to_json(&self) -> Value;
    /// Reads the JSON view back; unknown fields are an error, so a typo
    /// never silently drops data. The result is not validated.
    fn from_json(json: Value) -> Result<Self, JsonError>;
}

/// Opaque bytes as the view shows them: a string when they are readable
/// UTF-8 text, else `{"hex": "..."}`.
pub fn bytes_to_json(bytes: &[u8]) -> Value {
    value::bytes_json(bytes)
}
