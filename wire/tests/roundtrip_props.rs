//! Properties: envelopes built through the typed constructors validate and
//! round-trip byte-identically; decoding never panics on arbitrary or
//! mutated input.

mod common;

use std::num::NonZeroU64;

use agdx_wire::*;
use proptest::prelude::*;

fn agent() -> impl Strategy<Value = AgentId> {
    "[a-z][a-z0-9.-]{0,24}".prop_map(|s| AgentId::new(s).unwrap())
}

fn body() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 1..48)
}

fn short_text() -> impl Strategy<Value = String> {
    "[a-z_]{1,12}"
}

fn plain_scalar() -> impl Strategy<Value = Scalar> {
    prop_oneof![
        Just(Scalar::Null),
        any::<bool>().prop_map(Scalar::from),
        any::<u64>().prop_map(Scalar::from),
        any::<i64>().prop_map(Scalar::from),
        any::<f64>().prop_map(Scalar::from),
        ".{0,16}".prop_map(Scalar::from),
    ]
}

/// Scalars and arrays of them, arrays nesting a few levels deep.
fn scalar() -> impl Strategy<Value = Scalar> {
    plain_scalar().prop_recursive(3, 16, 4, |inner| {
        prop::collection::vec(inner, 0..4).prop_map(Scalar::Array)
    })
}

/// Keys in no particular order, mixing case, length and non-ASCII text, so
/// byte-wise order differs from insertion and from length-first order.
fn metadata() -> impl Strategy<Value = Metadata> {
    prop::collection::vec(("[a-zA-Z0-9_.é]{0,10}", scalar()), 0..6)
        .prop_map(|entries| entries.into_iter().collect())
}

fn usage() -> impl Strategy<Value = TokenUsage> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<Option<u64>>(),
        any::<Option<u64>>(),
        any::<Option<u64>>(),
    )
        .prop_map(|(i, o, r, cr, cc)| TokenUsage {
            reasoning_output_tokens: r,
            cache_read_input_tokens: cr,
            cache_creation_input_tokens: cc,
            ..TokenUsage::new(i, o)
        })
}

fn signature() -> impl Strategy<Value = Signature> {
    (
        any::<[u8; 8]>(),
        prop::collection::vec(any::<u8>(), 64),
        any::<Option<(Option<u8>, Option<u32>)>>(),
    )
        .prop_map(|(key_id, bytes, context)| {
            let mut sig = [0u8; 64];
            sig.copy_from_slice(&bytes);
            let s = Signature::ed25519(key_id, sig);
            match context {
                Some((ct, av)) => s.with_context(SignatureContext {
                    content_type: ct.map(ContentType::from_code),
                    agent_version: av,
                }),
                None => s,
            }
        })
}

fn task_state() -> impl Strategy<Value = TaskState> {
    any::<u8>().prop_map(TaskState::from_code)
}

/// A log position as its four numbers.
type Position = (u32, u32, u32, u64);

/// Refinements every kind accepts.
#[derive(Debug, Clone)]
struct Common {
    target: Option<AgentId>,
    cause: Option<(u128, Option<Position>)>,
    metadata: Option<Metadata>,
    signature: Option<Signature>,
    must_understand: u64,
}

fn common() -> impl Strategy<Value = Common> {
    (
        prop::option::of(agent()),
        any::<Option<(u128, Option<Position>)>>(),
        prop::option::of(metadata()),
        prop::option::of(signature()),
        prop_oneof![Just(0u64), any::<u64>()],
    )
        .prop_map(
            |(target, cause, metadata, signature, must_understand)| Common {
                target,
                cause,
                metadata,
                signature,
                must_understand,
            },
        )
}

fn apply(mut e: AgentEnvelope, c: Common) -> AgentEnvelope {
    if let Some(t) = c.target {
        e = e.with_target(t);
    }
    if let Some((cause, at)) = c.cause {
        let at = at.map(|(stream, topic, partition, offset)| LogPosition {
            stream,
            topic,
            partition,
            offset,
        });
        e = e.with_cause(RecordId::from_u128(cause), at);
    }
    if let Some(m) = c.metadata {
        e = e.with_metadata(m);
    }
    if let Some(s) = c.signature {
        e = e.with_signature(s);
    }
    e.with_must_understand(c.must_understand)
}

