//! Envelope metadata (and `ErrorBody.detail`): a map of text keys to
//! scalars, always written in byte-wise key order (the reference's
//! encoding, which signatures cover), whatever order built or decoded it.

use std::borrow::Cow;

use crate::cbor::{
    Item, Reader, write_array, write_bool, write_f16, write_f32, write_f64, write_map, write_nint,
    write_null, write_text, write_uint,
};
use crate::error::DecodeError;
use crate::validation::Problem;

/// Most entries a metadata map may hold.
pub const METADATA_MAX_ENTRIES: usize = 32;
/// Longest metadata key, in bytes.
pub const METADATA_MAX_KEY_LEN: usize = 256;
/// Largest metadata value, by [`Scalar::cap_size`].
pub const METADATA_MAX_VALUE_SIZE: usize = 1024;
/// Largest sum over all entries of key length plus value size.
pub const METADATA_MAX_TOTAL_SIZE: usize = 8192;

macro_rules! pinned_keys {
    ($( $(#[$doc:meta])* $name:ident = $key:literal : $shape:ident, )*) => {
        $( $(#[$doc])* pub const $name: &str = $key; )*
        const PINNED: &[(&str, Shape)] = &[$( ($key, Shape::$shape) ),*];
    };
}

/// The value shape a pinned metadata key must have.
#[derive(Clone, Copy)]
enum Shape {
    Text,
    TextArray,
    Uint,
    Role,
}

pinned_keys! {
    /// `role`: who wrote the content: `user`, `assistant`, `system` or `tool`.
    META_ROLE = "role": Role,
    /// `bridge_hops`: array of bridge ids, the loop guard: a bridge appends
    /// its id and drops a message that already carries it.
    META_BRIDGE_HOPS = "bridge_hops": TextArray,
    /// `run`: the run this message belongs to.
    META_RUN = "run": Text,
    /// `on_behalf_of`: the user an agent acts for; grants intersect.
    META_ON_BEHALF_OF = "on_behalf_of": Text,
    /// `purpose`: advisory unless the envelope is signed.
    META_PURPOSE = "purpose": Text,
    /// `data_classification`: advisory unless the envelope is signed.
    META_DATA_CLASSIFICATION = "data_classification": Text,
    /// `task_context`: advisory unless the envelope is signed.
    META_TASK_CONTEXT = "task_context": Text,
    /// `session_intent`: advisory unless the envelope is signed.
    META_SESSION_INTENT = "session_intent": Text,
    /// `agdx.fence`: an alternative carrier of the fence token.
    META_FENCE = "agdx.fence": Uint,
}

/// The values `role` may take.
pub const ROLES: [&str; 4] = ["user", "assistant", "system", "tool"];

/// A metadata integer: anything from -2^63 to 2^64-1, the range the
/// reference holds (an `i64` or a `u64`). Beyond it decoding fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Integer(i128);

impl Integer {
    /// The smallest metadata integer, -2^63.
    pub const MIN: i128 = i64::MIN as i128;
    /// The largest metadata integer, 2^64-1.
    pub const MAX: i128 = u64::MAX as i128;
    /// The range, in words (for errors).
    const RANGE: &'static str = "the metadata integer range -2^63..=2^64-1";

    /// The integer, when metadata can carry it.
    pub const fn new(v: i128) -> Option<Self> {
        if v >= Self::MIN && v <= Self::MAX {
            Some(Self(v))
        } else {
            None
        }
    }

    /// The value.
    pub const fn get(self) -> i128 {
        self.0
    }

    /// The value as a `u64`, when it is one.
    pub fn as_u64(self) -> Option<u64> {
        u64::try_from(self.0).ok()
    }

    /// The value as an `i64`, when it is one.
    pub fn as_i64(self) -> Option<i64> {
        i64::try_from(self.0).ok()
    }

    fn write(self, out: &mut Vec<u8>) {
        match u64::try_from(self.0) {
            Ok(v) => write_uint(out, v),
            // In range by construction: -1 - v fits in u64 for v >= -2^63.
            Err(_) => write_nint(out, (-1 - self.0) as u64),
        }
    }
}

macro_rules! integer_from {
    ($($t:ty),*) => {$(
        impl From<$t> for Integer {
            fn from(v: $t) -> Self {
                Self(i128::from(v))
            }
        }
    )*};
}
integer_from!(u8, u16, u32, u64, i8, i16, i32, i64);

/// An integer outside the metadata range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("{0} is outside the metadata integer range -2^63..=2^64-1")]
pub struct IntegerRangeError(pub i128);

impl TryFrom<i128> for Integer {
    type Error = IntegerRangeError;
    fn try_from(v: i128) -> Result<Self, Self::Error> {
        Self::new(v).ok_or(IntegerRangeError(v))
    }
}

/// A metadata float, held as its `f64` bits. It is written at the shortest
/// of half, single and double width that widens back to exactly those bits
/// (the quiet NaN as `f9 7e00`), as the reference writes it, whatever width
/// it was decoded from; no constructor picks another width.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Float(u64);

impl Float {
    /// The float `v`.
    pub fn new(v: f64) -> Self {
        Self(v.to_bits())
    }

    /// The value.
    pub fn value(self) -> f64 {
        f64::from_bits(self.0)
    }

    /// How many bytes the value takes on the wire after its initial byte: 2, 4 or 8.
    pub fn width(self) -> usize {
        match self.narrowed() {
            Narrow::Half(_) => 2,
            Narrow::Single(_) => 4,
            Narrow::Double(_) => 8,
        }
    }

    /// The narrowest width whose bits widen back to exactly these.
    fn narrowed(self) -> Narrow {
        let v = self.value();
        let half = half::f16::from_f64(v);
        if half.to_f64().to_bits() == self.0 {
            return Narrow::Half(half.to_bits());
        }
        let single = v as f32;
        if f64::from(single).to_bits() == self.0 {
            return Narrow::Single(single.to_bits());
        }
        Narrow::Double(self.0)
    }

    fn write(self, out: &mut Vec<u8>) {
        match self.narrowed() {
            Narrow::Half(b) => write_f16(out, b),
            Narrow::Single(b) => write_f32(out, b),
            Narrow::Double(b) => write_f64(out, b),
        }
    }
}

/// A float's bits at one wire width.
enum Narrow {
    Half(u16),
    Single(u32),
    Double(u64),
}

impl From<f64> for Float {
    fn from(v: f64) -> Self {
        Self::new(v)
    }
}

/// A metadata value: text, integer, float, boolean, null, or an array of
/// values (arrays may nest, to [`MAX_NESTING`](crate::MAX_NESTING)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scalar {
    /// CBOR null.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer.
    Int(Integer),
    /// A float.
    Float(Float),
    /// UTF-8 text.
    Text(String),
    /// An array of values.
    Array(Vec<Scalar>),
}

impl Scalar {
    /// The size counted against the metadata caps: text by its length, an
    /// array as the sum of one plus each item's size (nested arrays counted
    /// the same way), anything else 9.
    pub fn cap_size(&self) -> usize {
        match self {
            Scalar::Text(s) => s.len(),
            Scalar::Array(items) => items.iter().map(|i| 1 + i.cap_size()).sum(),
            _ => 9,
        }
    }

    /// The text, when the value is text.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Scalar::Text(s) => Some(s),
            _ => None,
        }
    }

    /// The value as a `u64`, when it is a non-negative integer that fits.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Scalar::Int(i) => i.as_u64(),
            _ => None,
        }
    }

    /// The items, when the value is an array.
    pub fn as_array(&self) -> Option<&[Scalar]> {
        match self {
            Scalar::Array(items) => Some(items),
            _ => None,
        }
    }

    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        Ok(match r.item()? {
            Item::Null => Scalar::Null,
            Item::Bool(b) => Scalar::Bool(b),
            Item::Uint(v) => Scalar::Int(Integer(i128::from(v))),
            Item::Nint(n) => {
                let value = -1 - i128::from(n);
                Scalar::Int(Integer::new(value).ok_or(DecodeError::IntegerOutOfRange {
                    field,
                    value,
                    range: Integer::RANGE,
                })?)
            }
            Item::F16(b) => Scalar::Float(Float::new(half::f16::from_bits(b).to_f64())),
            Item::F32(b) => Scalar::Float(Float::new(f64::from(f32::from_bits(b)))),
            Item::F64(b) => Scalar::Float(Float(b)),
            Item::Text(t) => Scalar::Text(
                std::str::from_utf8(t)
                    .map_err(|_| DecodeError::InvalidUtf8 { field })?
                    .to_owned(),
            ),
            Item::Array(n) => {
                r.open()?;
                let mut items = Vec::with_capacity(bounded(n, r.remaining()));
                for _ in 0..n {
                    items.push(Scalar::read(r, field)?);
                }
                r.close();
                Scalar::Array(items)
            }
            other => {
                return Err(DecodeError::WrongType {
                    field,
                    expected: "a scalar (text, integer, float, boolean, null or an array of those)",
                    found: other.describe(),
                });
            }
        })
    }

    fn write(&self, out: &mut Vec<u8>) {
        match self {
            Scalar::Null => write_null(out),
            Scalar::Bool(b) => write_bool(out, *b),
            Scalar::Int(i) => i.write(out),
            Scalar::Float(f) => f.write(out),
            Scalar::Text(s) => write_text(out, s),
            Scalar::Array(items) => {
                write_array(out, items.len());
                for item in items {
                    item.write(out);
                }
            }
        }
    }
}

