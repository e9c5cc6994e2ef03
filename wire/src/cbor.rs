//! The small subset of CBOR (RFC 8949) the AGDX wire uses: definite-length
//! items, text-keyed maps, shortest-form heads on output.
//!
//! Hand-written rather than serde-driven so that encoding order, integer and
//! float widths are under exact control (re-encoding must be byte-identical)
//! and so that decoding never allocates from a length the input claims.

use bytes::Bytes;

use crate::error::DecodeError;

const MAJOR_UINT: u8 = 0;
const MAJOR_NINT: u8 = 1;
const MAJOR_BYTES: u8 = 2;
const MAJOR_TEXT: u8 = 3;
const MAJOR_ARRAY: u8 = 4;
const MAJOR_MAP: u8 = 5;
const MAJOR_SIMPLE: u8 = 7;

/// How deep maps and arrays may nest in one payload, the outermost map
/// included: what the reference decoder accepts. Deeper input fails to
/// decode, which also bounds the recursion of nested metadata arrays.
pub const MAX_NESTING: usize = 256;

/// One decoded CBOR head, with string contents already sliced out.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Item<'a> {
    Uint(u64),
    /// A negative integer `-1 - n`.
    Nint(u64),
    Bytes(&'a [u8]),
    /// Text content, not yet checked for UTF-8.
    Text(&'a [u8]),
    Array(u64),
    Map(u64),
    Tag,
    Bool(bool),
    Null,
    Undefined,
    Simple,
    F16(u16),
    F32(u32),
    F64(u64),
}

impl Item<'_> {
    /// How the item is named in a wrong-type error.
    pub(crate) fn describe(&self) -> &'static str {
        match self {
            Item::Uint(_) => "an unsigned integer",
            Item::Nint(_) => "a negative integer",
            Item::Bytes(_) => "a byte string",
            Item::Text(_) => "a text string",
            Item::Array(_) => "an array",
            Item::Map(_) => "a map",
            Item::Tag => "a tagged item",
            Item::Bool(_) => "a boolean",
            Item::Null => "null",
            Item::Undefined => "undefined",
            Item::Simple => "a simple value",
            Item::F16(_) | Item::F32(_) | Item::F64(_) => "a float",
        }
    }
}

