//! Minting new ids: ULIDs (millisecond time prefix, random tail), so ids sort
//! roughly by creation time and never collide in practice. The ids derived
//! instead of minted are in [`crate::routing`].

use std::time::{SystemTime, UNIX_EPOCH};

use agdx_wire::{ChannelId, ConversationId, CorrelationId, RecordId};

/// Ids minted at one instant, in milliseconds since the Unix epoch.
/// Reading the clock (and turning it into milliseconds) is a good part of
/// what minting an id costs, so a producer building a batch does it once
/// for every id of the batch; the random tails still make each id unique.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mint(u64);

impl Mint {
    /// Ids stamped with the current time.
    pub(crate) fn now() -> Self {
        Self::at(SystemTime::now())
    }

    /// Ids stamped with `time`; a clock set before 1970 stamps zero.
    fn at(time: SystemTime) -> Self {
        let since_epoch = time.duration_since(UNIX_EPOCH).unwrap_or_default();
        Self(u64::try_from(since_epoch.as_millis()).unwrap_or(u64::MAX))
    }

    fn ulid(self) -> u128 {
        // The ULID keeps the low 48 bits of the time and 80 random bits.
        ulid::Ulid::from_parts(self.0, rand::random()).into()
    }

    /// A fresh record id.
    pub(crate) fn record_id(self) -> RecordId {
        RecordId::from_u128(self.ulid())
    }

    /// A fresh conversation id.
    pub(crate) fn conversation_id(self) -> ConversationId {
        ConversationId::from_u128(self.ulid())
    }

    /// A fresh correlation id.
    pub(crate) fn correlation_id(self) -> CorrelationId {
        CorrelationId::from_u128(self.ulid())
    }

    /// A fresh chunk-stream channel id.
    pub(crate) fn channel_id(self) -> ChannelId {
        ChannelId::from_u128(self.ulid())
    }
}

/// A fresh record id.
pub fn new_record_id() -> RecordId {
    Mint::now().record_id()
}

/// A fresh conversation id.
pub fn new_conversation_id() -> ConversationId {
    Mint::now().conversation_id()
}

/// A fresh correlation id.
pub fn new_correlation_id() -> CorrelationId {
    Mint::now().correlation_id()
}

/// A fresh chunk-stream channel id.
pub fn new_channel_id() -> ChannelId {
    Mint::now().channel_id()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn ids_of_one_mint_share_its_millisecond_and_nothing_else() {
        let at = SystemTime::UNIX_EPOCH + Duration::from_millis(1_765_000_000_123);
        let mint = Mint::at(at);
        let ids = [
            mint.record_id().as_u128(),
            mint.conversation_id().as_u128(),
            mint.correlation_id().as_u128(),
            mint.record_id().as_u128(),
        ];
        for id in ids {
            assert_eq!(ulid::Ulid::from(id).timestamp_ms(), 1_765_000_000_123);
        }
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(
            distinct.len(),
            ids.len(),
            "ids of one mint collide: {ids:x?}"
        );
    }
}
