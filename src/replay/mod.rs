//! Replay: the log read back (docs/runtime.md §7).
//!
//! The log is the single source of truth, so everything here is a reading
//! of it, raw, with nothing synthetic added:
//!
//! - [`Replay`]: one conversation's records, read from the conversation's
//!   partition of each topic (the only place they can be), from
//!   per-partition offsets, in log order (timestamp, then position).
//! - [`CausalGraph`] and [`causal_graph`]: records linked by `cause`,
//!   walked up (ancestors), down (descendants) or both from any record.
//! - [`Replay::context`] and [`assemble`]: a conversation's turns for a
//!   prompt, as a [`ContextPolicy`] keeps them (last N, a token budget,
//!   roles, one record's causal branch); [`ConversationContext`] keeps
//!   them as a fold that resumes from its snapshot.
//! - [`Fold`] and [`Folded`]: a user fold over a conversation, snapshotted
//!   on `agent.snapshots` and resumed from the snapshot's `as_of + 1`.
//! - [`dead_letters`], [`redrive`]: the capsules on `agent.dlq`, and
//!   putting their original bytes back where they came from.

mod context;
mod context_fold;
mod dead_letters;
mod fold;
mod graph;
mod reader;
pub(crate) mod snapshot;

pub use context::{BytesPerToken, ContextPolicy, Role, TokenCounter, Turn, assemble};
pub use context_fold::{CONTEXT_FOLD, ConversationContext, SNAPSHOT_BODY_BYTES, SNAPSHOT_TURNS};
pub use dead_letters::{
    DeadLetterEntry, REDRIVE_OPERATION, Redrive, RedriveOutcome, dead_letter, dead_letters, redrive,
};
pub use fold::{Fold, Folded};
pub use graph::{
    CausalGraph, Direction, GraphNode, GraphStart, META_CAUSES, NodeKey, causal_graph, causes_of,
};
pub use reader::{Cursor, Replay, ReplayError, ReplayItem, ReplayRecord, record_at};
