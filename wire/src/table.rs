//! One declaration per struct-like wire type: [`wire_struct!`] takes the
//! struct with, on each field, its key (the CBOR map key, which is also its
//! JSON name), its codec and its presence, and gives the struct, its key
//! constants, its CBOR writer and reader and its JSON view. A field cannot
//! be renamed, reordered or retyped in one form and not the other.
//!
//! The CBOR reader keeps the contract's strict rules: a map with text keys,
//! each known key at most once ([`DecodeError::DuplicateKey`]), unknown keys
//! skipped, required fields checked in declaration order once the map is
//! read. The writer emits the fields in declaration order, absent optionals
//! and defaults omitted.
//!
//! Presences:
//! - `required`: always written; its absence fails decoding;
//! - `optional`: an `Option`, written when `Some`;
//! - `default`: written when it is not its type's default, read as the
//!   default when absent (`last`, `must_understand`, `body`, a card's
//!   capabilities);
//! - `always`: always written, read as the default when absent (an error
//!   body's `retryable`).

use bytes::Bytes;

use crate::agent_id::{AgentId, IdempotencyKey};
use crate::cbor::{Reader, write_bool, write_bytes, write_text, write_uint};
use crate::dictionary::{
    ContentType, DeadLetterReason, ErrorCode, Health, SignatureScheme, TaskState,
};
use crate::error::DecodeError;
use crate::id::{ChannelId, ConversationId, CorrelationId, RecordId};
use crate::kind::Kind;
use crate::metadata::Metadata;
use crate::payload::Codec;
use crate::position::LogPosition;

#[cfg(feature = "json")]
use crate::json::{
    JsonCodec, JsonError, Value,
    scalar::{DictJson, metadata_from, metadata_json},
    value::{
        boolean, bytes_from, bytes_json, hex_from, hex_json, nested_from, nested_json, parse, show,
        text, uint,
    },
};

/// How a codec writes and reads a field's value of type `T` in CBOR.
pub(crate) trait Cbor<T> {
    fn write(value: &T, out: &mut Vec<u8>);
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<T, DecodeError>;
}

/// How a codec shows a field's value of type `T` in JSON, and reads it back.
#[cfg(feature = "json")]
pub(crate) trait Json<T> {
    fn to_json(value: &T) -> Value;
    fn from_json(json: Value) -> Result<T, JsonError>;
}

/// A declared struct's JSON object (for capsules nested in others, and
/// for parts that are not payloads themselves).
#[cfg(feature = "json")]
pub(crate) trait JsonObject: Sized {
    fn to_json_object(&self) -> Value;
    fn from_json_object(json: Value) -> Result<Self, JsonError>;
}

/// Whether a `default` field holds its default (and is left out).
pub(crate) fn is_default<T: Default + PartialEq>(value: &T) -> bool {
    *value == T::default()
}

/// An unsigned integer; narrower types refuse a value they cannot hold.
pub(crate) enum Uint {}

