//! The runtime's own views of whole topics, resumed from snapshots.
//!
//! A view (who is live, who is quarantined) folds every partition of a
//! topic. Folding from offset 0 at each start would make start-up grow
//! with the age of the deployment, so a view saves its state as a
//! [`FoldSnapshot`](agdx_wire::FoldSnapshot) on `agent.snapshots` (the
//! format of [`Folded`](crate::replay::Folded), over all the topic's
//! partitions) when [`snapshot_due`] says so, and the next start reads the
//! newest snapshot and only what follows it. Saving holds the view's topic
//! from the snapshot's offsets on ([`Log::hold`](crate::log::Log::hold)),
//! so the embedded log's retention never removes what the next start
//! reads; a start that finds retention removed some anyway says so. Each view has a conversation of its own
//! ([`conversation_of`]), so its snapshots sit in one partition.
//!
//! The views are declared in one table, [`VIEWS`].

use std::collections::BTreeMap;
use std::time::Duration;

use agdx_wire::ConversationId;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::log::{LogError, LogRecord, SharedLog, TopicInfo};
use crate::replay::ReplayError;
use crate::replay::snapshot::{append_snapshot, from_cbor, latest_snapshot, snapshot_of, to_cbor};
use crate::topology::Topology;

/// Records a view folds between two of its snapshots.
pub const SNAPSHOT_EVERY: u64 = 10_000;

/// Longest a view that folded anything goes without saving a snapshot,
/// far within any topic's retention, so retention on Iggy and Kafka (which
/// remove records by age alone) never removes records after a view's
/// newest snapshot while the view runs.
pub const SNAPSHOT_MAX_AGE: Duration = Duration::from_secs(3_600);

/// Whether a view should save a snapshot now: it folded
/// [`SNAPSHOT_EVERY`] records since its last one, or folded anything and
/// either has no snapshot to resume from yet (so the next start need not
/// fold again what this one did) or saved none for [`SNAPSHOT_MAX_AGE`].
pub fn snapshot_due(unsaved: u64, resumed: bool, since_saved: Duration) -> bool {
    unsaved >= SNAPSHOT_EVERY || (unsaved > 0 && (!resumed || since_saved >= SNAPSHOT_MAX_AGE))
}

/// Records read per poll by a view.
const VIEW_BATCH: u32 = 1024;

/// One of the runtime's views: its name and the topic it folds.
#[derive(Debug, Clone, Copy)]
pub struct ViewName {
    /// The name its snapshots carry (and so their format).
    pub name: &'static str,
    /// The topic it folds.
    pub topic: fn(&Topology) -> &TopicInfo,
}

/// The live agent cards ([`LiveAgents`](crate::cards::LiveAgents)).
pub const CARDS: ViewName = ViewName {
    name: "agdx.view.cards.v1",
    topic: |t| &t.registry,
};

/// The quarantine set
/// ([`QuarantineWatch`](crate::trust::QuarantineWatch)).
pub const QUARANTINE: ViewName = ViewName {
    name: "agdx.view.quarantine.v1",
    topic: |t| &t.registry,
};

/// The IOA bridge's nodes, identities and spaces (its messages are read
/// from `agent.commands` as long as that keeps them).
pub const IOA: ViewName = ViewName {
    name: "agdx.view.ioa.v1",
    topic: |t| &t.registry,
};

/// Every view the runtime keeps.
pub const VIEWS: [ViewName; 3] = [CARDS, QUARANTINE, IOA];

/// The conversation a view's snapshots belong to: XXH3-128 of
/// `agdx.view.v1` and the view's name.
pub fn conversation_of(view: &ViewName) -> ConversationId {
    let mut input = b"agdx.view.v1".to_vec();
    input.extend_from_slice(view.name.as_bytes());
    ConversationId::from_u128(xxhash_rust::xxh3::xxh3_128(&input))
}

/// A view's state from its newest snapshot, and per partition the next
/// offset to read; `None` when it has no snapshot.
/// `instance` tells apart the snapshots of readers whose folds differ for
/// the same records (the quarantine set of readers trusting other keys):
/// each resumes only from its own kind ([`ViewName::name`] when all agree).
pub(crate) async fn resume<S: DeserializeOwned>(
    log: &SharedLog,
    topology: &Topology,
    view: &ViewName,
    instance: &str,
) -> Result<Option<(S, BTreeMap<u32, u64>)>, ReplayError> {
    let started = std::time::Instant::now();
    let Some(saved) = latest_snapshot(
        log,
        &topology.snapshots,
        conversation_of(view),
        instance,
        (view.topic)(topology),
    )
    .await?
    else {
        return Ok(None);
    };
    let found = started.elapsed();
    let state = from_cbor(&saved.state)?;
    tracing::debug!(view = instance, bytes = saved.state.len(), ?found, decoded = ?started.elapsed(), "view snapshot read");
    let next: BTreeMap<u32, u64> = saved
        .as_of
        .into_iter()
        .map(|(p, offset)| (p, offset.saturating_add(1)))
        .collect();
    report_gaps(log, (view.topic)(topology), view, &next).await;
    Ok(Some((state, next)))
}

