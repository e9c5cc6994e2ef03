//! What the port refuses before a backend is asked anything, the same way
//! and in the same words on every backend: a batch without records, a
//! record without payload or over the log's limit, headers outside
//! [the shared rules](super::headers), a partition outside the topic, a
//! poll for no records.
//!
//! Every backend calls these first, so a request one backend refuses, every
//! backend refuses alike; an implementation of [`super::Log`] outside this
//! crate can call them too.

use super::headers::check_headers;
use super::{LogError, OutgoingRecord, TopicInfo};

/// Checks an append of `records` to `partition` of `topic` on a log whose
/// records carry at most `max_record_bytes` of payload
/// ([`super::Log::max_record_bytes`]): at least one record, each with 1 to
/// `max_record_bytes` bytes of payload and headers within the shared
/// limits, and a partition the topic has.
pub fn check_append(
    topic: &TopicInfo,
    partition: u32,
    records: &[OutgoingRecord],
    max_record_bytes: usize,
) -> Result<(), LogError> {
    topic.check_partition(partition)?;
    if records.is_empty() {
        return Err(LogError::InvalidInput(
            "an append needs at least one record; the batch is empty".into(),
        ));
    }
    for (index, record) in records.iter().enumerate() {
        let size = record.payload.len();
        if size == 0 {
            return Err(LogError::InvalidInput(format!(
                "record {index} of the batch has an empty payload; every record needs at least one byte"
            )));
        }
        if size > max_record_bytes {
            return Err(LogError::RecordTooLarge {
                size,
                limit: max_record_bytes,
            });
        }
        check_headers(&record.headers).map_err(|refused| match refused {
            LogError::InvalidInput(why) => {
                LogError::InvalidInput(format!("record {index} of the batch: {why}"))
            }
            other => other,
        })?;
    }
    Ok(())
}

/// Checks a poll of up to `max` records of `partition` of `topic`: at
/// least one record, and a partition the topic has.
pub fn check_poll(topic: &TopicInfo, partition: u32, max: u32) -> Result<(), LogError> {
    if max == 0 {
        return Err(LogError::InvalidInput(
            "a poll asked for 0 records; ask for at least 1 (max is the most records one poll returns)".into(),
        ));
    }
    topic.check_partition(partition)
}

#[cfg(test)]
mod tests {
    use agdx_wire::HeaderValue;

    use super::*;

    fn topic() -> TopicInfo {
        TopicInfo {
            stream: "s".into(),
            topic: "t".into(),
            stream_id: 1,
            topic_id: 1,
            partitions: std::num::NonZeroU32::new(2).expect("not 0"),
        }
    }

    fn record(payload: &[u8]) -> OutgoingRecord {
        OutgoingRecord {
            headers: Vec::new(),
            payload: bytes::Bytes::copy_from_slice(payload),
        }
    }

    fn refusal(records: &[OutgoingRecord]) -> String {
        match check_append(&topic(), 0, records, 8) {
            Err(LogError::InvalidInput(why)) => why,
            other => panic!("{records:?} passed: {other:?}"),
        }
    }

    #[test]
    fn an_append_names_the_record_it_refuses() {
        assert!(refusal(&[]).contains("the batch is empty"));
        assert!(
            refusal(&[record(b"a"), record(b"")])
                .starts_with("record 1 of the batch has an empty payload")
        );
        let mut twice = record(b"a");
        twice.headers = vec![
            ("k".into(), HeaderValue::u8(1)),
            ("k".into(), HeaderValue::u8(2)),
        ];
        let why = refusal(&[record(b"a"), record(b"b"), twice]);
        assert!(
            why.starts_with("record 2 of the batch: header 'k' appears twice"),
            "{why}"
        );
    }

    #[test]
    fn an_append_keeps_to_the_limit_and_the_partitions() {
        check_append(&topic(), 1, &[record(b"12345678")], 8).unwrap();
        assert!(matches!(
            check_append(&topic(), 0, &[record(b"123456789")], 8),
            Err(LogError::RecordTooLarge { size: 9, limit: 8 })
        ));
        assert!(matches!(
            check_append(&topic(), 2, &[record(b"a")], 8),
            Err(LogError::NoSuchPartition {
                partition: 2,
                partitions: 2,
                ..
            })
        ));
    }

    #[test]
    fn a_poll_asks_for_a_record_of_a_partition_there_is() {
        check_poll(&topic(), 1, 1).unwrap();
        assert!(
            matches!(check_poll(&topic(), 0, 0), Err(LogError::InvalidInput(why)) if why.contains("at least 1"))
        );
        assert!(matches!(
            check_poll(&topic(), 2, 1),
            Err(LogError::NoSuchPartition { partition: 2, .. })
        ));
    }
}
