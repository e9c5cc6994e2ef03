//! Partition choice by key, identical to what Apache Iggy computes.

/// The partition (0-based) a record with partitioning `key` lands in:
/// `xxhash32(seed 0, key) % partitions`, exactly as Iggy computes it for a
/// message key. Agent records use the conversation id's 26-char display
/// string as the key, so a requester knows where its replies land.
///
/// ```
/// assert!(agdx::log::partition_for_key(b"01J0Y1ZAG00000000000000002", 8) < 8);
/// ```
///
/// # Panics
/// When `partitions` is 0 (a topic always has at least one partition).
pub fn partition_for_key(key: &[u8], partitions: u32) -> u32 {
    assert!(partitions > 0, "a topic has at least one partition");
    xxhash_rust::xxh32::xxh32(key, 0) % partitions
}
