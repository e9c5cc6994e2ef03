//! Typed record headers, the out-of-band part of an agent record.
//!
//! Values mirror Apache Iggy's typed header values: a kind plus the value's
//! bytes (numbers little-endian), so a header built here goes to Iggy and to
//! the embedded log unchanged.

use std::borrow::Cow;
use std::fmt;
use std::str::FromStr;

use smallvec::SmallVec;

use crate::dictionary::ContentType;
use crate::envelope::AgentEnvelope;

macro_rules! header_kinds {
    ($( $(#[$doc:meta])* $variant:ident => $name:literal, )*) => {
        /// The kind of a typed header value (Iggy's header kinds).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum HeaderKind {
            $( $(#[$doc])* $variant, )*
        }

        impl HeaderKind {
            /// Every kind.
            pub const ALL: &'static [HeaderKind] = &[$(HeaderKind::$variant),*];

            /// The kind's name as the AGDX reference corpus writes it
            /// (`u8`, `u32`, `uint128`, `string`, ...).
            pub const fn name(self) -> &'static str {
                match self {
                    $( HeaderKind::$variant => $name, )*
                }
            }
        }

        impl FromStr for HeaderKind {
            type Err = UnknownHeaderKind;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $name => Ok(HeaderKind::$variant), )*
                    _ => Err(UnknownHeaderKind(s.to_owned())),
                }
            }
        }
    };
}

header_kinds! {
    /// Opaque bytes.
    Raw => "raw",
    /// UTF-8 text.
    String => "string",
    /// A boolean.
    Bool => "bool",
    /// `i8`.
    Int8 => "i8",
    /// `i16`.
    Int16 => "i16",
    /// `i32`.
    Int32 => "i32",
    /// `i64`.
    Int64 => "i64",
    /// `i128`.
    Int128 => "int128",
    /// `u8`.
    Uint8 => "u8",
    /// `u16`.
    Uint16 => "u16",
    /// `u32`.
    Uint32 => "u32",
    /// `u64`.
    Uint64 => "u64",
    /// `u128`.
    Uint128 => "uint128",
    /// `f32`.
    Float32 => "f32",
    /// `f64`.
    Float64 => "f64",
}

/// A header kind name that is not known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown header kind {0:?}")]
pub struct UnknownHeaderKind(pub String);

impl HeaderKind {
    /// How many bytes every value of a fixed-size kind has; `None` for
    /// `Raw` and `String`. Both log backends refuse values of another size.
    pub const fn fixed_width(self) -> Option<usize> {
        match self {
            HeaderKind::Raw | HeaderKind::String => None,
            HeaderKind::Bool | HeaderKind::Int8 | HeaderKind::Uint8 => Some(1),
            HeaderKind::Int16 | HeaderKind::Uint16 => Some(2),
            HeaderKind::Int32 | HeaderKind::Uint32 | HeaderKind::Float32 => Some(4),
            HeaderKind::Int64 | HeaderKind::Uint64 | HeaderKind::Float64 => Some(8),
            HeaderKind::Int128 | HeaderKind::Uint128 => Some(16),
        }
    }
}

impl fmt::Display for HeaderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// One typed header value: its kind and its bytes as Iggy stores them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeaderValue {
    /// The value's kind.
    pub kind: HeaderKind,
    /// The value's bytes (numbers little-endian).
    pub bytes: HeaderBytes,
}

/// A header value's bytes: up to 24 kept inline (every number, an id, most
/// agent ids), longer ones on the heap.
pub type HeaderBytes = SmallVec<[u8; 24]>;

/// A header's name: the agent record keys ([`AGENT_RECORD_HEADER_KEYS`])
/// borrowed from their constants ([`header_name`] finds them), any other
/// name owned.
pub type HeaderName = Cow<'static, str>;

