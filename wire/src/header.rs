//! Typed record headers, the out-of-band part of an agent record.
//!
//! Values mirror Apache Iggy's typed header values: a kind plus the value's
//! bytes (numbers little-endian), so a header built here goes to Iggy and to
//! the embedded log unchanged.

/// The kind of a typed header value (Iggy's header kinds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum HeaderKind {
    Raw,
    String,
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    Int128,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Uint128,
    Float32,
    Float64,
}

/// One typed header value: its kind and its bytes as Iggy stores them.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HeaderValue {
    pub kind: HeaderKind,
    pub bytes: Vec<u8>,
}

impl HeaderValue {
    /// A `u8` header value.
    pub fn u8(v: u8) -> Self {
        Self { kind: HeaderKind::Uint8, bytes: vec![v] }
    }
    /// A `u32` header value (little-endian bytes).
    pub fn u32(v: u32) -> Self {
        Self { kind: HeaderKind::Uint32, bytes: v.to_le_bytes().to_vec() }
    }
    /// A `uint128` header value (little-endian bytes).
    pub fn u128(v: u128) -> Self {
        Self { kind: HeaderKind::Uint128, bytes: v.to_le_bytes().to_vec() }
    }
    /// A UTF-8 string header value.
    pub fn string(v: &str) -> Self {
        Self { kind: HeaderKind::String, bytes: v.as_bytes().to_vec() }
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
            HeaderKind::Uint32 => self.bytes.as_slice().try_into().ok().map(u32::from_le_bytes),
            _ => None,
        }
    }
    /// The value as a `u128`, when it is one.
    pub fn as_u128(&self) -> Option<u128> {
        match self.kind {
            HeaderKind::Uint128 => self.bytes.as_slice().try_into().ok().map(u128::from_le_bytes),
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
pub type Headers = Vec<(String, HeaderValue)>;
