//! The AXON envelope: one JSON object per QUIC stream (AXON
//! MESSAGE_TYPES.md, WIRE_FORMAT.md §5–6).
//!
//! ```json
//! {"id":"<uuid v4>","kind":"request","payload":{...},"ref":"<uuid>"}
//! ```
//!
//! Parsing follows the reference implementation's rules exactly, so the
//! bridge accepts what an AXON daemon accepts and drops what it drops:
//!
//! - at most [`MAX_MESSAGE_SIZE`] bytes;
//! - one JSON object (trailing bytes other than whitespace refused, a
//!   field given twice refused, unknown fields ignored);
//! - `id` a UUID; `kind` a string, and a kind other than the four known
//!   ones parses as [`Kind::Unknown`]; `ref` absent, `null` or a UUID;
//!   `payload` any JSON value (its bytes are kept verbatim); `from` and
//!   `to`, which are not on the wire but which the reference tolerates,
//!   absent, `null` or strings.
//!
//! [`Envelope::validate`] then checks what the reference checks before a
//! message is acted on: a non-nil, version-4 `id` and an object `payload`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use uuid::Uuid;

/// The largest message, in bytes, that is sent or read (64 KiB).
pub const MAX_MESSAGE_SIZE: usize = 65_536;

/// What a message is, which also says which stream carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// Asks for a `response` or `error`, on a bidirectional stream.
    Request,
    /// Answers a request.
    Response,
    /// Fire and forget, on a unidirectional stream.
    Message,
    /// Answers a request with a failure, or reports one unsolicited.
    Error,
    /// A kind this version does not know (a later protocol's).
    #[serde(other)]
    Unknown,
}

impl Kind {
    /// The kind's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Request => "request",
            Kind::Response => "response",
            Kind::Message => "message",
            Kind::Error => "error",
            Kind::Unknown => "unknown",
        }
    }
}

/// An AXON message.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// The message id, a UUID v4.
    pub id: Uuid,
    /// What the message is.
    pub kind: Kind,
    /// The request a reply answers.
    #[serde(rename = "ref", default, skip_serializing_if = "Option::is_none")]
    pub reference: Option<Uuid>,
    /// The application's JSON, byte for byte as it came.
    pub payload: Box<RawValue>,
    /// Tolerated on input, never sent.
    #[serde(rename = "from", default, skip_serializing)]
    _from: Option<String>,
    /// Tolerated on input, never sent.
    #[serde(rename = "to", default, skip_serializing)]
    _to: Option<String>,
}

/// Why bytes are not an acceptable AXON message.
#[derive(Debug, thiserror::Error)]
pub enum EnvelopeError {
    /// Over the size limit.
    #[error(
        "the message is {0} bytes, over AXON's limit of {MAX_MESSAGE_SIZE} bytes; send less per message"
    )]
    TooLarge(usize),
    /// Not JSON, or not the envelope's shape.
    #[error(
        "the message is not an AXON envelope ({0}); send one JSON object with id (uuid), kind, payload (object) and an optional ref (uuid)"
    )]
    Json(#[from] serde_json::Error),
    /// The id is the nil UUID.
    #[error("message id must be non-nil; use a fresh UUID v4")]
    NilId,
    /// The id is a UUID of another version.
    #[error("message id must be UUID v4, got version {0}; use a fresh random UUID")]
    NotV4(usize),
    /// The payload is not a JSON object.
    #[error("payload must be a JSON object, e.g. {{\"message\":\"...\"}}")]
    PayloadNotObject,
}

impl EnvelopeError {
    /// Whether sending the same bytes again may pass (never).
    pub fn is_retryable(&self) -> bool {
        match self {
            EnvelopeError::TooLarge(_) => false,
            EnvelopeError::Json(_) => false,
            EnvelopeError::NilId => false,
            EnvelopeError::NotV4(_) => false,
            EnvelopeError::PayloadNotObject => false,
        }
    }
}

impl Envelope {
    /// A new message of `kind` with a fresh id.
    pub fn new(kind: Kind, payload: Box<RawValue>) -> Self {
        Self {
            id: Uuid::new_v4(),
            kind,
            reference: None,
            payload,
            _from: None,
            _to: None,
        }
    }

    /// A reply of `kind` (`response` or `error`) to the request `request`.
    pub fn reply(request: Uuid, kind: Kind, payload: Box<RawValue>) -> Self {
        Self {
            reference: Some(request),
            ..Self::new(kind, payload)
        }
    }

