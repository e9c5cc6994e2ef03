//! Fold snapshots: a derived view's state and how far into the log it got.

use std::collections::BTreeMap;

use crate::cbor::{
    Item, Reader, Seen, required, write_bytes, write_map, write_text, write_uint, wrong_type,
};
use crate::error::DecodeError;
use crate::id::ConversationId;
use crate::payload::{Codec, wire_payload};
use crate::validation::ValidationError;

/// A view folded over one conversation, with the last offset folded per
/// partition (inclusive: resume at offset + 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FoldSnapshot {
    /// The conversation folded.
    pub conversation: ConversationId,
    /// Partition → last folded offset. Written in ascending partition order.
    pub as_of: BTreeMap<u32, u64>,
    /// The folded state, opaque to the wire.
    pub state: Vec<u8>,
}

const CONVERSATION: &str = "conversation";
const AS_OF: &str = "as_of";
const STATE: &str = "state";

impl FoldSnapshot {
    /// A fold snapshot has no rules beyond its shape; always `Ok`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        Ok(())
    }

    /// Where to resume reading `partition`: one past the last folded offset.
    pub fn resume_offset(&self, partition: u32) -> Option<u64> {
        self.as_of.get(&partition).map(|o| o.saturating_add(1))
    }
}

impl Codec for FoldSnapshot {
    const NAME: &'static str = "fold snapshot";

    fn size_hint(&self) -> usize {
        64 + 14 * self.as_of.len() + self.state.len()
    }

    fn write(&self, out: &mut Vec<u8>) {
        write_map(out, 3);
        write_text(out, CONVERSATION);
        self.conversation.write(out);
        write_text(out, AS_OF);
        write_map(out, self.as_of.len());
        for (partition, offset) in &self.as_of {
            write_uint(out, u64::from(*partition));
            write_uint(out, *offset);
        }
        write_text(out, STATE);
        write_bytes(out, &self.state);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let (mut conversation, mut as_of, mut state) = (None, None, None);
        for _ in 0..entries {
            match r.key()? {
                CONVERSATION => {
                    seen.mark(0, CONVERSATION)?;
                    conversation = Some(ConversationId::read(r, CONVERSATION)?);
                }
                AS_OF => {
                    seen.mark(1, AS_OF)?;
                    let n = r.map(AS_OF)?;
                    let mut map = BTreeMap::new();
                    for _ in 0..n {
                        let partition = match r.item()? {
                            Item::Uint(p) => {
                                u32::try_from(p).map_err(|_| DecodeError::OutOfRange {
                                    field: AS_OF,
                                    value: p,
                                    type_name: "u32",
                                })?
                            }
                            other => {
                                return Err(wrong_type(
                                    AS_OF,
                                    "a map of partition numbers",
                                    &other,
                                ));
                            }
                        };
                        let offset = r.uint(AS_OF)?;
                        if map.insert(partition, offset).is_some() {
                            return Err(DecodeError::DuplicateKey { field: AS_OF });
                        }
                    }
                    r.close();
                    as_of = Some(map);
                }
                STATE => {
                    seen.mark(2, STATE)?;
                    state = Some(r.bytes(STATE)?.to_vec());
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(FoldSnapshot {
            conversation: required(conversation, CONVERSATION)?,
            as_of: required(as_of, AS_OF)?,
            state: required(state, STATE)?,
        })
    }
}

wire_payload!(FoldSnapshot, "fold-snapshot");
