//! AGDX runtime: agents and services exchanging typed CBOR envelopes over a
//! durable, partitioned log (an embedded local log, Apache Iggy or a
//! Kafka-protocol cluster).
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
//! - [`routing`]: where records go: the partition of a conversation and
//!   the conversations derived from keys and agent names.
//! - `testing` (feature `testing`): a handler test kit, an in-memory log
//!   and the log conformance suite.
//!
//! Time enters through a [`Clock`], so deadline logic is testable without
//! sleeping ([`ManualClock`]).
//!
//! Cargo features choose what is built in: the backends `embedded`,
//! `iggy` and `kafka`; the bridges `bridge-axon`, `bridge-ax-ipc`,
//! `bridge-ioa`, `bridge-mcp` and `bridge-a2a`; `metrics` (the Prometheus exporter); `blobs-object-store`
//! (claim checks in S3, GCS, Azure Blob Storage); and `cli`, the `agdx`
//! binary with all of them. The default features are `embedded` and `cli`;
//! `default-features = false, features = ["embedded"]` is the embedded log
//! alone.

#![warn(missing_docs)]
// Unsafe code only where a dependency leaves no other way, each block
// allowed where it is, with its SAFETY comment.
#![deny(unsafe_code)]

mod ask;
mod blob;
pub mod bridge;
mod cancel;
pub mod cards;
mod claim_check;
mod clock;
mod dlq;
mod fence;
mod file_mode;
mod idempotency;
mod ids;
pub mod log;
pub mod metrics;
mod producer;
mod reassembly;
mod record;
pub mod replay;
mod retry;
pub mod routing;
mod sqlite;
mod task_states;
#[cfg(feature = "testing")]
pub mod testing;
mod topology;
pub mod trust;
pub mod view;
pub mod worker;

pub use agdx_wire as wire;
pub use ask::{
    Answer, AskError, READER_LINGER, Reply, ReplyEvent, ReplyWatch, Requester, TERMINAL_STATE_GRACE,
};
#[cfg(feature = "blobs-object-store")]
pub use blob::ObjectBlobStore;
pub use blob::{
    BlobError, BlobSpec, BlobSpecError, BlobStore, DirBlobStore, LogBlobRef, LogBlobStore,
    MAX_BLOB_CHUNK_BYTES, MAX_BLOB_CHUNKS,
};
pub use cancel::{LOOKAHEAD_AFTER, OpenCommand, is_cancel_of, open_commands};
pub use claim_check::{
    ClaimCheck, ClaimCheckError, DEFAULT_CLAIM_CHECK_THRESHOLD, META_REF_CONTENT_TYPE,
};
pub use clock::{Clock, ManualClock, SharedClock, SystemClock, system_clock};
pub use dlq::{MAX_DETAIL_BYTES, dead_letter, dead_letter_record};
pub use fence::{CLAIM_PARTITION, FENCE_HEADER, FenceError, Fences, fence_of, fence_of_record};
pub use idempotency::{KeyClaim, KeyRetention, KeyScope, ProcessedKeys, StoreError};
pub use ids::{new_channel_id, new_conversation_id, new_correlation_id, new_record_id};
pub use producer::{
    ChunkWriter, CommandRequest, Outgoing, PreparedBatch, ProduceError, Producer, ReplyFields,
    ReplyTo, Sent,
};
pub use reassembly::{StreamAssembler, StreamCounters, StreamEnd, StreamEvent};
pub use record::{RecordError, content_type_of, envelope_of};
pub use retry::RetryPolicy;
pub use routing::conversation_for_key;
pub use task_states::{
    INPUT_FOR_KEY, INPUT_OPERATION, InputError, TASK_STATES_KEY, input_for, task_states_requested,
};
pub use topology::{
    CommandRouting, DEFAULT_PARTITIONS, DEFAULT_STREAM, INBOX_GROUP_SUFFIX, Inboxes, Retentions,
    TopicNames, Topology, TopologyConfig, inbox_topic_name,
};

/// The README's example compiles.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
