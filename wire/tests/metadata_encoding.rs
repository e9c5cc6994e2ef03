//! Metadata as the reference implementation writes and reads it: keys in
//! byte-wise order whatever the insertion order (signatures cover that
//! encoding), nested arrays with recursive caps, the integer range it holds,
//! floats at their shortest exact width, and the CBOR it refuses.

use agdx_wire::*;
use ciborium::Value;

fn event() -> AgentEnvelope {
    AgentEnvelope::event(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        AgentId::new("ledger").unwrap(),
        b"paid".to_vec(),
    )
}

fn cbor(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).unwrap();
    out
}

/// The event's encoding with one more entry, `key` → `raw` (bytes as
/// given), placed just before `body` (the last field, so `metadata` stays in
/// declaration order).
fn event_plus(key: &str, raw: &[u8]) -> Vec<u8> {
    let bytes = event().encode();
    // A small map head (0xa0 | n) counts the entries; one more follows.
    assert!(bytes[0] > 0xa0 && bytes[0] < 0xb7);
    let body = cbor(&Value::Text("body".into()));
    let at = bytes.windows(body.len()).rposition(|w| w == body).unwrap();
    [
        &[bytes[0] + 1],
        &bytes[1..at],
        &cbor(&Value::Text(key.into())),
        raw,
        &bytes[at..],
    ]
    .concat()
}

/// A metadata map holding `key` → `raw` (the value's bytes as given).
fn metadata_of(key: &str, raw: &[u8]) -> Vec<u8> {
    [vec![0xa1], cbor(&Value::Text(key.into())), raw.to_vec()].concat()
}

fn text_map(entries: &[(&str, Value)]) -> Value {
    Value::Map(
        entries
            .iter()
            .map(|(k, v)| (Value::Text((*k).into()), v.clone()))
            .collect(),
    )
}

#[test]
fn keys_are_written_in_byte_order_whatever_the_insertion_order() {
    let inserted = ["role", "é", "b", "aa", "B", "agdx.fence", "a"];
    let mut m = Metadata::new();
    for (i, key) in inserted.iter().enumerate() {
        m.insert(*key, i as u64);
    }
    // Byte-wise order: not insertion order, and not RFC 8949's length-first
    // order (which would put "B", "a", "b" before "aa").
    let sorted = ["B", "a", "aa", "agdx.fence", "b", "role", "é"];
    assert_eq!(m.keys().collect::<Vec<_>>(), sorted);

    let bytes = event().with_metadata(m.clone()).encode();
    let expected = text_map(
        &sorted
            .iter()
            .map(|k| {
                let at = inserted.iter().position(|i| i == k).unwrap();
                (*k, Value::Integer((at as u64).into()))
            })
            .collect::<Vec<_>>(),
    );
    let metadata = cbor(&expected);
    assert!(
        bytes.windows(metadata.len()).any(|w| w == metadata),
        "the metadata map is not written in byte-wise key order"
    );

    let reversed: Metadata = m
        .iter()
        .rev()
        .map(|(k, v)| (k.to_owned(), v.clone()))
        .collect();
    assert_eq!(reversed, m);
    assert_eq!(event().with_metadata(reversed).encode(), bytes);
}

#[test]
fn the_signing_input_does_not_depend_on_insertion_order() {
    let signature = Signature::ed25519([1; 8], [2; 64]);
    let a = event()
        .with_metadata(
            Metadata::new()
                .with("role", "user")
                .with("agdx.fence", 7u64),
        )
        .with_signature(signature.clone());
    let b = event()
        .with_metadata(
            Metadata::new()
                .with("agdx.fence", 7u64)
                .with("role", "user"),
        )
        .with_signature(signature);
    assert_eq!(signing_input(&a), signing_input(&b));
    let at = signing_input(&a)
        .windows(b"agdx.fence".len())
        .position(|w| w == b"agdx.fence")
        .unwrap();
    let role = signing_input(&a)
        .windows(4)
        .position(|w| w == b"role")
        .unwrap();
    assert!(at < role, "agdx.fence sorts before role");
}

