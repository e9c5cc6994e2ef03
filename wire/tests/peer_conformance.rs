//! Byte compatibility with the independent reference corpus: every positive
//! decodes, validates and re-encodes byte-for-byte; every negative is
//! rejected for its rule; the record binding's headers match.

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use agdx_wire::*;
use ciborium::Value;

/// How to check one peer file.
#[derive(Clone, Copy)]
enum Expect {
    Valid(fn(&[u8])),
    Rejected { field: &'static str, missing: bool },
    Record,
}

const CORPUS: &[(&str, Expect)] = &[
    (
        "agent_command.bin",
        Expect::Valid(roundtrip::<AgentEnvelope>),
    ),
    (
        "agent_response.bin",
        Expect::Valid(roundtrip::<AgentEnvelope>),
    ),
    ("agent_event.bin", Expect::Valid(roundtrip::<AgentEnvelope>)),
    (
        "agent_chunk_open.bin",
        Expect::Valid(roundtrip::<AgentEnvelope>),
    ),
    (
        "agent_chunk_terminal.bin",
        Expect::Valid(roundtrip::<AgentEnvelope>),
    ),
    (
        "agent_status_task.bin",
        Expect::Valid(roundtrip::<AgentEnvelope>),
    ),
    ("agent_error.bin", Expect::Valid(error_envelope)),
    (
        "agent_error_body.bin",
        Expect::Valid(roundtrip::<ErrorBody>),
    ),
    ("agent_body_ref.bin", Expect::Valid(roundtrip::<BodyRef>)),
    ("agent_dead_letter.bin", Expect::Valid(dead_letter)),
    ("agent_signature.bin", Expect::Valid(roundtrip::<Signature>)),
    ("agent_record.bin", Expect::Record),
    (
        "agent_invalid_command_no_correlation.bin",
        Expect::Rejected {
            field: "correlation",
            missing: true,
        },
    ),
    (
        "agent_invalid_chunk_no_sequence.bin",
        Expect::Rejected {
            field: "sequence",
            missing: true,
        },
    ),
    (
        "agent_invalid_status_no_operation.bin",
        Expect::Rejected {
            field: "operation",
            missing: true,
        },
    ),
    (
        "agent_invalid_response_channel.bin",
        Expect::Rejected {
            field: "channel",
            missing: false,
        },
    ),
];

fn roundtrip<T: WirePayload + std::fmt::Debug>(bytes: &[u8]) {
    let value = T::decode(bytes).unwrap_or_else(|e| panic!("{} did not decode: {e}", T::TYPE_NAME));
    if let Err(e) = value.validate() {
        panic!(
            "{} is valid in the corpus but was rejected: {e}",
            T::TYPE_NAME
        );
    }
    assert_eq!(
        value.encode(),
        bytes,
        "{} re-encoded differently: {value:?}",
        T::TYPE_NAME
    );
}

fn error_envelope(bytes: &[u8]) {
    roundtrip::<AgentEnvelope>(bytes);
    let env = AgentEnvelope::decode(bytes).unwrap();
    assert_eq!(env.kind, Kind::Error);
    roundtrip::<ErrorBody>(&env.body);
    let body = ErrorBody::decode(&env.body).unwrap();
    assert_eq!(body.code, ErrorCode::ToolFailure);
    assert!(body.retryable);
}

fn dead_letter(bytes: &[u8]) {
    roundtrip::<DeadLetter>(bytes);
    let dl = DeadLetter::decode(bytes).unwrap();
    assert_eq!(dl.source.to_string(), "1/2/3/99");
    assert_eq!(dl.reason, DeadLetterReason::RetryExhausted);
    roundtrip::<AgentEnvelope>(&dl.payload);
}

fn record(bytes: &[u8]) {
    let value: Value = ciborium::from_reader(bytes).expect("agent_record.bin is CBOR");
    let map = value.as_map().expect("a map");
    let get = |key: &str| {
        map.iter()
            .find(|(k, _)| k.as_text() == Some(key))
            .map(|(_, v)| v)
            .unwrap_or_else(|| panic!("agent_record.bin has no {key}"))
    };
    let payload = get("payload").as_bytes().expect("payload bytes");
    roundtrip::<AgentEnvelope>(payload);
    let env = AgentEnvelope::decode(payload).unwrap();
    assert_eq!(
        get("partition_key").as_text(),
        Some(env.conversation.to_string().as_str())
    );

    let theirs: BTreeMap<String, (String, Vec<u8>)> = get("headers")
        .as_map()
        .expect("headers map")
        .iter()
        .map(|(k, v)| {
            let fields = v.as_map().expect("header value map");
            let field = |name: &str| {
                fields
                    .iter()
                    .find(|(k, _)| k.as_text() == Some(name))
                    .map(|(_, v)| v)
                    .unwrap()
            };
            (
                k.as_text().unwrap().to_owned(),
                (
                    field("kind").as_text().unwrap().to_owned(),
                    field("bytes").as_bytes().unwrap().clone(),
                ),
            )
        })
        .collect();
    let ct = ContentType::from_code(theirs["agdx.ct"].1[0]);
    assert_eq!(ct, ContentType::Json);
    let ours: BTreeMap<String, (String, Vec<u8>)> = record_headers(&env, ct)
        .into_iter()
        .map(|(k, v)| (k.into_owned(), (v.kind.name().to_owned(), v.bytes.to_vec())))
        .collect();
    assert_eq!(ours, theirs);
    assert_eq!(check_header_caps(&record_headers(&env, ct)), Ok(()));
}

fn check(dir: &Path, name: &str, expect: Expect) {
    let bytes = common::read(dir, name);
    match expect {
        Expect::Valid(f) => f(&bytes),
        Expect::Record => record(&bytes),
        Expect::Rejected { field, missing } => {
            let env = AgentEnvelope::decode(&bytes)
                .unwrap_or_else(|e| panic!("{name} is well-formed: {e}"));
            let err = env.validate().expect_err(name);
            assert_eq!(err.field, field, "{name}: {err}");
            let want = if missing {
                Reason::Missing
            } else {
                Reason::Forbidden
            };
            assert_eq!(err.reason, want, "{name}: {err}");
            assert!(matches!(
                AgentEnvelope::decode_valid(&bytes),
                Err(WireError::Invalid(_))
            ));
        }
    }
}

#[test]
fn peer_corpus_conforms() {
    let Some(dir) = common::peer_dir() else {
        return;
    };
    for (name, expect) in CORPUS {
        check(&dir, name, *expect);
    }
}

#[test]
fn every_peer_file_is_checked() {
    let Some(dir) = common::peer_dir() else {
        return;
    };
    let mut unknown = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".bin") && !CORPUS.iter().any(|(n, _)| *n == name) {
            unknown.push(name);
        }
    }
    assert!(
        unknown.is_empty(),
        "peer files without a check: {unknown:?}"
    );
}

