//! Snapshots on `agent.snapshots`: the one format every fold and view
//! writes, and finding the newest one.
//!
//! A [`FoldSnapshot`]'s `state` bytes are CBOR of `{"fold": NAME, "topic":
//! TOPIC, "state": BYTES}`, where `BYTES` is the folded state in CBOR: the
//! name and topic let several folds keep snapshots of one conversation and
//! never resume from another's. A snapshot goes to the partition of its
//! conversation; the newest is found by reading that partition backwards,
//! a few hundred records at a time, never past its first record.

use std::collections::BTreeMap;
use std::time::Duration;

use agdx_wire::{ConversationId, FoldSnapshot};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::log::{LogError, SharedLog, TopicInfo};
use crate::record::capsule_record;
use crate::routing::partition_of;

use super::reader::ReplayError;

/// Records read by the first step when looking for the latest snapshot,
/// newest first: the newest is usually the last record or close to it, and a
/// snapshot can be large, so the steps start small and double.
const SNAPSHOT_SCAN_FIRST: u64 = 1;
/// Most records read per step when looking for the latest snapshot.
const SNAPSHOT_SCAN: u64 = 256;

/// What a snapshot's `state` bytes hold.
#[derive(Serialize, Deserialize)]
struct SnapshotState {
    fold: String,
    topic: String,
    #[serde(with = "serde_bytes_vec")]
    state: Vec<u8>,
}

/// Serde for a byte string as a CBOR byte string, not an array of numbers.
pub(crate) mod serde_bytes_vec {
    use serde::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Vec<u8>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a byte string")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
                Ok(v.to_vec())
            }
            fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
                Ok(v)
            }
        }
        // Not `deserialize_bytes`: ciborium takes only byte strings that
        // fit its scratch buffer (4 KiB) there.
        d.deserialize_byte_buf(V)
    }
}

pub(crate) fn to_cbor<T: Serialize>(value: &T) -> Result<Vec<u8>, ReplayError> {
    let mut out = Vec::new();
    ciborium::into_writer(value, &mut out).map_err(|e| ReplayError::State(Box::new(e)))?;
    Ok(out)
}

pub(crate) fn from_cbor<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ReplayError> {
    ciborium::from_reader(bytes).map_err(|e| ReplayError::State(Box::new(e)))
}

/// A snapshot found: the folded state (CBOR) and how far it got.
pub(crate) struct Saved {
    /// The state bytes the fold saved.
    pub state: Vec<u8>,
    /// Partition of the folded topic → last offset folded (inclusive).
    pub as_of: BTreeMap<u32, u64>,
}

/// The snapshot of `state`, named for `fold` over `topic`.
pub(crate) fn snapshot_of(
    conversation: ConversationId,
    fold: &str,
    topic: &TopicInfo,
    as_of: BTreeMap<u32, u64>,
    state: Vec<u8>,
) -> Result<FoldSnapshot, ReplayError> {
    let state = SnapshotState {
        fold: fold.to_owned(),
        topic: topic.topic.clone(),
        state,
    };
    Ok(FoldSnapshot {
        conversation,
        as_of,
        state: to_cbor(&state)?,
    })
}

/// Appends `snapshot` to its conversation's partition of `snapshots`.
pub(crate) async fn append_snapshot(
    log: &SharedLog,
    snapshots: &TopicInfo,
    snapshot: &FoldSnapshot,
) -> Result<(), LogError> {
    let partition = partition_of(snapshots, snapshot.conversation);
    log.append(
        snapshots,
        partition,
        vec![capsule_record(snapshot.encode())],
    )
    .await
}

/// Appends `snapshot`, when there is one, and hands it back.
pub(crate) async fn save_snapshot(
    log: &SharedLog,
    snapshots: &TopicInfo,
    snapshot: Option<FoldSnapshot>,
) -> Result<Option<FoldSnapshot>, ReplayError> {
    if let Some(snapshot) = &snapshot {
        append_snapshot(log, snapshots, snapshot).await?;
    }
    Ok(snapshot)
}

/// The newest snapshot of `fold` over `topic` for `conversation`.
pub(crate) async fn latest_snapshot(
    log: &SharedLog,
    snapshots: &TopicInfo,
    conversation: ConversationId,
    fold: &str,
    topic: &TopicInfo,
) -> Result<Option<Saved>, ReplayError> {
    let partition = partition_of(snapshots, conversation);
    let Some(last) = log.last_offset(snapshots, partition).await? else {
        return Ok(None);
    };
    let Some(first) = log.first_offset(snapshots, partition).await? else {
        return Ok(None);
    };
    let mut end = last + 1;
    let mut step = SNAPSHOT_SCAN_FIRST;
    while end > first {
        let start = end.saturating_sub(step).max(first);
        step = (step * 2).min(SNAPSHOT_SCAN);
        let records = match log
            .poll(
                snapshots,
                partition,
                start,
                u32::try_from(end - start).unwrap_or(u32::MAX),
                Duration::ZERO,
            )
            .await
        {
            Ok(records) => records,
            // A damaged snapshot is as good as none: look further back.
            Err(LogError::Corrupt(_)) => Vec::new(),
            Err(error) => return Err(error.into()),
        };
        for record in records.iter().rev().filter(|r| r.position.offset < end) {
            let Ok(snapshot) = FoldSnapshot::decode(&record.payload) else {
                continue;
            };
            if snapshot.conversation != conversation {
                continue;
            }
            let Ok(saved) = from_cbor::<SnapshotState>(&snapshot.state) else {
                continue;
            };
            if saved.fold != fold || saved.topic != topic.topic {
                continue;
            }
            return Ok(Some(Saved {
                state: saved.state,
                as_of: snapshot.as_of,
            }));
        }
        end = start;
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_names_its_fold_and_topic_and_keeps_its_state() {
        let topic = TopicInfo {
            stream: "agdx".into(),
            topic: "agent.registry".into(),
            stream_id: 1,
            topic_id: 1,
            partitions: std::num::NonZeroU32::new(4).unwrap(),
        };
        // Larger than ciborium's 4 KiB scratch buffer, as real states are.
        let state = vec![7u8; 100_000];
        let snapshot = snapshot_of(
            ConversationId::from_u128(7),
            "agdx.view.test.v1",
            &topic,
            BTreeMap::from([(0, 9)]),
            state.clone(),
        )
        .unwrap();
        let decoded = FoldSnapshot::decode(&snapshot.encode()).unwrap();
        let saved: SnapshotState = from_cbor(&decoded.state).unwrap();
        assert_eq!(saved.fold, "agdx.view.test.v1");
        assert_eq!(saved.topic, "agent.registry");
        assert_eq!(saved.state, state);
        assert_eq!(decoded.as_of, BTreeMap::from([(0, 9)]));
    }
}
