//! The four 128-bit machine ids: record, conversation, correlation, channel.
//!
//! On the wire each is a 16-byte big-endian byte string; shown to people as
//! 26 characters of Crockford base32 (the ULID alphabet). The wire crate
//! never mints ids: the runtime does, from its clock and random source.

use std::fmt;
use std::str::FromStr;

use crate::cbor::{Reader, write_bytes};
use crate::error::DecodeError;

/// Length of an id on the wire.
pub const ID_LEN: usize = 16;

/// Length of an id's display form.
pub const ID_TEXT_LEN: usize = 26;

const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// Maps an ASCII byte to its base32 digit, either case; 0xff when not a digit.
const DIGITS: [u8; 256] = {
    let mut table = [0xffu8; 256];
    let mut i = 0;
    while i < 32 {
        let c = ALPHABET[i];
        table[c as usize] = i as u8;
        table[c.to_ascii_lowercase() as usize] = i as u8;
        i += 1;
    }
    table
};

/// Why an id's text form could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdParseError {
    /// Not 26 characters long.
    #[error("an id is {ID_TEXT_LEN} characters of Crockford base32, got {0} characters")]
    WrongLength(usize),
    /// A character outside the ULID alphabet.
    #[error(
        "{character:?} at position {index} is not a Crockford base32 digit (0-9 and A-Z without I, L, O, U)"
    )]
    BadCharacter {
        /// The offending character.
        character: char,
        /// Its character position.
        index: usize,
    },
    /// The value does not fit in 128 bits (the first character is above `7`).
    #[error("the id overflows 128 bits: its first character must be 0-7, got {0:?}")]
    Overflow(char),
}

/// An id byte string of the wrong length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("an id is {ID_LEN} bytes (a u128, big-endian), got {0} bytes")]
pub struct IdLengthError(pub usize);

fn encode_base32(v: u128) -> [u8; ID_TEXT_LEN] {
    // Character i holds bits 5*(25-i).. of `v`. Taken as the top 8 bits (2
    // characters) and two runs of 60 bits (12 characters each), every shift
    // is on a u64: the ids of every record a worker answers pass here.
    const SIXTY: u64 = (1 << 60) - 1;
    let runs = [
        ((v >> 120) as u64, 2),
        ((v >> 60) as u64 & SIXTY, 12),
        (v as u64 & SIXTY, 12),
    ];
    let mut out = [0u8; ID_TEXT_LEN];
    let mut at = 0;
    for (bits, chars) in runs {
        for c in (0..chars).rev() {
            out[at] = ALPHABET[((bits >> (5 * c)) & 0x1f) as usize];
            at += 1;
        }
    }
    out
}

fn decode_base32(s: &str) -> Result<u128, IdParseError> {
    let count = s.chars().count();
    if count != ID_TEXT_LEN {
        return Err(IdParseError::WrongLength(count));
    }
    let mut v: u128 = 0;
    for (index, character) in s.chars().enumerate() {
        let d = if character.is_ascii() {
            DIGITS[character as usize]
        } else {
            0xff
        };
        if d == 0xff {
            return Err(IdParseError::BadCharacter { character, index });
        }
        if index == 0 && d > 7 {
            return Err(IdParseError::Overflow(character));
        }
        v = (v << 5) | u128::from(d);
    }
    Ok(v)
}

macro_rules! ids {
    ($( $(#[$doc:meta])* $name:ident ),* $(,)?) => {$(
        $(#[$doc])*
        ///
        /// Conversions between id types are explicit
        /// (`CorrelationId::from_u128(conversation.as_u128())`).
        // Kept as its wire bytes: big-endian, so their order is the
        // number's, and byte-aligned, so an optional id takes 17 bytes where
        // a `u128` (aligned to 16) would take 32 in every envelope.
        #[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
        pub struct $name([u8; ID_LEN]);

        impl $name {
            /// Wraps a raw 128-bit value.
            pub const fn from_u128(v: u128) -> Self {
                Self(v.to_be_bytes())
            }

            /// The raw 128-bit value.
            pub const fn as_u128(self) -> u128 {
                u128::from_be_bytes(self.0)
            }

            /// The 16-byte big-endian wire form.
            pub const fn to_bytes(self) -> [u8; ID_LEN] {
                self.0
            }

            /// Reads the 16-byte big-endian wire form.
            pub fn from_bytes(bytes: &[u8]) -> Result<Self, IdLengthError> {
                bytes.try_into().map(Self).map_err(|_| IdLengthError(bytes.len()))
            }

            /// The text form (what [`Display`](fmt::Display) writes: 26
            /// characters of Crockford base32) as ASCII bytes, without
            /// allocating.
            pub fn to_text(self) -> [u8; ID_TEXT_LEN] {
                encode_base32(self.as_u128())
            }

            pub(crate) fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
                let b = r.bytes(field)?;
                Self::from_bytes(b).map_err(|e| DecodeError::BadId { field, len: e.0 })
            }

            pub(crate) fn write(self, out: &mut Vec<u8>) {
                write_bytes(out, &self.0);
            }
        }

        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_tuple(stringify!($name)).field(&self.as_u128()).finish()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                let text = self.to_text();
                // The alphabet is ASCII, so the bytes are always UTF-8.
                f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
            }
        }

        impl FromStr for $name {
            type Err = IdParseError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                decode_base32(s).map(Self::from_u128)
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                if s.is_human_readable() {
                    s.collect_str(self)
                } else {
                    s.serialize_bytes(&self.to_bytes())
                }
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                struct Visitor;
                impl serde::de::Visitor<'_> for Visitor {
                    type Value = $name;
                    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                        f.write_str("a 16-byte id or its 26-character base32 form")
                    }
                    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<$name, E> {
                        v.parse().map_err(E::custom)
                    }
                    fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<$name, E> {
                        $name::from_bytes(v).map_err(E::custom)
                    }
                }
                if d.is_human_readable() {
                    d.deserialize_str(Visitor)
                } else {
                    d.deserialize_bytes(Visitor)
                }
            }
        }
    )*};
}