/// A capacity hint that an attacker's length claim cannot inflate.
pub(crate) fn bounded(claimed: u64, remaining: usize) -> usize {
    usize::try_from(claimed)
        .unwrap_or(usize::MAX)
        .min(remaining)
        .min(64)
}

impl From<&str> for Scalar {
    fn from(v: &str) -> Self {
        Scalar::Text(v.to_owned())
    }
}
impl From<String> for Scalar {
    fn from(v: String) -> Self {
        Scalar::Text(v)
    }
}
impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Bool(v)
    }
}
impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::Float(Float::new(v))
    }
}
impl From<Integer> for Scalar {
    fn from(v: Integer) -> Self {
        Scalar::Int(v)
    }
}
impl From<u64> for Scalar {
    fn from(v: u64) -> Self {
        Scalar::Int(v.into())
    }
}
impl From<i64> for Scalar {
    fn from(v: i64) -> Self {
        Scalar::Int(v.into())
    }
}
impl From<Vec<Scalar>> for Scalar {
    fn from(v: Vec<Scalar>) -> Self {
        Scalar::Array(v)
    }
}

/// A metadata key: borrowed when it is a constant (the pinned keys, as
/// set and as decoded), owned otherwise.
pub type MetaKey = Cow<'static, str>;

/// A map of text keys to [`Scalar`]s, kept in byte-wise key order: the
/// order it is written in, whatever order the keys were inserted in.
///
/// The entries are one sorted list: a map holds a few (at most
/// [`METADATA_MAX_ENTRIES`] in a valid envelope), and a list of them costs
/// one allocation where a tree costs a node, and a pinned key none.
///
/// ```
/// use agdx_wire::{Metadata, Scalar};
/// let m = Metadata::new().with("role", "user").with("agdx.fence", 7u64);
/// assert_eq!(m.get("role").and_then(Scalar::as_str), Some("user"));
/// assert_eq!(m.keys().collect::<Vec<_>>(), ["agdx.fence", "role"]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Metadata(Vec<(MetaKey, Scalar)>);

