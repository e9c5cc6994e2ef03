//! Folds with snapshots: a fold resumed from its snapshot on
//! `agent.snapshots` (reading on from `as_of + 1`) equals the fold from
//! the start, also after more records arrive; each fold finds only its own
//! snapshots. On every backend.

use crate::support;

use std::collections::BTreeMap;

use agdx::replay::{Fold, Folded, Replay, ReplayItem, ReplayRecord};
use agdx::wire::{AgentEnvelope, ContentType, ConversationId, CorrelationId, TokenUsage};
use agdx::{Outgoing, new_record_id};
use support::agents::neighbour_of;
use support::fabric::{Fabric, agent_id, on_every_fabric};

/// Tokens per agent, and every record id in the order folded.
struct Usage;

#[derive(Default, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct UsageState {
    tokens: BTreeMap<String, (u64, u64)>,
    seen: Vec<String>,
}

impl Fold for Usage {
    type State = UsageState;
    fn name(&self) -> &str {
        "usage"
    }
    fn apply(&self, state: &mut UsageState, record: &ReplayRecord) {
        let Some(e) = record.envelope() else { return };
        state
            .seen
            .push(e.record.map(|r| r.to_string()).unwrap_or_default());
        if let Some(usage) = e.usage {
            let tokens = state.tokens.entry(e.source.to_string()).or_default();
            tokens.0 += usage.input_tokens;
            tokens.1 += usage.output_tokens;
        }
    }
}

/// The same function under another name: it must not read Usage's snapshots.
struct Other;
impl Fold for Other {
    type State = UsageState;
    fn name(&self) -> &str {
        "other"
    }
    fn apply(&self, state: &mut UsageState, record: &ReplayRecord) {
        Usage.apply(state, record);
    }
}

/// `n` responses from `agent` in `conversation`, each spending (10, i).
async fn respond(fabric: &Fabric, conversation: ConversationId, agent: &str, n: u64) {
    let producer = fabric.producer(agent);
    let items = (1..=n)
        .map(|i| {
            let e = AgentEnvelope::response(
                new_record_id(),
                conversation,
                agent_id(agent),
                CorrelationId::from_u128(7),
                b"ok".to_vec(),
            )
            .with_usage(TokenUsage::new(10, i));
            Outgoing::new(e, ContentType::Raw)
        })
        .collect();
    producer
        .publish(&fabric.topology.responses, items)
        .await
        .expect("publish");
}

fn folded<F: Fold>(fabric: &Fabric, fold: F, conversation: ConversationId) -> Folded<F> {
    Folded::from_start(
        fold,
        fabric.log.clone(),
        fabric.topology.clone(),
        fabric.topology.responses.clone(),
        conversation,
    )
}

async fn resumed<F: Fold>(fabric: &Fabric, fold: F, conversation: ConversationId) -> Folded<F> {
    Folded::resume(
        fold,
        fabric.log.clone(),
        fabric.topology.clone(),
        fabric.topology.responses.clone(),
        conversation,
    )
    .await
    .expect("resume")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fold_resumed_from_its_snapshot_equals_the_fold_from_the_start() {
    on_every_fabric("fold", |fabric| async move {
        let conversation = agdx::new_conversation_id();
        let neighbour = neighbour_of(&fabric, conversation);
        respond(&fabric, conversation, "writer", 3).await;
        respond(&fabric, neighbour, "writer", 2).await;
        respond(&fabric, conversation, "critic", 2).await;

        let mut first = folded(&fabric, Usage, conversation);
        assert_eq!(
            first.catch_up().await.expect("fold"),
            5,
            "the neighbour's records are not folded"
        );
        assert_eq!(
            first.as_of(),
            Some(6),
            "as_of counts every offset read, the neighbour's too"
        );
        let saved = first.save().await.expect("save").expect("a snapshot");
        assert_eq!(saved.conversation, conversation);
        assert_eq!(saved.as_of.values().copied().collect::<Vec<_>>(), [6]);

        // Resumed right away: the same state, nothing left to fold.
        let mut again = resumed(&fabric, Usage, conversation).await;
        assert_eq!(again.resumed_from(), Some(7));
        assert_eq!(again.catch_up().await.expect("fold"), 0);
        assert_eq!(again.state(), first.state());

        // More records arrive; the resumed fold reads only them and ends
        // where the fold from the start does.
        respond(&fabric, conversation, "writer", 2).await;
        respond(&fabric, neighbour, "critic", 1).await;
        let mut resumed_fold = resumed(&fabric, Usage, conversation).await;
        assert_eq!(resumed_fold.catch_up().await.expect("fold"), 2);
        let mut from_start = folded(&fabric, Usage, conversation);
        from_start.catch_up().await.expect("fold");
        assert_eq!(resumed_fold.state(), from_start.state());
        assert_eq!(resumed_fold.as_of(), from_start.as_of());
        assert_eq!(from_start.state().tokens["writer"], (50, 1 + 2 + 3 + 1 + 2));
        assert_eq!(from_start.state().tokens["critic"], (20, 3));
        assert_eq!(from_start.state().seen.len(), 7);

        // A second snapshot supersedes the first; another fold finds neither.
        resumed_fold.save().await.expect("save");
        assert_eq!(
            resumed(&fabric, Usage, conversation).await.resumed_from(),
            Some(10)
        );
        assert_eq!(
            resumed(&fabric, Other, conversation).await.resumed_from(),
            None
        );
        let mut other = resumed(&fabric, Other, conversation).await;
        other.catch_up().await.expect("fold");
        assert_eq!(other.state(), from_start.state());

        // The snapshots are on agent.snapshots, in the conversation's timeline.
        let snapshots: Vec<_> = Replay::new(fabric.log.clone(), &fabric.topology, conversation)
            .read_to_end()
            .await
            .expect("replay")
            .into_iter()
            .filter(|r| matches!(r.item, ReplayItem::Snapshot(_)))
            .map(|r| r.topic)
            .collect();
        assert_eq!(snapshots, ["agent.snapshots", "agent.snapshots"]);
    })
    .await;
}
