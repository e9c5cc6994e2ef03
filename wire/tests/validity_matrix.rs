//! The validity matrix of wire.md, restated here as data independent of the
//! implementation: random field combinations must be accepted by
//! `validate` exactly when they satisfy this table.

use agdx_wire::*;
use proptest::prelude::*;

/// A condition a cell depends on.
#[derive(Debug, Clone, Copy)]
enum Cond {
    OperationIsTask,
    HasChannel,
    Last,
    SequenceZero,
}

/// One cell of the matrix.
#[derive(Debug, Clone, Copy)]
enum Cell {
    /// Required.
    R,
    /// Optional.
    O,
    /// Forbidden.
    X,
    /// Optional only when the condition holds, forbidden otherwise.
    OnlyWhen(Cond),
    /// Required when the condition holds, optional otherwise.
    RequiredWhen(Cond),
    /// Required when the condition holds, forbidden otherwise.
    RequiredWhenElseX(Cond),
    /// Required unless the condition holds, then optional.
    RequiredUnless(Cond),
}

use Cell::*;
use Cond::*;

/// Columns: command, response, event, chunk, status, error.
const KINDS: [Kind; 6] = [
    Kind::Command,
    Kind::Response,
    Kind::Event,
    Kind::Chunk,
    Kind::Status,
    Kind::Error,
];

const MATRIX: [(&str, [Cell; 6]); 13] = [
    ("record", [R, R, R, O, R, R]),
    (
        "correlation",
        [R, R, O, R, RequiredWhen(OperationIsTask), R],
    ),
    ("channel", [X, X, X, R, X, O]),
    ("sequence", [X, X, X, R, X, OnlyWhen(HasChannel)]),
    ("last", [X, X, X, O, O, X]),
    ("finish_reason", [X, O, X, OnlyWhen(Last), X, X]),
    ("idempotency_key", [O, O, O, X, X, X]),
    ("deadline_micros", [O, X, X, OnlyWhen(SequenceZero), X, X]),
    (
        "task_state",
        [X, O, X, X, RequiredWhenElseX(OperationIsTask), O],
    ),
    (
        "operation",
        [O, O, O, RequiredWhenElseX(SequenceZero), R, O],
    ),
    ("tool", [O, O, O, O, X, O]),
    ("usage", [X, O, O, OnlyWhen(Last), O, O]),
    ("body", [R, R, R, RequiredUnless(Last), O, R]),
];

/// The closed vocabularies.
const STATUS_OPERATIONS: [&str; 5] = ["task", "card", "progress", "quarantine", "unquarantine"];
const STREAM_PURPOSES: [&str; 3] = ["chat", "reasoning", "tool_args"];
/// Status operations whose body carries the subject (a card, an agent id).
const STATUS_BODY_REQUIRED: [&str; 3] = ["card", "quarantine", "unquarantine"];

/// Operations the generator draws from: both vocabularies and an open one.
const OPERATIONS: [&str; 8] = [
    "task",
    "card",
    "progress",
    "quarantine",
    "chat",
    "reasoning",
    "tool_args",
    "summarize",
];

#[derive(Debug, Clone)]
struct Shape {
    kind: Kind,
    present: [bool; 13],
    operation: &'static str,
    sequence: u64,
}

fn present(shape: &Shape, field: &str) -> bool {
    let i = MATRIX.iter().position(|(f, _)| *f == field).unwrap();
    shape.present[i]
}

fn holds(shape: &Shape, cond: Cond) -> bool {
    match cond {
        OperationIsTask => present(shape, "operation") && shape.operation == "task",
        HasChannel => present(shape, "channel"),
        Last => present(shape, "last"),
        SequenceZero => present(shape, "sequence") && shape.sequence == 0,
    }
}