impl Metadata {
    /// An empty map.
    pub fn new() -> Self {
        Self::default()
    }

    /// Where `key` is, or where it would go.
    fn find(&self, key: &str) -> Result<usize, usize> {
        self.0.binary_search_by(|(k, _)| k.as_ref().cmp(key))
    }

    /// Sets `key`; returns the old value.
    pub fn insert(&mut self, key: impl Into<MetaKey>, value: impl Into<Scalar>) -> Option<Scalar> {
        let key = key.into();
        let value = value.into();
        match self.find(&key) {
            Ok(at) => Some(std::mem::replace(&mut self.0[at].1, value)),
            Err(at) => {
                self.0.insert(at, (key, value));
                None
            }
        }
    }

    /// [`insert`](Self::insert), chainable.
    pub fn with(mut self, key: impl Into<MetaKey>, value: impl Into<Scalar>) -> Self {
        self.insert(key, value);
        self
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Scalar> {
        self.find(key).ok().map(|at| &self.0[at].1)
    }

    /// Removes `key`, returning its value.
    pub fn remove(&mut self, key: &str) -> Option<Scalar> {
        self.find(key).ok().map(|at| self.0.remove(at).1)
    }

    /// The entries in key order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&str, &Scalar)> {
        self.0.iter().map(|(k, v)| (k.as_ref(), v))
    }

