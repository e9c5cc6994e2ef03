//! The Iggy record headers, their caps, the signing input and the serde
//! forms of ids and positions.

use agdx_wire::*;

fn event() -> AgentEnvelope {
    AgentEnvelope::event(
        RecordId::from_u128(1),
        ConversationId::from_u128(0x0102),
        AgentId::new("ledger").unwrap(),
        b"paid".to_vec(),
    )
}

#[test]
fn headers_are_exactly_the_contract_set() {
    let headers = record_headers(&event(), ContentType::Cbor);
    let keys: Vec<&str> = headers.iter().map(|(k, _)| k.as_ref()).collect();
    assert_eq!(
        keys,
        [
            HEADER_CONTENT_TYPE,
            HEADER_WIRE_VERSION,
            HEADER_CONVERSATION
        ]
    );
    assert_eq!(headers[0].1, HeaderValue::u8(3));
    assert_eq!(headers[1].1.as_u32(), Some(WIRE_VERSION));
    // Iggy's typed u128 is little-endian, unlike the envelope's id bytes.
    assert_eq!(headers[2].1.kind, HeaderKind::Uint128);
    assert_eq!(&headers[2].1.bytes[..2], &[0x02, 0x01]);

    let targeted = record_headers(
        &event().with_target(AgentId::new("auditor").unwrap()),
        ContentType::Json,
    );
    assert_eq!(targeted.len(), 4);
    assert_eq!(targeted[3].0, HEADER_TARGET);
    assert_eq!(targeted[3].1.as_str(), Some("auditor"));
    assert_eq!(
        AGENT_RECORD_HEADER_KEYS,
        ["agdx.ct", "agdx.av", "gen_ai.conversation.id", "agdx.to"]
    );
}

#[test]
fn the_header_table_gives_each_agent_header_the_kind_record_headers_writes() {
    let targeted = record_headers(
        &event().with_target(AgentId::new("auditor").unwrap()),
        ContentType::Json,
    );
    assert_eq!(targeted.len(), AGENT_RECORD_HEADER_KEYS.len());
    for (key, value) in &targeted {
        assert_eq!(agent_record_header_kind(key), Some(value.kind), "{key}");
    }
    assert_eq!(agent_record_header_kind("x-other"), None);
}

#[test]
fn header_kind_names_round_trip() {
    for kind in HeaderKind::ALL {
        assert_eq!(kind.name().parse::<HeaderKind>(), Ok(*kind));
    }
    assert_eq!(HeaderKind::Uint8.name(), "u8");
    assert_eq!(HeaderKind::Uint32.name(), "u32");
    assert_eq!(HeaderKind::Uint128.name(), "uint128");
    assert_eq!(HeaderKind::String.name(), "string");
}

#[test]
fn header_caps() {
    let longest = AgentId::new("a".repeat(255)).unwrap();
    let headers = record_headers(&event().with_target(longest), ContentType::Json);
    // 7+1+9 + 7+4+9 + 22+16+9 + 7+255+9 = 355
    assert_eq!(check_header_caps(&headers), Ok(()));

    // A legal 256-byte agent id does not fit a header value: the routing
    // hint is left out and the record stays sendable.
    let too_long = AgentId::new("a".repeat(256)).unwrap();
    let headers = record_headers(&event().with_target(too_long), ContentType::Json);
    assert!(headers.iter().all(|(key, _)| key != HEADER_TARGET));
    assert_eq!(check_header_caps(&headers), Ok(()));

    let mut over = record_headers(&event(), ContentType::Json);
    over.push(("x-long".into(), HeaderValue::string(&"v".repeat(256))));
    assert_eq!(
        check_header_caps(&over),
        Err(HeaderCapError::ValueTooLarge {
            key: "x-long".into(),
            len: 256
        })
    );

    let mut many = record_headers(&event(), ContentType::Json);
    for i in 0..3 {
        many.push((
            format!("x-extra-{i}").into(),
            HeaderValue::string(&"v".repeat(255)),
        ));
    }
    // 84 for the contract three, then 3 × (9 + 255 + 9) = 819: 903 fits.
    assert_eq!(check_header_caps(&many), Ok(()));
    many.push(("x-extra-3".into(), HeaderValue::string(&"v".repeat(255))));
    assert_eq!(
        check_header_caps(&many),
        Err(HeaderCapError::TotalTooLarge { total: 1176 })
    );
}

#[test]
fn signing_input_covers_context_and_unsigned_envelope() {
    let context = SignatureContext {
        content_type: Some(ContentType::Json),
        agent_version: Some(1),
    };
    let signed = event().with_signature(Signature::ed25519([1; 8], [2; 64]).with_context(context));
    let mut unsigned = signed.clone();
    unsigned.signature = None;

    let input = signing_input(&signed);
    let expected = [
        SIGNING_DOMAIN,
        context.encode().as_slice(),
        unsigned.encode().as_slice(),
    ]
    .concat();
    assert_eq!(input, expected);
    assert_eq!(
        context.encode(),
        b"\xa2\x6ccontent_type\x01\x6dagent_version\x01"
    );

    // A verifier rebuilds the same input from the received bytes.
    let received = AgentEnvelope::decode_valid(&signed.encode()).unwrap();
    assert_eq!(signing_input(&received), input);

    // Without a context only the domain and the unsigned envelope are signed.
    let plain = event().with_signature(Signature::ed25519([1; 8], [2; 64]));
    assert_eq!(
        signing_input(&plain),
        [SIGNING_DOMAIN, unsigned.encode().as_slice()].concat()
    );
    assert_eq!(SIGNING_DOMAIN, b"agdx.signature.v1");
}

#[test]
fn must_understand_rejects_unknown_bits() {
    let e = event().with_must_understand(0b101);
    assert!(e.requires_unknown_features(0));
    assert!(e.requires_unknown_features(0b001));
    assert!(!e.requires_unknown_features(0b101));
    assert!(!event().requires_unknown_features(0));
}

#[test]
fn serde_forms_of_ids_and_positions() {
    let id = RecordId::from_u128(0x0102);
    let mut out = Vec::new();
    ciborium::into_writer(&id, &mut out).unwrap();
    assert_eq!(out[0], 0x50, "a 16-byte byte string");
    assert_eq!(
        ciborium::from_reader::<RecordId, _>(out.as_slice()).unwrap(),
        id
    );

    let position: LogPosition = "1/2/3/4".parse().unwrap();
    let mut out = Vec::new();
    ciborium::into_writer(&position, &mut out).unwrap();
    assert_eq!(out[0], 0x54, "a 20-byte byte string");
    assert_eq!(&out[1..], position.to_bytes());
    assert_eq!(
        ciborium::from_reader::<LogPosition, _>(out.as_slice()).unwrap(),
        position
    );

    let agent = AgentId::new("planner").unwrap();
    let mut out = Vec::new();
    ciborium::into_writer(&agent, &mut out).unwrap();
    assert_eq!(
        ciborium::from_reader::<AgentId, _>(out.as_slice()).unwrap(),
        agent
    );
    let mut bad = Vec::new();
    ciborium::into_writer(&"", &mut bad).unwrap();
    assert!(ciborium::from_reader::<AgentId, _>(bad.as_slice()).is_err());
}
