//! Folds: a view derived from a conversation by a user function from state
//! and record to state, snapshotted on `agent.snapshots` so it can resume
//! from where the snapshot got to instead of from offset zero.
//!
//! A fold reads one topic (the conversation's partition of it). A snapshot
//! is a [`FoldSnapshot`] with `as_of` = that partition → the last offset
//! folded (inclusive); resuming reads from `as_of + 1`. Its `state` bytes
//! are CBOR of `{"fold": NAME, "topic": TOPIC, "state": BYTES}`, where
//! `BYTES` is the user state in CBOR: the name and topic let several folds
//! keep snapshots of one conversation and never resume from another's (the
//! runtime's own views over whole topics use the same format).
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog, topology: agdx::Topology, conversation: agdx::wire::ConversationId) -> Result<(), agdx::replay::ReplayError> {
//! use agdx::replay::{Fold, Folded, ReplayRecord};
//!
//! /// How many replies each agent sent.
//! struct Replies;
//! impl Fold for Replies {
//!     type State = std::collections::BTreeMap<String, u64>;
//!     fn name(&self) -> &str { "replies" }
//!     fn apply(&self, state: &mut Self::State, record: &ReplayRecord) {
//!         if let Some(e) = record.envelope() {
//!             *state.entry(e.source.to_string()).or_default() += 1;
//!         }
//!     }
//! }
//!
//! let responses = topology.responses.clone();
//! let mut folded = Folded::resume(Replies, log, topology, responses, conversation).await?;
//! folded.catch_up().await?;
//! println!("{:?}", folded.state());
//! folded.save().await?; // the next resume starts after what was folded here
//! # Ok(()) }
//! ```

use std::collections::BTreeMap;

use agdx_wire::{ConversationId, FoldSnapshot};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::log::{Damage, SharedLog, TopicInfo};
use crate::routing::partition_of;
use crate::topology::Topology;

use super::reader::{Replay, ReplayError, ReplayRecord};
use super::snapshot::{from_cbor, latest_snapshot, save_snapshot, snapshot_of, to_cbor};

/// A user fold: a name and a function from state and record to state.
pub trait Fold: Send + Sync {
    /// The folded state; serialized (CBOR) into snapshots.
    type State: Serialize + DeserializeOwned + Default + Send;

    /// A name that identifies this fold's snapshots (and their format).
    fn name(&self) -> &str;

    /// Folds one record (of the fold's topic, in the fold's conversation,
    /// in log order) into the state.
    fn apply(&self, state: &mut Self::State, record: &ReplayRecord);
}

/// A fold over one conversation's records in one topic, with its state and
/// how far it got.
pub struct Folded<F: Fold> {
    fold: F,
    log: SharedLog,
    topology: Topology,
    replay: Replay,
    partition: u32,
    state: F::State,
    as_of: Option<u64>,
    resumed_from: Option<u64>,
}

impl<F: Fold> Folded<F> {
    /// The fold from the conversation's first record in `topic`.
    pub fn from_start(
        fold: F,
        log: SharedLog,
        topology: Topology,
        topic: TopicInfo,
        conversation: ConversationId,
    ) -> Self {
        Self::starting_at(fold, log, topology, topic, conversation, None)
    }

    /// The fold from its latest snapshot of `conversation` in `topic` (the
    /// state it saved, reading on from `as_of + 1`), or from the start when
    /// it has none.
    pub async fn resume(
        fold: F,
        log: SharedLog,
        topology: Topology,
        topic: TopicInfo,
        conversation: ConversationId,
    ) -> Result<Self, ReplayError> {
        let snapshot =
            latest_snapshot(&log, &topology.snapshots, conversation, fold.name(), &topic).await?;
        let folded_partition = partition_of(&topic, conversation);
        let resumed = match snapshot {
            Some(saved) => match saved.as_of.get(&folded_partition) {
                Some(&as_of) => Some((from_cbor(&saved.state)?, as_of)),
                None => None,
            },
            None => None,
        };
        Ok(Self::starting_at(
            fold,
            log,
            topology,
            topic,
            conversation,
            resumed,
        ))
    }

    fn starting_at(
        fold: F,
        log: SharedLog,
        topology: Topology,
        topic: TopicInfo,
        conversation: ConversationId,
        resumed: Option<(F::State, u64)>,
    ) -> Self {
        let partition = partition_of(&topic, conversation);
        let (state, as_of) = match resumed {
            Some((state, as_of)) => (state, Some(as_of)),
            None => (F::State::default(), None),
        };
        let resumed_from = as_of.map(|o| o + 1);
        let replay =
            Replay::over(log.clone(), [topic], conversation).from_offset(resumed_from.unwrap_or(0));
        Self {
            fold,
            log,
            topology,
            replay,
            partition,
            state,
            as_of,
            resumed_from,
        }
    }

    /// Folds every record there is now (up to the partition's last offset
    /// when this began); returns how many were folded.
    pub async fn catch_up(&mut self) -> Result<u64, ReplayError> {
        let ends = self.replay.end_offsets().await?;
        let mut folded = 0;
        while let Some(batch) = self.replay.next_up_to(&ends).await? {
            self.track_progress();
            for record in &batch {
                self.fold.apply(&mut self.state, record);
                folded += 1;
            }
        }
        Ok(folded)
    }

    /// The damaged records stepped over so far (see [`Replay::damaged`]).
    pub fn damaged(&self) -> &[Damage] {
        self.replay.damaged()
    }

    /// The last offset read, folded or stepped over (another conversation's).
    fn track_progress(&mut self) {
        let next = self.replay.cursors()[0].next;
        self.as_of = next.checked_sub(1).or(self.as_of);
    }

    /// The state so far.
    pub fn state(&self) -> &F::State {
        &self.state
    }

    /// The last offset of the conversation's partition folded (inclusive).
    pub fn as_of(&self) -> Option<u64> {
        self.as_of
    }

    /// Where a resume started reading (`as_of + 1` of the snapshot it
    /// found); `None` when it started from the beginning.
    pub fn resumed_from(&self) -> Option<u64> {
        self.resumed_from
    }

    /// The snapshot of the state so far; `None` when nothing was read yet.
    pub fn snapshot(&self) -> Result<Option<FoldSnapshot>, ReplayError> {
        let Some(as_of) = self.as_of else {
            return Ok(None);
        };
        snapshot_of(
            self.replay.conversation(),
            self.fold.name(),
            &self.replay.cursors()[0].topic,
            BTreeMap::from([(self.partition, as_of)]),
            to_cbor(&self.state)?,
        )
        .map(Some)
    }

    /// Appends the snapshot to `agent.snapshots` (the conversation's
    /// partition) and returns it; `None` when nothing was read yet.
    pub async fn save(&self) -> Result<Option<FoldSnapshot>, ReplayError> {
        save_snapshot(&self.log, &self.topology.snapshots, self.snapshot()?).await
    }
}