    /// The keys in order.
    pub fn keys(&self) -> impl DoubleEndedIterator<Item = &str> {
        self.0.iter().map(|(k, _)| k.as_ref())
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no entries.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Reads a map in any key order; a repeated key fails.
    pub(crate) fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        let n = r.map(field)?;
        // Read whole, then sorted once: a hostile map of many keys costs
        // n log n, not the n² of inserting each in place.
        let mut entries = Vec::new();
        for _ in 0..n {
            let key = meta_key(r.key()?);
            let value = Scalar::read(r, field)?;
            entries.push((key, value));
        }
        r.close();
        entries.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        if entries.windows(2).any(|pair| pair[0].0 == pair[1].0) {
            return Err(DecodeError::DuplicateKey { field });
        }
        Ok(Self(entries))
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        write_map(out, self.0.len());
        for (k, v) in &self.0 {
            write_text(out, k);
            v.write(out);
        }
    }

    /// Checks each pinned key present ([`META_ROLE`], [`META_BRIDGE_HOPS`],
    /// [`META_FENCE`], ...) against its pinned shape: `role` one of
    /// [`ROLES`], `bridge_hops` an array of text, `agdx.fence` an unsigned
    /// integer, the others text. Not part of envelope validation (the
    /// validity matrix and caps say nothing of metadata values, so a peer's
    /// record is never refused for them): whoever acts on a pinned key calls
    /// this, or checks that one value, and ignores a value it cannot use.
    pub fn check_pinned(&self) -> Result<(), PinnedShapeError> {
        self.0.iter().try_for_each(|(k, v)| check_pinned(k, v))
    }

    /// The bridge ids in `bridge_hops`, in order: the bridges this message
    /// passed through.
    ///
    /// The value counts only in its pinned shape, an array of text (docs/wire.md,
    /// "Pinned metadata keys"). Anything else (a lone text, a number, an
    /// array holding a non-text item) reads as no hops, like any pinned
    /// value one cannot use ([`check_pinned`](Self::check_pinned)), so every
    /// bridge and every port reads one value the same way. The loop guard
    /// still holds: the first bridge to append replaces such a value with a
    /// well-formed array, and from there on a loop is caught.
    ///
    /// ```
    /// use agdx_wire::{META_BRIDGE_HOPS, Metadata, Scalar};
    /// let m = Metadata::new().with(META_BRIDGE_HOPS, vec![Scalar::from("axon:a")]);
    /// assert_eq!(m.bridge_hops().collect::<Vec<_>>(), ["axon:a"]);
    /// let lone = Metadata::new().with(META_BRIDGE_HOPS, "axon:a");
    /// assert_eq!(lone.bridge_hops().count(), 0);
    /// ```
    pub fn bridge_hops(&self) -> impl Iterator<Item = &str> {
        self.well_formed_hops()
            .unwrap_or_default()
            .iter()
            .filter_map(Scalar::as_str)
    }

