//! Log positions: where a record sits in the log (`cause_at`, dead-letter `source`).

use std::fmt;
use std::str::FromStr;

use crate::cbor::{Reader, write_bytes};
use crate::error::DecodeError;

/// A record's place in a partitioned log: stream id, topic id, partition id
/// (0-based) and offset, addressed exactly like Apache Iggy.
///
/// On the wire it is a 20-byte string (u32 BE ×3, u64 BE); shown to people as
/// `stream/topic/partition/offset`.
///
/// ```
/// use agdx_wire::LogPosition;
/// let p: LogPosition = "1/2/3/41".parse().unwrap();
/// assert_eq!(p.offset, 41);
/// assert_eq!(LogPosition::from_bytes(&p.to_bytes()).unwrap(), p);
/// assert_eq!(p.to_string(), "1/2/3/41");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LogPosition {
    /// The stream id.
    pub stream: u32,
    /// The topic id.
    pub topic: u32,
    /// The partition id, from 0.
    pub partition: u32,
    /// The record's offset in the partition.
    pub offset: u64,
}

/// Length of a packed [`LogPosition`].
pub const LOG_POSITION_LEN: usize = 20;

/// Why a log position could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PositionError {
    /// The byte form is not 20 bytes long.
    #[error(
        "a log position is {LOG_POSITION_LEN} bytes (u32 stream, u32 topic, u32 partition, u64 offset, big-endian), got {0} bytes"
    )]
    WrongLength(usize),
    /// The text form is not four `/`-separated unsigned numbers.
    #[error(
        "a log position is written stream/topic/partition/offset with four unsigned numbers, e.g. 1/2/0/42; got {0:?}"
    )]
    BadText(String),
}

impl LogPosition {
    /// Packs the position into its 20-byte wire form.
    pub fn to_bytes(&self) -> [u8; LOG_POSITION_LEN] {
        let mut out = [0u8; LOG_POSITION_LEN];
        out[0..4].copy_from_slice(&self.stream.to_be_bytes());
        out[4..8].copy_from_slice(&self.topic.to_be_bytes());
        out[8..12].copy_from_slice(&self.partition.to_be_bytes());
        out[12..20].copy_from_slice(&self.offset.to_be_bytes());
        out
    }

    /// Reads the 20-byte wire form.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, PositionError> {
        let b: &[u8; LOG_POSITION_LEN] = bytes
            .try_into()
            .map_err(|_| PositionError::WrongLength(bytes.len()))?;
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut off = [0u8; 8];
        off.copy_from_slice(&b[12..20]);
        Ok(Self {
            stream: u32_at(0),
            topic: u32_at(4),
            partition: u32_at(8),
            offset: u64::from_be_bytes(off),
        })
    }
}

impl fmt::Display for LogPosition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}/{}/{}/{}",
            self.stream, self.topic, self.partition, self.offset
        )
    }
}

impl FromStr for LogPosition {
    type Err = PositionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || PositionError::BadText(s.to_owned());
        let mut parts = s.split('/');
        let mut next = || parts.next().ok_or_else(bad);
        let stream = next()?.parse().map_err(|_| bad())?;
        let topic = next()?.parse().map_err(|_| bad())?;
        let partition = next()?.parse().map_err(|_| bad())?;
        let offset = next()?.parse().map_err(|_| bad())?;
        if parts.next().is_some() {
            return Err(bad());
        }
        Ok(Self {
            stream,
            topic,
            partition,
            offset,
        })
    }
}

impl LogPosition {
    pub(crate) fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        let b = r.bytes(field)?;
        Self::from_bytes(b).map_err(|_| DecodeError::BadPosition {
            field,
            len: b.len(),
        })
    }

    pub(crate) fn write(&self, out: &mut Vec<u8>) {
        write_bytes(out, &self.to_bytes());
    }
}

/// Human-readable formats get `stream/topic/partition/offset`; binary ones
/// the 20-byte wire form.
impl serde::Serialize for LogPosition {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.collect_str(self)
        } else {
            s.serialize_bytes(&self.to_bytes())
        }
    }
}

impl<'de> serde::Deserialize<'de> for LogPosition {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = LogPosition;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a 20-byte log position or stream/topic/partition/offset")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<LogPosition, E> {
                v.parse().map_err(E::custom)
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<LogPosition, E> {
                LogPosition::from_bytes(v).map_err(E::custom)
            }
        }
        if d.is_human_readable() {
            d.deserialize_str(Visitor)
        } else {
            d.deserialize_bytes(Visitor)
        }
    }
}
