//! A conversation's context kept as a fold: [`ConversationContext`] reads
//! on from its latest snapshot on `agent.snapshots` instead of from the
//! conversation's first record.
//!
//! A context snapshot (fold `agdx.context.v1`, in the conversation's
//! partition of `agent.snapshots`) holds the newest turns read so far (at
//! most [`SNAPSHOT_TURNS`] of them, and [`SNAPSHOT_BODY_BYTES`] of bodies:
//! a snapshot is one record, and a context for a prompt wants the recent
//! turns) and, per topic, the offset the reading goes on from. A chunk
//! stream still open when the snapshot is taken is left out of it, and its
//! topic's offset stays at its first chunk, so the resumed reading builds
//! that stream whole. A context resumed from a snapshot knows the turns the
//! snapshot kept and every turn after; [`ConversationContext::from_start`]
//! reads everything.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog, topology: agdx::Topology, conversation: agdx::wire::ConversationId) -> Result<(), agdx::replay::ReplayError> {
//! use agdx::replay::{ContextPolicy, ConversationContext};
//!
//! let mut context = ConversationContext::resume(log, &topology, conversation).await?;
//! context.catch_up().await?;
//! let prompt = context.turns(&ContextPolicy::default().last(20).budget(4000));
//! context.save().await?; // the next resume reads only what follows
//! # let _ = prompt; Ok(()) }
//! ```

use std::collections::BTreeMap;

use agdx_wire::{AgentId, ChannelId, ContentType, ConversationId, FoldSnapshot, Kind, RecordId};
use serde::{Deserialize, Serialize};

use super::context::{Built, ContextPolicy, Placed, Role, Turn, keep};
use super::reader::{Replay, ReplayError, ReplayItem};
use super::snapshot::{
    from_cbor, latest_snapshot, save_snapshot, serde_bytes_vec, snapshot_of, to_cbor,
};
use crate::log::SharedLog;
use crate::routing::partition_of;
use crate::topology::Topology;

/// The fold name of context snapshots.
pub const CONTEXT_FOLD: &str = "agdx.context.v1";

/// The most turns a context snapshot keeps (the newest).
pub const SNAPSHOT_TURNS: usize = 1_000;

/// The most bytes of turn bodies a context snapshot keeps: small enough to
/// be one record on every backend.
pub const SNAPSHOT_BODY_BYTES: usize = 512 * 1024;

/// One conversation's turns, read on from a snapshot (or the start) and
/// snapshotted in turn.
pub struct ConversationContext {
    log: SharedLog,
    topology: Topology,
    conversation: ConversationId,
    replay: Replay,
    built: Built,
    /// Per topic, the offset the snapshot resumed from: records before it
    /// are in the snapshot's turns already.
    resumed_from: Option<BTreeMap<String, u64>>,
    read: u64,
}

/// What a context snapshot's state holds.
#[derive(Serialize, Deserialize)]
struct ContextState {
    /// Per topic, where reading goes on.
    next: BTreeMap<String, u64>,
    turns: Vec<SavedTurn>,
}

/// A turn as a snapshot keeps it (the wire types' text forms).
#[derive(Serialize, Deserialize)]
struct SavedTurn {
    role: String,
    source: String,
    kind: String,
    record: Option<String>,
    cause: Option<String>,
    topic: String,
    position: String,
    timestamp_micros: u64,
    operation: Option<String>,
    content_type: String,
    #[serde(with = "serde_bytes_vec")]
    body: Vec<u8>,
    channel: Option<String>,
}

impl SavedTurn {
    fn of(placed: &Placed) -> Self {
        let t = &placed.turn;
        Self {
            role: t.role.as_str().to_owned(),
            source: t.source.to_string(),
            kind: t.kind.as_str().to_owned(),
            record: t.record.map(|r| r.to_string()),
            cause: t.cause.map(|r| r.to_string()),
            topic: placed.topic.clone(),
            position: t.position.to_string(),
            timestamp_micros: t.timestamp_micros,
            operation: t.operation.clone(),
            content_type: t.content_type.name().to_owned(),
            body: t.body.clone(),
            channel: placed.channel.map(|c| c.to_string()),
        }
    }

