//! The AGDX wire contract, free of any runtime: ids, the agent envelope,
//! capsules, dictionaries, validation, Iggy headers and the signing input.
//!
//! Every payload is one CBOR map with text keys, written in declaration
//! order with absent optionals omitted, so decode → validate → re-encode is
//! byte-identical (which is what makes signatures verifiable). No I/O, no
//! clock, no randomness, no cryptography: the runtime mints ids, signs and
//! verifies.
//!
//! ```
//! use agdx_wire::*;
//! let conversation = ConversationId::from_u128(0x0190_3c1f_aa00_0000_0000_0000_0000_0002);
//! let command = AgentEnvelope::command(
//!     RecordId::from_u128(1),
//!     conversation,
//!     AgentId::new("planner")?,
//!     CorrelationId::from_u128(conversation.as_u128()),
//!     Some("summarize"),
//!     b"summarize incident 42".to_vec(),
//! );
//! let bytes = command.encode();
//! let back = AgentEnvelope::decode_valid(&bytes)?;
//! assert_eq!(back.encode(), bytes);
//! assert_eq!(conversation.to_string(), "01J0Y1ZAG00000000000000002");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Layers
//!
//! Modules only reach down, never in a circle (`tests/module_layers.rs`
//! checks it):
//! - at the bottom, the building blocks: `cbor` (the CBOR subset), `error`
//!   (decode errors), ids, kinds, dictionaries, metadata, `validation`, the
//!   vocabulary of broken rules every payload's `validate` speaks, and
//!   (feature `json`) the JSON primitives of `json`;
//! - `table`, on them: `wire_struct!`, which declares each struct-like
//!   payload once, its keys, CBOR codec and JSON view together;
//! - above it, the payloads: the capsules and `envelope`, each one
//!   declaration;
//! - beside the envelope, `matrix`, its validity matrix, which reads the
//!   envelope (the envelope never calls into it); then the constructors
//!   (`build`), the status bodies, the record headers and the signing input.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod agent_id;
mod body;
mod body_ref;
mod build;
mod card;
mod cbor;
mod dead_letter;
mod dictionary;
mod envelope;
mod error;
mod error_body;
mod header;
mod id;
#[cfg(feature = "json")]
pub mod json;
mod kind;
mod matrix;
mod metadata;
mod operation;
mod payload;
mod position;
mod presence;
mod signature;
mod signing;
mod snapshot;
mod status_body;
mod table;
mod usage;
mod validation;

pub use agent_id::{
    AGENT_ID_MAX_LEN, AgentId, AgentIdError, IDEMPOTENCY_KEY_MAX_LEN, IdempotencyKey,
    IdempotencyKeyError,
};
pub use body::IntoBody;
pub use body_ref::{BODY_REF_MAX_LEN, BodyRef};
/// The shared byte buffer an envelope's body is (re-exported from `bytes`).
pub use bytes::Bytes;
pub use card::{AgentCard, CARD_MAX_CAPABILITIES, CapabilityDescriptor, ContentRef};
pub use cbor::MAX_NESTING;
pub use dead_letter::DeadLetter;
pub use dictionary::{
    ContentType, DeadLetterReason, ErrorCode, Health, SignatureScheme, TaskState, UnknownNameError,
};
pub use envelope::AgentEnvelope;
pub use error::DecodeError;
pub use error_body::ErrorBody;
pub use header::{
    AGENT_RECORD_HEADER_KEYS, HEADER_CONTENT_TYPE, HEADER_CONVERSATION, HEADER_FRAMING,
    HEADER_TARGET, HEADER_VALUE_CAP, HEADER_WIRE_VERSION, HEADERS_TOTAL_SOFT_CAP, HeaderBytes,
    HeaderCapError, HeaderKind, HeaderName, HeaderValue, Headers, UnknownHeaderKind, WIRE_VERSION,
    agent_record_header_kind, check_header_caps, header_name, record_headers,
};
pub use id::{
    ChannelId, ConversationId, CorrelationId, ID_LEN, ID_TEXT_LEN, IdLengthError, IdParseError,
    RecordId,
};
pub use kind::{Kind, UnknownKindError};
pub use metadata::{
    Float, Integer, IntegerRangeError, META_BRIDGE_HOPS, META_DATA_CLASSIFICATION, META_FENCE,
    META_ON_BEHALF_OF, META_PURPOSE, META_ROLE, META_RUN, META_SESSION_INTENT, META_TASK_CONTEXT,
    METADATA_MAX_ENTRIES, METADATA_MAX_KEY_LEN, METADATA_MAX_TOTAL_SIZE, METADATA_MAX_VALUE_SIZE,
    MetaKey, Metadata, PinnedShapeError, ROLES, Scalar,
};
pub use operation::{
    EVENT_STATE_DELTA, EVENT_STATE_SNAPSHOT, StatusOperation, StreamPurpose, UnknownOperationError,
};
pub use payload::{WireError, WirePayload};
pub use position::{LOG_POSITION_LEN, LogPosition, PositionError};
pub use presence::{AgentPresence, PRESENCE_VERSION};
pub use signature::{ED25519_KEY_ID_LEN, ED25519_SIGNATURE_LEN, Signature, SignatureContext};
pub use signing::{SIGNING_DOMAIN, signing_input};
pub use snapshot::FoldSnapshot;
pub use status_body::{ControlFact, StatusBodyError};
pub use usage::TokenUsage;
pub use validation::{Reason, Subject, TEXT_FIELD_MAX_LEN, ValidationError};