/// A cursor over one input buffer.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Maps and arrays open around the cursor.
    depth: usize,
    /// The buffer `buf` is, when shared: opaque byte strings are then
    /// slices of it, not copies.
    shared: Option<&'a Bytes>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self {
            buf,
            pos: 0,
            depth: 0,
            shared: None,
        }
    }

    /// A reader over `buf` whose opaque byte strings share its buffer.
    pub(crate) fn shared(buf: &'a Bytes) -> Self {
        Self {
            shared: Some(buf),
            ..Self::new(buf)
        }
    }

    /// Enters a map or array whose head was just read: its items sit one
    /// level deeper, and no deeper than [`MAX_NESTING`].
    pub(crate) fn open(&mut self) -> Result<(), DecodeError> {
        if self.depth == MAX_NESTING {
            return Err(DecodeError::TooDeep { limit: MAX_NESTING });
        }
        self.depth += 1;
        Ok(())
    }

    /// Leaves the map or array entered last, after its last item.
    pub(crate) fn close(&mut self) {
        self.depth -= 1;
    }

    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], DecodeError> {
        if n > self.remaining() {
            return Err(DecodeError::Truncated);
        }
        let out = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn argument(&mut self, info: u8) -> Result<u64, DecodeError> {
        Ok(match info {
            0..=23 => u64::from(info),
            24 => u64::from(self.byte()?),
            25 => u64::from(u16::from_be_bytes(self.array_of()?)),
            26 => u64::from(u32::from_be_bytes(self.array_of()?)),
            27 => u64::from_be_bytes(self.array_of()?),
            31 => return Err(DecodeError::IndefiniteLength),
            _ => {
                return Err(DecodeError::Malformed(
                    "reserved additional information 28..30",
                ));
            }
        })
    }

    fn array_of<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    /// A string's content, checked against what is left before slicing so a
    /// claimed length never drives an allocation.
    fn content(&mut self, len: u64) -> Result<&'a [u8], DecodeError> {
        let len = usize::try_from(len).map_err(|_| DecodeError::Truncated)?;
        self.take(len)
    }

    /// Reads the next head (and a string's content).
    pub(crate) fn item(&mut self) -> Result<Item<'a>, DecodeError> {
        let initial = self.byte()?;
        let major = initial >> 5;
        let info = initial & 0x1f;
        if major == MAJOR_SIMPLE {
            return Ok(match info {
                0..=19 => Item::Simple,
                20 => Item::Bool(false),
                21 => Item::Bool(true),
                22 => Item::Null,
                23 => Item::Undefined,
                24 => {
                    if self.byte()? < 32 {
                        return Err(DecodeError::Malformed(
                            "a two-byte simple value below 32 (0xf8 0x00..0x1f is not well-formed, RFC 8949 section 3.3)",
                        ));
                    }
                    Item::Simple
                }
                25 => Item::F16(u16::from_be_bytes(self.array_of()?)),
                26 => Item::F32(u32::from_be_bytes(self.array_of()?)),
                27 => Item::F64(u64::from_be_bytes(self.array_of()?)),
                31 => {
                    return Err(DecodeError::Malformed(
                        "a break code outside an indefinite-length item",
                    ));
                }
                _ => {
                    return Err(DecodeError::Malformed(
                        "reserved simple-value encoding 28..30",
                    ));
                }
            });
        }
        let arg = self.argument(info)?;
        Ok(match major {
            MAJOR_UINT => Item::Uint(arg),
            MAJOR_NINT => Item::Nint(arg),
            MAJOR_BYTES => Item::Bytes(self.content(arg)?),
            MAJOR_TEXT => Item::Text(self.content(arg)?),
            MAJOR_ARRAY => Item::Array(arg),
            MAJOR_MAP => Item::Map(arg),
            // Major type 6, the only one left: a tag, whose item follows.
            _ => Item::Tag,
        })
    }

    /// Skips one whole item (an unknown key's value), however nested,
    /// without recursion: a stack of the items still owed by each open
    /// container replaces the call stack, and it is bounded by
    /// [`MAX_NESTING`]. Its text must still be UTF-8.
    pub(crate) fn skip(&mut self) -> Result<(), DecodeError> {
        let mut open: Vec<u64> = Vec::new();
        let mut owed: u64 = 0;
        loop {
            if let Some(items) = open.last_mut() {
                *items -= 1;
                owed -= 1;
            }
            let items = match self.item()? {
                Item::Array(n) => Some(n),
                Item::Map(n) => Some(n.checked_mul(2).ok_or(DecodeError::Truncated)?),
                Item::Tag => Some(1),
                // Text that is not UTF-8 is invalid CBOR (RFC 8949
                // section 5.3.1), skipped or not, as the reference finds.
                Item::Text(t) if std::str::from_utf8(t).is_err() => {
                    return Err(DecodeError::InvalidUtf8 {
                        field: "an unknown key's value",
                    });
                }
                _ => None,
            };
            if let Some(n) = items {
                if self.depth + open.len() == MAX_NESTING {
                    return Err(DecodeError::TooDeep { limit: MAX_NESTING });
                }
                owed = owed.checked_add(n).ok_or(DecodeError::Truncated)?;
                // Every owed item takes at least one byte; fail fast on a
                // claim the input cannot back.
                if owed > self.remaining() as u64 {
                    return Err(DecodeError::Truncated);
                }
                open.push(n);
            }
            while open.last() == Some(&0) {
                open.pop();
            }
            if open.is_empty() {
                return Ok(());
            }
        }
    }

    pub(crate) fn uint(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        match self.item()? {
            Item::Uint(v) => Ok(v),
            other => Err(wrong_type(field, "an unsigned integer", &other)),
        }
    }

    /// An unsigned integer that must fit a narrower type.
    pub(crate) fn uint_as<T: TryFrom<u64>>(
        &mut self,
        field: &'static str,
        type_name: &'static str,
    ) -> Result<T, DecodeError> {
        let v = self.uint(field)?;
        T::try_from(v).map_err(|_| DecodeError::OutOfRange {
            field,
            value: v,
            type_name,
        })
    }

    pub(crate) fn bool(&mut self, field: &'static str) -> Result<bool, DecodeError> {
        match self.item()? {
            Item::Bool(v) => Ok(v),
            other => Err(wrong_type(field, "a boolean", &other)),
        }
    }

    pub(crate) fn bytes(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        match self.item()? {
            Item::Bytes(v) => Ok(v),
            other => Err(wrong_type(field, "a byte string", &other)),
        }
    }

    /// A byte string as [`Bytes`]: a slice of the input when it is shared,
    /// else a copy.
    pub(crate) fn shared_bytes(&mut self, field: &'static str) -> Result<Bytes, DecodeError> {
        let shared = self.shared;
        let value = self.bytes(field)?;
        Ok(match shared {
            Some(buf) => buf.slice_ref(value),
            None => Bytes::copy_from_slice(value),
        })
    }

    pub(crate) fn text(&mut self, field: &'static str) -> Result<&'a str, DecodeError> {
        match self.item()? {
            Item::Text(v) => std::str::from_utf8(v).map_err(|_| DecodeError::InvalidUtf8 { field }),
            other => Err(wrong_type(field, "a text string", &other)),
        }
    }

    /// A map head; returns the number of entries. The map is open until
    /// [`close`](Self::close).
    pub(crate) fn map(&mut self, field: &'static str) -> Result<u64, DecodeError> {
        match self.item()? {
            Item::Map(n) => {
                self.open()?;
                Ok(n)
            }
            other => Err(wrong_type(field, "a map", &other)),
        }
    }

    /// A text map key.
    pub(crate) fn key(&mut self) -> Result<&'a str, DecodeError> {
        key_text(self.raw_key()?)
    }

    /// A text map key's bytes, not yet checked for UTF-8: a key equal to
    /// one a decoder knows is valid, and [`skip_unknown`](Self::skip_unknown)
    /// checks any other.
    pub(crate) fn raw_key(&mut self) -> Result<&'a [u8], DecodeError> {
        match self.item()? {
            Item::Text(v) => Ok(v),
            other => Err(DecodeError::NonTextKey {
                found: other.describe(),
            }),
        }
    }

    /// Skips the value of an entry whose key (read with
    /// [`raw_key`](Self::raw_key)) no field has, once the key is found to be
    /// UTF-8.
    pub(crate) fn skip_unknown(&mut self, key: &[u8]) -> Result<(), DecodeError> {
        key_text(key)?;
        self.skip()
    }
}