    /// The turn back; `None` when a field does not read (a snapshot of
    /// another version): the caller then reads from the start.
    fn placed(self) -> Option<Placed> {
        let parse_id = |text: Option<String>| match text {
            Some(text) => text.parse::<RecordId>().ok().map(Some),
            None => Some(None),
        };
        let channel = match self.channel {
            Some(text) => Some(text.parse::<ChannelId>().ok()?),
            None => None,
        };
        Some(Placed {
            turn: Turn {
                role: Role::from_name(&self.role)?,
                source: self.source.parse::<AgentId>().ok()?,
                kind: self.kind.parse::<Kind>().ok()?,
                record: parse_id(self.record)?,
                cause: parse_id(self.cause)?,
                position: self.position.parse().ok()?,
                timestamp_micros: self.timestamp_micros,
                operation: self.operation,
                content_type: self.content_type.parse::<ContentType>().ok()?,
                body: self.body,
                tokens: 0,
            },
            topic: self.topic,
            channel,
        })
    }
}

impl ConversationContext {
    /// The context from the conversation's first record.
    pub fn from_start(log: SharedLog, topology: &Topology, conversation: ConversationId) -> Self {
        Self {
            replay: Replay::new(log.clone(), topology, conversation),
            log,
            topology: topology.clone(),
            conversation,
            built: Built::default(),
            resumed_from: None,
            read: 0,
        }
    }

    /// The context from its latest snapshot of `conversation` (its turns,
    /// reading on from where it stopped), or from the start when there is
    /// none (or none this version reads).
    pub async fn resume(
        log: SharedLog,
        topology: &Topology,
        conversation: ConversationId,
    ) -> Result<Self, ReplayError> {
        let mut context = Self::from_start(log, topology, conversation);
        let saved = latest_snapshot(
            &context.log,
            &topology.snapshots,
            conversation,
            CONTEXT_FOLD,
            &topology.responses,
        )
        .await?;
        let Some(saved) = saved else {
            return Ok(context);
        };
        let state: ContextState = from_cbor(&saved.state)?;
        let Some(placed) = state
            .turns
            .into_iter()
            .map(SavedTurn::placed)
            .collect::<Option<Vec<_>>>()
        else {
            tracing::warn!(%conversation, "a context snapshot did not read; reading the conversation from its start");
            return Ok(context);
        };
        context.built.ended = placed.iter().filter_map(|p| p.channel).collect();
        context.built.placed = placed;
        context.replay =
            Replay::new(context.log.clone(), topology, conversation).from_offsets(&state.next);
        context.resumed_from = Some(state.next);
        Ok(context)
    }

    /// Reads every record there is now; how many of the conversation's
    /// records were read (its snapshots aside).
    pub async fn catch_up(&mut self) -> Result<u64, ReplayError> {
        let records = self.replay.read_to_end().await?;
        let mut read = 0;
        for record in &records {
            // An inbox the snapshot read is read again from its start only
            // when this reader had not met it yet: what the snapshot holds
            // is not taken twice.
            let seen = self
                .resumed_from
                .as_ref()
                .and_then(|next| next.get(&record.topic))
                .is_some_and(|&next| record.position.offset < next);
            if !seen && !matches!(record.item, ReplayItem::Snapshot(_)) {
                self.built.push(record);
                read += 1;
            }
        }
        self.read += read;
        Ok(read)
    }

    /// The turns `policy` keeps, oldest first (see [`super::assemble`]).
    pub fn turns(&self, policy: &ContextPolicy) -> Vec<Turn> {
        keep(self.built.turns(), policy)
    }

    /// Per topic, where the snapshot this resumed from had stopped; `None`
    /// when it read from the start.
    pub fn resumed_from(&self) -> Option<&BTreeMap<String, u64>> {
        self.resumed_from.as_ref()
    }

    /// The conversation's records read by [`Self::catch_up`] so far.
    pub fn records_read(&self) -> u64 {
        self.read
    }

