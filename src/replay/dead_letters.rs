//! Dead-letter tools: list the capsules on `agent.dlq`, show one with its
//! original decoded, and redrive: re-append the original bytes verbatim to
//! the topic and partition they came from, so a worker takes them up again.
//!
//! A redrive is remembered on the log, not in a local file: after the
//! re-append, an `event` with operation [`REDRIVE_OPERATION`] goes onto
//! `agent.dlq`, caused by the original record (`cause`, `cause_at` = where
//! it sat), with a JSON body naming the capsule (`{"capsule":
//! "stream/topic/partition/offset", "forced": false}`). Listing joins the
//! two, so every reader sees what was redriven, when and by whom, and a
//! second redrive is refused unless forced. The re-append comes first: a
//! crash between the two can repeat a redrive, never lose one.

use std::time::Duration;

use agdx_wire::{
    AgentEnvelope, AgentId, BodyRef, ContentType, DeadLetter, LogPosition, record_headers,
};

use crate::ids::new_record_id;
use crate::log::{LogError, OutgoingRecord, SharedLog, TopicInfo};
use crate::producer::{Outgoing, Producer};
use crate::routing::partition_of;
use crate::topology::Topology;

use super::reader::{ReplayError, ReplayItem, ReplayRecord, topic_of};

/// The `operation` of the event that records a redrive on `agent.dlq`.
pub const REDRIVE_OPERATION: &str = "agdx.redrive";

/// One redrive of a capsule, as recorded on the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redrive {
    /// When it was recorded, epoch microseconds (log time).
    pub timestamp_micros: u64,
    /// Who redrove it (the event's source).
    pub by: AgentId,
    /// Whether it was forced past an earlier redrive.
    pub forced: bool,
}

/// A dead-letter capsule with where it sits and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterEntry {
    /// Where the capsule sits in `agent.dlq`: its id for `show` and `redrive`.
    pub position: LogPosition,
    /// When it was set aside, epoch microseconds (log time).
    pub timestamp_micros: u64,
    /// The capsule.
    pub capsule: DeadLetter,
    /// The original envelope, when the payload decodes.
    pub original: Option<AgentEnvelope>,
    /// Its redrives, oldest first.
    pub redrives: Vec<Redrive>,
}

impl DeadLetterEntry {
    /// The agent the original was for: its target, when it named one.
    pub fn agent(&self) -> Option<&AgentId> {
        self.original.as_ref().and_then(|e| e.target.as_ref())
    }
}

/// What a redrive did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedriveOutcome {
    /// The original bytes were appended again.
    Redriven {
        /// The topic they went to.
        topic: String,
        /// The partition they went to.
        partition: u32,
    },
    /// Nothing: it was redriven before (force to do it again).
    AlreadyRedriven(Redrive),
}

#[derive(serde::Serialize, serde::Deserialize)]
struct RedriveBody {
    capsule: String,
    forced: bool,
}

