//! The validity matrix of docs/wire.md, restated here as data independent of
//! the implementation: random field combinations must be accepted by
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

/// How many fields the generator varies (the rows below).
const FIELDS: usize = 18;

const MATRIX: [(&str, [Cell; 6]); FIELDS] = [
    ("record", [R, R, R, O, R, R]),
    ("target", [O, O, O, O, O, O]),
    ("cause", [O, O, O, O, O, O]),
    ("cause_at", [O, O, O, O, O, O]),
    ("metadata", [O, O, O, O, O, O]),
    ("signature", [O, O, O, O, O, O]),
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
    ("task_state", [X, O, X, X, RequiredWhen(OperationIsTask), O]),
    (
        "operation",
        [O, O, O, RequiredWhenElseX(SequenceZero), R, O],
    ),
    ("tool", [O, O, O, O, X, O]),
    ("usage", [X, O, O, OnlyWhen(Last), O, O]),
    ("body", [R, R, R, RequiredUnless(Last), O, R]),
];

/// The closed vocabularies. A status body is unconstrained whatever the
/// operation: cards and control facts are checked by the folds that read them.
const STATUS_OPERATIONS: [&str; 5] = ["task", "card", "progress", "quarantine", "unquarantine"];
const STREAM_PURPOSES: [&str; 3] = ["chat", "reasoning", "tool_args"];

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
    present: [bool; FIELDS],
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
        (Kind::Chunk, Some(op)) if holds(shape, SequenceZero) && !STREAM_PURPOSES.contains(&op) => {
            wrong.push("operation")
        }
        _ => {}
    }
    wrong
}

/// Builds the envelope. A present body is the same opaque bytes whatever the
/// kind and operation: the matrix says whether a body is there, never what it
/// holds (a card, an agent id, an ErrorBody are conventions of the readers).
fn build(shape: &Shape) -> AgentEnvelope {
    let p = |f| present(shape, f);
    let mut e = AgentEnvelope::bare(
        shape.kind,
        ConversationId::from_u128(2),
        AgentId::new("agent-a").unwrap(),
    );
    e.record = p("record").then(|| RecordId::from_u128(1));
    e.target = p("target").then(|| AgentId::new("agent-b").unwrap());
    e.cause = p("cause").then(|| RecordId::from_u128(5));
    e.cause_at = p("cause_at").then(|| "1/2/3/4".parse().unwrap());
    // Metadata values are checked against the caps only, pinned keys too.
    e.metadata = p("metadata").then(|| {
        Metadata::new()
            .with(META_ROLE, "developer")
            .with(META_FENCE, -1i64)
            .with("k", 1.5)
    });
    e.signature = p("signature").then(|| Signature::ed25519([1; 8], [2; 64]));
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
        e.body = b"\xffx".to_vec().into();
    }
    e
}

