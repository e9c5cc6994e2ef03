//! How long a topic keeps its records.
//!
//! Each backend removes old records its own way: Iggy by message expiry
//! (whole segments, once every message in one has expired), Kafka by
//! `retention.ms` (whole segments too), the embedded log by deleting the
//! records older than the topic's retention in small batches after its
//! appends. Readers see the same thing everywhere: a partition starts at
//! [`Log::first_offset`](super::Log::first_offset), and a poll from below
//! it reads from it.
//!
//! A reader that depends on records (a view resuming from a snapshot)
//! places a [`hold`](super::Log::hold) on the offset it reads on from; the
//! embedded log never removes a held record. Iggy and Kafka remove records
//! by age alone, so the runtime's views save a snapshot at least every
//! [`SNAPSHOT_MAX_AGE`](crate::view::SNAPSHOT_MAX_AGE), well within any
//! retention, and report a gap when one opened anyway.

use std::fmt;
use std::time::Duration;

/// How long a topic keeps its records.
///
/// ```
/// use std::time::Duration;
/// use agdx::log::Retention;
/// assert_eq!(Retention::For(Duration::from_secs(3600)).max_age(), Some(Duration::from_secs(3600)));
/// assert_eq!(Retention::Forever.max_age(), None);
/// assert_eq!(Retention::For(Duration::from_secs(7 * 86_400)).to_string(), "7 days");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Retention {
    /// Whatever the backend does when told nothing: the embedded log and
    /// Iggy's default settings keep every record, a Kafka broker applies its
    /// `log.retention.*` settings (7 days unless set).
    #[default]
    BackendDefault,
    /// Records are never removed.
    Forever,
    /// Records older than this (by the log's timestamp) are removed.
    For(Duration),
}

impl Retention {
    /// The age past which records are removed, when there is one.
    pub fn max_age(&self) -> Option<Duration> {
        match self {
            Retention::For(age) => Some(*age),
            Retention::BackendDefault | Retention::Forever => None,
        }
    }
}

impl fmt::Display for Retention {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Retention::BackendDefault => f.write_str("the backend's default"),
            Retention::Forever => f.write_str("forever"),
            Retention::For(age) => {
                let secs = age.as_secs();
                match secs {
                    s if s >= 86_400 && s % 86_400 == 0 => write!(f, "{} days", s / 86_400),
                    s if s >= 3_600 && s % 3_600 == 0 => write!(f, "{} hours", s / 3_600),
                    _ => write!(f, "{age:?}"),
                }
            }
        }
    }
}
