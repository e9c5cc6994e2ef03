//! The mapping of the port onto Kafka: topic names, ids, offsets and
//! headers, each converted here and nowhere else.

use agdx_wire::{
    HeaderBytes, HeaderKind, HeaderValue, Headers, agent_record_header_kind, header_name,
};
use bytes::Bytes;
use rdkafka::Message;
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders, Timestamp};

use crate::log::{Damage, LogError, LogRecord, TopicInfo};

/// Longest Kafka topic name.
const MAX_TOPIC_NAME: usize = 249;

/// The Kafka topic holding `topic` of `stream`: `STREAM.TOPIC`, e.g.
/// `agents.agent.commands`. A stream name has no dot, so the first dot
/// separates the two and no two (stream, topic) pairs share a Kafka topic.
pub(crate) fn topic_name(stream: &str, topic: &str) -> Result<String, LogError> {
    let prefix = stream_prefix(stream)?;
    check_name("topic", topic)?;
    let name = format!("{prefix}{topic}");
    if name.len() > MAX_TOPIC_NAME {
        return Err(LogError::InvalidInput(format!(
            "the Kafka topic {name:?} would have {} characters; stream and topic names together have at most {} on Kafka",
            name.len(),
            MAX_TOPIC_NAME - 1
        )));
    }
    Ok(name)
}

/// What the Kafka topics of `stream` start with: `STREAM.`.
pub(crate) fn stream_prefix(stream: &str) -> Result<String, LogError> {
    check_name("stream", stream)?;
    if stream.contains('.') {
        return Err(LogError::InvalidInput(format!(
            "stream name {stream:?} has a dot; on Kafka a stream is the prefix of topic names up to the first dot (agents.agent.commands), so stream names have none: use e.g. {:?}",
            stream.replace('.', "-")
        )));
    }
    Ok(format!("{stream}."))
}

/// The Kafka consumer group of consumer group `group` on `stream`:
/// `STREAM.GROUP`, e.g. `agents.echo`. Kafka's group ids are cluster-wide,
/// so without the stream the pools of one agent in two deployments
/// (streams) of a cluster would be one group, each one's rebalances
/// stalling the other's.
pub(crate) fn group_id(stream: &str, group: &str) -> String {
    format!("{stream}.{group}")
}

/// Checks a name against Kafka's topic name rules.
fn check_name(what: &str, name: &str) -> Result<(), LogError> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
    if name.is_empty() || !name.chars().all(allowed) {
        return Err(LogError::InvalidInput(format!(
            "invalid {what} name {name:?}: on Kafka names have ASCII letters, digits, '.', '_' and '-' only"
        )));
    }
    Ok(())
}

/// The number a stream or topic name stands for in record positions.
/// Kafka numbers neither, so the number is the name's xxHash32: every client
/// computes the same one, and positions (`cause_at`, dead letters) mean the
/// same thing wherever they are read.
pub(crate) fn name_id(name: &str) -> u32 {
    xxhash_rust::xxh32::xxh32(name.as_bytes(), 0)
}

/// The resolved topic `topic` of `stream` with `partitions` partitions
/// ([`LogError::NoPartitions`] when it has none).
pub(crate) fn topic_info(
    stream: &str,
    topic: &str,
    partitions: u32,
) -> Result<TopicInfo, LogError> {
    TopicInfo::resolved(
        stream.to_owned(),
        topic.to_owned(),
        name_id(stream),
        name_id(topic),
        partitions,
    )
}

/// A partition number as Kafka writes it.
pub(crate) fn kafka_partition(partition: u32) -> i32 {
    // Topics are checked to have fewer partitions than i32::MAX first.
    i32::try_from(partition).unwrap_or(i32::MAX)
}

/// A record offset of the port as Kafka writes it (both count from 0).
pub(crate) fn kafka_offset(offset: u64) -> Result<i64, LogError> {
    i64::try_from(offset).map_err(|_| {
        LogError::InvalidInput(format!(
            "offset {offset} is beyond any Kafka partition's range"
        ))
    })
}

/// What Kafka commits for a group that processed everything up to
/// `last_processed`: Kafka stores the next offset to read, the port the last
/// one processed. This and [`last_processed`] are the only two places that
/// convert between them.
pub(crate) fn committed_for(last_processed: u64) -> Result<i64, LogError> {
    kafka_offset(last_processed)?.checked_add(1).ok_or_else(|| {
        LogError::InvalidInput(format!("offset {last_processed} cannot be committed"))
    })
}

/// The last processed offset for a Kafka committed offset (the next one to
/// read); `None` when nothing was processed yet.
pub(crate) fn last_processed(committed: rdkafka::Offset) -> Option<u64> {
    match committed {
        rdkafka::Offset::Offset(next) if next > 0 => u64::try_from(next - 1).ok(),
        _ => None,
    }
}