impl HeaderValue {
    /// A `u8` header value.
    pub fn u8(v: u8) -> Self {
        Self {
            kind: HeaderKind::Uint8,
            bytes: SmallVec::from_slice(&[v]),
        }
    }
    /// A `u32` header value (little-endian bytes).
    pub fn u32(v: u32) -> Self {
        Self {
            kind: HeaderKind::Uint32,
            bytes: SmallVec::from_slice(&v.to_le_bytes()),
        }
    }
    /// A `uint128` header value (little-endian bytes).
    pub fn u128(v: u128) -> Self {
        Self {
            kind: HeaderKind::Uint128,
            bytes: SmallVec::from_slice(&v.to_le_bytes()),
        }
    }
    /// A UTF-8 string header value.
    pub fn string(v: &str) -> Self {
        Self {
            kind: HeaderKind::String,
            bytes: SmallVec::from_slice(v.as_bytes()),
        }
    }
    /// The value as a `u8`, when it is one.
    pub fn as_u8(&self) -> Option<u8> {
        match (self.kind, self.bytes.as_slice()) {
            (HeaderKind::Uint8, [b]) => Some(*b),
            _ => None,
        }
    }
    /// The value as a `u32`, when it is one.
    pub fn as_u32(&self) -> Option<u32> {
        match self.kind {
            HeaderKind::Uint32 => self
                .bytes
                .as_slice()
                .try_into()
                .ok()
                .map(u32::from_le_bytes),
            _ => None,
        }
    }
    /// The value as a `u128`, when it is one.
    pub fn as_u128(&self) -> Option<u128> {
        match self.kind {
            HeaderKind::Uint128 => self
                .bytes
                .as_slice()
                .try_into()
                .ok()
                .map(u128::from_le_bytes),
            _ => None,
        }
    }
    /// The value as text, when it is a valid UTF-8 string header.
    pub fn as_str(&self) -> Option<&str> {
        match self.kind {
            HeaderKind::String => std::str::from_utf8(&self.bytes).ok(),
            _ => None,
        }
    }
}

/// An ordered set of typed headers on one record.
pub type Headers = Vec<(HeaderName, HeaderValue)>;