#[test]
fn decoding_accepts_any_key_order_and_re_encodes_in_order() {
    let unordered = text_map(&[
        ("zeta", Value::Bool(true)),
        ("alpha", Value::Integer(1.into())),
        ("mid", Value::Text("x".into())),
    ]);
    let bytes = event_plus("metadata", &cbor(&unordered));
    let decoded = AgentEnvelope::decode_valid(&bytes).unwrap();
    let metadata = decoded.metadata.as_ref().unwrap();
    assert_eq!(
        metadata.keys().collect::<Vec<_>>(),
        ["alpha", "mid", "zeta"]
    );

    let ordered = text_map(&[
        ("alpha", Value::Integer(1.into())),
        ("mid", Value::Text("x".into())),
        ("zeta", Value::Bool(true)),
    ]);
    assert_eq!(decoded.encode(), event_plus("metadata", &cbor(&ordered)));
}

#[test]
fn a_duplicate_metadata_key_still_fails_decoding() {
    // {"a": true, "a": false}
    let duplicated = [0xa2, 0x61, b'a', 0xf5, 0x61, b'a', 0xf4];
    assert_eq!(
        AgentEnvelope::decode(&event_plus("metadata", &duplicated)).unwrap_err(),
        DecodeError::DuplicateKey { field: "metadata" }
    );
}

#[test]
fn error_body_detail_is_ordered_and_may_nest() {
    let body = ErrorBody::new(ErrorCode::ToolFailure).with_detail(
        Metadata::new()
            .with("zone", "eu")
            .with("attempts", vec![Scalar::Array(vec![1u64.into()])]),
    );
    assert_eq!(body.validate(), Ok(()));
    let bytes = body.encode();
    let attempts = bytes.windows(8).position(|w| w == b"attempts").unwrap();
    let zone = bytes.windows(4).position(|w| w == b"zone").unwrap();
    assert!(attempts < zone);
    assert_eq!(ErrorBody::decode_valid(&bytes).unwrap().encode(), bytes);
}

#[test]
fn nested_arrays_are_accepted_and_re_encode_unchanged() {
    let hops = Value::Array(vec![
        Value::Array(vec![Value::Text("a".into())]),
        Value::Array(vec![Value::Array(vec![]), Value::Integer(5.into())]),
    ]);
    let bytes = event_plus("metadata", &cbor(&text_map(&[("hops", hops)])));
    let decoded = AgentEnvelope::decode_valid(&bytes).unwrap();
    assert_eq!(
        decoded.metadata.as_ref().unwrap().get("hops"),
        Some(&Scalar::Array(vec![
            Scalar::Array(vec!["a".into()]),
            Scalar::Array(vec![Scalar::Array(vec![]), 5u64.into()]),
        ]))
    );
    assert_eq!(decoded.encode(), bytes);

    // Constructed the same way, it is valid too.
    let built =
        event().with_metadata(Metadata::new().with("hops", vec![Scalar::Array(vec!["a".into()])]));
    assert_eq!(built.validate(), Ok(()));
}

#[test]
fn nested_arrays_count_against_the_value_cap_recursively() {
    // [[text]]: 1 + (1 + len), so a 1022-byte text is at the 1024 cap.
    let nested = |len: usize| {
        event().with_metadata(Metadata::new().with(
            "v",
            vec![Scalar::Array(vec![Scalar::from("x".repeat(len))])],
        ))
    };
    assert_eq!(nested(1022).validate(), Ok(()));
    let err = nested(1023).validate().unwrap_err();
    assert_eq!(err.field, "metadata");
    assert_eq!(
        err.reason,
        Reason::TooLarge {
            actual: 1025,
            limit: 1024,
            unit: "bytes in one value"
        }
    );
    assert_eq!(
        Scalar::Array(vec![Scalar::Array(vec![true.into(), "ab".into()])]).cap_size(),
        1 + ((1 + 9) + (1 + 2))
    );
}

