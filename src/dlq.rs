//! Dead letters: records a worker gave up on, set aside on `agent.dlq`.
//!
//! A dead-letter capsule keeps the original record's bytes verbatim with
//! where it sat, why it was set aside and after how many attempts, so it can
//! be inspected and re-appended unchanged.

use agdx_wire::{DeadLetter, DeadLetterReason, LogPosition};

use crate::log::{OutgoingRecord, TopicInfo};
use crate::record::capsule_record;

/// The capsule for the record at `source` with its original `payload`.
pub fn dead_letter(
    source: LogPosition,
    reason: DeadLetterReason,
    attempts: u32,
    detail: impl Into<String>,
    payload: Vec<u8>,
) -> DeadLetter {
    let detail = detail.into();
    DeadLetter {
        source,
        reason,
        attempts,
        detail: (!detail.is_empty()).then_some(detail),
        payload,
    }
}

/// The log record carrying a capsule, and the partition of `dlq` it goes
/// to: the partition the poison record sat in (modulo the DLQ's partition
/// count), so one conversation's dead letters stay in order.
pub fn dead_letter_record(dlq: &TopicInfo, capsule: &DeadLetter) -> (u32, OutgoingRecord) {
    let partition = capsule.source.partition % dlq.partitions.max(1);
    (partition, capsule_record(capsule.encode()))
}
