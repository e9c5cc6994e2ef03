//! Prepared batches: records validated, encoded and grouped by topic and
//! partition before anything is appended.

use std::collections::BTreeMap;

use crate::log::{Append, OutgoingRecord, TopicInfo};

#[cfg(doc)]
use super::Producer;
use super::Sent;

/// Prepared records for `topic` as one batch per partition, in order.
pub(crate) fn appends(topic: &TopicInfo, prepared: Vec<Prepared>) -> Vec<Append> {
    // Counted first, so each partition's batch is made at its size: a
    // worker's run of replies (hundreds, mostly to one partition) would
    // otherwise be copied over and over as its batch grows.
    let mut counts: BTreeMap<u32, usize> = BTreeMap::new();
    for p in &prepared {
        *counts.entry(p.sent.partition).or_default() += 1;
    }
    let mut by_partition: BTreeMap<u32, Vec<OutgoingRecord>> = counts
        .into_iter()
        .map(|(partition, count)| (partition, Vec::with_capacity(count)))
        .collect();
    for Prepared { sent, record } in prepared {
        by_partition.entry(sent.partition).or_default().push(record);
    }
    by_partition
        .into_iter()
        .map(|(partition, records)| Append {
            topic: topic.clone(),
            partition,
            records,
        })
        .collect()
}

/// One topic's records of a batch, by partition.
pub(crate) type ByPartition = (TopicInfo, BTreeMap<u32, Vec<OutgoingRecord>>);

/// A record ready to append, and what it carries.
#[derive(Debug, Clone)]
pub(crate) struct Prepared {
    /// Where it goes and its ids.
    pub sent: Sent,
    /// Headers and payload.
    pub record: OutgoingRecord,
}

/// Records ready to append, already grouped by topic and partition, and
/// what each one is: made by [`Producer::prepare_commands`] or
/// [`Producer::prepare`], appended by [`Producer::publish_prepared`]. A
/// batch of commands goes to one topic, `agent.commands`, except with the
/// inbox routing, where each target's commands go to its inbox.
///
/// It holds everything the append needs (each record's topic, partition,
/// headers and payload) and what the publish reports (each record's
/// [`Sent`]), so it can wait, move to another task, or be cloned to be
/// published again with the same record ids.
#[derive(Debug, Clone, Default)]
pub struct PreparedBatch {
    pub(super) sent: Vec<Sent>,
    pub(super) by_topic: Vec<ByPartition>,
}

impl PreparedBatch {
    /// An empty batch with room for `records` records' reports, so that
    /// preparing a batch does not grow it record by record.
    pub(super) fn with_capacity(records: usize) -> Self {
        Self {
            sent: Vec::with_capacity(records),
            by_topic: Vec::new(),
        }
    }

    /// Adds `prepared`, bound for `topic`, after what the batch holds.
    pub(super) fn push(&mut self, topic: &TopicInfo, prepared: Prepared) {
        let Prepared { sent, record } = prepared;
        let index = match self.by_topic.iter().position(|(t, _)| t == topic) {
            Some(index) => index,
            None => {
                self.by_topic.push((topic.clone(), BTreeMap::new()));
                self.by_topic.len() - 1
            }
        };
        self.by_topic[index]
            .1
            .entry(sent.partition)
            .or_default()
            .push(record);
        self.sent.push(sent);
    }

    /// The topics it goes to, in the order first prepared for.
    pub fn topics(&self) -> impl Iterator<Item = &TopicInfo> {
        self.by_topic.iter().map(|(topic, _)| topic)
    }

    /// What each record is and where it goes, in the order prepared: what
    /// [`Producer::publish_prepared`] returns.
    pub fn sent(&self) -> &[Sent] {
        &self.sent
    }

    /// The records, topic by topic as [`topics`](Self::topics) lists them,
    /// each topic's by partition in ascending order, each partition's in
    /// the order prepared: exactly what will be appended.
    pub fn records(&self) -> impl Iterator<Item = (&TopicInfo, u32, &[OutgoingRecord])> {
        self.by_topic.iter().flat_map(|(topic, by_partition)| {
            by_partition
                .iter()
                .map(move |(&partition, records)| (topic, partition, records.as_slice()))
        })
    }
}
