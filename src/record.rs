//! Reading agent records: the envelope and what the headers say about it.

use agdx_wire::{
    AgentEnvelope, ContentType, HEADER_CONTENT_TYPE, HEADER_WIRE_VERSION, HeaderName, HeaderValue,
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

/// Why an agent record's envelope was not read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    /// The `agdx.av` header names another wire version: the payload was not
    /// decoded, since its bytes may mean something else there.
    #[error(
        "the record's `{HEADER_WIRE_VERSION}` header says wire version {found}; this runtime reads wire version {WIRE_VERSION} only, so the payload was not decoded"
    )]
    UnsupportedVersion {
        /// The version the header names.
        found: u32,
    },
    /// The `agdx.av` header is not a u32.
    #[error(
        "the record's `{HEADER_WIRE_VERSION}` header is a {kind} of {len} byte(s), not the u32 wire version; the payload was not decoded"
    )]
    VersionNotU32 {
        /// The header's kind, by name.
        kind: &'static str,
        /// How many bytes its value has.
        len: usize,
    },
    /// The payload is not a valid envelope.
    #[error(transparent)]
    Wire(#[from] WireError),
}

/// Reads the wire version header, then decodes and validates the envelope
/// an agent record carries. A record without the header is read as version
/// [`WIRE_VERSION`].
pub fn envelope_of(record: &LogRecord) -> Result<AgentEnvelope, RecordError> {
    let version = record
        .headers
        .iter()
        .find(|(key, _)| key == HEADER_WIRE_VERSION)
        .map(|(_, value)| {
            value.as_u32().ok_or(RecordError::VersionNotU32 {
                kind: value.kind.name(),
                len: value.bytes.len(),
            })
        })
        .transpose()?;
    match version {
        Some(found) if found != WIRE_VERSION => Err(RecordError::UnsupportedVersion { found }),
        _ => Ok(AgentEnvelope::decode_valid_shared(&record.payload)?),
    }
}

/// A record carrying a CBOR capsule (dead letter, fold snapshot): the
/// content-type and wire-version headers, and the encoded capsule.
pub(crate) fn capsule_record(payload: Vec<u8>) -> OutgoingRecord {
    let headers = vec![
        (
            HeaderName::Borrowed(HEADER_CONTENT_TYPE),
            HeaderValue::u8(ContentType::Cbor.code()),
        ),
        (
            HeaderName::Borrowed(HEADER_WIRE_VERSION),
            HeaderValue::u32(WIRE_VERSION),
        ),
    ];
    OutgoingRecord {
        headers,
        payload: payload.into(),
    }
}

#[cfg(test)]
mod tests {
    use agdx_wire::{AgentId, ConversationId, LogPosition, RecordId, record_headers};

    use super::*;

    fn record(version: Option<HeaderValue>) -> LogRecord {
        let event = AgentEnvelope::event(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            AgentId::new("ledger").unwrap(),
            b"paid".to_vec(),
        );
        let mut headers = record_headers(&event, ContentType::Raw);
        headers.retain(|(key, _)| key != HEADER_WIRE_VERSION);
        if let Some(value) = version {
            headers.push((HEADER_WIRE_VERSION.into(), value));
        }
        LogRecord {
            position: "1/2/0/7".parse::<LogPosition>().unwrap(),
            timestamp_micros: 0,
            headers,
            payload: event.encode().into(),
        }
    }

    #[test]
    fn the_wire_version_header_is_read_before_the_payload() {
        assert!(envelope_of(&record(Some(HeaderValue::u32(WIRE_VERSION)))).is_ok());
        // Records without the header read as the current version.
        assert!(envelope_of(&record(None)).is_ok());

        let err = envelope_of(&record(Some(HeaderValue::u32(2)))).unwrap_err();
        assert_eq!(err, RecordError::UnsupportedVersion { found: 2 });
        assert!(
            err.to_string()
                .starts_with("the record's `agdx.av` header says wire version 2; "),
            "{err}"
        );
        let err = envelope_of(&record(Some(HeaderValue::string("1")))).unwrap_err();
        assert_eq!(
            err,
            RecordError::VersionNotU32 {
                kind: "string",
                len: 1
            }
        );
    }

    /// A handler's body is the record's bytes, not a copy of them: a large
    /// body is read once off the log and never copied on the way in.
    #[test]
    fn the_envelope_body_shares_the_record_payload() {
        let record = record(None);
        let envelope = envelope_of(&record).unwrap();
        assert_eq!(envelope.body, b"paid"[..]);
        assert!(
            record
                .payload
                .as_ptr_range()
                .contains(&envelope.body.as_ptr()),
            "the body was copied out of the payload"
        );
    }
}
