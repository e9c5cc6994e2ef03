//! Minting new ids: ULIDs (millisecond time prefix, random tail), so ids sort
//! roughly by creation time and never collide in practice. The ids derived
//! instead of minted are in [`crate::routing`].

use agdx_wire::{ChannelId, ConversationId, CorrelationId, RecordId};

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
