//! Minting new ids: ULIDs (millisecond time prefix, random tail), so ids sort
//! roughly by creation time and never collide in practice; and the one id
//! that is derived instead, the conversation of a keyed command.

use agdx_wire::{AgentId, ChannelId, ConversationId, CorrelationId, IdempotencyKey, RecordId};

fn ulid() -> u128 {
    ulid::Ulid::new().into()
}

/// A fresh record id.
pub fn new_record_id() -> RecordId {
    RecordId::from_u128(ulid())
}

/// A fresh conversation id.
pub fn new_conversation_id() -> ConversationId {
    ConversationId::from_u128(ulid())
}

/// A fresh correlation id.
pub fn new_correlation_id() -> CorrelationId {
    CorrelationId::from_u128(ulid())
}

/// A fresh chunk-stream channel id.
pub fn new_channel_id() -> ChannelId {
    ChannelId::from_u128(ulid())
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
/// use agdx::conversation_for_key;
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