#[test]
fn peer_positives_reject_trailing_bytes_and_truncation() {
    let Some(dir) = common::peer_dir() else {
        return;
    };
    for (name, expect) in CORPUS {
        if !matches!(expect, Expect::Valid(_)) {
            continue;
        }
        let mut bytes = common::read(&dir, name);
        bytes.push(0);
        let trailing = match *name {
            "agent_error_body.bin" => ErrorBody::decode(&bytes).err(),
            "agent_body_ref.bin" => BodyRef::decode(&bytes).err(),
            "agent_dead_letter.bin" => DeadLetter::decode(&bytes).err(),
            "agent_signature.bin" => Signature::decode(&bytes).err(),
            _ => AgentEnvelope::decode(&bytes).err(),
        };
        assert_eq!(
            trailing,
            Some(DecodeError::TrailingBytes { count: 1 }),
            "{name}"
        );
        bytes.truncate(bytes.len() - 2);
        assert!(AgentEnvelope::decode(&bytes).is_err(), "{name} truncated");
    }
}

const BASE: u128 = 0x0190_3c1f_aa00_0000_0000_0000_0000_0000;
const DEADLINE: u64 = 1_717_171_777_000_000;

fn agent(name: &str) -> AgentId {
    AgentId::new(name).unwrap()
}