/// The fields this shape gets wrong according to the table.
fn violations(shape: &Shape) -> Vec<&'static str> {
    let column = KINDS.iter().position(|k| *k == shape.kind).unwrap();
    let mut wrong = Vec::new();
    for (i, (field, cells)) in MATRIX.iter().enumerate() {
        let here = shape.present[i];
        let ok = match cells[column] {
            R => here,
            O => true,
            X => !here,
            OnlyWhen(c) => !here || holds(shape, c),
            RequiredWhen(c) => here || !holds(shape, c),
            RequiredWhenElseX(c) => here == holds(shape, c),
            RequiredUnless(c) => here || holds(shape, c),
        };
        if !ok {
            wrong.push(*field);
        }
    }
    let op = present(shape, "operation").then_some(shape.operation);
    match (shape.kind, op) {
        (Kind::Status, Some(op)) if !STATUS_OPERATIONS.contains(&op) => wrong.push("operation"),
        (Kind::Status, Some(op))
            if STATUS_BODY_REQUIRED.contains(&op) && !present(shape, "body") =>
        {
            wrong.push("body")
        }
        (Kind::Chunk, Some(op)) if holds(shape, SequenceZero) && !STREAM_PURPOSES.contains(&op) => {
            wrong.push("operation")
        }
        _ => {}
    }
    wrong
}

/// Builds the envelope; present bodies carry what the kind and operation need.
fn build(shape: &Shape) -> AgentEnvelope {
    let p = |f| present(shape, f);
    let mut e = AgentEnvelope::bare(
        shape.kind,
        ConversationId::from_u128(2),
        AgentId::new("agent-a").unwrap(),
    );
    e.record = p("record").then(|| RecordId::from_u128(1));
    e.correlation = p("correlation").then(|| CorrelationId::from_u128(3));
    e.channel = p("channel").then(|| ChannelId::from_u128(4));
    e.sequence = p("sequence").then_some(shape.sequence);
    e.last = p("last");
    e.finish_reason = p("finish_reason").then(|| "stop".to_owned());
    e.idempotency_key = p("idempotency_key").then(|| IdempotencyKey::new("key-1").unwrap());
    e.deadline_micros = p("deadline_micros").then_some(1_717_171_777_000_000);
    e.task_state = p("task_state").then_some(TaskState::Working);
    e.operation = p("operation").then(|| shape.operation.to_owned());
    e.tool = p("tool").then(|| "search".to_owned());
    e.usage = p("usage").then(|| TokenUsage::new(10, 2));
    if p("body") {
        e.body = match (shape.kind, e.operation.as_deref()) {
            (Kind::Error, _) => ErrorBody::new(ErrorCode::Internal).encode(),
            (Kind::Status, Some("card")) => AgentCard::default().encode(),
            (Kind::Status, Some("quarantine" | "unquarantine")) => b"agent-b".to_vec(),
            _ => b"x".to_vec(),
        };
    }
    e
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop::sample::select(KINDS.to_vec()),
        any::<[bool; 13]>(),
        prop::sample::select(OPERATIONS.to_vec()),
        prop::sample::select(vec![0u64, 1, 7]),
    )
        .prop_map(|(kind, present, operation, sequence)| Shape {
            kind,
            present,
            operation,
            sequence,
        })
}

/// Shapes biased towards validity: start from the table's required set for
/// the kind, then flip a few fields, so accepted cases are common too.
fn near_valid_shape() -> impl Strategy<Value = Shape> {
    (shape(), prop::collection::vec(0..13usize, 0..3)).prop_map(|(mut s, flips)| {
        let column = KINDS.iter().position(|k| *k == s.kind).unwrap();
        for (i, (_, cells)) in MATRIX.iter().enumerate() {
            s.present[i] = matches!(cells[column], R | RequiredUnless(_));
        }
        if s.kind == Kind::Status {
            let i = MATRIX.iter().position(|(f, _)| *f == "operation").unwrap();
            s.present[i] = true;
        }
        for f in flips {
            s.present[f] = !s.present[f];
        }
        s
    })
}

