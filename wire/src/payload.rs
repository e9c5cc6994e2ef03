//! What every top-level wire payload (the envelope and each capsule) can do.

use crate::cbor::{Reader, decode_exact};
use crate::error::DecodeError;
use crate::validation::ValidationError;

/// Why bytes were not accepted as a valid payload.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The bytes did not decode.
    #[error(transparent)]
    Decode(#[from] DecodeError),
    /// The payload decoded but breaks a rule.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
}

/// A payload that travels as one CBOR item: the envelope and every capsule.
/// Each type also has these as inherent methods; the trait lets tools treat
/// them alike.
pub trait WirePayload: Sized {
    /// The payload's name in tools (`agdx wire check --type NAME`).
    const TYPE_NAME: &'static str;

    /// The canonical encoding: declaration order, shortest integers,
    /// absent optionals omitted.
    fn encode(&self) -> Vec<u8>;

    /// Decodes exactly one item; trailing bytes are an error.
    fn decode(bytes: &[u8]) -> Result<Self, DecodeError>;

    /// Checks the contract's rules for this payload.
    fn validate(&self) -> Result<(), ValidationError>;

    /// [`decode`](Self::decode) then [`validate`](Self::validate).
    fn decode_valid(bytes: &[u8]) -> Result<Self, WireError> {
        let value = Self::decode(bytes)?;
        value.validate()?;
        Ok(value)
    }
}

/// Reading and writing a payload inside a larger item.
pub(crate) trait Codec: Sized {
    /// The name used as the field of a top-level wrong-type error.
    const NAME: &'static str;
    /// A first guess at the encoded size.
    fn size_hint(&self) -> usize {
        64
    }
    fn write(&self, out: &mut Vec<u8>);
    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError>;
}

pub(crate) fn encode<T: Codec>(value: &T) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.size_hint());
    value.write(&mut out);
    out
}

pub(crate) fn decode<T: Codec>(bytes: &[u8]) -> Result<T, DecodeError> {
    decode_exact(bytes, T::read)
}

/// Gives a [`Codec`] type with an inherent `validate` the inherent
/// `encode`/`decode`/`decode_valid` and the [`WirePayload`] impl.
macro_rules! wire_payload {
    ($t:ty, $type_name:literal) => {
        impl $t {
            /// The canonical encoding: declaration order, shortest integers,
            /// absent optionals omitted.
            pub fn encode(&self) -> Vec<u8> {
                $crate::payload::encode(self)
            }

            /// Decodes exactly one item; trailing bytes are an error.
            pub fn decode(bytes: &[u8]) -> Result<Self, $crate::DecodeError> {
                $crate::payload::decode(bytes)
            }

            /// Decodes, then validates.
            pub fn decode_valid(bytes: &[u8]) -> Result<Self, $crate::WireError> {
                <Self as $crate::WirePayload>::decode_valid(bytes)
            }
        }

        impl $crate::WirePayload for $t {
            const TYPE_NAME: &'static str = $type_name;
            fn encode(&self) -> Vec<u8> {
                <$t>::encode(self)
            }
            fn decode(bytes: &[u8]) -> Result<Self, $crate::DecodeError> {
                <$t>::decode(bytes)
            }
            fn validate(&self) -> Result<(), $crate::ValidationError> {
                <$t>::validate(self)
            }
        }
    };
}
pub(crate) use wire_payload;