ids! {
    /// The id of one durable record (an envelope's `record`, `cause`).
    RecordId,
    /// The id of a conversation: the partition key and the trace identity.
    ConversationId,
    /// Pairs a request with its replies.
    CorrelationId,
    /// Groups the chunks of one stream.
    ChannelId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_pins_the_extremes() {
        assert_eq!(
            RecordId::from_u128(0).to_string(),
            "00000000000000000000000000"
        );
        assert_eq!(
            RecordId::from_u128(u128::MAX).to_string(),
            "7ZZZZZZZZZZZZZZZZZZZZZZZZZ"
        );
        assert_eq!(
            RecordId::from_u128(1).to_string(),
            "00000000000000000000000001"
        );
        assert_eq!(
            RecordId::from_u128(32).to_string(),
            "00000000000000000000000010"
        );
    }

    #[test]
    fn each_bit_lands_in_its_character() {
        for bit in 0..128 {
            let text = RecordId::from_u128(1 << bit).to_text();
            let at = ID_TEXT_LEN - 1 - bit / 5;
            for (i, &c) in text.iter().enumerate() {
                let want = if i == at {
                    ALPHABET[1 << (bit % 5)]
                } else {
                    b'0'
                };
                assert_eq!(c, want, "bit {bit}, character {i}");
            }
        }
    }

    #[test]
    fn text_round_trips_through_parsing() {
        // A fixed xorshift walk: ids with every character varied.
        let mut v: u128 = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834;
        for _ in 0..1000 {
            v ^= v << 13;
            v ^= v >> 7;
            v ^= v << 17;
            let id = RecordId::from_u128(v);
            assert_eq!(id.to_string().parse::<RecordId>(), Ok(id));
        }
    }

    #[test]
    fn ids_order_as_their_numbers_so_ulids_sort_by_time() {
        let mut v: u128 = 0x0123_4567_89ab_cdef_fedc_ba98_7654_3210;
        let mut previous = RecordId::from_u128(v);
        for _ in 0..1000 {
            v ^= v << 13;
            v ^= v >> 7;
            v ^= v << 17;
            let id = RecordId::from_u128(v);
            assert_eq!(id.cmp(&previous), v.cmp(&previous.as_u128()), "{v:x}");
            previous = id;
        }
        let earlier = ConversationId::from_u128(0x0190_0000_0000_0000_0000_0000_0000_ffff);
        let later = ConversationId::from_u128(0x0191_0000_0000_0000_0000_0000_0000_0000);
        assert!(earlier < later);
    }

    #[test]
    fn parse_is_case_insensitive_and_round_trips() {
        let id = ConversationId::from_u128(0x0190_3c1f_aa00_0000_0000_0000_0000_0002);
        let text = id.to_string();
        assert_eq!(text, "01J0Y1ZAG00000000000000002");
        assert_eq!(text.to_lowercase().parse::<ConversationId>(), Ok(id));
        assert_eq!(text.parse::<ConversationId>(), Ok(id));
    }

    #[test]
    fn parse_errors_are_distinct() {
        assert_eq!("0".parse::<RecordId>(), Err(IdParseError::WrongLength(1)));
        assert_eq!(
            "0000000000000000000000000I".parse::<RecordId>(),
            Err(IdParseError::BadCharacter {
                character: 'I',
                index: 25
            })
        );
        assert_eq!(
            "80000000000000000000000000".parse::<RecordId>(),
            Err(IdParseError::Overflow('8'))
        );
        assert_eq!(
            "é0000000000000000000000000".parse::<RecordId>(),
            Err(IdParseError::BadCharacter {
                character: 'é',
                index: 0
            })
        );
    }

    #[test]
    fn bytes_are_big_endian() {
        let id = ChannelId::from_u128(0x0102);
        let b = id.to_bytes();
        assert_eq!(&b[14..], &[1, 2]);
        assert_eq!(ChannelId::from_bytes(&b), Ok(id));
        assert_eq!(ChannelId::from_bytes(&b[1..]), Err(IdLengthError(15)));
    }
}