/// A map key's bytes as text: CBOR text must be UTF-8.
fn key_text(key: &[u8]) -> Result<&str, DecodeError> {
    std::str::from_utf8(key).map_err(|_| DecodeError::InvalidUtf8 { field: "map key" })
}

pub(crate) fn wrong_type(
    field: &'static str,
    expected: &'static str,
    found: &Item<'_>,
) -> DecodeError {
    DecodeError::WrongType {
        field,
        expected,
        found: found.describe(),
    }
}

/// Decodes exactly one item of `T` from `bytes`; anything after it is an error.
pub(crate) fn decode_exact<T>(
    bytes: &[u8],
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    read_exact(Reader::new(bytes), read)
}

/// [`decode_exact`] with opaque byte strings sharing `bytes`' buffer.
pub(crate) fn decode_exact_shared<T>(
    bytes: &Bytes,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    read_exact(Reader::shared(bytes), read)
}

fn read_exact<T>(
    mut r: Reader<'_>,
    read: impl FnOnce(&mut Reader<'_>) -> Result<T, DecodeError>,
) -> Result<T, DecodeError> {
    let value = read(&mut r)?;
    debug_assert_eq!(r.depth, 0, "a reader left a map or array open");
    match r.remaining() {
        0 => Ok(value),
        count => Err(DecodeError::TrailingBytes { count }),
    }
}

/// Unwraps a required field after its map was read.
pub(crate) fn required<T>(value: Option<T>, field: &'static str) -> Result<T, DecodeError> {
    value.ok_or(DecodeError::MissingField { field })
}

fn head(out: &mut Vec<u8>, major: u8, v: u64) {
    let m = major << 5;
    if v < 24 {
        out.push(m | v as u8);
    } else if v <= u64::from(u8::MAX) {
        out.extend_from_slice(&[m | 24, v as u8]);
    } else if v <= u64::from(u16::MAX) {
        out.push(m | 25);
        out.extend_from_slice(&(v as u16).to_be_bytes());
    } else if v <= u64::from(u32::MAX) {
        out.push(m | 26);
        out.extend_from_slice(&(v as u32).to_be_bytes());
    } else {
        out.push(m | 27);
        out.extend_from_slice(&v.to_be_bytes());
    }
}

pub(crate) fn write_uint(out: &mut Vec<u8>, v: u64) {
    head(out, MAJOR_UINT, v);
}

/// Writes the negative integer `-1 - n`.
pub(crate) fn write_nint(out: &mut Vec<u8>, n: u64) {
    head(out, MAJOR_NINT, n);
}

pub(crate) fn write_bytes(out: &mut Vec<u8>, v: &[u8]) {
    head(out, MAJOR_BYTES, v.len() as u64);
    out.extend_from_slice(v);
}

/// The bytes of text item `text`, head and all, made at compile time: a
/// map key known beforehand is written as one copy. `N` is
/// [`text_item_len`] of `text` (a mismatch fails the build).
pub(crate) const fn text_item<const N: usize>(text: &str) -> [u8; N] {
    let bytes = text.as_bytes();
    let mut out = [0u8; N];
    let at = if bytes.len() < 24 {
        out[0] = (MAJOR_TEXT << 5) | bytes.len() as u8;
        1
    } else {
        assert!(
            bytes.len() <= u8::MAX as usize,
            "a key this long is not a key"
        );
        out[0] = (MAJOR_TEXT << 5) | 24;
        out[1] = bytes.len() as u8;
        2
    };
    assert!(at + bytes.len() == N, "N must be text_item_len(text)");
    let mut i = 0;
    while i < bytes.len() {
        out[at + i] = bytes[i];
        i += 1;
    }
    out
}

/// The length of [`text_item`] of `text`.
pub(crate) const fn text_item_len(text: &str) -> usize {
    text.len() + if text.len() < 24 { 1 } else { 2 }
}

pub(crate) fn write_text(out: &mut Vec<u8>, v: &str) {
    head(out, MAJOR_TEXT, v.len() as u64);
    out.extend_from_slice(v.as_bytes());
}

pub(crate) fn write_array(out: &mut Vec<u8>, len: usize) {
    head(out, MAJOR_ARRAY, len as u64);
}

pub(crate) fn write_map(out: &mut Vec<u8>, len: usize) {
    head(out, MAJOR_MAP, len as u64);
}

pub(crate) fn write_bool(out: &mut Vec<u8>, v: bool) {
    out.push(if v { 0xf5 } else { 0xf4 });
}

pub(crate) fn write_null(out: &mut Vec<u8>) {
    out.push(0xf6);
}

pub(crate) fn write_f16(out: &mut Vec<u8>, bits: u16) {
    out.push(0xf9);
    out.extend_from_slice(&bits.to_be_bytes());
}

pub(crate) fn write_f32(out: &mut Vec<u8>, bits: u32) {
    out.push(0xfa);
    out.extend_from_slice(&bits.to_be_bytes());
}

pub(crate) fn write_f64(out: &mut Vec<u8>, bits: u64) {
    out.push(0xfb);
    out.extend_from_slice(&bits.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_items_made_at_compile_time_are_the_written_ones() {
        const SHORT: [u8; text_item_len("kind")] = text_item("kind");
        const AT_23: [u8; text_item_len("abcdefghijklmnopqrstuvw")] =
            text_item("abcdefghijklmnopqrstuvw");
        const LONG: [u8; text_item_len("cache_creation_input_tokens")] =
            text_item("cache_creation_input_tokens");
        for (item, text) in [
            (&SHORT[..], "kind"),
            (&AT_23[..], "abcdefghijklmnopqrstuvw"),
            (&LONG[..], "cache_creation_input_tokens"),
        ] {
            let mut out = Vec::new();
            write_text(&mut out, text);
            assert_eq!(item, out, "{text}");
        }
    }

    #[test]
    fn heads_use_the_shortest_form() {
        let cases: [(u64, &[u8]); 9] = [
            (0, &[0x00]),
            (23, &[0x17]),
            (24, &[0x18, 24]),
            (255, &[0x18, 0xff]),
            (256, &[0x19, 1, 0]),
            (65535, &[0x19, 0xff, 0xff]),
            (65536, &[0x1a, 0, 1, 0, 0]),
            (u64::from(u32::MAX) + 1, &[0x1b, 0, 0, 0, 1, 0, 0, 0, 0]),
            (
                u64::MAX,
                &[0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
            ),
        ];
        for (v, want) in cases {
            let mut out = Vec::new();
            write_uint(&mut out, v);
            assert_eq!(out, want, "{v}");
            assert!(matches!(Reader::new(&out).item(), Ok(Item::Uint(x)) if x == v));
        }
    }

    #[test]
    fn skip_refuses_counts_the_input_cannot_back() {
        // An array claiming 2^64-1 elements followed by nothing.
        let input = [0x9b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
        assert_eq!(Reader::new(&input).skip(), Err(DecodeError::Truncated));
        // A byte string claiming more bytes than exist.
        assert_eq!(
            Reader::new(&[0x5a, 0xff, 0xff, 0xff, 0xff]).skip(),
            Err(DecodeError::Truncated)
        );
    }

    #[test]
    fn skip_walks_nested_items() {
        // [1, {"a": [h'00', 1(2)]}, 3.0f16]
        let input = [
            0x83, 0x01, 0xa1, 0x61, b'a', 0x82, 0x41, 0x00, 0xc1, 0x02, 0xf9, 0x42, 0x00,
        ];
        let mut r = Reader::new(&input);
        assert_eq!(r.skip(), Ok(()));
        assert_eq!(r.remaining(), 0);
    }

    #[test]
    fn indefinite_and_reserved_heads_are_rejected() {
        assert_eq!(
            Reader::new(&[0x9f, 0xff]).item().err(),
            Some(DecodeError::IndefiniteLength)
        );
        assert!(matches!(
            Reader::new(&[0x1c]).item(),
            Err(DecodeError::Malformed(_))
        ));
        assert!(matches!(
            Reader::new(&[0xff]).item(),
            Err(DecodeError::Malformed(_))
        ));
    }
}