fn shape() -> impl Strategy<Value = Shape> {
    (
        prop::sample::select(KINDS.to_vec()),
        any::<[bool; FIELDS]>(),
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
    (shape(), prop::collection::vec(0..FIELDS, 0..3)).prop_map(|(mut s, flips)| {
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
        let mut present = [false; FIELDS];
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

/// The reference accepts a task state on every status; only a status `task`
/// must carry one.
#[test]
fn a_status_that_is_not_a_task_may_carry_a_task_state() {
    for operation in StatusOperation::ALL.iter().copied() {
        let e = status(operation, b"40%").with_task_state(TaskState::Working);
        assert_eq!(e.validate(), Ok(()), "status `{operation}`");
    }
    let mut task = status(StatusOperation::Task, b"");
    task.task_state = None;
    let err = task.validate().unwrap_err();
    assert_eq!((err.field, err.reason), ("task_state", Reason::Missing));
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

fn status(operation: StatusOperation, body: &[u8]) -> AgentEnvelope {
    let e = AgentEnvelope::status(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        AgentId::new("operator").unwrap(),
        operation,
        body.to_vec(),
    );
    if operation == StatusOperation::Task {
        return e
            .with_correlation(CorrelationId::from_u128(3))
            .with_task_state(TaskState::Working);
    }
    e
}

/// docs/wire.md: "validation accepts any status body, or none"; a peer's
/// bodyless card must not be refused or dead-lettered.
#[test]
fn a_status_body_is_unconstrained_whatever_the_operation() {
    let card = AgentCard::default().encode();
    let bodies: [&[u8]; 6] = [
        b"",
        b"not cbor",
        b"two\nlines",
        &[0xff, 0xfe],
        &card,
        b"agent-b",
    ];
    for operation in StatusOperation::ALL.iter().copied() {
        for body in bodies {
            assert_eq!(
                status(operation, body).validate(),
                Ok(()),
                "status `{operation}` with body {body:?}"
            );
        }
    }
}

/// The matrix requires an error's body, not its codec: the codec is named out
/// of band (`agdx.ct`), and a claim-checked error carries a BodyRef.
#[test]
fn an_error_body_is_required_but_its_content_is_not_checked() {
    let error = AgentEnvelope::error(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        AgentId::new("worker").unwrap(),
        CorrelationId::from_u128(3),
        &ErrorBody::new(ErrorCode::Internal),
    );
    let claim_checked = BodyRef::new("blob://sha256/ab", 1 << 20, [7; 32]).encode();
    for body in [claim_checked, b"oops".to_vec(), vec![0xff]] {
        let e = AgentEnvelope {
            body: body.clone().into(),
            ..error.clone()
        };
        assert_eq!(e.validate(), Ok(()), "error body {body:?}");
    }
    let empty = AgentEnvelope {
        body: Bytes::new(),
        ..error
    };
    let err = empty.validate().unwrap_err();
    assert_eq!((err.field, err.reason), ("body", Reason::Missing));
}

/// The pinned metadata keys name meanings, not wire rules: the matrix and the
/// caps say nothing of their values, so `validate` accepts any scalar there
/// and readers check the shape with `Metadata::check_pinned`.
#[test]
fn pinned_metadata_values_are_not_checked_by_validate() {
    let off_shape = Metadata::new()
        .with(META_ROLE, "developer")
        .with(META_BRIDGE_HOPS, "a2a")
        .with(META_FENCE, -1i64);
    let event = AgentEnvelope::event(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        AgentId::new("ledger").unwrap(),
        b"x".to_vec(),
    )
    .with_metadata(off_shape.clone());
    assert_eq!(event.validate(), Ok(()));
    // Keys are checked in key order: `agdx.fence` comes first.
    assert_eq!(off_shape.check_pinned().unwrap_err().key, META_FENCE);
    let role = Metadata::new().with(META_ROLE, "developer");
    let err = role.check_pinned().unwrap_err();
    assert_eq!(err.key, META_ROLE);
    assert_eq!(
        err.to_string(),
        "metadata key \"role\" must be one of user, assistant, system, tool"
    );
    let hops = Metadata::new().with(META_BRIDGE_HOPS, "a2a");
    assert_eq!(hops.check_pinned().unwrap_err().key, META_BRIDGE_HOPS);
    let fence = Metadata::new().with(META_FENCE, -1i64);
    assert_eq!(fence.check_pinned().unwrap_err().key, META_FENCE);
    let fine = Metadata::new()
        .with(META_ROLE, "tool")
        .with(META_BRIDGE_HOPS, vec![Scalar::from("a2a")])
        .with(META_FENCE, 7u64)
        .with("anything", -1i64);
    assert_eq!(fine.check_pinned(), Ok(()));
}

/// Every cap of docs/wire.md, from both sides: the cap itself is accepted, one
/// more is refused (no stricter, no looser).
#[test]
fn caps_are_exact() {
    let long = |n: usize| "x".repeat(n);
    let command = || {
        AgentEnvelope::command(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            AgentId::new("planner").unwrap(),
            CorrelationId::from_u128(3),
            None,
            b"x".to_vec(),
        )
    };
    let response = || {
        AgentEnvelope::response(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            AgentId::new("worker").unwrap(),
            CorrelationId::from_u128(3),
            b"x".to_vec(),
        )
    };
    let too_large = |r: Result<(), ValidationError>, field: &str| {
        let e = r.unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(matches!(e.reason, Reason::TooLarge { .. }), "{e}");
    };
    assert_eq!(command().with_operation(long(256)).validate(), Ok(()));
    too_large(command().with_operation(long(257)).validate(), "operation");
    assert_eq!(command().with_tool(long(256)).validate(), Ok(()));
    too_large(command().with_tool(long(257)).validate(), "tool");
    assert_eq!(response().with_finish_reason(long(256)).validate(), Ok(()));
    too_large(
        response().with_finish_reason(long(257)).validate(),
        "finish_reason",
    );

    // Ids and keys are checked when they are made (and decoded).
    assert!(AgentId::new(long(256)).is_ok());
    assert_eq!(AgentId::new(long(257)), Err(AgentIdError::TooLong(257)));
    assert!(IdempotencyKey::new(long(64)).is_ok());
    assert_eq!(
        IdempotencyKey::new(long(65)),
        Err(IdempotencyKeyError::TooLong(65))
    );

    let card = |name: usize, skill: usize, capabilities: usize| AgentCard {
        name: Some(long(name)),
        version: Some(long(name)),
        capabilities: (0..capabilities)
            .map(|i| CapabilityDescriptor::new(format!("{i}{}", long(skill - 1))))
            .collect(),
        ttl_micros: None,
    };
    assert_eq!(card(256, 256, 9).validate(), Ok(()));
    assert_eq!(card(1, 1, 64).validate(), Ok(()));
    too_large(card(257, 1, 1).validate(), "name");
    too_large(card(1, 257, 1).validate(), "skill_id");
    too_large(card(1, 1, 65).validate(), "capabilities");
    let version_only = AgentCard {
        version: Some(long(257)),
        ..AgentCard::default()
    };
    too_large(version_only.validate(), "version");

    assert_eq!(BodyRef::new(long(1), 0, [0; 32]).validate(), Ok(()));
    assert_eq!(BodyRef::new(long(1024), 0, [0; 32]).validate(), Ok(()));
    too_large(BodyRef::new(long(1025), 0, [0; 32]).validate(), "reference");
    assert!(BodyRef::new("", 0, [0; 32]).validate().is_err());
}