fn ids() -> impl Strategy<Value = (RecordId, ConversationId, CorrelationId, ChannelId)> {
    any::<[u128; 4]>().prop_map(|[r, c, k, ch]| {
        (
            RecordId::from_u128(r),
            ConversationId::from_u128(c),
            CorrelationId::from_u128(k),
            ChannelId::from_u128(ch),
        )
    })
}

fn key() -> impl Strategy<Value = IdempotencyKey> {
    "[a-zA-Z0-9-]{1,64}".prop_map(|k| IdempotencyKey::new(k).unwrap())
}

/// Every constructor, with the refinements its kind allows.
fn envelope() -> impl Strategy<Value = AgentEnvelope> {
    let command = (
        ids(),
        agent(),
        prop::option::of(short_text()),
        body(),
        prop::option::of(key()),
        any::<Option<u64>>(),
        prop::option::of(short_text()),
    )
        .prop_map(|((r, c, k, _), s, op, b, idem, deadline, tool)| {
            let mut e = AgentEnvelope::command(r, c, s, k, op.as_deref(), b);
            e.idempotency_key = idem;
            e.deadline_micros = deadline;
            e.tool = tool;
            e
        });
    let response = (
        ids(),
        agent(),
        body(),
        prop::option::of(task_state()),
        prop::option::of(short_text()),
        prop::option::of(usage()),
    )
        .prop_map(|((r, c, k, _), s, b, state, finish, usage)| {
            let mut e = AgentEnvelope::response(r, c, s, k, b);
            e.task_state = state;
            e.finish_reason = finish;
            e.usage = usage;
            e
        });
    let event = (
        ids(),
        agent(),
        body(),
        prop::option::of(short_text()),
        any::<bool>(),
        prop::option::of(usage()),
    )
        .prop_map(|((r, c, k, _), s, b, op, correlated, usage)| {
            let mut e = AgentEnvelope::event(r, c, s, b);
            e.operation = op;
            e.correlation = correlated.then_some(k);
            e.usage = usage;
            e
        });
    let purpose = prop::sample::select(StreamPurpose::ALL.to_vec());
    let chunk_open = (
        ids(),
        agent(),
        purpose,
        body(),
        any::<Option<u64>>(),
        any::<bool>(),
    )
        .prop_map(|((r, c, k, ch), s, p, b, deadline, with_record)| {
            let mut e = AgentEnvelope::chunk_open(c, s, k, ch, p, b);
            e.deadline_micros = deadline;
            if with_record {
                e = e.with_record(r);
            }
            e
        });
    let chunk = (
        ids(),
        agent(),
        1..u64::MAX,
        body(),
        prop::option::of(short_text()),
    )
        .prop_map(|((_, c, k, ch), s, n, b, tool)| {
            let mut e = AgentEnvelope::chunk(c, s, k, ch, NonZeroU64::new(n).unwrap(), b);
            e.tool = tool;
            e
        });
    let chunk_last = (
        ids(),
        agent(),
        1..u64::MAX,
        prop::collection::vec(any::<u8>(), 0..16),
        prop::option::of(short_text()),
        prop::option::of(usage()),
    )
        .prop_map(|((_, c, k, ch), s, n, b, finish, usage)| {
            AgentEnvelope::chunk_last(
                c,
                s,
                k,
                ch,
                NonZeroU64::new(n).unwrap(),
                b,
                finish.as_deref(),
                usage,
            )
        });
    let status = (
        ids(),
        agent(),
        task_state(),
        agent(),
        any::<bool>(),
        body(),
        0..4u8,
        any::<bool>(),
    )
        .prop_map(
            |((r, c, k, _), s, state, subject, quarantined, b, which, last)| {
                let e = match which {
                    0 => AgentEnvelope::status_task(r, c, s, k, state),
                    1 => AgentEnvelope::status_card(
                        r,
                        c,
                        s,
                        &AgentCard {
                            name: Some(subject.to_string()),
                            ..AgentCard::default()
                        },
                    ),
                    2 => AgentEnvelope::status_progress(r, c, s, b),
                    _ => AgentEnvelope::status_quarantine(r, c, s, &subject, quarantined),
                };
                if last { e.with_last() } else { e }
            },
        );
    let error = (
        ids(),
        agent(),
        any::<u8>(),
        prop::option::of(".{0,20}"),
        any::<bool>(),
        any::<Option<u64>>(),
        prop::option::of(task_state()),
    )
        .prop_map(
            |((r, c, k, ch), s, code, message, retryable, terminal, state)| {
                let mut body = ErrorBody::new(ErrorCode::from_code(code)).retryable(retryable);
                body.message = message;
                let mut e = AgentEnvelope::error(r, c, s, k, &body);
                if let Some(n) = terminal {
                    e = e.with_stream_terminal(ch, n);
                }
                e.task_state = state;
                e
            },
        );
    (
        prop_oneof![
            command, response, event, chunk_open, chunk, chunk_last, status, error
        ],
        common(),
    )
        .prop_map(|(e, c)| apply(e, c))
}