    /// Whether [`bridge_hops`](Self::bridge_hops) names the bridge `id`: the
    /// message already passed through it, so handing it on again would loop.
    ///
    /// ```
    /// use agdx_wire::Metadata;
    /// let mut m = Metadata::new();
    /// m.push_bridge_hop("axon:a");
    /// m.push_bridge_hop("ax-ipc:b");
    /// assert!(m.has_bridge_hop("axon:a") && m.has_bridge_hop("ax-ipc:b"));
    /// assert!(!m.has_bridge_hop("axon:c"));
    /// ```
    pub fn has_bridge_hop(&self, id: &str) -> bool {
        self.bridge_hops().any(|hop| hop == id)
    }

    /// Appends the bridge `id` to `bridge_hops`, keeping the hops already
    /// there; a value [`bridge_hops`](Self::bridge_hops) does not read as
    /// hops is replaced by `[id]`.
    pub fn push_bridge_hop(&mut self, id: &str) {
        let well_formed = self.well_formed_hops().is_some();
        match self.find(META_BRIDGE_HOPS) {
            Ok(at) => match &mut self.0[at].1 {
                Scalar::Array(hops) if well_formed => hops.push(id.into()),
                slot => *slot = Scalar::Array(vec![id.into()]),
            },
            Err(at) => self.0.insert(
                at,
                (META_BRIDGE_HOPS.into(), Scalar::Array(vec![id.into()])),
            ),
        }
    }

    /// The `bridge_hops` items, when the value has its pinned shape.
    fn well_formed_hops(&self) -> Option<&[Scalar]> {
        let value = self.get(META_BRIDGE_HOPS)?;
        check_pinned(META_BRIDGE_HOPS, value).ok()?;
        value.as_array()
    }

    /// The envelope metadata caps (docs/wire.md), and nothing else.
    pub(crate) fn check_envelope_rules(&self) -> Result<(), Problem> {
        if self.0.len() > METADATA_MAX_ENTRIES {
            return Err(Problem::too_large(
                self.0.len(),
                METADATA_MAX_ENTRIES,
                "entries",
                "keep metadata to small routing and policy facts; move bulk data into the body",
            ));
        }
        let mut total = 0usize;
        for (k, v) in &self.0 {
            if k.len() > METADATA_MAX_KEY_LEN {
                return Err(Problem::too_large(
                    k.len(),
                    METADATA_MAX_KEY_LEN,
                    "bytes in one key",
                    "shorten the metadata key",
                ));
            }
            let size = v.cap_size();
            if size > METADATA_MAX_VALUE_SIZE {
                return Err(Problem::too_large(
                    size,
                    METADATA_MAX_VALUE_SIZE,
                    "bytes in one value",
                    "metadata values are small; move large values into the body",
                ));
            }
            total += k.len() + size;
        }
        if total > METADATA_MAX_TOTAL_SIZE {
            return Err(Problem::too_large(
                total,
                METADATA_MAX_TOTAL_SIZE,
                "bytes of keys and values",
                "metadata as a whole is capped; move bulk data into the body",
            ));
        }
        Ok(())
    }
}

/// A pinned metadata key whose value does not have the key's pinned shape
/// (see [`Metadata::check_pinned`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("metadata key {key:?} must be {expected}")]
pub struct PinnedShapeError {
    /// The pinned key ([`META_ROLE`], [`META_FENCE`], ...).
    pub key: &'static str,
    /// The shape it must have, in words.
    pub expected: &'static str,
}