macro_rules! header_keys {
    ($( $(#[$doc:meta])* $name:ident = $key:literal: $kind:ident, )*) => {
        $( $(#[$doc])* pub const $name: &str = $key; )*

        /// Every header an agent record may carry, in the order
        /// [`record_headers`] writes them.
        pub const AGENT_RECORD_HEADER_KEYS: &[&str] = &[$($key),*];

        /// The kind of an agent record header's value, by its key; `None`
        /// for any other key. Logs whose headers carry bytes without a kind
        /// (Kafka) give the agent record headers their kind back from here.
        pub fn agent_record_header_kind(key: &str) -> Option<HeaderKind> {
            match key {
                $( $key => Some(HeaderKind::$kind), )*
                _ => None,
            }
        }

        /// `name` as a [`HeaderName`]: an agent record key borrowed from
        /// its constant, so reading a record allocates nothing for it; any
        /// other name owned.
        ///
        /// ```
        /// use std::borrow::Cow;
        /// assert!(matches!(agdx_wire::header_name("agdx.ct"), Cow::Borrowed(_)));
        /// assert!(matches!(agdx_wire::header_name("x-trace"), Cow::Owned(_)));
        /// ```
        pub fn header_name(name: &str) -> HeaderName {
            match name {
                $( $key => Cow::Borrowed($key), )*
                _ => Cow::Owned(name.to_owned()),
            }
        }
    };
}

header_keys! {
    /// `agdx.ct` (u8): the content-type code of the body.
    HEADER_CONTENT_TYPE = "agdx.ct": Uint8,
    /// `agdx.av` (u32): the envelope wire version, [`WIRE_VERSION`].
    HEADER_WIRE_VERSION = "agdx.av": Uint32,
    /// `gen_ai.conversation.id` (uint128, little-endian): the conversation.
    HEADER_CONVERSATION = "gen_ai.conversation.id": Uint128,
    /// `agdx.to` (string): the target agent, only when `target` is set.
    HEADER_TARGET = "agdx.to": String,
}

/// The envelope wire version stamped in `agdx.av`.
pub const WIRE_VERSION: u32 = 1;

/// Soft cap on all of a record's headers, framing included.
pub const HEADERS_TOTAL_SOFT_CAP: usize = 1024;
/// Cap on one header value, in bytes.
pub const HEADER_VALUE_CAP: usize = 255;
/// Framing bytes counted per header toward [`HEADERS_TOTAL_SOFT_CAP`].
pub const HEADER_FRAMING: usize = 9;

/// The exact header set of an agent record carrying `envelope` with a body
/// of `content_type`: `agdx.ct`, `agdx.av`, `gen_ai.conversation.id`, and
/// `agdx.to` when the envelope has a target whose id fits in a header value
/// ([`HEADER_VALUE_CAP`] bytes; a longer one is left out). Everything else
/// lives only in the envelope.
///
/// ```
/// use agdx_wire::*;
/// let event = AgentEnvelope::event(
///     RecordId::from_u128(1),
///     ConversationId::from_u128(2),
///     AgentId::new("ledger")?,
///     b"{}".to_vec(),
/// );
/// let headers = record_headers(&event, ContentType::Json);
/// assert_eq!(headers.len(), 3);
/// assert_eq!(headers[2].1.as_u128(), Some(2));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn record_headers(envelope: &AgentEnvelope, content_type: ContentType) -> Headers {
    let mut headers = Vec::with_capacity(4);
    headers.push((
        Cow::Borrowed(HEADER_CONTENT_TYPE),
        HeaderValue::u8(content_type.code()),
    ));
    headers.push((
        Cow::Borrowed(HEADER_WIRE_VERSION),
        HeaderValue::u32(WIRE_VERSION),
    ));
    headers.push((
        Cow::Borrowed(HEADER_CONVERSATION),
        HeaderValue::u128(envelope.conversation.as_u128()),
    ));
    // A routing hint only (the envelope's `target` is the truth): an agent
    // id longer than a header value may be (ids take up to 256 bytes) is
    // left out rather than making the record unsendable.
    if let Some(target) = envelope
        .target
        .as_ref()
        .filter(|t| t.as_str().len() <= HEADER_VALUE_CAP)
    {
        headers.push((
            Cow::Borrowed(HEADER_TARGET),
            HeaderValue::string(target.as_str()),
        ));
    }
    headers
}

/// Headers over their caps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderCapError {
    /// One value is over [`HEADER_VALUE_CAP`].
    #[error(
        "header {key:?} has a {len}-byte value; a header value is at most {HEADER_VALUE_CAP} bytes"
    )]
    ValueTooLarge {
        /// The header.
        key: String,
        /// Its value's length.
        len: usize,
    },
    /// All headers together are over [`HEADERS_TOTAL_SOFT_CAP`].
    #[error(
        "the headers take {total} bytes (keys, values and {HEADER_FRAMING} bytes of framing each); \
         the cap is {HEADERS_TOTAL_SOFT_CAP}"
    )]
    TotalTooLarge {
        /// The measured total.
        total: usize,
    },
}

/// Checks the header caps: each value at most 255 bytes, and keys plus values
/// plus 9 bytes of framing per header at most 1024 bytes in all.
pub fn check_header_caps(headers: &Headers) -> Result<(), HeaderCapError> {
    let mut total = 0;
    for (key, value) in headers {
        if value.bytes.len() > HEADER_VALUE_CAP {
            return Err(HeaderCapError::ValueTooLarge {
                key: key.to_string(),
                len: value.bytes.len(),
            });
        }
        total += key.len() + value.bytes.len() + HEADER_FRAMING;
    }
    if total > HEADERS_TOTAL_SOFT_CAP {
        return Err(HeaderCapError::TotalTooLarge { total });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{HeaderKind, HeaderValue};

    #[test]
    fn fixed_widths_match_the_values_built_here() {
        for value in [
            HeaderValue::u8(7),
            HeaderValue::u32(7),
            HeaderValue::u128(7),
        ] {
            assert_eq!(value.kind.fixed_width(), Some(value.bytes.len()));
        }
        for kind in HeaderKind::ALL {
            let sized = !matches!(kind, HeaderKind::Raw | HeaderKind::String);
            assert_eq!(kind.fixed_width().is_some(), sized, "{kind}");
        }
    }
}
