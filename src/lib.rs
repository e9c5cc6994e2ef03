//! AGDX runtime: agents and services exchanging typed CBOR envelopes over a
//! durable, partitioned log (an embedded local log or Apache Iggy).

mod blob;
mod clock;
pub mod log;
mod retry;
mod topology;

pub use agdx_wire as wire;
pub use blob::{BlobError, BlobStore, DirBlobStore};
pub use clock::{Clock, ManualClock, SharedClock, SystemClock, system_clock};
pub use retry::RetryPolicy;
pub use topology::{DEFAULT_PARTITIONS, DEFAULT_STREAM, TopicNames, Topology, TopologyConfig};