/// `key` as a [`MetaKey`]: a pinned key borrowed, any other owned.
fn meta_key(key: &str) -> MetaKey {
    match PINNED.iter().find(|(pinned, _)| *pinned == key) {
        Some((pinned, _)) => Cow::Borrowed(pinned),
        None => Cow::Owned(key.to_owned()),
    }
}

fn check_pinned(key: &str, value: &Scalar) -> Result<(), PinnedShapeError> {
    let Some(&(key, shape)) = PINNED.iter().find(|(k, _)| *k == key) else {
        return Ok(());
    };
    let ok = match shape {
        Shape::Text => matches!(value, Scalar::Text(_)),
        Shape::TextArray => {
            matches!(value, Scalar::Array(items) if items.iter().all(|i| matches!(i, Scalar::Text(_))))
        }
        Shape::Uint => value.as_u64().is_some(),
        Shape::Role => value.as_str().is_some_and(|r| ROLES.contains(&r)),
    };
    if ok {
        return Ok(());
    }
    let expected = match shape {
        Shape::Text => "text",
        Shape::TextArray => "an array of text",
        Shape::Uint => "an unsigned integer",
        Shape::Role => "one of user, assistant, system, tool",
    };
    Err(PinnedShapeError { key, expected })
}

/// The entries in key order, owned.
impl IntoIterator for Metadata {
    type Item = (MetaKey, Scalar);
    type IntoIter = std::vec::IntoIter<(MetaKey, Scalar)>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

impl<K: Into<MetaKey>, V: Into<Scalar>> FromIterator<(K, V)> for Metadata {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(iter: I) -> Self {
        let mut m = Metadata::new();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(s: &Scalar) -> Vec<u8> {
        let mut out = Vec::new();
        s.write(&mut out);
        out
    }

    fn read(bytes: &[u8]) -> Result<Metadata, DecodeError> {
        crate::cbor::decode_exact(bytes, |r| Metadata::read(r, "metadata"))
    }

    #[test]
    fn decoded_keys_are_sorted_with_the_pinned_ones_borrowed() {
        // {"zeta": 1, "agdx.fence": 7, "alpha": 2}
        let mut bytes = vec![0xa3, 0x64];
        bytes.extend_from_slice(b"zeta");
        bytes.extend_from_slice(&[0x01, 0x6a]);
        bytes.extend_from_slice(b"agdx.fence");
        bytes.extend_from_slice(&[0x07, 0x65]);
        bytes.extend_from_slice(b"alpha");
        bytes.push(0x02);
        let m = read(&bytes).expect("a valid map");
        let keys: Vec<_> =
            m.0.iter()
                .map(|(k, _)| (k.as_ref(), matches!(k, Cow::Borrowed(_))))
                .collect();
        assert_eq!(
            keys,
            [("agdx.fence", true), ("alpha", false), ("zeta", false)]
        );
        assert_eq!(m.get(META_FENCE).and_then(Scalar::as_u64), Some(7));
    }

    #[test]
    fn a_key_repeated_anywhere_in_a_map_fails_decoding() {
        // {"b": 1, "a": 2, "c": 3, "b": 4}: the repeat is neither next to
        // the first nor in key order.
        let bytes = [
            0xa4, 0x61, b'b', 0x01, 0x61, b'a', 0x02, 0x61, b'c', 0x03, 0x61, b'b', 0x04,
        ];
        assert_eq!(
            read(&bytes).unwrap_err(),
            DecodeError::DuplicateKey { field: "metadata" }
        );
    }

    #[test]
    fn bridge_hops_append_to_the_hops_already_there() {
        let mut m = Metadata::new()
            .with("role", "user")
            .with(META_BRIDGE_HOPS, vec![Scalar::from("axon:a")]);
        m.push_bridge_hop("axon:b");
        assert_eq!(m.keys().collect::<Vec<_>>(), [META_BRIDGE_HOPS, "role"]);
        assert_eq!(
            m.get(META_BRIDGE_HOPS),
            Some(&Scalar::Array(vec!["axon:a".into(), "axon:b".into()]))
        );
        assert_eq!(m.bridge_hops().collect::<Vec<_>>(), ["axon:a", "axon:b"]);
        assert!(m.has_bridge_hop("axon:a") && m.has_bridge_hop("axon:b"));
    }

