//! Why bytes could not be decoded.

use crate::agent_id::{AgentIdError, IdempotencyKeyError};

/// Why a payload could not be decoded. Decoding checks shape (one CBOR item,
/// the right types, required fields present, no duplicate known keys); the
/// per-kind rules are [`ValidationError`](crate::ValidationError)s.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The input ended inside an item (or claims more bytes than it has).
    #[error(
        "the payload is truncated: the input ends inside a CBOR item or claims more bytes than it has"
    )]
    Truncated,
    /// Bytes follow the one item a payload may hold.
    #[error("{count} byte(s) follow the CBOR item; a payload is exactly one item")]
    TrailingBytes {
        /// How many bytes were left over.
        count: usize,
    },
    /// The bytes are not well-formed CBOR.
    #[error("malformed CBOR: {0}")]
    Malformed(&'static str),
    /// An indefinite-length array, map or string.
    #[error(
        "indefinite-length CBOR items are not used on the AGDX wire; encode with definite lengths"
    )]
    IndefiniteLength,
    /// A known field holds the wrong CBOR type.
    #[error("`{field}` must be {expected}, found {found}")]
    WrongType {
        /// The field.
        field: &'static str,
        /// What the contract says it is.
        expected: &'static str,
        /// What the input holds.
        found: &'static str,
    },
    /// A known key appears twice in one map.
    #[error("`{field}` appears more than once in the same map")]
    DuplicateKey {
        /// The repeated field.
        field: &'static str,
    },
    /// A required field is absent.
    #[error("required field `{field}` is missing")]
    MissingField {
        /// The absent field.
        field: &'static str,
    },
    /// The envelope `kind` is not one of the six kinds.
    #[error(
        "unknown envelope kind {0:?}; the kinds are command, response, event, chunk, status and error"
    )]
    UnknownKind(String),
    /// An id byte string is not 16 bytes.
    #[error("`{field}` must be a 16-byte id (a u128, big-endian), got {len} bytes")]
    BadId {
        /// The id field.
        field: &'static str,
        /// Its actual length.
        len: usize,
    },
    /// A log position byte string is not 20 bytes.
    #[error(
        "`{field}` must be a 20-byte log position (u32 stream, u32 topic, u32 partition, u64 offset), got {len} bytes"
    )]
    BadPosition {
        /// The position field.
        field: &'static str,
        /// Its actual length.
        len: usize,
    },
    /// A fixed-size byte string has the wrong length.
    #[error("`{field}` must be exactly {expected} bytes, got {len}")]
    BadLength {
        /// The field.
        field: &'static str,
        /// The required length.
        expected: usize,
        /// Its actual length.
        len: usize,
    },
    /// Text that is not UTF-8.
    #[error("`{field}` is not valid UTF-8 text")]
    InvalidUtf8 {
        /// The field.
        field: &'static str,
    },
    /// An unsigned integer too large for its field.
    #[error("`{field}` is {value}, which does not fit in {type_name}")]
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value read.
        value: u64,
        /// The field's integer type.
        type_name: &'static str,
    },
    /// An integer outside the range a field holds (metadata holds
    /// -2^63 to 2^64-1, as the reference does).
    #[error("`{field}` holds the integer {value}, outside {range}")]
    IntegerOutOfRange {
        /// The field.
        field: &'static str,
        /// The value read.
        value: i128,
        /// The range the field holds, in words.
        range: &'static str,
    },
    /// Maps and arrays nested deeper than the decoder follows.
    #[error(
        "maps and arrays nest more than {limit} deep (the outermost map included); flatten the structure"
    )]
    TooDeep {
        /// The deepest nesting accepted ([`MAX_NESTING`](crate::MAX_NESTING)).
        limit: usize,
    },
    /// An agent id that breaks the agent-id rules.
    #[error("`{field}`: {source}")]
    InvalidAgentId {
        /// The field.
        field: &'static str,
        /// The broken rule.
        source: AgentIdError,
    },
    /// An idempotency key that breaks the key rules.
    #[error("`idempotency_key`: {0}")]
    InvalidIdempotencyKey(#[from] IdempotencyKeyError),
    /// A map key that is not text.
    #[error("map keys must be text, found {found}")]
    NonTextKey {
        /// What the key was.
        found: &'static str,
    },
    /// A dictionary written by name carries a name the dictionary lacks.
    #[error("`{field}` names {name:?}, which is not a known {dictionary}")]
    UnknownName {
        /// The field.
        field: &'static str,
        /// The dictionary.
        dictionary: &'static str,
        /// The name read.
        name: String,
    },
    /// A nested capsule failed to decode.
    #[error("in `{field}`: {source}")]
    Nested {
        /// The field holding the capsule.
        field: &'static str,
        /// What went wrong inside it.
        source: Box<DecodeError>,
    },
}

impl DecodeError {
    /// Places this error inside the capsule held by `field`.
    pub(crate) fn within(self, field: &'static str) -> Self {
        DecodeError::Nested {
            field,
            source: Box::new(self),
        }
    }

    /// The innermost error, past any [`DecodeError::Nested`] layers.
    pub fn root(&self) -> &DecodeError {
        match self {
            DecodeError::Nested { source, .. } => source.root(),
            other => other,
        }
    }
}
