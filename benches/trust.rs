//! What a signature costs per envelope: signing (signing input + Ed25519),
//! and the full verification a worker does at step 4 (canonical
//! re-encoding, registry lookup, strict Ed25519, principal, window and
//! context), for a typical command and for one with a 64 KiB body.
//!
//! `cargo bench --bench trust`

use std::hint::black_box;

use agdx::trust::{ContextBinding, KeyEntry, KeyKind, KeyRegistry, Observed, Signer, Verifier};
use agdx::wire::{
    AgentEnvelope, AgentId, ContentType, ConversationId, CorrelationId, IdempotencyKey, Metadata,
    RecordId,
};
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const BASE: u128 = 0x0190_3c1f_aa00_0000_0000_0000_0000_0000;

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("a valid agent id")
}

fn command(body: Vec<u8>) -> AgentEnvelope {
    AgentEnvelope::command(
        RecordId::from_u128(BASE | 1),
        ConversationId::from_u128(BASE | 2),
        agent("planner"),
        CorrelationId::from_u128(BASE | 5),
        Some("summarize"),
        body,
    )
    .with_target(agent("summarizer"))
    .with_idempotency_key(IdempotencyKey::new("order-123-attempt-2").expect("a valid key"))
    .with_metadata(Metadata::new().with("priority", "high"))
}

fn bench_sign_verify(c: &mut Criterion) {
    let signer = Signer::from_seed(&[42; 32]).with_binding(ContextBinding::ALL);
    let mut registry = KeyRegistry::new();
    registry
        .insert(KeyEntry::new(
            agent("planner"),
            KeyKind::Agent,
            signer.public_key(),
            None,
            None,
        ))
        .expect("enroll the key");
    let verifier = Verifier::new(registry);

    for (name, body) in [
        ("command_64B", vec![b'x'; 64]),
        ("command_64KiB", vec![b'x'; 64 * 1024]),
    ] {
        let envelope = command(body);
        let signed = signer.sign_record(envelope.clone(), ContentType::Raw);
        let payload = signed.encode();
        let observed = Observed::file(1);
        let mut group = c.benchmark_group(format!("trust/{name}"));
        group.throughput(Throughput::Elements(1));
        group.bench_function("sign", |b| {
            b.iter(|| signer.sign_record(black_box(envelope.clone()), ContentType::Raw))
        });
        group.bench_function("verify", |b| {
            b.iter(|| {
                verifier
                    .verify(black_box(&payload), &observed)
                    .expect("verifies")
            })
        });
        group.finish();
    }
}

criterion_group!(benches, bench_sign_verify);
criterion_main!(benches);