#[test]
fn integers_outside_i64_min_to_u64_max_fail_decoding() {
    let decode =
        |raw: &[u8]| AgentEnvelope::decode(&event_plus("metadata", &metadata_of("n", raw)));
    // -2^63 - 1: a negative integer whose argument is 2^63.
    let below = [0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0];
    let err = decode(&below).unwrap_err();
    assert!(
        matches!(
            err,
            DecodeError::IntegerOutOfRange {
                field: "metadata",
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("-9223372036854775809"), "{err}");
    // The smallest negative CBOR integer, -2^64, likewise.
    assert!(decode(&[0x3b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]).is_err());
    // Inside an array too.
    assert!(decode(&[[0x81].as_slice(), &below].concat()).is_err());

    // -2^63 and 2^64 - 1 are the ends of the range.
    let lowest = [0x3b, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    let highest = [0x1b, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    for raw in [lowest, highest] {
        let bytes = event_plus("metadata", &metadata_of("n", &raw));
        let decoded = AgentEnvelope::decode_valid(&bytes).unwrap();
        assert_eq!(decoded.encode(), bytes);
    }
    assert_eq!(Integer::MIN, i128::from(i64::MIN));
    assert!(Integer::new(Integer::MIN - 1).is_none());
    assert!(Integer::new(Integer::MIN).is_some());
}

#[test]
fn two_byte_simple_values_below_32_fail_wherever_they_appear() {
    for value in [0x00u8, 0x13, 0x1f] {
        let raw = [0xf8, value];
        for bytes in [
            event_plus("x-unknown", &raw),
            event_plus("x-unknown", &[[0x81].as_slice(), &raw].concat()),
            event_plus("metadata", &metadata_of("k", &raw)),
        ] {
            let err = AgentEnvelope::decode(&bytes).unwrap_err();
            assert!(
                matches!(err, DecodeError::Malformed(_)),
                "{value:#x}: {err:?}"
            );
        }
    }
    // 0xf8 0x20 and up are well-formed simple values: an unknown key may
    // hold one, and it is dropped with the key.
    let bytes = event_plus("x-unknown", &[0xf8, 0x20]);
    assert_eq!(
        AgentEnvelope::decode_valid(&bytes).unwrap().encode(),
        event().encode()
    );
}

#[test]
fn floats_are_written_at_their_shortest_exact_width() {
    let cases: [(&[u8], &[u8]); 6] = [
        // 1.5 at double and single width, written as a half.
        (&[0xfb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0], &[0xf9, 0x3e, 0x00]),
        (&[0xfa, 0x3f, 0xc0, 0, 0], &[0xf9, 0x3e, 0x00]),
        // 100000.0 needs a single.
        (
            &[0xfb, 0x40, 0xf8, 0x6a, 0, 0, 0, 0, 0],
            &[0xfa, 0x47, 0xc3, 0x50, 0x00],
        ),
        // The quiet NaN at any width is f9 7e00.
        (&[0xfb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0], &[0xf9, 0x7e, 0x00]),
        (&[0xfa, 0x7f, 0xc0, 0, 0], &[0xf9, 0x7e, 0x00]),
        // -0.0 keeps its sign.
        (&[0xfb, 0x80, 0, 0, 0, 0, 0, 0, 0], &[0xf9, 0x80, 0x00]),
    ];
    for (input, written) in cases {
        let bytes = event_plus("metadata", &metadata_of("f", input));
        let decoded = AgentEnvelope::decode_valid(&bytes).unwrap();
        assert_eq!(
            decoded.encode(),
            event_plus("metadata", &metadata_of("f", written)),
            "{input:02x?}"
        );
    }
    let written = |v: f64| event().with_metadata(Metadata::new().with("f", v)).encode();
    assert_eq!(
        written(f64::NAN),
        event_plus("metadata", &metadata_of("f", &[0xf9, 0x7e, 0x00]))
    );
    assert_eq!(written(0.1).len(), written(0.5).len() + 6);
    assert_eq!(Float::new(0.1).width(), 8);
    assert_eq!(Float::new(0.5).width(), 2);
    assert_eq!(Float::new(1.5), Float::from(1.5));
}

#[test]
fn nesting_deeper_than_the_limit_fails_decoding() {
    // The envelope map, the metadata map, then arrays: MAX_NESTING in all.
    let arrays = |n: usize| [vec![0x81; n - 1], vec![0x80]].concat();
    let deepest = event_plus("metadata", &metadata_of("d", &arrays(MAX_NESTING - 2)));
    assert!(AgentEnvelope::decode(&deepest).is_ok());
    let too_deep = event_plus("metadata", &metadata_of("d", &arrays(MAX_NESTING - 1)));
    assert_eq!(
        AgentEnvelope::decode(&too_deep).unwrap_err(),
        DecodeError::TooDeep { limit: MAX_NESTING }
    );
    // The same limit holds for what an unknown key holds.
    let skipped = event_plus("x-unknown", &arrays(MAX_NESTING - 1));
    assert!(AgentEnvelope::decode(&skipped).is_ok());
    let too_deep = event_plus("x-unknown", &arrays(MAX_NESTING));
    assert_eq!(
        AgentEnvelope::decode(&too_deep).unwrap_err(),
        DecodeError::TooDeep { limit: MAX_NESTING }
    );
}
