//! AGDX runtime: agents and services exchanging typed CBOR envelopes over a
//! durable, partitioned log (an embedded local log or Apache Iggy).
//!
//! The pieces, from the bottom up:
//!
//! - [`wire`] (the `agdx-wire` crate): ids, the [`wire::AgentEnvelope`],
//!   capsules, validation, headers. Runtime-free.
//! - [`log`]: the one log interface ([`log::Log`]) and its backends, chosen
//!   with a [`log::LogSpec`] such as `embedded:.agdx` or
//!   `iggy://iggy:iggy@127.0.0.1:8090`.
//! - [`TopologyConfig`] / [`Topology`]: the stream and its five agent topics.
//! - [`Producer`]: typed verbs (`command`, `respond`, `event`, `status_*`,
//!   `fail`, chunk streams) that validate before they send.
//! - [`Requester`]: `ask` and `ask_stream`, first terminal reply wins.
//! - [`worker::Worker`]: a consumer-group member that runs handlers and
//!   commits only after the reply is on the log.
//! - [`cards`]: live agent cards on `agent.registry`: who is running.
//! - [`replay`]: the log read back: conversation timelines, the causal
//!   graph, folds with snapshots, dead-letter tools.
//! - [`bridge`]: edge bridges that let agents speaking another protocol
//!   work with agents on the log (AXON, AX IPC, an IOA server).
//! - [`trust`]: Ed25519 signing and verification, the key registry, grants
//!   and operator-signed quarantine.
//!
//! Time enters through a [`Clock`], so deadline logic is testable without
//! sleeping ([`ManualClock`]).

#![warn(missing_docs)]

mod ask;
pub mod bench;
mod blob;
pub mod bridge;
pub mod cards;
mod claim_check;
mod clock;
mod dlq;
mod idempotency;
mod ids;
pub mod log;
pub mod metrics;
mod producer;
mod reassembly;
mod record;
pub mod replay;
mod retry;
mod sqlite;
mod topology;
pub mod trust;
pub mod worker;

pub use agdx_wire as wire;
pub use ask::{Answer, AskError, Reply, ReplyEvent, ReplyWatch, Requester};
pub use blob::{BlobError, BlobStore, DirBlobStore};
pub use claim_check::{ClaimCheck, ClaimCheckError, DEFAULT_CLAIM_CHECK_THRESHOLD};
pub use clock::{Clock, ManualClock, SharedClock, SystemClock, system_clock};
pub use dlq::{MAX_DETAIL_BYTES, dead_letter, dead_letter_record};
pub use idempotency::{KeyClaim, KeyRetention, KeyScope, ProcessedKeys, StoreError};
pub use ids::{
    conversation_for_key, new_channel_id, new_conversation_id, new_correlation_id, new_record_id,
};
pub use producer::{
    ChunkWriter, CommandRequest, Outgoing, PreparedBatch, ProduceError, Producer, ReplyTo, Sent,
};
pub use reassembly::{StreamAssembler, StreamCounters, StreamEnd, StreamEvent};
pub use record::{RecordError, content_type_of, envelope_of};
pub use retry::RetryPolicy;
pub use topology::{DEFAULT_PARTITIONS, DEFAULT_STREAM, TopicNames, Topology, TopologyConfig};

/// The README's example compiles.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
