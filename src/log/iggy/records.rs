//! Records to Iggy messages and back, with typed user headers.
//!
//! Headers travel as Iggy's typed user headers: a string key and a typed
//! value (kind code plus the value's bytes, numbers little-endian), exactly
//! what [`agdx_wire::HeaderValue`] holds. They are written and read as the
//! raw header block of the message, entry by entry, so their order survives
//! the round trip (Iggy's map-based helpers would sort them by key).

use agdx_wire::{HeaderBytes, HeaderKind, HeaderValue, Headers, header_name};
use bytes::{BufMut, Bytes, BytesMut};
use iggy::prelude::{HeaderKind as IggyHeaderKind, IggyMessage, IggyMessageHeader};

use crate::log::headers::block_size;
use crate::log::{Damage, LogError, LogRecord, OutgoingRecord, TopicInfo};

/// Iggy's kind for an AGDX header kind (the same fifteen kinds).
fn to_iggy_kind(kind: HeaderKind) -> IggyHeaderKind {
    match kind {
        HeaderKind::Raw => IggyHeaderKind::Raw,
        HeaderKind::String => IggyHeaderKind::String,
        HeaderKind::Bool => IggyHeaderKind::Bool,
        HeaderKind::Int8 => IggyHeaderKind::Int8,
        HeaderKind::Int16 => IggyHeaderKind::Int16,
        HeaderKind::Int32 => IggyHeaderKind::Int32,
        HeaderKind::Int64 => IggyHeaderKind::Int64,
        HeaderKind::Int128 => IggyHeaderKind::Int128,
        HeaderKind::Uint8 => IggyHeaderKind::Uint8,
        HeaderKind::Uint16 => IggyHeaderKind::Uint16,
        HeaderKind::Uint32 => IggyHeaderKind::Uint32,
        HeaderKind::Uint64 => IggyHeaderKind::Uint64,
        HeaderKind::Uint128 => IggyHeaderKind::Uint128,
        HeaderKind::Float32 => IggyHeaderKind::Float32,
        HeaderKind::Float64 => IggyHeaderKind::Float64,
    }
}

/// The AGDX header kind for an Iggy kind.
fn from_iggy_kind(kind: IggyHeaderKind) -> HeaderKind {
    match kind {
        IggyHeaderKind::Raw => HeaderKind::Raw,
        IggyHeaderKind::String => HeaderKind::String,
        IggyHeaderKind::Bool => HeaderKind::Bool,
        IggyHeaderKind::Int8 => HeaderKind::Int8,
        IggyHeaderKind::Int16 => HeaderKind::Int16,
        IggyHeaderKind::Int32 => HeaderKind::Int32,
        IggyHeaderKind::Int64 => HeaderKind::Int64,
        IggyHeaderKind::Int128 => HeaderKind::Int128,
        IggyHeaderKind::Uint8 => HeaderKind::Uint8,
        IggyHeaderKind::Uint16 => HeaderKind::Uint16,
        IggyHeaderKind::Uint32 => HeaderKind::Uint32,
        IggyHeaderKind::Uint64 => HeaderKind::Uint64,
        IggyHeaderKind::Uint128 => HeaderKind::Uint128,
        IggyHeaderKind::Float32 => HeaderKind::Float32,
        IggyHeaderKind::Float64 => HeaderKind::Float64,
    }
}

/// The raw Iggy header block for `headers`, `None` when there are none;
/// [`crate::log::check_append`] has checked them.
fn encode_headers(headers: &Headers) -> Option<Bytes> {
    if headers.is_empty() {
        return None;
    }
    let mut block = BytesMut::with_capacity(block_size(headers));
    for (key, value) in headers {
        put_field(&mut block, IggyHeaderKind::String, key.as_bytes());
        put_field(&mut block, to_iggy_kind(value.kind), &value.bytes);
    }
    Some(block.freeze())
}

