//! Partition choice by key, identical to what Apache Iggy computes.

use std::num::NonZeroU32;

/// The partition (0-based) a record with partitioning `key` lands in:
/// `xxhash32(seed 0, key) % partitions`, exactly as Iggy computes it for a
/// message key. Agent records use the conversation id's 26-char display
/// string as the key, so a requester knows where its replies land.
///
/// ```
/// use std::num::NonZeroU32;
/// let eight = NonZeroU32::new(8).unwrap();
/// assert!(agdx::log::partition_for_key(b"01J0Y1ZAG00000000000000002", eight) < 8);
/// ```
pub fn partition_for_key(key: &[u8], partitions: NonZeroU32) -> u32 {
    xxhash_rust::xxh32::xxh32(key, 0) % partitions
}