/// Warns about each partition whose records after the snapshot retention
/// already removed: the view misses what they held.
async fn report_gaps(
    log: &SharedLog,
    topic: &TopicInfo,
    view: &ViewName,
    next: &BTreeMap<u32, u64>,
) {
    for partition in 0..topic.partitions.get() {
        let from = next.get(&partition).copied().unwrap_or(0);
        match log.first_offset(topic, partition).await {
            Ok(Some(first)) if first > from => tracing::warn!(
                view = view.name,
                topic = %topic.topic,
                partition,
                "retention removed offsets {from} to {} before a snapshot of the view covered them: what they held is missing from the view; give the topic a longer retention than the views' snapshot interval",
                first - 1
            ),
            Ok(_) => {}
            Err(error) => {
                tracing::debug!(%error, partition, "cannot read where the partition starts")
            }
        }
    }
}

/// Saves a view's `state`, folded up to (not including) `next` per
/// partition, as `instance` (see [`resume`]), and holds the view's topic
/// from `next` on for it. Partitions it has read nothing of are left out.
pub(crate) async fn save<S: Serialize>(
    log: &SharedLog,
    topology: &Topology,
    view: &ViewName,
    instance: &str,
    next: &BTreeMap<u32, u64>,
    state: &S,
) -> Result<(), ReplayError> {
    let as_of = next
        .iter()
        .filter(|(_, next)| **next > 0)
        .map(|(p, next)| (*p, next - 1))
        .collect();
    let snapshot = snapshot_of(
        conversation_of(view),
        instance,
        (view.topic)(topology),
        as_of,
        to_cbor(state)?,
    )?;
    append_snapshot(log, &topology.snapshots, &snapshot).await?;
    // The next start reads on from here: retention must leave it.
    let topic = (view.topic)(topology);
    let from: Vec<(u32, u64)> = (0..topic.partitions.get())
        .map(|p| (p, next.get(&p).copied().unwrap_or(0)))
        .collect();
    log.hold(topic, instance, &from).await?;
    Ok(())
}

/// Reads a partition from `from` until a poll (waiting up to `wait`) comes
/// back empty, handing each batch to `each`; damaged records are stepped
/// over (and counted in the result). Returns the next offset to read and
/// how many records were damaged.
pub(crate) async fn read_partition(
    log: &SharedLog,
    topic: &TopicInfo,
    partition: u32,
    mut from: u64,
    wait: Duration,
    each: &mut (dyn FnMut(&[LogRecord]) + Send),
) -> Result<(u64, u64), LogError> {
    let mut damaged = 0;
    loop {
        match log.poll(topic, partition, from, VIEW_BATCH, wait).await {
            Ok(records) if records.is_empty() => return Ok((from, damaged)),
            Ok(records) => {
                from = records.last().map_or(from, |r| r.position.offset + 1);
                each(&records);
            }
            Err(LogError::Corrupt(damage)) => {
                tracing::warn!(%damage, topic = %topic.topic, "stepping over damaged records");
                damaged += damage.count();
                from = damage.next_offset();
            }
            Err(error) => return Err(error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view saves after a snapshot's worth of records, after anything
    /// once it has no snapshot, and after anything once an hour passed.
    #[test]
    fn a_snapshot_is_due_by_count_by_first_start_or_by_age() {
        let minute = Duration::from_secs(60);
        assert!(snapshot_due(SNAPSHOT_EVERY, true, minute));
        assert!(!snapshot_due(SNAPSHOT_EVERY - 1, true, minute));
        assert!(snapshot_due(1, false, Duration::ZERO));
        assert!(!snapshot_due(0, false, SNAPSHOT_MAX_AGE));
        assert!(snapshot_due(1, true, SNAPSHOT_MAX_AGE));
        assert!(!snapshot_due(1, true, SNAPSHOT_MAX_AGE - minute));
    }

    #[test]
    fn views_have_distinct_names_and_conversations() {
        let names: std::collections::BTreeSet<_> = VIEWS.iter().map(|v| v.name).collect();
        let conversations: std::collections::BTreeSet<_> =
            VIEWS.iter().map(conversation_of).collect();
        assert_eq!(names.len(), VIEWS.len());
        assert_eq!(conversations.len(), VIEWS.len());
    }
}