/// Appends one field of the header block: kind code, u32 LE length, bytes.
/// The lengths are checked before (at most 255).
fn put_field(block: &mut BytesMut, kind: IggyHeaderKind, bytes: &[u8]) {
    block.put_u8(kind.as_code());
    block.put_u32_le(u32::try_from(bytes.len()).unwrap_or(u32::MAX));
    block.put_slice(bytes);
}

/// Splits the first field off a header block: its kind code and bytes.
fn take_field(block: &[u8]) -> Result<(u8, &[u8], &[u8]), String> {
    let truncated = || format!("a field cut short ({} bytes left)", block.len());
    let (&kind, rest) = block.split_first().ok_or_else(truncated)?;
    let (len, rest) = rest.split_first_chunk::<4>().ok_or_else(truncated)?;
    let len = u32::from_le_bytes(*len) as usize;
    if len > rest.len() {
        return Err(truncated());
    }
    let (bytes, rest) = rest.split_at(len);
    Ok((kind, bytes, rest))
}

/// Reads a raw Iggy header block back, in order.
fn decode_headers(mut block: &[u8]) -> Result<Headers, String> {
    let mut headers = Vec::with_capacity(4);
    while !block.is_empty() {
        let (key_kind, key, rest) = take_field(block)?;
        let (value_kind, value, rest) = take_field(rest)?;
        block = rest;
        if key_kind != IggyHeaderKind::String.as_code() {
            return Err(format!(
                "a header name of kind code {key_kind} (names are strings)"
            ));
        }
        let key =
            std::str::from_utf8(key).map_err(|_| "a header name that is not UTF-8".to_owned())?;
        let kind = IggyHeaderKind::from_code(value_kind)
            .map_err(|_| format!("header '{key}' has the unknown kind code {value_kind}"))?;
        headers.push((
            header_name(key),
            HeaderValue {
                kind: from_iggy_kind(kind),
                bytes: HeaderBytes::from_slice(value),
            },
        ));
    }
    Ok(headers)
}

/// The Iggy message for `record`, which [`crate::log::check_append`] has
/// checked (a payload of 1 to [`super::MAX_RECORD_BYTES`] bytes, headers
/// within Iggy's limits). `sent_at` is its origin timestamp in
/// microseconds since the epoch, one reading for all the records of an
/// append, as they leave together.
pub(crate) fn to_message(record: OutgoingRecord, sent_at: u64) -> IggyMessage {
    let OutgoingRecord { headers, payload } = record;
    let user_headers = encode_headers(&headers);
    IggyMessage {
        header: IggyMessageHeader {
            origin_timestamp: sent_at,
            user_headers_length: user_headers
                .as_ref()
                .map_or(0, |block| u32::try_from(block.len()).unwrap_or(u32::MAX)),
            payload_length: u32::try_from(payload.len()).unwrap_or(u32::MAX),
            ..IggyMessageHeader::default()
        },
        payload,
        user_headers,
    }
}