    /// The snapshot of what was read so far; `None` before any record of
    /// the conversation was read.
    pub fn snapshot(&self) -> Result<Option<FoldSnapshot>, ReplayError> {
        let mut next: BTreeMap<String, u64> = self
            .replay
            .cursors()
            .iter()
            .map(|c| (c.topic.topic.clone(), c.next))
            .collect();
        if next.values().all(|&n| n == 0) {
            return Ok(None);
        }
        // An open stream's chunks are read again after a resume, from its
        // first: nothing of its topic from there on is saved.
        for placed in &self.built.placed {
            if let Some(channel) = placed.channel
                && self.built.is_open(channel)
                && let Some(at) = next.get_mut(&placed.topic)
            {
                *at = (*at).min(placed.turn.position.offset);
            }
        }
        let before_cut = |p: &&Placed| {
            next.get(&p.topic)
                .is_some_and(|&cut| p.turn.position.offset < cut)
        };
        let mut kept: Vec<&Placed> = self.built.placed.iter().filter(before_cut).collect();
        kept.sort_by_key(|p| (p.turn.timestamp_micros, p.turn.position));
        let mut bytes = 0usize;
        let newest = kept
            .iter()
            .rev()
            .take(SNAPSHOT_TURNS)
            .take_while(|p| {
                bytes = bytes.saturating_add(p.turn.body.len());
                bytes <= SNAPSHOT_BODY_BYTES
            })
            .count();
        let turns = kept[kept.len() - newest..]
            .iter()
            .map(|p| SavedTurn::of(p))
            .collect();
        let responses = &self.topology.responses;
        let as_of = next
            .get(&responses.topic)
            .map(|&n| n.saturating_sub(1))
            .unwrap_or_default();
        let state = to_cbor(&ContextState { next, turns })?;
        snapshot_of(
            self.conversation,
            CONTEXT_FOLD,
            responses,
            BTreeMap::from([(partition_of(responses, self.conversation), as_of)]),
            state,
        )
        .map(Some)
    }

    /// Appends [`Self::snapshot`] to `agent.snapshots` and returns it.
    pub async fn save(&self) -> Result<Option<FoldSnapshot>, ReplayError> {
        save_snapshot(&self.log, &self.topology.snapshots, self.snapshot()?).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use agdx_wire::{AgentEnvelope, ContentType};

    use super::*;
    use crate::testing::MemoryLog;
    use crate::{Outgoing, Producer, TopologyConfig, new_conversation_id, new_record_id};

    /// A snapshot of a conversation longer than it keeps holds its newest
    /// turns within the byte bound, and a resumed reading knows those.
    #[tokio::test]
    async fn a_snapshot_keeps_the_newest_turns_within_its_bounds() {
        let log: SharedLog = Arc::new(MemoryLog::new());
        let topology = TopologyConfig::new("agents")
            .open(log.as_ref())
            .await
            .expect("topology");
        let producer = Producer::new(
            log.clone(),
            topology.clone(),
            AgentId::new("writer").expect("id"),
        );
        let conversation = new_conversation_id();
        let turns = 700usize;
        for n in 0..turns {
            let mut body = format!("turn {n:04} ").into_bytes();
            body.resize(1024, b'.');
            let event = AgentEnvelope::event(
                new_record_id(),
                conversation,
                producer.source().clone(),
                body,
            );
            producer
                .publish_one(&topology.commands, Outgoing::new(event, ContentType::Raw))
                .await
                .expect("publish");
        }
        let mut whole = ConversationContext::from_start(log.clone(), &topology, conversation);
        assert_eq!(whole.catch_up().await.expect("read"), turns as u64);
        whole.save().await.expect("save").expect("a snapshot");

        let mut resumed = ConversationContext::resume(log.clone(), &topology, conversation)
            .await
            .expect("resume");
        assert_eq!(
            resumed.catch_up().await.expect("read"),
            0,
            "nothing follows"
        );
        let kept = resumed.turns(&ContextPolicy::default());
        let fit = SNAPSHOT_BODY_BYTES / 1024;
        assert_eq!(kept.len(), fit.min(SNAPSHOT_TURNS));
        assert_eq!(
            kept,
            whole.turns(&ContextPolicy::default())[turns - kept.len()..],
            "the newest turns, as a whole reading has them"
        );
    }
}