/// Every capsule on `agent.dlq` with its redrives, in log order.
pub async fn dead_letters(
    log: &SharedLog,
    topology: &Topology,
) -> Result<Vec<DeadLetterEntry>, ReplayError> {
    let dlq = &topology.dlq;
    let mut entries = Vec::new();
    let mut redrives: Vec<(LogPosition, Redrive)> = Vec::new();
    for partition in 0..dlq.partitions.get() {
        let mut from = 0;
        loop {
            let batch = match log.poll(dlq, partition, from, 1000, Duration::ZERO).await {
                Ok(batch) => batch,
                Err(LogError::Corrupt(damage)) => {
                    tracing::warn!(%damage, "stepping over damaged records of the dead-letter topic");
                    from = damage.next_offset();
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let Some(last) = batch.last() else { break };
            from = last.position.offset + 1;
            for record in batch {
                let Some(record) = ReplayRecord::decode(&dlq.topic, record) else {
                    continue;
                };
                match record.item {
                    ReplayItem::DeadLetter { capsule, original } => entries.push(DeadLetterEntry {
                        position: record.position,
                        timestamp_micros: record.timestamp_micros,
                        capsule,
                        original: original.map(|e| *e),
                        redrives: Vec::new(),
                    }),
                    ReplayItem::Envelope(e)
                        if e.operation.as_deref() == Some(REDRIVE_OPERATION) =>
                    {
                        let Ok(body) = serde_json::from_slice::<RedriveBody>(&e.body) else {
                            continue;
                        };
                        let Ok(capsule) = body.capsule.parse::<LogPosition>() else {
                            continue;
                        };
                        redrives.push((
                            capsule,
                            Redrive {
                                timestamp_micros: record.timestamp_micros,
                                by: e.source,
                                forced: body.forced,
                            },
                        ));
                    }
                    _ => {}
                }
            }
        }
    }
    redrives.sort_by_key(|(_, r)| r.timestamp_micros);
    for (capsule, redrive) in redrives {
        if let Some(entry) = entries.iter_mut().find(|e| e.position == capsule) {
            entry.redrives.push(redrive);
        }
    }
    entries.sort_by_key(|e| (e.timestamp_micros, e.position));
    Ok(entries)
}

/// The capsule at `position` of `agent.dlq`, with its redrives.
pub async fn dead_letter(
    log: &SharedLog,
    topology: &Topology,
    position: LogPosition,
) -> Result<DeadLetterEntry, ReplayError> {
    dead_letters(log, topology)
        .await?
        .into_iter()
        .find(|e| e.position == position)
        .ok_or_else(|| {
            ReplayError::NotFound(format!(
                "no dead letter at {position}; dead_letters lists them"
            ))
        })
}

/// Re-appends a capsule's original bytes, verbatim, to the topic and
/// partition it came from (its conversation's partition), then records the
/// redrive on `agent.dlq` as `producer`'s source. A capsule redriven
/// before is left alone unless `force`.
pub async fn redrive(
    producer: &Producer,
    entry: &DeadLetterEntry,
    force: bool,
) -> Result<RedriveOutcome, ReplayError> {
    if let (Some(last), false) = (entry.redrives.last(), force) {
        return Ok(RedriveOutcome::AlreadyRedriven(last.clone()));
    }
    let capsule = &entry.capsule;
    if capsule.payload.is_empty() {
        return Err(ReplayError::NotFound(format!(
            "dead letter {} kept no bytes (the record was damaged on the log: {}); there is nothing to redrive",
            entry.position,
            capsule.detail.as_deref().unwrap_or("no detail")
        )));
    }
    let log = producer.log();
    let topology = producer.topology();
    let topic = &source_topic(log, topology, entry).await?;
    let partition = match &entry.original {
        Some(original) => partition_of(topic, original.conversation),
        None => capsule.source.partition % topic.partitions,
    };
    let record = OutgoingRecord {
        headers: original_headers(log, topology, entry).await?,
        payload: capsule.payload.clone().into(),
    };
    log.append(topic, partition, vec![record]).await?;
    let mark = RedriveBody {
        capsule: entry.position.to_string(),
        forced: force && !entry.redrives.is_empty(),
    };
    let body = serde_json::to_vec(&mark).map_err(|e| ReplayError::State(Box::new(e)))?;
    let conversation = entry
        .original
        .as_ref()
        .map_or_else(crate::ids::new_conversation_id, |e| e.conversation);
    let mut event = AgentEnvelope::event(
        new_record_id(),
        conversation,
        producer.source().clone(),
        body,
    )
    .with_operation(REDRIVE_OPERATION);
    if let Some(cause) = entry.original.as_ref().and_then(|e| e.record) {
        event = event.with_cause(cause, Some(capsule.source));
    }
    producer
        .publish_one(&topology.dlq, Outgoing::new(event, ContentType::Json))
        .await?;
    Ok(RedriveOutcome::Redriven {
        topic: topic.topic.clone(),
        partition,
    })
}

/// The topic a capsule's original was read from: one of the agent topics,
/// or the inbox of the original's target (inbox routing).
async fn source_topic(
    log: &SharedLog,
    topology: &Topology,
    entry: &DeadLetterEntry,
) -> Result<TopicInfo, ReplayError> {
    let source = entry.capsule.source;
    let foreign = match topic_of(topology, source) {
        Ok(topic) => return Ok(topic.clone()),
        Err(foreign) => foreign,
    };
    let target = entry.original.as_ref().and_then(|e| e.target.as_ref());
    if let Some(target) = target
        && let Some(inbox) = topology.find_inbox(log.as_ref(), target).await?
        && (inbox.stream_id, inbox.topic_id) == (source.stream, source.topic)
    {
        return Ok(inbox);
    }
    Err(foreign)
}

/// The headers the original was appended with: read from where it sat when
/// it is still there, else derived from the envelope (content type `ref`
/// when the body is a claim check, `raw` otherwise).
async fn original_headers(
    log: &SharedLog,
    topology: &Topology,
    entry: &DeadLetterEntry,
) -> Result<agdx_wire::Headers, ReplayError> {
    let topic = &source_topic(log, topology, entry).await?;
    let source = entry.capsule.source;
    if let Ok(mut found) = log
        .poll(topic, source.partition, source.offset, 1, Duration::ZERO)
        .await
        && let Some(record) = found.pop().filter(|r| {
            r.position == source && r.payload.as_ref() == entry.capsule.payload.as_slice()
        })
    {
        return Ok(record.headers);
    }
    Ok(match &entry.original {
        Some(envelope) => {
            let content_type = if BodyRef::decode_valid(&envelope.body).is_ok() {
                ContentType::Ref
            } else {
                ContentType::Raw
            };
            record_headers(envelope, content_type)
        }
        None => Vec::new(),
    })
}