/// The record a polled message holds. A malformed header block (any Iggy
/// client can write one) makes it [`LogError::Corrupt`], which a consumer
/// steps over, where a retryable error would stop it at that record.
pub(crate) fn from_message(
    topic: &TopicInfo,
    partition: u32,
    message: IggyMessage,
) -> Result<LogRecord, LogError> {
    let position = topic.position(partition, message.header.offset);
    let headers = match &message.user_headers {
        Some(block) if !block.is_empty() => decode_headers(block).map_err(|why| {
            LogError::Corrupt(Damage::headers(
                position,
                format!("malformed user header block: {why}"),
                message.payload.clone(),
            ))
        })?,
        _ => Vec::new(),
    };
    Ok(LogRecord {
        position,
        timestamp_micros: message.header.timestamp,
        headers,
        payload: message.payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers() -> Headers {
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
    fn headers_round_trip_in_order() {
        let mut sent = headers();
        sent.push(("x-trace".into(), HeaderValue::u8(1)));
        let read = decode_headers(&encode_headers(&sent).unwrap()).unwrap();
        assert_eq!(read, sent);
        crate::log::headers::assert_names_as_read(&read);
    }

    #[test]
    fn headers_read_by_the_iggy_map_api() {
        let message = to_message(
            OutgoingRecord {
                headers: headers(),
                payload: Bytes::from_static(b"x"),
            },
            7,
        );
        let map = message.user_headers_map().unwrap().unwrap();
        let key = iggy::prelude::HeaderKey::try_from("gen_ai.conversation.id").unwrap();
        assert_eq!(
            map[&key].as_uint128().unwrap(),
            0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10
        );
        let key = iggy::prelude::HeaderKey::try_from("agdx.ct").unwrap();
        assert_eq!(map[&key].as_uint8().unwrap(), 3);
    }

    #[test]
    fn a_message_is_what_iggys_builder_makes() {
        let payload = Bytes::from_static(b"payload");
        let mut built = IggyMessage::builder()
            .payload(payload.clone())
            .build()
            .unwrap();
        built.header.origin_timestamp = 42;
        let record = |headers| OutgoingRecord {
            headers,
            payload: payload.clone(),
        };
        assert_eq!(to_message(record(Vec::new()), 42), built);
        let with_headers = to_message(record(headers()), 42);
        built.user_headers = encode_headers(&headers());
        built.header.user_headers_length = u32::try_from(block_size(&headers())).unwrap();
        assert_eq!(with_headers, built);
    }

    #[test]
    fn headers_written_by_the_iggy_map_api() {
        let key = |k: &str| iggy::prelude::HeaderKey::try_from(k).unwrap();
        let map = std::collections::BTreeMap::from([
            (key("b"), iggy::prelude::HeaderValue::from(7u32)),
            (key("a"), iggy::prelude::HeaderValue::try_from("x").unwrap()),
        ]);
        let message = IggyMessage::builder()
            .payload(Bytes::from_static(b"p"))
            .user_headers(map)
            .build()
            .unwrap();
        let decoded = decode_headers(message.user_headers.as_ref().unwrap()).unwrap();
        assert_eq!(
            decoded,
            vec![
                ("a".into(), HeaderValue::string("x")),
                ("b".into(), HeaderValue::u32(7))
            ]
        );
        assert!(decode_headers(&message.user_headers.unwrap()[..3]).is_err());
    }

    #[test]
    fn the_shared_header_limits_are_iggys() {
        assert_eq!(
            crate::log::headers::MAX_HEADERS_BYTES,
            iggy::prelude::MAX_USER_HEADERS_SIZE as usize
        );
        let block = encode_headers(&headers()).unwrap();
        assert_eq!(block.len(), block_size(&headers()));
    }

    #[test]
    fn a_malformed_header_block_is_a_corrupt_record() {
        let topic = TopicInfo {
            stream: "s".into(),
            topic: "t".into(),
            stream_id: 1,
            topic_id: 2,
            partitions: std::num::NonZeroU32::new(4).unwrap(),
        };
        let mut message = IggyMessage::builder()
            .payload(Bytes::from_static(b"p"))
            .build()
            .unwrap();
        message.header.offset = 9;
        message.user_headers = Some(Bytes::from_static(&[2, 200, 0, 0, 0, b'k']));
        match from_message(&topic, 3, message) {
            Err(LogError::Corrupt(damage)) => {
                assert_eq!(damage.position, topic.position(3, 9));
                assert_eq!(damage.count(), 1);
                assert!(damage.reason.contains("cut short"), "{}", damage.reason);
                assert_eq!(
                    damage.payload.as_deref(),
                    Some(&b"p"[..]),
                    "the payload is kept"
                );
            }
            other => panic!("{other:?}"),
        }
    }

    proptest::proptest! {
        /// A header block comes from the server, so from any client: any
        /// bytes, and a valid block with one byte changed or cut short,
        /// read as headers or an error, never a panic.
        #[test]
        fn any_block_reads_without_panicking(
            blocks in crate::log::headers::hostile(encode_headers(&headers()).unwrap().to_vec()),
        ) {
            for block in blocks {
                let _ = decode_headers(&block);
            }
        }
    }
}