    /// An `error` reply to `request` with the conventional payload
    /// `{code, message, retryable}`.
    pub fn error_reply(request: Uuid, code: &str, message: &str, retryable: bool) -> Self {
        let payload = serde_json::json!({
            "code": code,
            "message": message,
            "retryable": retryable,
        });
        Self::reply(request, Kind::Error, to_raw(&payload))
    }

    /// Parses one message, refusing what the reference refuses.
    pub fn decode(bytes: &[u8]) -> Result<Self, EnvelopeError> {
        if bytes.len() > MAX_MESSAGE_SIZE {
            return Err(EnvelopeError::TooLarge(bytes.len()));
        }
        Ok(serde_json::from_slice(bytes)?)
    }

    /// The checks made before a message is acted on: a non-nil UUID v4 id
    /// and an object payload.
    pub fn validate(&self) -> Result<(), EnvelopeError> {
        if self.id.is_nil() {
            return Err(EnvelopeError::NilId);
        }
        if self.id.get_version() != Some(uuid::Version::Random) {
            return Err(EnvelopeError::NotV4(self.id.get_version_num()));
        }
        if !is_object(&self.payload) {
            return Err(EnvelopeError::PayloadNotObject);
        }
        Ok(())
    }

    /// The wire bytes: compact JSON, `ref` only when set.
    pub fn encode(&self) -> Result<Vec<u8>, EnvelopeError> {
        let bytes = serde_json::to_vec(self)?;
        if bytes.len() > MAX_MESSAGE_SIZE {
            return Err(EnvelopeError::TooLarge(bytes.len()));
        }
        Ok(bytes)
    }
}

/// Whether a JSON value is an object.
pub fn is_object(value: &RawValue) -> bool {
    value.get().trim_start().starts_with('{')
}