/// The typed constructors produce the corpus bytes exactly: the verbs the
/// runtime uses write what the independent implementation writes.
#[test]
fn constructors_reproduce_the_corpus() {
    let Some(dir) = common::peer_dir() else {
        return;
    };
    let (record, conversation) = (
        RecordId::from_u128(BASE | 1),
        ConversationId::from_u128(BASE | 2),
    );
    let (correlation, channel) = (
        CorrelationId::from_u128(BASE | 5),
        ChannelId::from_u128(BASE | 6),
    );
    let source = || agent("source-agent");
    let seq = |n| std::num::NonZeroU64::new(n).unwrap();
    let built = [
        (
            "agent_command.bin",
            AgentEnvelope::command(
                record,
                conversation,
                source(),
                correlation,
                Some("chat"),
                br#"{"ask":"plan the trip"}"#.to_vec(),
            )
            .with_target(agent("target-agent"))
            .with_idempotency_key(IdempotencyKey::new("order-123-attempt-2").unwrap())
            .with_deadline_micros(DEADLINE)
            .with_metadata(Metadata::new().with("priority", "high")),
        ),
        (
            "agent_response.bin",
            AgentEnvelope::response(
                record,
                conversation,
                source(),
                correlation,
                br#"{"plan":["fly","drive"]}"#.to_vec(),
            )
            .with_cause(record, Some("1/2/3/41".parse().unwrap()))
            .with_task_state(TaskState::Completed)
            .with_usage(TokenUsage {
                reasoning_output_tokens: Some(64),
                ..TokenUsage::new(1200, 256)
            }),
        ),
        (
            "agent_event.bin",
            AgentEnvelope::event(
                record,
                conversation,
                source(),
                br#"{"observed":"user paid"}"#.to_vec(),
            ),
        ),
        (
            "agent_chunk_open.bin",
            AgentEnvelope::chunk_open(
                conversation,
                source(),
                correlation,
                channel,
                StreamPurpose::Reasoning,
                b"thinking".to_vec(),
            )
            .with_deadline_micros(DEADLINE),
        ),
        (
            "agent_chunk_terminal.bin",
            AgentEnvelope::chunk_last(
                conversation,
                source(),
                correlation,
                channel,
                seq(8),
                Vec::new(),
                Some("stop"),
                Some(TokenUsage {
                    cache_read_input_tokens: Some(900),
                    ..TokenUsage::new(1200, 88)
                }),
            ),
        ),
        (
            "agent_status_task.bin",
            AgentEnvelope::status_task(
                record,
                conversation,
                source(),
                correlation,
                TaskState::Working,
            ),
        ),
        (
            "agent_error.bin",
            AgentEnvelope::error(
                record,
                conversation,
                source(),
                correlation,
                &ErrorBody::new(ErrorCode::ToolFailure)
                    .with_message("search timed out")
                    .retryable(true)
                    .with_detail(Metadata::new().with("attempt", 3u64)),
            ),
        ),
    ];
    for (name, envelope) in built {
        assert_eq!(envelope.validate(), Ok(()), "{name}");
        assert_eq!(envelope.encode(), common::read(&dir, name), "{name}");
    }
    let signature = Signature::ed25519([0xab; 8], [0xcd; 64]);
    assert_eq!(
        signature.encode(),
        common::read(&dir, "agent_signature.bin")
    );
    let body_ref = BodyRef::new("s3://transcripts/conv-2/msg-9", 4 << 20, [7; 32]);
    assert_eq!(body_ref.encode(), common::read(&dir, "agent_body_ref.bin"));
}
