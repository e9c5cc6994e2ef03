//! Dead letters: records a worker gave up on, set aside on `agent.dlq`.
//!
//! A dead-letter capsule keeps the original record's bytes verbatim with
//! where it sat, why it was set aside and after how many attempts, so it can
//! be inspected and re-appended unchanged.
//!
//! A capsule must itself fit on the log, or the partition it comes from
//! could never move past the poison record. So its `detail` is cut to
//! [`MAX_DETAIL_BYTES`] bytes, and when the original bytes plus the capsule
//! still exceed the log's record limit, [`fit_to_log`] moves them to the
//! blob store (naming the blob in the detail) or, without a blob store,
//! leaves them out and says so.

use agdx_wire::{DeadLetter, DeadLetterReason, LogPosition};

use crate::claim_check::ClaimCheck;
use crate::log::{OutgoingRecord, TopicInfo};
use crate::record::capsule_record;

/// Most bytes of a dead letter's `detail` and of a worker's error-reply message: a
/// note for people, not a transcript. Longer text is cut at a character
/// boundary and says how much was cut.
pub const MAX_DETAIL_BYTES: usize = 4096;

/// The capsule for the record at `source` with its original `payload`; a
/// `detail` over [`MAX_DETAIL_BYTES`] bytes is cut.
pub fn dead_letter(
    source: LogPosition,
    reason: DeadLetterReason,
    attempts: u32,
    detail: impl Into<String>,
    payload: Vec<u8>,
) -> DeadLetter {
    let detail = shorten(detail.into(), MAX_DETAIL_BYTES);
    DeadLetter {
        source,
        reason,
        attempts,
        detail: (!detail.is_empty()).then_some(detail),
        payload,
    }
}

/// `text` cut to at most `limit` bytes at a character boundary, ending with
/// a note of how many bytes were cut.
pub(crate) fn shorten(text: String, limit: usize) -> String {
    if text.len() <= limit {
        return text;
    }
    let note = |cut: usize| format!(" … [{cut} more bytes cut]");
    // The note's own length depends on the number in it; the longest one
    // (all of the text cut) bounds it.
    let keep = limit.saturating_sub(note(text.len()).len());
    let end = (0..=keep)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let mut short = text[..end].to_owned();
    short.push_str(&note(text.len() - end));
    short
}

/// The capsule as it can go onto a log whose records hold at most
/// `record_limit` bytes: unchanged when it fits; otherwise its payload is
/// moved to the blob store of `claim_check` (the detail names the blob),
/// or left out with the reason in the detail when there is no blob store or
/// it fails.
pub(crate) async fn fit_to_log(
    mut capsule: DeadLetter,
    record_limit: usize,
    claim_check: Option<&ClaimCheck>,
) -> DeadLetter {
    if capsule.encode().len() <= record_limit {
        return capsule;
    }
    let payload = std::mem::take(&mut capsule.payload);
    let size = payload.len();
    let kept = match claim_check {
        Some(check) => match check.store(payload).await {
            Ok(body_ref) => format!(
                "the original record ({size} bytes) is too large to carry in a dead letter on this log (limit {record_limit} bytes); it is in the blob store as {} (SHA-256 {})",
                body_ref.reference,
                hex::encode(body_ref.sha256)
            ),
            Err(error) => format!(
                "the original record ({size} bytes) is too large to carry in a dead letter on this log (limit {record_limit} bytes) and the blob store refused it ({error}); read it at {} until the log's retention removes it",
                capsule.source
            ),
        },
        None => format!(
            "the original record ({size} bytes) is too large to carry in a dead letter on this log (limit {record_limit} bytes) and no blob store is configured; read it at {} until the log's retention removes it",
            capsule.source
        ),
    };
    let detail = match capsule.detail.take() {
        Some(detail) => format!("{detail}; {kept}"),
        None => kept,
    };
    capsule.detail = Some(shorten(detail, MAX_DETAIL_BYTES));
    capsule
}

/// The log record carrying a capsule, and the partition of `dlq` it goes
/// to: the partition the poison record sat in (modulo the DLQ's partition
/// count), so one conversation's dead letters stay in order.
pub fn dead_letter_record(dlq: &TopicInfo, capsule: &DeadLetter) -> (u32, OutgoingRecord) {
    let partition = capsule.source.partition % dlq.partitions;
    (partition, capsule_record(capsule.encode()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn position() -> LogPosition {
        LogPosition {
            stream: 1,
            topic: 2,
            partition: 3,
            offset: 4,
        }
    }

    #[test]
    fn a_long_detail_is_cut_at_a_character_boundary_and_says_so() {
        let text = "é".repeat(10_000);
        let short = shorten(text.clone(), MAX_DETAIL_BYTES);
        assert!(short.len() <= MAX_DETAIL_BYTES, "{}", short.len());
        assert!(short.ends_with("more bytes cut]"), "{short}");
        let kept = short.split(" … [").next().unwrap();
        assert!(text.starts_with(kept));
        assert_eq!(shorten("short".into(), 10), "short");
        let capsule = dead_letter(position(), DeadLetterReason::Rejected, 1, text, vec![1]);
        assert!(capsule.detail.unwrap().len() <= MAX_DETAIL_BYTES);
    }

    #[tokio::test]
    async fn a_capsule_too_large_for_the_log_leaves_its_payload_out_and_says_why() {
        let capsule = dead_letter(
            position(),
            DeadLetterReason::DecodeFailed,
            1,
            "bad",
            vec![7; 1000],
        );
        let fits = fit_to_log(capsule.clone(), 2000, None).await;
        assert_eq!(fits, capsule, "a capsule that fits is unchanged");
        let cut = fit_to_log(capsule, 500, None).await;
        assert!(cut.payload.is_empty());
        let detail = cut.detail.unwrap();
        assert!(
            detail.starts_with("bad; the original record (1000 bytes)"),
            "{detail}"
        );
        assert!(
            detail.contains("1/2/3/4"),
            "names where to read it: {detail}"
        );
    }

    #[tokio::test]
    async fn a_capsule_too_large_for_the_log_moves_its_payload_to_the_blob_store() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(crate::blob::DirBlobStore::new(dir.path()));
        let check = ClaimCheck::new(store, 1 << 20);
        let payload = vec![9; 1000];
        let capsule = dead_letter(
            position(),
            DeadLetterReason::Rejected,
            1,
            "",
            payload.clone(),
        );
        let cut = fit_to_log(capsule, 500, Some(&check)).await;
        assert!(cut.payload.is_empty());
        let detail = cut.detail.unwrap();
        let reference = detail
            .split_whitespace()
            .find(|w| w.starts_with("blob:sha256:"))
            .expect("the detail names the blob");
        let stored =
            crate::blob::BlobStore::get(&crate::blob::DirBlobStore::new(dir.path()), reference)
                .await
                .unwrap();
        assert_eq!(stored, payload);
    }
}