fn check(shape: &Shape) -> Result<(), TestCaseError> {
    let envelope = build(shape);
    let wrong = violations(shape);
    match envelope.validate() {
        Ok(()) => prop_assert!(
            wrong.is_empty(),
            "accepted, but the table says {wrong:?} are wrong: {shape:?}"
        ),
        Err(e) => {
            prop_assert!(
                !wrong.is_empty(),
                "rejected ({e}), but the table accepts {shape:?}"
            );
            prop_assert!(
                wrong.contains(&e.field),
                "rejected on `{}` ({e}), the table says {wrong:?}",
                e.field
            );
            prop_assert_eq!(e.subject, Subject::Envelope(shape.kind));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn validate_accepts_exactly_the_matrix(shape in shape()) {
        check(&shape)?;
    }

    #[test]
    fn validate_accepts_exactly_the_matrix_near_valid(shape in near_valid_shape()) {
        check(&shape)?;
    }
}

/// Every kind has accepted shapes: the property is not vacuous.
#[test]
fn every_kind_has_an_accepted_shape() {
    for kind in KINDS {
        let column = KINDS.iter().position(|k| *k == kind).unwrap();
        let mut present = [false; 13];
        for (i, (_, cells)) in MATRIX.iter().enumerate() {
            present[i] = matches!(cells[column], R | RequiredUnless(_));
        }
        let operation = if kind == Kind::Chunk {
            "chat"
        } else {
            "progress"
        };
        if matches!(kind, Kind::Status | Kind::Chunk) {
            present[MATRIX.iter().position(|(f, _)| *f == "operation").unwrap()] = true;
        }
        let shape = Shape {
            kind,
            present,
            operation,
            sequence: 0,
        };
        assert!(violations(&shape).is_empty(), "{kind}");
        assert_eq!(build(&shape).validate(), Ok(()), "{kind}");
    }
}

#[test]
fn errors_name_kind_field_and_remedy() {
    let command = AgentEnvelope {
        correlation: None,
        ..AgentEnvelope::command(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            AgentId::new("planner").unwrap(),
            CorrelationId::from_u128(3),
            None,
            b"x".to_vec(),
        )
    };
    assert_eq!(
        command.validate().unwrap_err().to_string(),
        "command envelope is missing `correlation`: every command needs a correlation id so its reply can be \
         matched; set one (fire-and-forget messages are `event`s)"
    );
    let too_long = command
        .clone()
        .with_correlation(CorrelationId::from_u128(3))
        .with_tool("t".repeat(300));
    let err = too_long.validate().unwrap_err();
    assert_eq!(
        err.reason,
        Reason::TooLarge {
            actual: 300,
            limit: 256,
            unit: "bytes"
        }
    );
    assert!(
        err.to_string().starts_with(
            "command envelope has a `tool` that is too large: 300 bytes, the cap is 256"
        )
    );
}

#[test]
fn constructed_metadata_with_nested_arrays_is_invalid() {
    let event = AgentEnvelope::event(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        AgentId::new("ledger").unwrap(),
        b"x".to_vec(),
    )
    .with_metadata(Metadata::new().with("deep", vec![Scalar::Array(vec![])]));
    let err = event.validate().unwrap_err();
    assert_eq!(err.field, "metadata");
    assert!(matches!(err.reason, Reason::InvalidValue(_)), "{err}");
}

#[test]
fn metadata_caps_are_exact() {
    let event = |m: Metadata| {
        AgentEnvelope::event(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            AgentId::new("a").unwrap(),
            b"x".to_vec(),
        )
        .with_metadata(m)
        .validate()
    };
    let entries = |n: usize| {
        (0..n)
            .map(|i| (format!("k{i}"), Scalar::from(true)))
            .collect::<Metadata>()
    };
    assert_eq!(event(entries(32)), Ok(()));
    assert!(event(entries(33)).is_err());
    assert_eq!(event(Metadata::new().with("k".repeat(256), true)), Ok(()));
    assert!(event(Metadata::new().with("k".repeat(257), true)).is_err());
    assert_eq!(event(Metadata::new().with("v", "x".repeat(1024))), Ok(()));
    assert!(event(Metadata::new().with("v", "x".repeat(1025))).is_err());
    // A list counts 1 + each item: 102 items of 9 = 1020 fits, 103 = 1030 does not.
    let list = |n: usize| Scalar::Array(vec![Scalar::from(1u64); n]);
    assert_eq!(event(Metadata::new().with("v", list(102))), Ok(()));
    assert!(event(Metadata::new().with("v", list(103))).is_err());
    // Total: 8 entries of (2-byte key + 1000) = 8016 fits; a 9th goes over 8192.
    let big = |n: usize| {
        (0..n)
            .map(|i| (format!("k{i}"), Scalar::from("x".repeat(1000))))
            .collect::<Metadata>()
    };
    assert_eq!(event(big(8)), Ok(()));
    let err = event(big(9)).unwrap_err();
    assert_eq!(
        err.reason,
        Reason::TooLarge {
            actual: 9018,
            limit: 8192,
            unit: "bytes of keys and values"
        }
    );
}
