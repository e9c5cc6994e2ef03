//! Damage: records of a partition that a poll cannot return, and where
//! they are.
//!
//! Every backend reports unreadable records the same way, as a
//! [`LogError::Corrupt`](super::LogError::Corrupt) carrying a [`Damage`]:
//! one record whose bytes fail their integrity check or whose header block
//! does not decode, or a run of records the storage lost (the embedded
//! log's database no longer returns offsets it acknowledged). Records
//! before it are returned by the poll that meets it; a poll starting at it
//! fails with it. A reader steps over it by reading on from
//! [`Damage::next_offset`], a consumer group by committing
//! [`Damage::last`], and a tool says where it was.

use std::fmt;

use agdx_wire::LogPosition;
use bytes::Bytes;

/// Consecutive records of one partition that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// The first record that cannot be read.
    pub position: LogPosition,
    /// The offset of the last one (`position.offset` for one record).
    pub last: u64,
    /// What is wrong with them.
    pub reason: String,
    /// The record's payload when it is one intact record with only its
    /// headers unreadable (a message with a malformed header block that
    /// another client wrote), so a consumer can keep the bytes (a worker
    /// puts them in the dead letter); `None` when the bytes themselves are
    /// damaged or gone.
    pub payload: Option<Bytes>,
}

impl Damage {
    /// One record that cannot be read.
    pub fn record(position: LogPosition, reason: impl Into<String>) -> Self {
        Self {
            position,
            last: position.offset,
            reason: reason.into(),
            payload: None,
        }
    }

    /// One record with intact `payload` whose headers cannot be read.
    pub fn headers(position: LogPosition, reason: impl Into<String>, payload: Bytes) -> Self {
        Self {
            payload: Some(payload),
            ..Self::record(position, reason)
        }
    }

    /// The records from `position` to offset `last` (inclusive; at least
    /// `position.offset`) of its partition.
    pub fn range(position: LogPosition, last: u64, reason: impl Into<String>) -> Self {
        Self {
            last: last.max(position.offset),
            ..Self::record(position, reason)
        }
    }

    /// How many records it covers.
    pub fn count(&self) -> u64 {
        self.last - self.position.offset + 1
    }

    /// The offset to read on from, past the damage.
    pub fn next_offset(&self) -> u64 {
        self.last.saturating_add(1)
    }

    /// The position of the last record it covers.
    pub fn last_position(&self) -> LogPosition {
        LogPosition {
            offset: self.last,
            ..self.position
        }
    }

    /// The offsets it covers, for people: `12` or `12 to 40 (29 records)`.
    pub fn offsets(&self) -> String {
        if self.count() == 1 {
            return self.last.to_string();
        }
        format!(
            "{} to {} ({} records)",
            self.position.offset,
            self.last,
            self.count()
        )
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.count() == 1 {
            write!(f, "the record at {} cannot be read", self.position)?;
        } else {
            write!(
                f,
                "the records from {} to offset {} ({} records) cannot be read",
                self.position,
                self.last,
                self.count()
            )?;
        }
        write!(f, " ({})", self.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(offset: u64) -> LogPosition {
        LogPosition {
            stream: 1,
            topic: 2,
            partition: 3,
            offset,
        }
    }

    #[test]
    fn one_record_and_a_range() {
        let one = Damage::record(at(7), "checksum mismatch");
        assert_eq!((one.count(), one.next_offset()), (1, 8));
        assert_eq!(one.offsets(), "7");
        assert_eq!(
            one.to_string(),
            "the record at 1/2/3/7 cannot be read (checksum mismatch)"
        );
        let run = Damage::range(at(10), 39, "lost");
        assert_eq!((run.count(), run.next_offset()), (30, 40));
        assert_eq!(run.last_position(), at(39));
        assert_eq!(run.offsets(), "10 to 39 (30 records)");
        assert!(run.to_string().contains("to offset 39 (30 records)"));
        assert_eq!(Damage::range(at(5), 2, "x").count(), 1, "never backwards");
        assert_eq!(Damage::record(at(u64::MAX), "x").next_offset(), u64::MAX);
    }
}
