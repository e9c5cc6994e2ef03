//! AGDX runtime: agents and services exchanging typed CBOR envelopes over a
//! durable, partitioned log (an embedded local log or Apache Iggy).

pub mod log;

pub use agdx_wire as wire;
