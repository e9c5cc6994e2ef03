//! Reading agent records: the envelope and what the headers say about it.

use agdx_wire::{
    AgentEnvelope, ContentType, HEADER_CONTENT_TYPE, HEADER_WIRE_VERSION, HeaderValue,
    WIRE_VERSION, WireError,
};

use crate::log::{LogRecord, OutgoingRecord};

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

/// A record carrying a CBOR capsule (dead letter, fold snapshot): the
/// content-type and wire-version headers, and the encoded capsule.
pub(crate) fn capsule_record(payload: Vec<u8>) -> OutgoingRecord {
    let headers = vec![
        (
            HEADER_CONTENT_TYPE.to_owned(),
            HeaderValue::u8(ContentType::Cbor.code()),
        ),
        (
            HEADER_WIRE_VERSION.to_owned(),
            HeaderValue::u32(WIRE_VERSION),
        ),
    ];
    OutgoingRecord { headers, payload }
}
