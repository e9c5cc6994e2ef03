//! Fold snapshots: a derived view's state and how far into the log it got.

use std::collections::BTreeMap;

use crate::cbor::{Item, Reader, write_map, write_uint, wrong_type};
use crate::error::DecodeError;
use crate::id::ConversationId;
use crate::payload::wire_payload;
use crate::table::{Cbor, Opaque, Shown, wire_struct};
use crate::validation::ValidationError;

wire_struct! {
    /// A view folded over one conversation, with the last offset folded per
    /// partition (inclusive: resume at offset + 1).
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct FoldSnapshot {
        cbor: "fold snapshot",
        json: "fold snapshot",
        keys: field,
        size_hint: |s| 64 + 14 * s.as_of.len() + s.state.len();
        /// The conversation folded.
        pub conversation: ConversationId [CONVERSATION = "conversation", Shown, required],
        /// Partition → last folded offset. Written in ascending partition order.
        pub as_of: BTreeMap<u32, u64> [AS_OF = "as_of", PartitionOffsets, required],
        /// The folded state, opaque to the wire.
        pub state: Vec<u8> [STATE = "state", Opaque, required],
    }
}

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

/// Partition → offset: a map with unsigned integer keys in CBOR (each
/// partition once), an object keyed by the partition's decimal text in JSON.
enum PartitionOffsets {}

impl Cbor<BTreeMap<u32, u64>> for PartitionOffsets {
    fn write(value: &BTreeMap<u32, u64>, out: &mut Vec<u8>) {
        write_map(out, value.len());
        for (partition, offset) in value {
            write_uint(out, u64::from(*partition));
            write_uint(out, *offset);
        }
    }

    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<BTreeMap<u32, u64>, DecodeError> {
        let n = r.map(field)?;
        let mut map = BTreeMap::new();
        for _ in 0..n {
            let partition = match r.item()? {
                Item::Uint(p) => u32::try_from(p).map_err(|_| DecodeError::OutOfRange {
                    field,
                    value: p,
                    type_name: "u32",
                })?,
                other => return Err(wrong_type(field, "a map of partition numbers", &other)),
            };
            let offset = r.uint(field)?;
            if map.insert(partition, offset).is_some() {
                return Err(DecodeError::DuplicateKey { field });
            }
        }
        r.close();
        Ok(map)
    }
}

#[cfg(feature = "json")]
impl crate::table::Json<BTreeMap<u32, u64>> for PartitionOffsets {
    fn to_json(value: &BTreeMap<u32, u64>) -> crate::json::Value {
        crate::json::Value::Object(
            value
                .iter()
                .map(|(p, o)| (p.to_string(), crate::json::Value::from(*o)))
                .collect(),
        )
    }

    fn from_json(json: crate::json::Value) -> Result<BTreeMap<u32, u64>, crate::json::JsonError> {
        use crate::json::JsonError;
        match json {
            crate::json::Value::Object(entries) => entries
                .into_iter()
                .map(|(p, o)| {
                    let partition = p
                        .parse::<u32>()
                        .map_err(|_| JsonError::Invalid(format!("partition {p:?} is not a u32")))?;
                    Ok((partition, crate::json::value::uint(o)?))
                })
                .collect(),
            _ => Err(JsonError::Expected("an object of partition -> offset")),
        }
    }
}

wire_payload!(FoldSnapshot, "fold-snapshot");
#[cfg(feature = "json")]
crate::table::json_payload!(FoldSnapshot);