/// The Kafka headers for `headers`: each value's bytes exactly as the typed
/// value holds them (`agdx.ct` one byte, `agdx.av` u32 little-endian,
/// `gen_ai.conversation.id` u128 little-endian, `agdx.to` UTF-8).
///
/// Kafka headers carry no kind. The agent record headers get theirs back
/// from the wire crate's table when read; any other header must be raw,
/// since nothing could tell its kind when it is read back.
pub(crate) fn kafka_headers(headers: &Headers) -> Result<Option<OwnedHeaders>, LogError> {
    if headers.is_empty() {
        return Ok(None);
    }
    let mut out = OwnedHeaders::new_with_capacity(headers.len());
    for (name, value) in headers {
        let expected = agent_record_header_kind(name).unwrap_or(HeaderKind::Raw);
        if value.kind != expected {
            let why = match agent_record_header_kind(name) {
                Some(kind) => format!("'{name}' is always a {kind} header"),
                None => format!(
                    "Kafka headers carry bytes without a kind, and only the AGDX headers ({}) get theirs back when read, so '{name}' must be a raw header, not {}",
                    agdx_wire::AGENT_RECORD_HEADER_KEYS.join(", "),
                    value.kind
                ),
            };
            return Err(LogError::InvalidInput(why));
        }
        out = out.insert(Header {
            key: name.as_ref(),
            value: Some(value.bytes.as_slice()),
        });
    }
    Ok(Some(out))
}

/// Reads headers back: agent record headers with their kind (checked
/// against its width and, for strings, UTF-8), anything else as raw bytes.
/// `Err` says what is malformed.
pub(crate) fn typed_headers<'a>(
    raw: impl IntoIterator<Item = (&'a [u8], Option<&'a [u8]>)>,
) -> Result<Headers, String> {
    let mut headers = Vec::with_capacity(4);
    for (name, value) in raw {
        let name =
            std::str::from_utf8(name).map_err(|_| "a header name that is not UTF-8".to_owned())?;
        let bytes = HeaderBytes::from_slice(value.unwrap_or_default());
        let kind = agent_record_header_kind(name).unwrap_or(HeaderKind::Raw);
        if kind.fixed_width().is_some_and(|width| width != bytes.len()) {
            return Err(format!(
                "header '{name}' has {} bytes, but a {kind} value has {}",
                bytes.len(),
                kind.fixed_width().unwrap_or_default()
            ));
        }
        if kind == HeaderKind::String && std::str::from_utf8(&bytes).is_err() {
            return Err(format!("header '{name}' is not UTF-8"));
        }
        headers.push((header_name(name), HeaderValue { kind, bytes }));
    }
    Ok(headers)
}

/// The header names and values of a message, as bytes.
///
/// Read through librdkafka directly: rdkafka's `Headers` API panics on a
/// header name that is not UTF-8, and any Kafka client can write one.
#[allow(
    unsafe_code,
    reason = "rdkafka offers no safe way to read raw header names"
)]
fn raw_headers<'a>(message: &'a BorrowedMessage<'a>) -> Vec<(&'a [u8], Option<&'a [u8]>)> {
    use rdkafka::bindings as rd;
    let mut headers: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `message.ptr()` is a live message for the borrow of `message`;
    // librdkafka sets `headers` to a list the message owns, or leaves it null.
    let found = unsafe { rd::rd_kafka_message_headers(message.ptr(), &mut headers) };
    let mut out = Vec::new();
    if found != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || headers.is_null() {
        return out;
    }
    for index in 0.. {
        let mut name: *const std::os::raw::c_char = std::ptr::null();
        let mut value: *const std::os::raw::c_void = std::ptr::null();
        let mut size = 0usize;
        // SAFETY: `headers` is the message's list; librdkafka fills the three
        // out-pointers for an index within it and reports an error past its end.
        let got = unsafe {
            rd::rd_kafka_header_get_all(headers, index, &mut name, &mut value, &mut size)
        };
        if got != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR || name.is_null() {
            break;
        }
        // SAFETY: librdkafka keeps names NUL-terminated (and `name` is not
        // null), alive as long as the message.
        let name = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
        // SAFETY: a value that is not null is `size` bytes long, alive as
        // long as the message.
        let value = (!value.is_null())
            .then(|| unsafe { std::slice::from_raw_parts(value.cast::<u8>(), size) });
        out.push((name, value));
    }
    out
}

/// The record a fetched message holds. Malformed headers (any Kafka client
/// can write them) make it [`LogError::Corrupt`] carrying the intact payload,
/// so a worker dead-letters the bytes instead of dropping them.
pub(crate) fn from_message(
    topic: &TopicInfo,
    partition: u32,
    message: &BorrowedMessage<'_>,
) -> Result<LogRecord, LogError> {
    let offset = u64::try_from(message.offset()).unwrap_or_default();
    let position = topic.position(partition, offset);
    let headers = typed_headers(raw_headers(message)).map_err(|why| {
        LogError::Corrupt(Damage::headers(
            position,
            format!("malformed Kafka headers: {why}"),
            Bytes::copy_from_slice(message.payload().unwrap_or_default()),
        ))
    })?;
    let millis = match message.timestamp() {
        Timestamp::CreateTime(ms) | Timestamp::LogAppendTime(ms) => ms,
        Timestamp::NotAvailable => 0,
    };
    Ok(LogRecord {
        position,
        // Any producer sets CreateTime: a time before 1970 reads as 1970,
        // one past what microseconds in a u64 hold as the latest there is.
        timestamp_micros: u64::try_from(millis)
            .unwrap_or_default()
            .saturating_mul(1000),
        headers,
        payload: Bytes::copy_from_slice(message.payload().unwrap_or_default()),
    })
}

