//! AGDX runtime: agents and services exchanging typed CBOR envelopes over a
//! durable, partitioned log (an embedded local log or Apache Iggy).

mod ask;
pub mod bench;
mod blob;
mod claim_check;
mod clock;
mod dlq;
mod idempotency;
mod ids;
pub mod log;
mod producer;
mod reassembly;
mod record;
mod retry;
mod topology;
pub mod worker;

pub use agdx_wire as wire;
pub use ask::{Answer, AskError, Reply, ReplyEvent, ReplyWatch, Requester};
pub use blob::{BlobError, BlobStore, DirBlobStore};
pub use claim_check::{ClaimCheck, ClaimCheckError, DEFAULT_CLAIM_CHECK_THRESHOLD};
pub use clock::{Clock, ManualClock, SharedClock, SystemClock, system_clock};
pub use dlq::{dead_letter, dead_letter_record};
pub use idempotency::{KeyScope, ProcessedKeys, StoreError};
pub use ids::{new_channel_id, new_conversation_id, new_correlation_id, new_record_id};
pub use producer::{ChunkWriter, CommandRequest, Outgoing, ProduceError, Producer, ReplyTo, Sent};
pub use reassembly::{StreamAssembler, StreamCounters, StreamEnd, StreamEvent};
pub use record::{content_type_of, envelope_of};
pub use retry::RetryPolicy;
pub use topology::{DEFAULT_PARTITIONS, DEFAULT_STREAM, TopicNames, Topology, TopologyConfig};

/// The README's example compiles.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
