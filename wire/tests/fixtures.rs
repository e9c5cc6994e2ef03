//! Our golden corpus in `<workspace>/fixtures`: every file comes from the one
//! list in [`corpus`]. Positives must re-encode to the bytes on disk;
//! negatives must be rejected for the rule they are named after.
//!
//! Regenerating is explicit:
//! `AGDX_REGENERATE_FIXTURES=1 cargo test -p agdx-wire --test fixtures`.

mod common;

use std::collections::BTreeSet;
use std::num::NonZeroU64;

use agdx_wire::*;
use ciborium::Value;

const BASE: u128 = 0x0190_3c1f_aa00_0000_0000_0000_0000_0000;
const MANIFEST: &str = "MANIFEST.tsv";

/// What a fixture must do.
enum Expect {
    /// Decode, validate, re-encode to the same bytes.
    Valid,
    /// Decode, then fail validation on `field` for `Why`.
    Invalid(&'static str, Why),
    /// Fail to decode, with an error the predicate accepts (innermost error).
    Malformed(fn(&DecodeError) -> bool),
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Why {
    Missing,
    Forbidden,
    TooLarge,
    InvalidValue,
}

enum Outcome {
    Reencoded(Vec<u8>),
    Invalid(ValidationError),
    Malformed(DecodeError),
}

struct Fixture {
    name: &'static str,
    type_name: &'static str,
    bytes: Vec<u8>,
    expect: Expect,
    outcome: fn(&[u8]) -> Outcome,
}

fn outcome<T: WirePayload>(bytes: &[u8]) -> Outcome {
    match T::decode(bytes) {
        Err(e) => Outcome::Malformed(e),
        Ok(v) => match v.validate() {
            Err(e) => Outcome::Invalid(e),
            Ok(()) => Outcome::Reencoded(v.encode()),
        },
    }
}

fn valid<T: WirePayload>(name: &'static str, value: T) -> Fixture {
    Fixture {
        name,
        type_name: T::TYPE_NAME,
        bytes: value.encode(),
        expect: Expect::Valid,
        outcome: outcome::<T>,
    }
}

fn invalid<T: WirePayload>(name: &'static str, field: &'static str, why: Why, value: T) -> Fixture {
    Fixture {
        name,
        type_name: T::TYPE_NAME,
        bytes: value.encode(),
        expect: Expect::Invalid(field, why),
        outcome: outcome::<T>,
    }
}

fn malformed<T: WirePayload>(
    name: &'static str,
    bytes: Vec<u8>,
    expected: fn(&DecodeError) -> bool,
) -> Fixture {
    Fixture {
        name,
        type_name: T::TYPE_NAME,
        bytes,
        expect: Expect::Malformed(expected),
        outcome: outcome::<T>,
    }
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).unwrap()
}
fn record() -> RecordId {
    RecordId::from_u128(BASE | 0x11)
}
fn conversation() -> ConversationId {
    ConversationId::from_u128(BASE | 0x22)
}
fn correlation() -> CorrelationId {
    CorrelationId::from_u128(BASE | 0x33)
}
fn channel() -> ChannelId {
    ChannelId::from_u128(BASE | 0x44)
}
fn seq(n: u64) -> NonZeroU64 {
    NonZeroU64::new(n).unwrap()
}
fn with(mut e: AgentEnvelope, f: impl FnOnce(&mut AgentEnvelope)) -> AgentEnvelope {
    f(&mut e);
    e
}

fn command() -> AgentEnvelope {
    AgentEnvelope::command(
        record(),
        conversation(),
        agent("planner"),
        correlation(),
        Some("summarize"),
        b"incident 42",
    )
}
fn response() -> AgentEnvelope {
    AgentEnvelope::response(
        record(),
        conversation(),
        agent("summarizer"),
        correlation(),
        b"summary",
    )
}
fn event() -> AgentEnvelope {
    AgentEnvelope::event(
        record(),
        conversation(),
        agent("ledger"),
        br#"{"paid":true}"#,
    )
}
fn chunk_open() -> AgentEnvelope {
    AgentEnvelope::chunk_open(
        conversation(),
        agent("writer"),
        correlation(),
        channel(),
        StreamPurpose::Chat,
        b"Hel",
    )
}
fn chunk_middle() -> AgentEnvelope {
    AgentEnvelope::chunk(
        conversation(),
        agent("writer"),
        correlation(),
        channel(),
        seq(1),
        b"lo",
    )
}
fn status_task() -> AgentEnvelope {
    AgentEnvelope::status_task(
        record(),
        conversation(),
        agent("worker"),
        correlation(),
        TaskState::Working,
    )
}
fn status_progress() -> AgentEnvelope {
    AgentEnvelope::status_progress(record(), conversation(), agent("worker"), b"40%")
}
fn error_body() -> ErrorBody {
    ErrorBody::new(ErrorCode::ToolFailure)
        .with_message("search timed out")
        .retryable(true)
        .with_detail(Metadata::new().with("attempt", 3u64))
}
fn error() -> AgentEnvelope {
    AgentEnvelope::error(
        record(),
        conversation(),
        agent("summarizer"),
        correlation(),
        &error_body(),
    )
}
fn card() -> AgentCard {
    AgentCard {
        name: Some("summarizer".into()),
        version: Some("1.4.0".into()),
        capabilities: vec![
            CapabilityDescriptor {
                cost_class: Some(2),
                latency_class: Some(1),
                max_concurrency: Some(8),
                health: Some(Health::Healthy),
                load: Some(125),
                ..CapabilityDescriptor::new("summarize")
                    .with_input(ContentRef::ContentType(ContentType::Json))
                    .with_output(ContentRef::Schema("agdx.summary.v1".into()))
            },
            CapabilityDescriptor::new("translate"),
        ],
        ttl_micros: Some(300_000_000),
    }
}
fn signature() -> Signature {
    Signature::ed25519([0xab; 8], [0xcd; 64]).with_context(SignatureContext {
        content_type: Some(ContentType::Json),
        agent_version: Some(1),
    })
}
fn rich_metadata() -> Metadata {
    Metadata::new()
        .with(META_ROLE, "user")
        .with(META_BRIDGE_HOPS, vec![Scalar::from("a2a-bridge")])
        .with(META_FENCE, 7u64)
        .with("temperature", 0.25)
        .with("ratio", 0.1)
        .with("offset", -3i64)
        .with("cached", false)
        .with("note", Scalar::Null)
        .with(
            "tags",
            vec![Scalar::from("x"), Scalar::from(1u64), Scalar::from(true)],
        )
}
fn long(n: usize) -> String {
    "x".repeat(n)
}

/// Builds a CBOR map in the given order (duplicates and all).
fn map(entries: Vec<(&str, Value)>) -> Vec<u8> {
    let value = Value::Map(
        entries
            .into_iter()
            .map(|(k, v)| (Value::Text(k.into()), v))
            .collect(),
    );
    let mut out = Vec::new();
    ciborium::into_writer(&value, &mut out).unwrap();
    out
}
fn id_value(n: u128) -> Value {
    Value::Bytes(n.to_be_bytes().to_vec())
}
/// A minimal valid event as map entries, for malformed variants.
fn event_entries() -> Vec<(&'static str, Value)> {
    vec![
        ("kind", Value::Text("event".into())),
        ("record", id_value(BASE | 0x11)),
        ("conversation", id_value(BASE | 0x22)),
        ("source", Value::Text("ledger".into())),
        ("body", Value::Bytes(b"x".to_vec())),
    ]
}
fn event_with(f: impl FnOnce(&mut Vec<(&'static str, Value)>)) -> Vec<u8> {
    let mut entries = event_entries();
    f(&mut entries);
    map(entries)
}
/// The map of `entries` and then `key` → `raw`, bytes ciborium cannot write.
fn with_raw_entry(entries: Vec<(&'static str, Value)>, key: &str, raw: &[u8]) -> Vec<u8> {
    let mut bytes = map(entries);
    // A small map head (0xa0 | n) counts the entries; one more follows.
    assert!(bytes[0] > 0xa0 && bytes[0] < 0xb7);
    bytes[0] += 1;
    ciborium::into_writer(&Value::Text(key.into()), &mut bytes).unwrap();
    bytes.extend_from_slice(raw);
    bytes
}
fn set(entries: &mut [(&'static str, Value)], key: &str, value: Value) {
    entries.iter_mut().find(|(k, _)| *k == key).unwrap().1 = value;
}

/// The corpus: one entry per file, `<name>.bin`.
fn corpus() -> Vec<Fixture> {
    use Why::*;
    type E = AgentEnvelope;
    vec![
        // Positives: one or more per kind.
        valid("envelope_command", command()),
        valid(
            "envelope_command_full",
            command()
                .with_target(agent("summarizer"))
                .with_cause(
                    RecordId::from_u128(BASE | 0x10),
                    Some("1/2/3/41".parse().unwrap()),
                )
                .with_idempotency_key(IdempotencyKey::new("order-123-attempt-2").unwrap())
                .with_deadline_micros(1_717_171_777_000_000)
                .with_tool("search")
                .with_metadata(rich_metadata())
                .with_must_understand(1)
                .with_signature(signature()),
        ),
        valid(
            "envelope_response",
            response()
                .with_task_state(TaskState::Completed)
                .with_finish_reason("stop")
                .with_usage(TokenUsage {
                    reasoning_output_tokens: Some(64),
                    ..TokenUsage::new(1200, 256)
                }),
        ),
        valid("envelope_event", event()),
        valid(
            "envelope_event_state_delta",
            event()
                .with_operation(EVENT_STATE_DELTA)
                .with_correlation(correlation()),
        ),
        valid(
            "envelope_chunk_open",
            chunk_open().with_deadline_micros(1_717_171_777_000_000),
        ),
        valid("envelope_chunk_middle", chunk_middle()),
        valid(
            "envelope_chunk_last",
            AgentEnvelope::chunk_last(
                conversation(),
                agent("writer"),
                correlation(),
                channel(),
                seq(2),
                Vec::new(),
                Some("stop"),
                Some(TokenUsage::new(12, 3)),
            ),
        ),
        valid(
            "envelope_chunk_single",
            chunk_open()
                .as_last(Some("length"), None)
                .with_record(record()),
        ),
        valid("envelope_status_task", status_task()),
        valid(
            "envelope_status_task_final",
            status_task()
                .with_task_state(TaskState::Completed)
                .with_last(),
        ),
        valid(
            "envelope_status_card",
            AgentEnvelope::status_card(record(), conversation(), agent("summarizer"), &card()),
        ),
        valid("envelope_status_progress", status_progress()),
        valid(
            "envelope_status_progress_task_state",
            status_progress().with_task_state(TaskState::Working),
        ),
        valid(
            "envelope_status_quarantine",
            AgentEnvelope::status_quarantine(
                record(),
                conversation(),
                agent("operator"),
                &agent("rogue"),
                true,
            )
            .with_signature(Signature::ed25519([1; 8], [2; 64])),
        ),
        valid(
            "envelope_status_unquarantine",
            AgentEnvelope::status_quarantine(
                record(),
                conversation(),
                agent("operator"),
                &agent("rogue"),
                false,
            ),
        ),
        valid("envelope_error", error()),
        valid(
            "envelope_error_stream_terminal",
            error()
                .with_stream_terminal(channel(), 3)
                .with_tool("search"),
        ),
        valid(
            "envelope_unrecognized_task_state",
            response().with_task_state(TaskState::from_code(42)),
        ),
        // Positives the validator must not refuse: it checks whether a body
        // is there, never what it holds, and metadata only against the caps.
        valid(
            "envelope_status_card_empty_body",
            AgentEnvelope::status(
                record(),
                conversation(),
                agent("summarizer"),
                StatusOperation::Card,
                Vec::new(),
            ),
        ),
        valid(
            "envelope_status_card_body_not_a_card",
            AgentEnvelope::status(
                record(),
                conversation(),
                agent("summarizer"),
                StatusOperation::Card,
                b"not cbor".to_vec(),
            ),
        ),
        valid(
            "envelope_status_quarantine_empty_body",
            AgentEnvelope::status(
                record(),
                conversation(),
                agent("operator"),
                StatusOperation::Quarantine,
                Vec::new(),
            ),
        ),
        valid(
            "envelope_status_quarantine_body_not_an_agent",
            AgentEnvelope::status(
                record(),
                conversation(),
                agent("operator"),
                StatusOperation::Quarantine,
                b"two\nlines".to_vec(),
            ),
        ),
        valid(
            "envelope_error_body_not_an_error_body",
            with(error(), |e| e.body = Bytes::from_static(b"oops")),
        ),
        valid(
            "envelope_error_claim_checked",
            with(error(), |e| {
                e.body = BodyRef::new("blob://sha256/3f2a", 1 << 20, [9; 32])
                    .encode()
                    .into()
            }),
        ),
        valid(
            "envelope_metadata_pinned_keys_off_shape",
            event().with_metadata(
                Metadata::new()
                    .with(META_ROLE, "developer")
                    .with(META_BRIDGE_HOPS, "a2a-bridge")
                    .with(META_FENCE, -1i64),
            ),
        ),
        valid(
            "envelope_metadata_nested_arrays",
            event().with_metadata(
                Metadata::new()
                    .with("hops", vec![Scalar::Array(vec!["a".into()])])
                    .with(
                        "grid",
                        vec![
                            Scalar::Array(vec![1u64.into(), Scalar::Array(vec![])]),
                            Scalar::Array(vec![2.5.into()]),
                        ],
                    ),
            ),
        ),
        // Positives: one or more per capsule.
        valid(
            "usage",
            TokenUsage {
                reasoning_output_tokens: Some(1),
                cache_read_input_tokens: Some(2),
                cache_creation_input_tokens: Some(3),
                ..TokenUsage::new(u64::MAX, 0)
            },
        ),
        valid("error_body", error_body()),
        valid(
            "error_body_minimal",
            ErrorBody::new(ErrorCode::from_code(200)),
        ),
        valid(
            "body_ref",
            BodyRef {
                encryption: Some(1),
                ..BodyRef::new("s3://bucket/key", 1 << 20, [9; 32])
            },
        ),
        valid(
            "dead_letter",
            DeadLetter {
                source: "1/2/3/99".parse().unwrap(),
                reason: DeadLetterReason::DecodeFailed,
                attempts: 1,
                detail: Some("not CBOR".into()),
                payload: vec![0xff, 0x00],
            },
        ),
        valid("signature", signature()),
        valid(
            "signature_other_scheme",
            Signature {
                scheme: SignatureScheme::from_code(9),
                key_id: vec![1, 2, 3],
                bytes: vec![4; 5],
                context: None,
            },
        ),
        valid(
            "signature_context",
            SignatureContext {
                content_type: Some(ContentType::Ref),
                agent_version: None,
            },
        ),
        valid("card", card()),
        valid("card_empty", AgentCard::default()),
        valid(
            "presence",
            AgentPresence::new(agent("summarizer"), Some("agent.commands".into())),
        ),
        valid(
            "fold_snapshot",
            FoldSnapshot {
                conversation: conversation(),
                as_of: [(0, 41), (3, 7)].into_iter().collect(),
                state: b"{\"count\":2}".to_vec(),
            },
        ),
        // Negatives: required fields (R).
        invalid(
            "invalid_command_no_record",
            "record",
            Missing,
            with(command(), |e| e.record = None),
        ),
        invalid(
            "invalid_command_no_correlation",
            "correlation",
            Missing,
            with(command(), |e| e.correlation = None),
        ),
        invalid(
            "invalid_command_empty_body",
            "body",
            Missing,
            with(command(), |e| e.body.clear()),
        ),
        invalid(
            "invalid_response_no_record",
            "record",
            Missing,
            with(response(), |e| e.record = None),
        ),
        invalid(
            "invalid_response_no_correlation",
            "correlation",
            Missing,
            with(response(), |e| e.correlation = None),
        ),
        invalid(
            "invalid_response_empty_body",
            "body",
            Missing,
            with(response(), |e| e.body.clear()),
        ),
        invalid(
            "invalid_event_no_record",
            "record",
            Missing,
            with(event(), |e| e.record = None),
        ),
        invalid(
            "invalid_event_empty_body",
            "body",
            Missing,
            with(event(), |e| e.body.clear()),
        ),
        invalid(
            "invalid_chunk_no_correlation",
            "correlation",
            Missing,
            with(chunk_middle(), |e| e.correlation = None),
        ),
        invalid(
            "invalid_chunk_no_channel",
            "channel",
            Missing,
            with(chunk_middle(), |e| e.channel = None),
        ),
        invalid(
            "invalid_chunk_no_sequence",
            "sequence",
            Missing,
            with(chunk_middle(), |e| e.sequence = None),
        ),
        invalid(
            "invalid_chunk_open_no_operation",
            "operation",
            Missing,
            with(chunk_open(), |e| e.operation = None),
        ),
        invalid(
            "invalid_chunk_empty_body_not_last",
            "body",
            Missing,
            with(chunk_middle(), |e| e.body.clear()),
        ),
        invalid(
            "invalid_status_no_record",
            "record",
            Missing,
            with(status_progress(), |e| e.record = None),
        ),
        invalid(
            "invalid_status_no_operation",
            "operation",
            Missing,
            with(status_progress(), |e| e.operation = None),
        ),
        invalid(
            "invalid_status_task_no_correlation",
            "correlation",
            Missing,
            with(status_task(), |e| e.correlation = None),
        ),
        invalid(
            "invalid_status_task_no_task_state",
            "task_state",
            Missing,
            with(status_task(), |e| e.task_state = None),
        ),
        invalid(
            "invalid_error_no_record",
            "record",
            Missing,
            with(error(), |e| e.record = None),
        ),
        invalid(
            "invalid_error_no_correlation",
            "correlation",
            Missing,
            with(error(), |e| e.correlation = None),
        ),
        invalid(
            "invalid_error_empty_body",
            "body",
            Missing,
            with(error(), |e| e.body.clear()),
        ),
        // Negatives: forbidden fields (X) and conditional rules.
        invalid(
            "invalid_command_channel",
            "channel",
            Forbidden,
            command().with_channel(channel()),
        ),
        invalid(
            "invalid_response_channel",
            "channel",
            Forbidden,
            response().with_channel(channel()),
        ),
        invalid(
            "invalid_event_channel",
            "channel",
            Forbidden,
            event().with_channel(channel()),
        ),
        invalid(
            "invalid_status_channel",
            "channel",
            Forbidden,
            status_progress().with_channel(channel()),
        ),
        invalid(
            "invalid_command_sequence",
            "sequence",
            Forbidden,
            with(command(), |e| e.sequence = Some(0)),
        ),
        invalid(
            "invalid_response_sequence",
            "sequence",
            Forbidden,
            with(response(), |e| e.sequence = Some(1)),
        ),
        invalid(
            "invalid_event_sequence",
            "sequence",
            Forbidden,
            with(event(), |e| e.sequence = Some(1)),
        ),
        invalid(
            "invalid_status_sequence",
            "sequence",
            Forbidden,
            with(status_progress(), |e| e.sequence = Some(1)),
        ),
        invalid(
            "invalid_error_sequence_without_channel",
            "sequence",
            Forbidden,
            with(error(), |e| e.sequence = Some(1)),
        ),
        invalid(
            "invalid_command_last",
            "last",
            Forbidden,
            with(command(), |e| e.last = true),
        ),
        invalid(
            "invalid_response_last",
            "last",
            Forbidden,
            with(response(), |e| e.last = true),
        ),
        invalid(
            "invalid_event_last",
            "last",
            Forbidden,
            with(event(), |e| e.last = true),
        ),
        invalid(
            "invalid_error_last",
            "last",
            Forbidden,
            with(error(), |e| e.last = true),
        ),
        invalid(
            "invalid_command_finish_reason",
            "finish_reason",
            Forbidden,
            command().with_finish_reason("stop"),
        ),
        invalid(
            "invalid_event_finish_reason",
            "finish_reason",
            Forbidden,
            event().with_finish_reason("stop"),
        ),
        invalid(
            "invalid_status_finish_reason",
            "finish_reason",
            Forbidden,
            status_progress().with_finish_reason("stop"),
        ),
        invalid(
            "invalid_error_finish_reason",
            "finish_reason",
            Forbidden,
            error().with_finish_reason("stop"),
        ),
        invalid(
            "invalid_chunk_finish_reason_not_last",
            "finish_reason",
            Forbidden,
            chunk_middle().with_finish_reason("stop"),
        ),
        invalid(
            "invalid_chunk_idempotency_key",
            "idempotency_key",
            Forbidden,
            chunk_middle().with_idempotency_key(IdempotencyKey::new("k").unwrap()),
        ),
        invalid(
            "invalid_status_idempotency_key",
            "idempotency_key",
            Forbidden,
            status_progress().with_idempotency_key(IdempotencyKey::new("k").unwrap()),
        ),
        invalid(
            "invalid_error_idempotency_key",
            "idempotency_key",
            Forbidden,
            error().with_idempotency_key(IdempotencyKey::new("k").unwrap()),
        ),
        invalid(
            "invalid_response_deadline",
            "deadline_micros",
            Forbidden,
            response().with_deadline_micros(1),
        ),
        invalid(
            "invalid_event_deadline",
            "deadline_micros",
            Forbidden,
            event().with_deadline_micros(1),
        ),
        invalid(
            "invalid_status_deadline",
            "deadline_micros",
            Forbidden,
            status_progress().with_deadline_micros(1),
        ),
        invalid(
            "invalid_error_deadline",
            "deadline_micros",
            Forbidden,
            error().with_deadline_micros(1),
        ),
        invalid(
            "invalid_chunk_deadline_after_open",
            "deadline_micros",
            Forbidden,
            chunk_middle().with_deadline_micros(1),
        ),
        invalid(
            "invalid_command_task_state",
            "task_state",
            Forbidden,
            command().with_task_state(TaskState::Working),
        ),
        invalid(
            "invalid_event_task_state",
            "task_state",
            Forbidden,
            event().with_task_state(TaskState::Working),
        ),
        invalid(
            "invalid_chunk_task_state",
            "task_state",
            Forbidden,
            chunk_middle().with_task_state(TaskState::Working),
        ),
        invalid(
            "invalid_chunk_operation_after_open",
            "operation",
            Forbidden,
            chunk_middle().with_operation("chat"),
        ),
        invalid(
            "invalid_status_tool",
            "tool",
            Forbidden,
            status_progress().with_tool("search"),
        ),
        invalid(
            "invalid_command_usage",
            "usage",
            Forbidden,
            command().with_usage(TokenUsage::new(1, 1)),
        ),
        invalid(
            "invalid_chunk_usage_not_last",
            "usage",
            Forbidden,
            chunk_middle().with_usage(TokenUsage::new(1, 1)),
        ),
        // Negatives: closed vocabularies.
        invalid(
            "invalid_status_unknown_operation",
            "operation",
            InvalidValue,
            with(status_progress(), |e| {
                e.operation = Some("summarize".into())
            }),
        ),
        invalid(
            "invalid_chunk_open_unknown_purpose",
            "operation",
            InvalidValue,
            with(chunk_open(), |e| e.operation = Some("audio".into())),
        ),
        invalid(
            "invalid_signature_ed25519_key_id",
            "signature",
            InvalidValue,
            event().with_signature(Signature {
                key_id: vec![1; 7],
                ..signature()
            }),
        ),
        // Negatives: caps.
        invalid(
            "invalid_operation_too_long",
            "operation",
            TooLarge,
            command().with_operation(long(257)),
        ),
        invalid(
            "invalid_tool_too_long",
            "tool",
            TooLarge,
            command().with_tool(long(257)),
        ),
        invalid(
            "invalid_finish_reason_too_long",
            "finish_reason",
            TooLarge,
            response().with_finish_reason(long(257)),
        ),
        invalid(
            "invalid_metadata_too_many_entries",
            "metadata",
            TooLarge,
            event().with_metadata(
                (0..33)
                    .map(|i| (format!("k{i}"), Scalar::from(i as u64)))
                    .collect(),
            ),
        ),
        invalid(
            "invalid_metadata_key_too_long",
            "metadata",
            TooLarge,
            event().with_metadata(Metadata::new().with(long(257), true)),
        ),
        invalid(
            "invalid_metadata_value_too_large",
            "metadata",
            TooLarge,
            event().with_metadata(Metadata::new().with("v", long(1025))),
        ),
        invalid(
            "invalid_metadata_total_too_large",
            "metadata",
            TooLarge,
            event().with_metadata(
                (0..9)
                    .map(|i| (format!("k{i}"), Scalar::from(long(1000))))
                    .collect(),
            ),
        ),
        invalid(
            "invalid_body_ref_empty_reference",
            "reference",
            InvalidValue,
            BodyRef::new("", 1, [0; 32]),
        ),
        invalid(
            "invalid_body_ref_reference_too_long",
            "reference",
            TooLarge,
            BodyRef::new(long(1025), 1, [0; 32]),
        ),
        invalid(
            "invalid_signature_ed25519_bytes",
            "bytes",
            InvalidValue,
            Signature {
                bytes: vec![0; 63],
                ..signature()
            },
        ),
        invalid(
            "invalid_card_name_too_long",
            "name",
            TooLarge,
            AgentCard {
                name: Some(long(257)),
                ..card()
            },
        ),
        invalid(
            "invalid_card_too_many_capabilities",
            "capabilities",
            TooLarge,
            AgentCard {
                capabilities: (0..65)
                    .map(|i| CapabilityDescriptor::new(format!("s{i}")))
                    .collect(),
                ..card()
            },
        ),
        invalid(
            "invalid_card_skill_id_too_long",
            "skill_id",
            TooLarge,
            AgentCard {
                capabilities: vec![CapabilityDescriptor::new(long(257))],
                ..card()
            },
        ),
        invalid(
            "invalid_presence_version",
            "v",
            InvalidValue,
            AgentPresence {
                version: 2,
                ..AgentPresence::new(agent("a"), None)
            },
        ),
        // Malformed input: decode errors.
        malformed::<E>(
            "malformed_trailing_bytes",
            [event().encode(), vec![0x00]].concat(),
            |e| matches!(e, DecodeError::TrailingBytes { count: 1 }),
        ),
        malformed::<E>(
            "malformed_truncated",
            {
                let b = event().encode();
                b[..b.len() - 3].to_vec()
            },
            |e| *e == DecodeError::Truncated,
        ),
        malformed::<E>("malformed_empty_input", Vec::new(), |e| {
            *e == DecodeError::Truncated
        }),
        malformed::<E>("malformed_not_a_map", vec![0x80], |e| {
            matches!(
                e,
                DecodeError::WrongType {
                    field: "envelope",
                    ..
                }
            )
        }),
        malformed::<E>(
            "malformed_wrong_id_length",
            event_with(|m| set(m, "record", Value::Bytes(vec![1; 15]))),
            |e| {
                *e == DecodeError::BadId {
                    field: "record",
                    len: 15,
                }
            },
        ),
        malformed::<E>(
            "malformed_wrong_type_source",
            event_with(|m| set(m, "source", Value::Integer(7.into()))),
            |e| {
                matches!(
                    e,
                    DecodeError::WrongType {
                        field: "source",
                        ..
                    }
                )
            },
        ),
        malformed::<E>(
            "malformed_null_optional",
            event_with(|m| m.push(("target", Value::Null))),
            |e| {
                matches!(
                    e,
                    DecodeError::WrongType {
                        field: "target",
                        ..
                    }
                )
            },
        ),
        malformed::<E>(
            "malformed_last_not_bool",
            event_with(|m| m.push(("last", Value::Integer(1.into())))),
            |e| matches!(e, DecodeError::WrongType { field: "last", .. }),
        ),
        malformed::<E>(
            "malformed_body_as_text",
            event_with(|m| set(m, "body", Value::Text("x".into()))),
            |e| matches!(e, DecodeError::WrongType { field: "body", .. }),
        ),
        malformed::<E>(
            "malformed_unknown_kind",
            event_with(|m| set(m, "kind", Value::Text("memo".into()))),
            |e| *e == DecodeError::UnknownKind("memo".into()),
        ),
        malformed::<E>(
            "malformed_duplicate_key",
            event_with(|m| m.push(("source", Value::Text("other".into())))),
            |e| *e == DecodeError::DuplicateKey { field: "source" },
        ),
        malformed::<E>(
            "malformed_missing_kind",
            event_with(|m| m.retain(|(k, _)| *k != "kind")),
            |e| *e == DecodeError::MissingField { field: "kind" },
        ),
        malformed::<E>(
            "malformed_missing_conversation",
            event_with(|m| m.retain(|(k, _)| *k != "conversation")),
            |e| {
                *e == DecodeError::MissingField {
                    field: "conversation",
                }
            },
        ),
        malformed::<E>(
            "malformed_missing_source",
            event_with(|m| m.retain(|(k, _)| *k != "source")),
            |e| *e == DecodeError::MissingField { field: "source" },
        ),
        malformed::<E>(
            "malformed_position_length",
            event_with(|m| m.push(("cause_at", Value::Bytes(vec![0; 19])))),
            |e| {
                *e == DecodeError::BadPosition {
                    field: "cause_at",
                    len: 19,
                }
            },
        ),
        malformed::<E>(
            "malformed_agent_id_control_character",
            event_with(|m| set(m, "source", Value::Text("led\nger".into()))),
            |e| {
                matches!(
                    e,
                    DecodeError::InvalidAgentId {
                        field: "source",
                        ..
                    }
                )
            },
        ),
        malformed::<E>(
            "malformed_idempotency_key_too_long",
            event_with(|m| m.push(("idempotency_key", Value::Text(long(65))))),
            |e| matches!(e, DecodeError::InvalidIdempotencyKey(_)),
        ),
        malformed::<E>(
            "malformed_task_state_out_of_range",
            event_with(|m| m.push(("task_state", Value::Integer(300.into())))),
            |e| {
                matches!(
                    e,
                    DecodeError::OutOfRange {
                        field: "task_state",
                        value: 300,
                        ..
                    }
                )
            },
        ),
        malformed::<E>(
            "malformed_metadata_integer_below_range",
            // -2^63 - 1: one below the smallest integer metadata holds.
            with_raw_entry(
                event_entries(),
                "metadata",
                &[0xa1, 0x61, b'n', 0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0],
            ),
            |e| {
                matches!(
                    e,
                    DecodeError::IntegerOutOfRange {
                        field: "metadata",
                        value: -9_223_372_036_854_775_809,
                        ..
                    }
                )
            },
        ),
        malformed::<E>(
            "malformed_simple_value_below_32",
            // 0xf8 0x00 is not well-formed CBOR, even under an unknown key.
            with_raw_entry(event_entries(), "x-unknown", &[0xf8, 0x00]),
            |e| matches!(e, DecodeError::Malformed(_)),
        ),
        malformed::<E>(
            "malformed_invalid_utf8_under_unknown_key",
            // Text that is not UTF-8 is invalid CBOR (RFC 8949 section 5.3.1)
            // even where it is skipped.
            with_raw_entry(event_entries(), "x-unknown", &[0x62, 0xff, b'a']),
            |e| {
                *e == DecodeError::InvalidUtf8 {
                    field: "an unknown key's value",
                }
            },
        ),
        malformed::<E>(
            "malformed_nesting_too_deep",
            // The envelope map and MAX_NESTING arrays under an unknown key.
            with_raw_entry(
                event_entries(),
                "x-unknown",
                &[vec![0x81; MAX_NESTING - 1], vec![0x80]].concat(),
            ),
            |e| *e == DecodeError::TooDeep { limit: MAX_NESTING },
        ),
        malformed::<E>(
            "malformed_metadata_duplicate_key",
            event_with(|m| {
                m.push((
                    "metadata",
                    Value::Map(vec![
                        (Value::Text("a".into()), Value::Bool(true)),
                        (Value::Text("a".into()), Value::Bool(false)),
                    ]),
                ))
            }),
            |e| *e == DecodeError::DuplicateKey { field: "metadata" },
        ),
        malformed::<E>(
            "malformed_non_text_key",
            event_with(|m| {
                m.push((
                    "usage",
                    Value::Map(vec![(Value::Integer(1.into()), Value::Integer(1.into()))]),
                ))
            }),
            |e| matches!(e, DecodeError::NonTextKey { .. }),
        ),
        malformed::<E>(
            "malformed_usage_missing_input_tokens",
            event_with(|m| {
                m.push((
                    "usage",
                    Value::Map(vec![(
                        Value::Text("output_tokens".into()),
                        Value::Integer(1.into()),
                    )]),
                ))
            }),
            |e| {
                *e == DecodeError::MissingField {
                    field: "input_tokens",
                }
            },
        ),
        malformed::<E>(
            "malformed_invalid_utf8",
            {
                let mut b = event().encode();
                let at = b.windows(6).position(|w| w == b"ledger").unwrap();
                b[at] = 0xff;
                b
            },
            |e| *e == DecodeError::InvalidUtf8 { field: "source" },
        ),
        malformed::<E>("malformed_indefinite_length", vec![0xbf, 0xff], |e| {
            *e == DecodeError::IndefiniteLength
        }),
        malformed::<BodyRef>(
            "malformed_body_ref_sha256_length",
            map(vec![
                ("reference", Value::Text("r".into())),
                ("size_bytes", Value::Integer(1.into())),
                ("sha256", Value::Bytes(vec![0; 31])),
            ]),
            |e| {
                *e == DecodeError::BadLength {
                    field: "sha256",
                    expected: 32,
                    len: 31,
                }
            },
        ),
        malformed::<ErrorBody>(
            "malformed_error_body_missing_code",
            map(vec![("retryable", Value::Bool(false))]),
            |e| *e == DecodeError::MissingField { field: "code" },
        ),
        malformed::<DeadLetter>(
            "malformed_dead_letter_missing_payload",
            map(vec![
                ("source", Value::Bytes(vec![0; 20])),
                ("reason", Value::Integer(1.into())),
                ("attempts", Value::Integer(1.into())),
            ]),
            |e| *e == DecodeError::MissingField { field: "payload" },
        ),
        malformed::<AgentCard>(
            "malformed_card_unknown_content_type",
            map(vec![(
                "capabilities",
                Value::Array(vec![Value::Map(vec![
                    (Value::Text("skill_id".into()), Value::Text("s".into())),
                    (
                        Value::Text("input".into()),
                        Value::Map(vec![(
                            Value::Text("content_type".into()),
                            Value::Text("yaml".into()),
                        )]),
                    ),
                ])]),
            )]),
            |e| matches!(e, DecodeError::UnknownName { .. }),
        ),
        malformed::<AgentPresence>(
            "malformed_presence_missing_agent",
            map(vec![("v", Value::Integer(1.into()))]),
            |e| *e == DecodeError::MissingField { field: "agent" },
        ),
        malformed::<FoldSnapshot>(
            "malformed_fold_snapshot_text_partition",
            map(vec![
                ("conversation", id_value(1)),
                (
                    "as_of",
                    Value::Map(vec![(Value::Text("0".into()), Value::Integer(1.into()))]),
                ),
                ("state", Value::Bytes(vec![])),
            ]),
            |e| matches!(e, DecodeError::WrongType { field: "as_of", .. }),
        ),
    ]
}

fn reason_of(r: &Reason) -> Why {
    match r {
        Reason::Missing => Why::Missing,
        Reason::Forbidden => Why::Forbidden,
        Reason::TooLarge { .. } => Why::TooLarge,
        Reason::InvalidValue(_) => Why::InvalidValue,
    }
}

/// Checks one fixture's behaviour against its expectation.
fn check(f: &Fixture, bytes: &[u8]) -> Result<(), String> {
    match (&f.expect, (f.outcome)(bytes)) {
        (Expect::Valid, Outcome::Reencoded(again)) if again == bytes => Ok(()),
        (Expect::Valid, Outcome::Reencoded(_)) => Err("re-encodes to different bytes".into()),
        (Expect::Invalid(field, why), Outcome::Invalid(e))
            if e.field == *field && reason_of(&e.reason) == *why =>
        {
            Ok(())
        }
        (Expect::Malformed(pred), Outcome::Malformed(e)) if pred(e.root()) => Ok(()),
        (_, Outcome::Reencoded(_)) => Err("was accepted".into()),
        (_, Outcome::Invalid(e)) => Err(format!("rejected for another reason: {e}")),
        (_, Outcome::Malformed(e)) => Err(format!("failed to decode: {e}")),
    }
}

fn expectation(e: &Expect) -> &'static str {
    match e {
        Expect::Valid => "valid",
        Expect::Invalid(..) => "invalid",
        Expect::Malformed(_) => "malformed",
    }
}

fn manifest(corpus: &[Fixture]) -> String {
    let mut out = String::from("# file\ttype\texpect (generated from wire/tests/fixtures.rs)\n");
    for f in corpus {
        out.push_str(&format!(
            "{}.bin\t{}\t{}\n",
            f.name,
            f.type_name,
            expectation(&f.expect)
        ));
    }
    out
}

fn files_on_disk() -> BTreeSet<String> {
    std::fs::read_dir(common::fixtures_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".bin"))
        .collect()
}

#[test]
fn fixtures_match_the_corpus_list() {
    let corpus = corpus();
    let dir = common::fixtures_dir();
    let names: BTreeSet<String> = corpus.iter().map(|f| format!("{}.bin", f.name)).collect();
    assert_eq!(names.len(), corpus.len(), "fixture names must be unique");

    // Every fixture behaves as named, from the bytes we build.
    let failures: Vec<String> = corpus
        .iter()
        .filter_map(|f| check(f, &f.bytes).err().map(|e| format!("{}: {e}", f.name)))
        .collect();
    assert!(
        failures.is_empty(),
        "fixtures that do not behave as named:\n{}",
        failures.join("\n")
    );

    if std::env::var_os("AGDX_REGENERATE_FIXTURES").is_some_and(|v| v == "1") {
        for stale in files_on_disk().difference(&names) {
            std::fs::remove_file(dir.join(stale)).unwrap();
        }
        for f in &corpus {
            std::fs::write(dir.join(format!("{}.bin", f.name)), &f.bytes).unwrap();
        }
        std::fs::write(dir.join(MANIFEST), manifest(&corpus)).unwrap();
        println!("regenerated {} fixtures in {}", corpus.len(), dir.display());
        return;
    }

    // The bytes on disk are what the list builds, and behave as named.
    for f in &corpus {
        let on_disk = common::read(&dir, &format!("{}.bin", f.name));
        assert!(
            on_disk == f.bytes,
            "{}.bin differs from what the corpus list builds; if the change is intended, \
             regenerate with AGDX_REGENERATE_FIXTURES=1 cargo test -p agdx-wire --test fixtures",
            f.name
        );
        if let Err(e) = check(f, &on_disk) {
            panic!("{}.bin {e}", f.name);
        }
    }
    let stray: Vec<_> = files_on_disk().difference(&names).cloned().collect();
    assert!(
        stray.is_empty(),
        "fixture files not in the corpus list: {stray:?}"
    );
    let written = std::fs::read_to_string(dir.join(MANIFEST)).unwrap();
    assert_eq!(
        written,
        manifest(&corpus),
        "{MANIFEST} is stale; regenerate the fixtures"
    );
}

#[test]
fn corpus_covers_every_kind_and_capsule() {
    let corpus = corpus();
    for kind in Kind::ALL {
        let found = corpus.iter().any(|f| {
            matches!(f.expect, Expect::Valid)
                && AgentEnvelope::decode(&f.bytes).is_ok_and(|e| e.kind == kind)
        });
        assert!(found, "no positive fixture for {kind}");
    }
    for type_name in [
        "usage",
        "error-body",
        "body-ref",
        "dead-letter",
        "signature",
        "signature-context",
        "card",
        "presence",
        "fold-snapshot",
    ] {
        let found = corpus
            .iter()
            .any(|f| matches!(f.expect, Expect::Valid) && f.type_name == type_name);
        assert!(found, "no positive fixture for {type_name}");
    }
}