#[cfg(test)]
mod tests {
    use rdkafka::message::Headers as _;

    use super::*;

    fn agdx_headers() -> Headers {
        vec![
            ("agdx.ct".into(), HeaderValue::u8(3)),
            ("agdx.av".into(), HeaderValue::u32(1)),
            (
                "gen_ai.conversation.id".into(),
                HeaderValue::u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10),
            ),
            ("agdx.to".into(), HeaderValue::string("billing")),
        ]
    }

    #[test]
    fn kafka_headers_carry_the_iggy_value_bytes_and_read_back_typed() {
        let written = kafka_headers(&agdx_headers()).unwrap().unwrap();
        let raw: Vec<(String, Vec<u8>)> = written
            .iter()
            .map(|h| (h.key.to_owned(), h.value.unwrap().to_vec()))
            .collect();
        let conversation = 0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10_u128;
        assert_eq!(
            raw,
            vec![
                ("agdx.ct".to_owned(), vec![3]),
                ("agdx.av".to_owned(), vec![1, 0, 0, 0]),
                (
                    "gen_ai.conversation.id".to_owned(),
                    conversation.to_le_bytes().to_vec()
                ),
                ("agdx.to".to_owned(), b"billing".to_vec()),
            ]
        );
        let read =
            typed_headers(raw.iter().map(|(k, v)| (k.as_bytes(), Some(v.as_slice())))).unwrap();
        assert_eq!(read, agdx_headers());
        crate::log::headers::assert_names_as_read(&read);
    }

    #[test]
    fn other_headers_are_raw_both_ways() {
        let raw = vec![(
            "x-trace".into(),
            HeaderValue {
                kind: HeaderKind::Raw,
                bytes: HeaderBytes::from_slice(&[9]),
            },
        )];
        assert!(kafka_headers(&raw).is_ok());
        let typed = vec![("x-trace".into(), HeaderValue::u32(9))];
        let refused = kafka_headers(&typed).unwrap_err().to_string();
        assert!(refused.contains("must be a raw header"), "{refused}");
        let wrong = vec![("agdx.ct".into(), HeaderValue::u32(9))];
        let refused = kafka_headers(&wrong).unwrap_err().to_string();
        assert!(refused.contains("always a u8 header"), "{refused}");
        let read = typed_headers([(&b"x-trace"[..], None)]).unwrap();
        assert_eq!(
            read[0].1,
            HeaderValue {
                kind: HeaderKind::Raw,
                bytes: HeaderBytes::new()
            }
        );
    }

    #[test]
    fn malformed_headers_from_other_clients_are_reported_not_panicked_on() {
        for (name, value, says) in [
            (&b"agdx.ct"[..], &[1u8, 2][..], "has 2 bytes"),
            (&b"gen_ai.conversation.id"[..], &[1u8; 8][..], "has 8 bytes"),
            (&b"agdx.to"[..], &[0xffu8][..], "not UTF-8"),
            (&[0xffu8, 0xfe][..], &[1u8][..], "name that is not UTF-8"),
        ] {
            let why = typed_headers([(name, Some(value))]).unwrap_err();
            assert!(why.contains(says), "{why}");
        }
    }

    #[test]
    fn offsets_convert_in_one_place() {
        assert_eq!(committed_for(0).unwrap(), 1);
        assert_eq!(committed_for(41).unwrap(), 42);
        assert_eq!(last_processed(rdkafka::Offset::Offset(42)), Some(41));
        assert_eq!(last_processed(rdkafka::Offset::Offset(1)), Some(0));
        assert_eq!(last_processed(rdkafka::Offset::Offset(0)), None);
        assert_eq!(last_processed(rdkafka::Offset::Invalid), None);
        assert!(committed_for(u64::MAX).is_err());
    }

    #[test]
    fn topic_names_put_the_stream_first() {
        assert_eq!(
            topic_name("agents", "agent.commands").unwrap(),
            "agents.agent.commands"
        );
        assert!(
            topic_name("my.agents", "t")
                .unwrap_err()
                .to_string()
                .contains("\"my-agents\"")
        );
        assert!(topic_name("agents", "a b").is_err());
        assert!(topic_name("", "t").is_err());
        assert!(topic_name(&"s".repeat(200), &"t".repeat(49)).is_err());
        let info = topic_info("agents", "agent.commands", 8).unwrap();
        assert!(topic_info("agents", "agent.commands", 0).is_err());
        assert_eq!(info.stream_id, name_id("agents"));
        assert_ne!(info.stream_id, info.topic_id);
    }
}
