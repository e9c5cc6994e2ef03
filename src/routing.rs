//! Where records go: the conversations derived from names and keys, and the
//! partition a conversation's records land in.
//!
//! Every record of one conversation lands in one partition of its topic, so
//! one worker at a time reads it, in order. A requester knows where its
//! replies land, a reader where a conversation's records are, and the
//! conversations derived here put what must stay in order (the retries of
//! one idempotency key, the cards and control facts of one agent) in one
//! partition. Nothing here reads or writes the log.

use std::num::NonZeroU32;

use agdx_wire::{AgentId, ConversationId, IdempotencyKey};

use crate::log::TopicInfo;

/// The partition (0-based) a record with partitioning `key` lands in:
/// `xxhash32(seed 0, key) % partitions`, exactly as Apache Iggy computes it
/// for a message key. Agent records use the conversation id's 26-char
/// display string as the key ([`partition_of`]).
///
/// ```
/// use std::num::NonZeroU32;
/// let eight = NonZeroU32::new(8).unwrap();
/// assert!(agdx::routing::partition_for_key(b"01J0Y1ZAG00000000000000002", eight) < 8);
/// ```
pub fn partition_for_key(key: &[u8], partitions: NonZeroU32) -> u32 {
    xxhash_rust::xxh32::xxh32(key, 0) % partitions
}

/// The partition of `topic` that records of `conversation` land in.
pub fn partition_of(topic: &TopicInfo, conversation: ConversationId) -> u32 {
    partition_for_key(&conversation.to_text(), topic.partitions)
}

/// The conversation of a command carrying idempotency key `key` from
/// `source` to `target` (`None`: no target), when the caller names none:
/// every retry of one key lands in one conversation, so in one partition,
/// where one worker at a time handles it, in order.
///
/// It is XXH3-128 (seed 0) over the UTF-8 bytes of `agdx.key.v1`, then of
/// the target (empty without one), the source and the key, each of the last
/// three preceded by its length as a big-endian u32; the 128-bit hash is
/// the conversation id.
///
/// ```
/// use agdx::routing::conversation_for_key;
/// use agdx::wire::{AgentId, IdempotencyKey};
/// let (ledger, shop) = (AgentId::new("ledger")?, AgentId::new("shop")?);
/// let key = IdempotencyKey::new("order-42")?;
/// let first = conversation_for_key(Some(&ledger), &shop, &key);
/// assert_eq!(first, conversation_for_key(Some(&ledger), &shop, &key));
/// assert_ne!(first, conversation_for_key(Some(&ledger), &AgentId::new("other")?, &key));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn conversation_for_key(
    target: Option<&AgentId>,
    source: &AgentId,
    key: &IdempotencyKey,
) -> ConversationId {
    let mut input = b"agdx.key.v1".to_vec();
    for part in [
        target.map_or("", AgentId::as_str),
        source.as_str(),
        key.as_str(),
    ] {
        // Ids are at most a few hundred bytes; the length always fits.
        input.extend_from_slice(&u32::try_from(part.len()).unwrap_or(u32::MAX).to_be_bytes());
        input.extend_from_slice(part.as_bytes());
    }
    ConversationId::from_u128(xxhash_rust::xxh3::xxh3_128(&input))
}

/// The conversation (and so the partition of `agent.registry`) of every
/// card of `agent` and of every control fact about it (quarantine): one
/// partition per agent keeps them in order. XXH3-128 (seed 0) of the
/// agent's name.
pub fn card_conversation(agent: &AgentId) -> ConversationId {
    ConversationId::from_u128(xxhash_rust::xxh3::xxh3_128(agent.as_str().as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The formula, against xxHash32 values computed independently (the
    /// first three are the xxHash specification's test vectors, the others
    /// were computed with Python's `xxhash` package).
    #[test]
    fn partition_for_key_is_xxhash32_mod_partitions() {
        let vectors: [(&[u8], u32); 5] = [
            (b"", 0x02CC_5D05),
            (b"a", 0x550D_7456),
            (b"abc", 0x32D1_53FF),
            (b"01J0Y1ZAG00000000000000002", 0xB6BD_3909),
            (b"01HZX3V5M8Q4R7T2W9YBCDEFGH", 0xB071_22BA),
        ];
        for (key, hash) in vectors {
            for partitions in [1, 2, 3, 8, 16, 1000] {
                assert_eq!(
                    partition_for_key(key, NonZeroU32::new(partitions).expect("not 0")),
                    hash % partitions,
                    "key {key:?}, {partitions} partitions"
                );
            }
        }
        assert_eq!(
            partition_for_key(
                b"01J0Y1ZAG00000000000000002",
                NonZeroU32::new(8).expect("not 0")
            ),
            1
        );
        assert_eq!(
            partition_for_key(
                b"01HZX3V5M8Q4R7T2W9YBCDEFGH",
                NonZeroU32::new(8).expect("not 0")
            ),
            2
        );
    }

    /// A conversation's partition is that of its 26-character text form,
    /// as the reference computes it.
    #[test]
    fn partition_of_hashes_the_conversation_text() {
        let topic = |partitions| TopicInfo {
            stream: "agdx".into(),
            topic: "agent.commands".into(),
            stream_id: 1,
            topic_id: 1,
            partitions: NonZeroU32::new(partitions).expect("not 0"),
        };
        for text in ["01J0Y1ZAG00000000000000002", "01HZX3V5M8Q4R7T2W9YBCDEFGH"] {
            let conversation: ConversationId = text.parse().expect("a valid id");
            for partitions in [1, 3, 8, 1000] {
                assert_eq!(
                    partition_of(&topic(partitions), conversation),
                    partition_for_key(text.as_bytes(), topic(partitions).partitions),
                    "{text}, {partitions} partitions"
                );
            }
        }
        let conversation: ConversationId = "01J0Y1ZAG00000000000000002".parse().expect("valid");
        assert_eq!(partition_of(&topic(8), conversation), 1);
    }
}