    /// `bridge_hops` is an array of text: a lone text value (or any other
    /// shape) is no hop at all, and the next bridge replaces it.
    #[test]
    fn a_misshapen_bridge_hops_value_is_no_hop_and_is_replaced() {
        let misshapen: [Scalar; 3] = [
            "axon:a".into(),
            7u64.into(),
            Scalar::Array(vec!["axon:a".into(), 7u64.into()]),
        ];
        for value in misshapen {
            let mut m = Metadata::new()
                .with(META_BRIDGE_HOPS, value.clone())
                .with("role", "user");
            assert_eq!(m.bridge_hops().count(), 0, "{value:?}");
            assert!(!m.has_bridge_hop("axon:a"), "{value:?}");
            m.push_bridge_hop("axon:a");
            assert_eq!(m.keys().collect::<Vec<_>>(), [META_BRIDGE_HOPS, "role"]);
            assert_eq!(
                m.get(META_BRIDGE_HOPS),
                Some(&Scalar::Array(vec!["axon:a".into()]))
            );
            assert!(m.has_bridge_hop("axon:a"));
            m.check_pinned().unwrap();
        }
    }

    #[test]
    fn floats_take_the_narrowest_width_that_keeps_their_bits() {
        assert_eq!(encode(&1.5.into()), [0xf9, 0x3e, 0x00]);
        assert_eq!(encode(&100000.0.into()), [0xfa, 0x47, 0xc3, 0x50, 0x00]);
        assert_eq!(encode(&0.1.into()).len(), 9);
        assert_eq!(encode(&f64::NAN.into()), [0xf9, 0x7e, 0x00]);
        assert_eq!(encode(&(-0.0).into()), [0xf9, 0x80, 0x00]);
        assert_eq!(encode(&f64::NEG_INFINITY.into()), [0xf9, 0xfc, 0x00]);
        // A NaN whose payload no narrower width holds stays wide.
        let payload = f64::from_bits(0x7ff8_0000_0000_0001);
        assert_eq!(encode(&payload.into()).len(), 9);
        let wide = [0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0];
        let decoded = Scalar::read(&mut Reader::new(&wide), "x").unwrap();
        assert_eq!(encode(&decoded), [0xf9, 0x3e, 0x00]);
        assert_eq!(decoded, Scalar::Float(Float::new(1.5)));
    }

    #[test]
    fn integers_cover_the_metadata_range() {
        assert_eq!(
            encode(&Scalar::Int(Integer::new(Integer::MIN).unwrap())),
            [0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]
        );
        assert_eq!(encode(&(-1i64).into()), [0x20]);
        assert!(Integer::new(Integer::MAX + 1).is_none());
        assert!(Integer::new(Integer::MIN - 1).is_none());
        assert_eq!(
            Integer::try_from(-(1i128 << 64)),
            Err(IntegerRangeError(-(1i128 << 64)))
        );
    }

    #[test]
    fn cap_sizes_follow_the_contract() {
        assert_eq!(Scalar::from("abc").cap_size(), 3);
        assert_eq!(Scalar::from(5u64).cap_size(), 9);
        assert_eq!(Scalar::Null.cap_size(), 9);
        assert_eq!(
            Scalar::Array(vec!["ab".into(), true.into()]).cap_size(),
            (1 + 2) + (1 + 9)
        );
    }

    #[test]
    fn insert_replaces_and_keys_stay_in_byte_order() {
        let mut m = Metadata::new().with("b", 1u64).with("a", 2u64);
        assert_eq!(m.insert("b", 3u64), Some(Scalar::from(1u64)));
        assert_eq!(m.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(m.get("b"), Some(&Scalar::from(3u64)));
    }
}