fn decode_all(bytes: &[u8]) {
    let _ = AgentEnvelope::decode_valid(bytes);
    let _ = ErrorBody::decode_valid(bytes);
    let _ = BodyRef::decode_valid(bytes);
    let _ = DeadLetter::decode_valid(bytes);
    let _ = Signature::decode_valid(bytes);
    let _ = AgentCard::decode_valid(bytes);
    let _ = AgentPresence::decode_valid(bytes);
    let _ = FoldSnapshot::decode_valid(bytes);
    let _ = TokenUsage::decode_valid(bytes);
}

/// Every fixture of ours and of the peer corpus, as mutation seeds.
fn seeds() -> Vec<Vec<u8>> {
    let mut dirs = vec![common::fixtures_dir()];
    dirs.extend(common::peer_dir());
    dirs.iter()
        .flat_map(|d| std::fs::read_dir(d).into_iter().flatten())
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .filter_map(|p| std::fs::read(p).ok())
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Insert(usize, u8),
    Remove(usize),
    Truncate(usize),
}

fn mutate(mut bytes: Vec<u8>, mutations: &[Mutation]) -> Vec<u8> {
    for m in mutations {
        let len = bytes.len().max(1);
        match *m {
            Mutation::Flip(at, mask) if !bytes.is_empty() => bytes[at % len] ^= mask,
            Mutation::Insert(at, b) => bytes.insert(at % (bytes.len() + 1), b),
            Mutation::Remove(at) if !bytes.is_empty() => {
                bytes.remove(at % len);
            }
            Mutation::Truncate(at) => bytes.truncate(at % len),
            _ => {}
        }
    }
    bytes
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), 1..=255u8).prop_map(|(a, m)| Mutation::Flip(a, m)),
        (any::<usize>(), any::<u8>()).prop_map(|(a, b)| Mutation::Insert(a, b)),
        any::<usize>().prop_map(Mutation::Remove),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn constructed_envelopes_validate_and_round_trip(e in envelope()) {
        prop_assert_eq!(e.validate(), Ok(()), "{:?}", e);
        let bytes = e.encode();
        let back = AgentEnvelope::decode_valid(&bytes).map_err(|err| TestCaseError::fail(err.to_string()))?;
        prop_assert_eq!(&back, &e);
        prop_assert_eq!(back.encode(), bytes.clone());
        prop_assert_eq!(signing_input(&back), signing_input(&e));
        // An independent CBOR reader sees exactly one well-formed item.
        let mut rest = bytes.as_slice();
        let value: ciborium::Value = ciborium::from_reader(&mut rest).unwrap();
        prop_assert!(rest.is_empty());
        prop_assert!(value.is_map());
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        decode_all(&bytes);
    }

    #[test]
    fn decoding_mutated_fixtures_never_panics(
        pick in any::<prop::sample::Index>(),
        mutations in prop::collection::vec(mutation(), 1..4),
    ) {
        let seeds = seeds();
        prop_assume!(!seeds.is_empty());
        let bytes = mutate(pick.get(&seeds).clone(), &mutations);
        decode_all(&bytes);
        // Whatever still decodes re-encodes to something that decodes the same.
        if let Ok(e) = AgentEnvelope::decode(&bytes) {
            prop_assert_eq!(AgentEnvelope::decode(&e.encode()), Ok(e));
        }
    }
}

#[test]
fn hostile_lengths_fail_fast() {
    // A map claiming 2^64-1 entries, an array inside metadata claiming as many.
    let huge_map = [0xbb, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    assert_eq!(
        AgentEnvelope::decode(&huge_map),
        Err(DecodeError::Truncated)
    );
    let mut deep = vec![0x81; 100_000];
    deep.push(0x00);
    let mut bytes = vec![0xa1, 0x63, b'z', b'z', b'z'];
    bytes.extend_from_slice(&deep);
    // Unknown keys are skipped without recursion, and no deeper than the
    // nesting limit.
    assert_eq!(
        AgentEnvelope::decode(&bytes),
        Err(DecodeError::TooDeep { limit: MAX_NESTING })
    );
}
