//! Reading agent records: the envelope and what the headers say about it.

use agdx_wire::{AgentEnvelope, ContentType, HEADER_CONTENT_TYPE, WireError};

use crate::log::LogRecord;

/// The content type an agent record's `agdx.ct` header names (`raw` when
/// the header is missing or not a `u8`).
pub fn content_type_of(record: &LogRecord) -> ContentType {
    record
        .headers
        .iter()
        .find(|(key, _)| key == HEADER_CONTENT_TYPE)
        .and_then(|(_, value)| value.as_u8())
        .map_or(ContentType::Raw, ContentType::from_code)
}

/// Decodes and validates the envelope an agent record carries.
pub fn envelope_of(record: &LogRecord) -> Result<AgentEnvelope, WireError> {
    AgentEnvelope::decode_valid(&record.payload)
}
