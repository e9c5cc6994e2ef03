//! Verifying a log end to end: every record of every partition read back,
//! and a [`Finding`] for whatever cannot be.
//!
//! [`check_topics`] reads through the port, so it checks any backend: each
//! partition from its first offset to the last one there was when it
//! began, collecting the [`Damage`] its polls report. The embedded log
//! adds checks of its own storage ([`super::embedded::EmbeddedLog::verify`]).

use std::fmt;
use std::time::Duration;

use super::{Damage, Log, LogError, TopicInfo};

/// Records one poll of a check reads.
const CHECK_BATCH: u32 = 1000;

/// Something wrong with a log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finding {
    /// Records that cannot be read.
    Records {
        /// The stream's name.
        stream: String,
        /// The topic's name.
        topic: String,
        /// Which records, and why.
        damage: Damage,
    },
    /// Records the log acknowledged that its storage no longer holds (the
    /// embedded log refuses to open until they are given up).
    Lost {
        /// The stream's name.
        stream: String,
        /// The topic's name.
        topic: String,
        /// Which records.
        damage: Damage,
    },
    /// A problem of the storage not tied to known records (a damaged
    /// database page SQLite's integrity check names, say).
    Storage(String),
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Records {
                stream,
                topic,
                damage,
            }
            | Finding::Lost {
                stream,
                topic,
                damage,
            } => write!(
                f,
                "'{stream}/{topic}' partition {} offset {}: {}",
                damage.position.partition,
                damage.offsets(),
                damage.reason
            ),
            Finding::Storage(problem) => f.write_str(problem),
        }
    }
}

/// What a check read and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Topics checked.
    pub topics: u64,
    /// Partitions checked.
    pub partitions: u64,
    /// Records read back intact.
    pub records: u64,
    /// What is wrong, in the order found.
    pub findings: Vec<Finding>,
}

impl CheckReport {
    /// Whether nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }

    /// Whether records the log acknowledged are gone.
    pub fn lost_records(&self) -> bool {
        self.findings
            .iter()
            .any(|finding| matches!(finding, Finding::Lost { .. }))
    }

    /// How many records the findings name as unreadable.
    pub fn damaged_records(&self) -> u64 {
        self.findings
            .iter()
            .map(|finding| match finding {
                Finding::Records { damage, .. } | Finding::Lost { damage, .. } => damage.count(),
                Finding::Storage(_) => 0,
            })
            .sum()
    }
}

/// Reads every partition of `topics` back into `report`.
pub async fn check_topics(
    log: &dyn Log,
    topics: &[TopicInfo],
    report: &mut CheckReport,
) -> Result<(), LogError> {
    for topic in topics {
        report.topics += 1;
        for partition in 0..topic.partitions.get() {
            report.partitions += 1;
            check_partition(log, topic, partition, report).await?;
        }
    }
    Ok(())
}

/// Reads one partition back, to the last offset it had when this began.
async fn check_partition(
    log: &dyn Log,
    topic: &TopicInfo,
    partition: u32,
    report: &mut CheckReport,
) -> Result<(), LogError> {
    let unreadable = |from: u64, reason: &str| {
        Finding::Storage(format!(
            "'{}/{}' partition {partition} from offset {from} on cannot be read: {reason}",
            topic.stream, topic.topic
        ))
    };
    let last = match log.last_offset(topic, partition).await {
        Ok(Some(last)) => last,
        Ok(None) => return Ok(()),
        Err(LogError::Damaged { reason, .. }) => {
            report.findings.push(unreadable(0, &reason));
            return Ok(());
        }
        Err(error) => return Err(error),
    };
    let mut from = 0;
    while from <= last {
        match log
            .poll(topic, partition, from, CHECK_BATCH, Duration::ZERO)
            .await
        {
            Ok(records) => {
                let Some(tail) = records.last() else {
                    let reason =
                        format!("the log returned nothing, though its last offset is {last}");
                    report.findings.push(unreadable(from, &reason));
                    break;
                };
                from = tail.position.offset + 1;
                report.records += records.len() as u64;
            }
            Err(LogError::Corrupt(damage)) => {
                from = damage.next_offset();
                report.findings.push(Finding::Records {
                    stream: topic.stream.clone(),
                    topic: topic.topic.clone(),
                    damage,
                });
            }
            Err(LogError::Damaged { reason, .. }) => {
                report.findings.push(unreadable(from, &reason));
                break;
            }
            Err(error) => return Err(error),
        }
    }
    Ok(())
}
