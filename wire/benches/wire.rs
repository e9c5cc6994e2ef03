//! Encode, decode+validate and the full decode+validate+encode cycle for a
//! typical command (the shape of the reference corpus's `agent_command.bin`,
//! built inline), a command with a 1 KiB body, and a 16-byte chunk.

use std::hint::black_box;
use std::num::NonZeroU64;

use agdx_wire::{
    AgentEnvelope, AgentId, ChannelId, ConversationId, CorrelationId, IdempotencyKey, Metadata,
    RecordId,
};
use criterion::{Criterion, criterion_group, criterion_main};

const BASE: u128 = 0x0190_3c1f_aa00_0000_0000_0000_0000_0000;

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("a valid agent id")
}

/// The same envelope as the reference corpus's agent_command.bin.
fn corpus_command(body: Vec<u8>) -> AgentEnvelope {
    AgentEnvelope::command(
        RecordId::from_u128(BASE | 1),
        ConversationId::from_u128(BASE | 2),
        agent("source-agent"),
        CorrelationId::from_u128(BASE | 5),
        Some("chat"),
        body,
    )
    .with_target(agent("target-agent"))
    .with_idempotency_key(IdempotencyKey::new("order-123-attempt-2").expect("a valid key"))
    .with_deadline_micros(1_717_171_777_000_000)
    .with_metadata(Metadata::new().with("priority", "high"))
}

fn chunk() -> AgentEnvelope {
    AgentEnvelope::chunk(
        ConversationId::from_u128(BASE | 2),
        agent("source-agent"),
        CorrelationId::from_u128(BASE | 5),
        ChannelId::from_u128(BASE | 6),
        NonZeroU64::MIN,
        vec![b'x'; 16],
    )
}

fn cases() -> [(&'static str, Vec<u8>); 3] {
    [
        (
            "agent_command",
            corpus_command(br#"{"ask":"plan the trip"}"#.to_vec()).encode(),
        ),
        ("command_1KiB", corpus_command(vec![b'a'; 1024]).encode()),
        ("chunk_16B", chunk().encode()),
    ]
}

fn bench(c: &mut Criterion) {
    for (name, bytes) in cases() {
        let envelope = AgentEnvelope::decode_valid(&bytes).expect("the bench inputs are valid");
        c.bench_function(&format!("{name}/encode"), |b| {
            b.iter(|| black_box(&envelope).encode())
        });
        c.bench_function(&format!("{name}/decode_validate"), |b| {
            b.iter(|| AgentEnvelope::decode_valid(black_box(&bytes)))
        });
        c.bench_function(&format!("{name}/decode_validate_encode"), |b| {
            b.iter(|| AgentEnvelope::decode_valid(black_box(&bytes)).map(|e| e.encode()))
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
