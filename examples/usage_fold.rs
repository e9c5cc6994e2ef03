//! A fold over a conversation: tokens spent per agent, from the `usage`
//! fields of its replies, snapshotted on `agent.snapshots` and resumed.
//!
//! ```sh
//! cargo run --example usage_fold
//! ```
//!
//! It writes a few replies into an embedded log in a temporary directory,
//! folds them, saves a snapshot, adds more, and resumes from the snapshot:
//! the resumed fold reads only the new records and ends where a fold from
//! the start does.

use std::collections::BTreeMap;

use agdx::log::LogSpec;
use agdx::replay::{Fold, Folded, ReplayRecord};
use agdx::wire::{AgentEnvelope, AgentId, ContentType, ConversationId, TokenUsage};
use agdx::{Outgoing, Producer, TopologyConfig, new_conversation_id, new_correlation_id};

/// Input and output tokens per agent.
struct TokensPerAgent;

#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Tokens {
    per_agent: BTreeMap<String, (u64, u64)>,
}

impl Fold for TokensPerAgent {
    type State = Tokens;

    fn name(&self) -> &str {
        "tokens-per-agent"
    }

    fn apply(&self, state: &mut Tokens, record: &ReplayRecord) {
        let Some(usage) = record.envelope().and_then(|e| e.usage.map(|u| (e, u))) else {
            return;
        };
        let (envelope, usage) = usage;
        let spent = state
            .per_agent
            .entry(envelope.source.to_string())
            .or_default();
        spent.0 += usage.input_tokens;
        spent.1 += usage.output_tokens;
    }
}

/// A reply from `agent` in `conversation` that spent `tokens`.
async fn reply(
    producer: &Producer,
    conversation: ConversationId,
    tokens: (u64, u64),
) -> Result<(), Box<dyn std::error::Error>> {
    let envelope = AgentEnvelope::response(
        agdx::new_record_id(),
        conversation,
        producer.source().clone(),
        new_correlation_id(),
        b"...".to_vec(),
    )
    .with_usage(TokenUsage::new(tokens.0, tokens.1));
    let responses = producer.topology().responses.clone();
    producer
        .publish_one(&responses, Outgoing::new(envelope, ContentType::Raw))
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let log = LogSpec::Embedded(dir.path().join("log")).open().await?;
    let topology = TopologyConfig::new("agents").ensure(log.as_ref()).await?;
    let writer = Producer::new(log.clone(), topology.clone(), AgentId::new("writer")?);
    let critic = Producer::new(log.clone(), topology.clone(), AgentId::new("critic")?);
    let conversation = new_conversation_id();

    reply(&writer, conversation, (120, 800)).await?;
    reply(&critic, conversation, (900, 60)).await?;
    let responses = topology.responses.clone();
    let mut fold = Folded::from_start(
        TokensPerAgent,
        log.clone(),
        topology.clone(),
        responses.clone(),
        conversation,
    );
    fold.catch_up().await?;
    println!("folded from the start: {:?}", fold.state().per_agent);
    fold.save().await?;

    reply(&writer, conversation, (200, 1500)).await?;
    let mut resumed = Folded::resume(
        TokensPerAgent,
        log.clone(),
        topology.clone(),
        responses.clone(),
        conversation,
    )
    .await?;
    let read = resumed.catch_up().await?;
    println!(
        "resumed from offset {:?}, folded {read} new record(s): {:?}",
        resumed.resumed_from(),
        resumed.state().per_agent
    );

    let mut whole = Folded::from_start(TokensPerAgent, log, topology, responses, conversation);
    whole.catch_up().await?;
    assert_eq!(resumed.state(), whole.state());
    println!("same as folding everything from the start");
    Ok(())
}