/// A JSON value as raw JSON.
pub(crate) fn to_raw(value: &serde_json::Value) -> Box<RawValue> {
    serde_json::value::to_raw_value(value)
        .unwrap_or_else(|_| unreachable!("a serde_json::Value always serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "7d0b4a1e-5c2f-4b7e-9a3d-1f2e3d4c5b6a";

    fn decoded(text: &str) -> Result<Envelope, EnvelopeError> {
        Envelope::decode(text.as_bytes())
    }

    #[test]
    fn ref_may_be_absent_null_or_a_uuid() {
        for text in [
            format!(r#"{{"id":"{ID}","kind":"response","payload":{{}}}}"#),
            format!(r#"{{"id":"{ID}","kind":"response","payload":{{}},"ref":null}}"#),
        ] {
            assert_eq!(decoded(&text).unwrap().reference, None);
        }
        let with = format!(r#"{{"id":"{ID}","kind":"response","payload":{{}},"ref":"{ID}"}}"#);
        assert_eq!(decoded(&with).unwrap().reference, Some(ID.parse().unwrap()));
        let bad = format!(r#"{{"id":"{ID}","kind":"response","payload":{{}},"ref":"nope"}}"#);
        assert!(decoded(&bad).is_err());
    }

    #[test]
    fn unknown_kinds_parse_as_unknown_and_non_string_kinds_do_not_parse() {
        let future = format!(r#"{{"id":"{ID}","kind":"negotiate","payload":{{}}}}"#);
        assert_eq!(decoded(&future).unwrap().kind, Kind::Unknown);
        let number = format!(r#"{{"id":"{ID}","kind":7,"payload":{{}}}}"#);
        assert!(decoded(&number).is_err());
    }

    #[test]
    fn the_payload_is_kept_byte_for_byte() {
        let payload = r#"{ "b" : 1.50, "a":"\u00e9" }"#;
        let text = format!(r#"{{"id":"{ID}","kind":"request","payload":{payload}}}"#);
        assert_eq!(decoded(&text).unwrap().payload.get(), payload);
    }

    #[test]
    fn what_the_reference_refuses_is_refused() {
        let cases = [
            "not json".to_owned(),
            format!(r#"{{"id":"{ID}","kind":"request"}}"#),
            r#"{"kind":"request","payload":{}}"#.to_owned(),
            r#"{"id":"x","kind":"request","payload":{}}"#.to_owned(),
            format!(r#"{{"id":"{ID}","id":"{ID}","kind":"request","payload":{{}}}}"#),
            format!(r#"{{"id":"{ID}","kind":"request","payload":{{}}}} trailing"#),
            format!(r#"{{"id":"{ID}","kind":"request","payload":{{}},"from":5}}"#),
        ];
        for text in cases {
            assert!(decoded(&text).is_err(), "accepted {text}");
        }
        let extra = format!(r#"{{"id":"{ID}","kind":"request","payload":{{}},"x":[1],"to":null}}"#);
        assert!(decoded(&extra).is_ok(), "unknown fields are ignored");
    }

    #[test]
    fn validation_wants_a_v4_id_and_an_object_payload() {
        let ok = decoded(&format!(
            r#"{{"id":"{ID}","kind":"request","payload":{{}}}}"#
        ))
        .unwrap();
        ok.validate().unwrap();
        let nil = decoded(
            r#"{"id":"00000000-0000-0000-0000-000000000000","kind":"request","payload":{}}"#,
        )
        .unwrap();
        assert!(matches!(nil.validate(), Err(EnvelopeError::NilId)));
        let v1 = decoded(
            r#"{"id":"7d0b4a1e-5c2f-1b7e-9a3d-1f2e3d4c5b6a","kind":"request","payload":{}}"#,
        )
        .unwrap();
        assert!(matches!(v1.validate(), Err(EnvelopeError::NotV4(1))));
        let list = decoded(&format!(
            r#"{{"id":"{ID}","kind":"request","payload":[1]}}"#
        ))
        .unwrap();
        assert!(matches!(
            list.validate(),
            Err(EnvelopeError::PayloadNotObject)
        ));
    }

    #[test]
    fn size_is_capped_both_ways() {
        let filler = "x".repeat(MAX_MESSAGE_SIZE);
        let big = format!(r#"{{"id":"{ID}","kind":"request","payload":{{"f":"{filler}"}}}}"#);
        assert!(matches!(decoded(&big), Err(EnvelopeError::TooLarge(_))));
        let raw = to_raw(&serde_json::json!({ "f": filler }));
        let envelope = Envelope::new(Kind::Message, raw);
        assert!(matches!(envelope.encode(), Err(EnvelopeError::TooLarge(_))));
    }

    fn round_trips(bytes: &[u8]) {
        let Ok(envelope) = Envelope::decode(bytes) else {
            return;
        };
        let again = Envelope::decode(&envelope.encode().expect("what decoded encodes"))
            .expect("what was encoded decodes");
        assert_eq!(
            (again.id, again.kind, again.reference, again.payload.get()),
            (
                envelope.id,
                envelope.kind,
                envelope.reference,
                envelope.payload.get()
            )
        );
        let _ = envelope.validate();
    }

    proptest::proptest! {
        #[test]
        fn hostile_bytes_never_panic_and_what_decodes_round_trips(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)
        ) {
            round_trips(&bytes);
        }

        #[test]
        fn envelope_shaped_json_round_trips(
            id in proptest::prelude::any::<u128>(),
            kind in "[a-z_]{0,9}",
            reference in proptest::option::of(proptest::prelude::any::<u128>()),
            payload in "[ -~]{0,40}",
        ) {
            let reference = match reference {
                Some(r) => format!(r#","ref":"{}""#, Uuid::from_u128(r)),
                None => String::new(),
            };
            let text = format!(
                r#"{{"id":"{}","kind":"{kind}","payload":{payload}{reference}}}"#,
                Uuid::from_u128(id)
            );
            round_trips(text.as_bytes());
            let object = format!(
                r#"{{"id":"{}","kind":"{kind}","payload":{{"k":{}}}{reference}}}"#,
                Uuid::from_u128(id),
                serde_json::Value::String(payload)
            );
            round_trips(object.as_bytes());
        }
    }

    #[test]
    fn encoding_omits_ref_when_unset_and_keeps_the_field_order() {
        let message = Envelope::new(Kind::Message, to_raw(&serde_json::json!({"a": 1})));
        let text = String::from_utf8(message.encode().unwrap()).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"id":"{}","kind":"message","payload":{{"a":1}}}}"#,
                message.id
            )
        );
        let reply = Envelope::error_reply(ID.parse().unwrap(), "unhandled", "no", false);
        let text = String::from_utf8(reply.encode().unwrap()).unwrap();
        assert!(
            text.contains(&format!(r#""kind":"error","ref":"{ID}","payload":"#)),
            "{text}"
        );
    }
}