impl Cbor<u64> for Uint {
    fn write(value: &u64, out: &mut Vec<u8>) {
        write_uint(out, *value);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<u64, DecodeError> {
        r.uint(field)
    }
}

macro_rules! narrow_uint {
    ($($t:ty),*) => {$(
        impl Cbor<$t> for Uint {
            fn write(value: &$t, out: &mut Vec<u8>) {
                write_uint(out, u64::from(*value));
            }
            fn read(r: &mut Reader<'_>, field: &'static str) -> Result<$t, DecodeError> {
                r.uint_as(field, stringify!($t))
            }
        }
    )*};
}

narrow_uint!(u8, u16, u32);

#[cfg(feature = "json")]
impl<T: Copy + Into<u64> + TryFrom<u64>> Json<T> for Uint {
    fn to_json(value: &T) -> Value {
        Value::from((*value).into())
    }
    fn from_json(json: Value) -> Result<T, JsonError> {
        uint(json)
    }
}

/// Text.
pub(crate) enum Text {}

impl Cbor<String> for Text {
    fn write(value: &String, out: &mut Vec<u8>) {
        write_text(out, value);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<String, DecodeError> {
        Ok(r.text(field)?.to_owned())
    }
}

#[cfg(feature = "json")]
impl Json<String> for Text {
    fn to_json(value: &String) -> Value {
        Value::from(value.as_str())
    }
    fn from_json(json: Value) -> Result<String, JsonError> {
        text(json)
    }
}

/// A boolean.
pub(crate) enum Bool {}

impl Cbor<bool> for Bool {
    fn write(value: &bool, out: &mut Vec<u8>) {
        write_bool(out, *value);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<bool, DecodeError> {
        r.bool(field)
    }
}

#[cfg(feature = "json")]
impl Json<bool> for Bool {
    fn to_json(value: &bool) -> Value {
        Value::Bool(*value)
    }
    fn from_json(json: Value) -> Result<bool, JsonError> {
        boolean(json)
    }
}

/// A byte string that is a key or a signature: lowercase hex in JSON.
pub(crate) enum Hex {}

/// A byte string of opaque content: text in JSON when it reads as text,
/// else `{"hex": "..."}`.
pub(crate) enum Opaque {}

/// A byte string that holds a `T` payload: its JSON view when it decodes
/// and re-encodes to the same bytes, else as [`Opaque`] bytes.
pub(crate) struct Nested<T>(std::marker::PhantomData<T>);

/// The byte-string codecs, alike in CBOR and apart in JSON.
pub(crate) trait ByteString {}

impl ByteString for Hex {}
impl ByteString for Opaque {}
impl<T> ByteString for Nested<T> {}

impl<C: ByteString> Cbor<Vec<u8>> for C {
    fn write(value: &Vec<u8>, out: &mut Vec<u8>) {
        write_bytes(out, value);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Vec<u8>, DecodeError> {
        Ok(r.bytes(field)?.to_vec())
    }
}

impl Cbor<Bytes> for Opaque {
    fn write(value: &Bytes, out: &mut Vec<u8>) {
        write_bytes(out, value);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Bytes, DecodeError> {
        r.shared_bytes(field)
    }
}

#[cfg(feature = "json")]
impl Json<Vec<u8>> for Hex {
    fn to_json(value: &Vec<u8>) -> Value {
        hex_json(value)
    }
    fn from_json(json: Value) -> Result<Vec<u8>, JsonError> {
        hex_from(json)
    }
}

#[cfg(feature = "json")]
impl Json<Vec<u8>> for Opaque {
    fn to_json(value: &Vec<u8>) -> Value {
        bytes_json(value)
    }
    fn from_json(json: Value) -> Result<Vec<u8>, JsonError> {
        bytes_from(json)
    }
}

#[cfg(feature = "json")]
impl Json<Bytes> for Opaque {
    fn to_json(value: &Bytes) -> Value {
        bytes_json(value)
    }
    fn from_json(json: Value) -> Result<Bytes, JsonError> {
        bytes_from(json).map(Bytes::from)
    }
}

#[cfg(feature = "json")]
impl<T: JsonCodec> Json<Vec<u8>> for Nested<T> {
    fn to_json(value: &Vec<u8>) -> Value {
        nested_json::<T>(value)
    }
    fn from_json(json: Value) -> Result<Vec<u8>, JsonError> {
        nested_from::<T>(json)
    }
}

/// A SHA-256 digest: exactly 32 bytes; lowercase hex in JSON.
pub(crate) enum Digest {}

impl Cbor<[u8; 32]> for Digest {
    fn write(value: &[u8; 32], out: &mut Vec<u8>) {
        write_bytes(out, value);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<[u8; 32], DecodeError> {
        let b = r.bytes(field)?;
        b.try_into().map_err(|_| DecodeError::BadLength {
            field,
            expected: 32,
            len: b.len(),
        })
    }
}

#[cfg(feature = "json")]
impl Json<[u8; 32]> for Digest {
    fn to_json(value: &[u8; 32]) -> Value {
        hex_json(value)
    }
    fn from_json(json: Value) -> Result<[u8; 32], JsonError> {
        let bytes = hex_from(json)?;
        bytes
            .as_slice()
            .try_into()
            .map_err(|_| JsonError::Invalid(format!("must be 32 bytes, got {}", bytes.len())))
    }
}

/// An id or a log position: its own byte form in CBOR, its text in JSON.
pub(crate) enum Shown {}

/// A dictionary: its code in CBOR, its name in JSON.
pub(crate) enum Dict {}

/// Types that read and write themselves, under a codec.
macro_rules! self_coded {
    ($codec:ty: $($t:ty),*) => {$(
        impl Cbor<$t> for $codec {
            fn write(value: &$t, out: &mut Vec<u8>) {
                value.write(out);
            }
            fn read(r: &mut Reader<'_>, field: &'static str) -> Result<$t, DecodeError> {
                <$t>::read(r, field)
            }
        }
    )*};
}

self_coded!(Shown: RecordId, ConversationId, CorrelationId, ChannelId, LogPosition);
self_coded!(Dict: ContentType, TaskState, ErrorCode, DeadLetterReason, Health, SignatureScheme);

#[cfg(feature = "json")]
impl<T> Json<T> for Shown
where
    T: std::fmt::Display + std::str::FromStr + Copy,
    T::Err: std::fmt::Display,
{
    fn to_json(value: &T) -> Value {
        show(value)
    }
    fn from_json(json: Value) -> Result<T, JsonError> {
        parse(json)
    }
}

#[cfg(feature = "json")]
impl<T: DictJson + Copy> Json<T> for Dict {
    fn to_json(value: &T) -> Value {
        value.to_json()
    }
    fn from_json(json: Value) -> Result<T, JsonError> {
        T::from_json(json)
    }
}

/// Metadata: a map of scalars, in its order.
pub(crate) enum Meta {}

self_coded!(Meta: Metadata);

#[cfg(feature = "json")]
impl Json<Metadata> for Meta {
    fn to_json(value: &Metadata) -> Value {
        metadata_json(value)
    }
    fn from_json(json: Value) -> Result<Metadata, JsonError> {
        metadata_from(json)
    }
}

/// An agent id: text that must follow the agent-id rules.
pub(crate) enum Agent {}

impl Cbor<AgentId> for Agent {
    fn write(value: &AgentId, out: &mut Vec<u8>) {
        write_text(out, value.as_str());
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<AgentId, DecodeError> {
        AgentId::new(r.text(field)?).map_err(|source| DecodeError::InvalidAgentId { field, source })
    }
}

/// An idempotency key: text that must follow the key rules.
pub(crate) enum Key {}

impl Cbor<IdempotencyKey> for Key {
    fn write(value: &IdempotencyKey, out: &mut Vec<u8>) {
        write_text(out, value.as_str());
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<IdempotencyKey, DecodeError> {
        Ok(IdempotencyKey::new(r.text(field)?)?)
    }
}

/// The envelope kind, by name.
pub(crate) enum KindName {}

impl Cbor<Kind> for KindName {
    fn write(value: &Kind, out: &mut Vec<u8>) {
        write_text(out, value.as_str());
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Kind, DecodeError> {
        r.text(field)?
            .parse::<Kind>()
            .map_err(|e| DecodeError::UnknownKind(e.0))
    }
}

/// Text identities show as their text and parse back through their rules.
#[cfg(feature = "json")]
macro_rules! text_json {
    ($($codec:ty: $t:ty),*) => {$(
        impl Json<$t> for $codec {
            fn to_json(value: &$t) -> Value {
                Value::from(value.as_str())
            }
            fn from_json(json: Value) -> Result<$t, JsonError> {
                parse(json)
            }
        }
    )*};
}

#[cfg(feature = "json")]
text_json!(Agent: AgentId, Key: IdempotencyKey, KindName: Kind);

/// A capsule nested in a field; its decode errors are placed in the field.
pub(crate) enum Capsule {}

impl<T: Codec> Cbor<T> for Capsule {
    fn write(value: &T, out: &mut Vec<u8>) {
        value.write(out);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<T, DecodeError> {
        T::read(r).map_err(|e| e.within(field))
    }
}

#[cfg(feature = "json")]
impl<T: JsonObject> Json<T> for Capsule {
    fn to_json(value: &T) -> Value {
        value.to_json_object()
    }
    fn from_json(json: Value) -> Result<T, JsonError> {
        T::from_json_object(json)
    }
}

/// A declared struct as a JSON payload: its [`JsonObject`] view.
#[cfg(feature = "json")]
macro_rules! json_payload {
    ($t:ty) => {
        impl $crate::json::JsonCodec for $t {
            fn to_json(&self) -> $crate::json::Value {
                $crate::table::JsonObject::to_json_object(self)
            }
            fn from_json(json: $crate::json::Value) -> Result<Self, $crate::json::JsonError> {
                $crate::table::JsonObject::from_json_object(json)
            }
        }
    };
}
#[cfg(feature = "json")]
pub(crate) use json_payload;

/// Declares a struct-like wire type once. Each field carries
/// `[CONST = "key", Codec, presence]`: `CONST` (in the module `keys`) names
/// the key, `Codec` implements [`Cbor`] (and [`Json`]) for the field's
/// value type, and the presence is `required`, `optional`, `default` or
/// `always` (see the module docs). `cbor` names the map in a wrong-type
/// error, `json` the object in a JSON error; an optional `size_hint`
/// guesses the encoded size.
macro_rules! wire_struct {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            cbor: $cbor_name:literal,
            json: $json_name:literal,
            keys: $keys:ident
            $(, size_hint: $hint:expr)?;
            $(
                $(#[$field_meta:meta])*
                pub $field:ident: $ty:ty [$KEY:ident = $key:literal, $codec:ty, $presence:ident],
            )*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $(
                $(#[$field_meta])*
                pub $field: $ty,
            )*
        }

        #[doc = concat!("The keys of [`", stringify!($name), "`], in declaration order.")]
        pub(crate) mod $keys {
            $(
                pub(crate) const $KEY: &str = $key;
            )*

            /// The keys as the bytes a decoder meets: a key read is matched
            /// as bytes, and only one matching none is checked for UTF-8.
            pub(crate) mod raw {
                $(
                    pub(crate) const $KEY: &[u8] = super::$KEY.as_bytes();
                )*
            }

            /// The keys as encoded text items, each written as one copy.
            pub(crate) mod item {
                $(
                    pub(crate) const $KEY: &[u8] = &$crate::cbor::text_item::<
                        { $crate::cbor::text_item_len(super::$KEY) },
                    >(super::$KEY);
                )*
            }
        }

        impl $name {
            /// Writes the map, leaving out each field whose key `keep`
            /// refuses (the signing input leaves out the signature).
            pub(crate) fn write_fields(&self, out: &mut Vec<u8>, keep: impl Fn(&'static str) -> bool) {
                let count = 0 $(
                    + usize::from(
                        $crate::table::present!($presence, &self.$field) && keep($keys::$KEY),
                    )
                )*;
                $crate::cbor::write_map(out, count);
                $(
                    $crate::table::write_field!(
                        $presence, $codec, ($keys::$KEY, $keys::item::$KEY), &self.$field, out, keep
                    );
                )*
            }
        }

        impl $crate::payload::Codec for $name {
            const NAME: &'static str = $cbor_name;

            $(
                fn size_hint(&self) -> usize {
                    let hint: fn(&Self) -> usize = $hint;
                    hint(self)
                }
            )?

            fn write(&self, out: &mut Vec<u8>) {
                self.write_fields(out, |_| true);
            }

            fn read(r: &mut $crate::cbor::Reader<'_>) -> Result<Self, $crate::DecodeError> {
                let entries = r.map(Self::NAME)?;
                $( let mut $field = None; )*
                for _ in 0..entries {
                    match r.raw_key()? {
                        $(
                            $keys::raw::$KEY => {
                                if $field.is_some() {
                                    return Err($crate::DecodeError::DuplicateKey {
                                        field: $keys::$KEY,
                                    });
                                }
                                $field = Some(
                                    <$codec as $crate::table::Cbor<_>>::read(r, $keys::$KEY)?,
                                );
                            }
                        )*
                        unknown => r.skip_unknown(unknown)?,
                    }
                }
                r.close();
                Ok($name {
                    $( $field: $crate::table::finish!($presence, $field, $keys::$KEY)?, )*
                })
            }
        }

        #[cfg(feature = "json")]
        impl $crate::table::JsonObject for $name {
            fn to_json_object(&self) -> $crate::json::Value {
                let object = $crate::json::value::Obj::default();
                $(
                    let object = $crate::table::put_json!(
                        $presence, $codec, object, $keys::$KEY, &self.$field
                    );
                )*
                object.done()
            }

            fn from_json_object(
                json: $crate::json::Value,
            ) -> Result<Self, $crate::json::JsonError> {
                let mut fields = $crate::json::value::Fields::new($json_name, json)?;
                let value = $name {
                    $(
                        $field: $crate::table::take_json!(
                            $presence, $codec, fields, $keys::$KEY
                        )?,
                    )*
                };
                fields.finish()?;
                Ok(value)
            }
        }
    };
}
pub(crate) use wire_struct;

/// Whether a field is written.
macro_rules! present {
    (required, $v:expr) => {
        true
    };
    (always, $v:expr) => {
        true
    };
    (optional, $v:expr) => {
        $v.is_some()
    };
    (default, $v:expr) => {
        !$crate::table::is_default($v)
    };
}
pub(crate) use present;

/// Writes one field's key and value, if it is written.
macro_rules! write_field {
    (optional, $codec:ty, ($key:expr, $item:expr), $v:expr, $out:ident, $keep:ident) => {
        if let Some(v) = $v
            && $keep($key)
        {
            $out.extend_from_slice($item);
            <$codec as $crate::table::Cbor<_>>::write(v, $out);
        }
    };
    ($presence:ident, $codec:ty, ($key:expr, $item:expr), $v:expr, $out:ident, $keep:ident) => {
        if $crate::table::present!($presence, $v) && $keep($key) {
            $out.extend_from_slice($item);
            <$codec as $crate::table::Cbor<_>>::write($v, $out);
        }
    };
}
pub(crate) use write_field;

/// A field's value once its map is read.
macro_rules! finish {
    (required, $v:ident, $key:expr) => {
        $crate::cbor::required($v, $key)
    };
    (optional, $v:ident, $key:expr) => {
        Ok::<_, $crate::DecodeError>($v)
    };
    ($presence:ident, $v:ident, $key:expr) => {
        Ok::<_, $crate::DecodeError>($v.unwrap_or_default())
    };
}
pub(crate) use finish;

/// Adds one field to a JSON object, if it is written.
#[cfg(feature = "json")]
macro_rules! put_json {
    (optional, $codec:ty, $object:ident, $key:expr, $v:expr) => {
        $object.opt(
            $key,
            $v.as_ref(),
            <$codec as $crate::table::Json<_>>::to_json,
        )
    };
    ($presence:ident, $codec:ty, $object:ident, $key:expr, $v:expr) => {
        if $crate::table::present!($presence, $v) {
            $object.put($key, <$codec as $crate::table::Json<_>>::to_json($v))
        } else {
            $object
        }
    };
}
#[cfg(feature = "json")]
pub(crate) use put_json;

/// Reads one field from a JSON object.
#[cfg(feature = "json")]
macro_rules! take_json {
    (required, $codec:ty, $fields:ident, $key:expr) => {
        $fields.req_map($key, <$codec as $crate::table::Json<_>>::from_json)
    };
    (optional, $codec:ty, $fields:ident, $key:expr) => {
        $fields.map($key, <$codec as $crate::table::Json<_>>::from_json)
    };
    ($presence:ident, $codec:ty, $fields:ident, $key:expr) => {
        $fields
            .map($key, <$codec as $crate::table::Json<_>>::from_json)
            .map(Option::unwrap_or_default)
    };
}
#[cfg(feature = "json")]
pub(crate) use take_json;
