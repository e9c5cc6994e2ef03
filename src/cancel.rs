//! Cancelling a command: the cancel record, and how a worker sees one.
//!
//! A cancel is a `status` `task` record with the state `canceled`, written
//! by the command's sender ([`crate::Producer::cancel`]) to the command's
//! own topic and conversation, so it lands in the command's partition,
//! after it. Only a cancel from the command's own sender counts. It carries the command's correlation, names the command's
//! record as its `cause` and is addressed to the command's target.
//!
//! A worker handles a partition in order, so a cancel is behind the
//! command it names. Before a command runs, the worker looks for its cancel
//! among the records it polled with it (the last of a full poll is carried
//! into the next poll's batch; the last of a poll that reached the
//! partition's end is looked past with a read of its own): a command
//! cancelled that early is not run. While a handler runs longer than
//! [`LOOKAHEAD_AFTER`], the worker reads on past it, and a cancel found
//! there stops the handler.
//! Either way the command is answered with an `error` `cancelled` and a
//! `status` `task` `canceled`, committed like any other outcome (and
//! remembered for its idempotency key). A cancel that comes after the
//! command was answered changes nothing.

use std::collections::HashMap;
use std::time::Duration;

use agdx_wire::{AgentEnvelope, AgentId, CorrelationId, Kind, TaskState};

use crate::log::{DEFAULT_POLL_WAIT, LogError, LogRecord, SharedLog, TopicInfo};
use crate::record::envelope_of;

/// How long a handler runs before its worker starts reading on past its
/// command for a cancel: a quick handler costs no extra read.
pub const LOOKAHEAD_AFTER: Duration = Duration::from_millis(200);

/// Records read per poll while looking for a cancel.
const LOOKAHEAD_POLL: u32 = 256;

/// Whether `envelope` is a cancel of the command with `correlation` sent
/// by `sender`: only the command's own sender cancels it.
pub fn is_cancel_of(
    envelope: &AgentEnvelope,
    correlation: CorrelationId,
    sender: &AgentId,
) -> bool {
    envelope.kind == Kind::Status
        && envelope.operation.as_deref() == Some("task")
        && envelope.task_state == Some(TaskState::Canceled)
        && envelope.correlation == Some(correlation)
        && envelope.source == *sender
}

/// The cancels among a polled batch, read once for the whole batch: a
/// command looks its own up instead of decoding every record after it.
#[derive(Debug, Default)]
pub(crate) struct Cancels {
    /// Per correlation, then sender, the offset of the newest cancel: keyed
    /// in two steps so that a lookup borrows the sender instead of copying it.
    newest: HashMap<CorrelationId, HashMap<AgentId, u64>>,
}

impl Cancels {
    /// The cancels among `records` (undecodable records cancel nothing).
    pub(crate) fn among(records: &[LogRecord]) -> Self {
        let envelopes: Vec<_> = records
            .iter()
            .filter_map(|record| Some((record.position.offset, envelope_of(record).ok()?)))
            .collect();
        Self::of(
            envelopes
                .iter()
                .map(|(offset, envelope)| (*offset, envelope)),
        )
    }

    /// The cancels among envelopes already decoded, each with its record's
    /// offset.
    pub(crate) fn of<'a>(envelopes: impl IntoIterator<Item = (u64, &'a AgentEnvelope)>) -> Self {
        let mut newest = HashMap::new();
        for (at, envelope) in envelopes {
            if let Some(correlation) = envelope.correlation
                && is_cancel_of(envelope, correlation, &envelope.source)
            {
                let offset = newest
                    .entry(correlation)
                    .or_insert_with(HashMap::new)
                    .entry(envelope.source.clone())
                    .or_insert(at);
                *offset = (*offset).max(at);
            }
        }
        Self { newest }
    }

    /// Whether a cancel after offset `after` cancels the command with
    /// `correlation` sent by `sender`: one before it (of an earlier copy of
    /// the command, redriven since) does not.
    pub(crate) fn cancel_after(
        &self,
        after: u64,
        correlation: CorrelationId,
        sender: &AgentId,
    ) -> bool {
        self.newest
            .get(&correlation)
            .and_then(|by_sender| by_sender.get(sender))
            .is_some_and(|&offset| offset > after)
    }
}

/// Whether the records at and after offset `from` of `partition` that are
/// on the log now (one poll's worth, not waiting) cancel the command with
/// `correlation`. A failed read says no: the look-ahead while the handler
/// runs still finds the cancel.
pub(crate) async fn cancelled_next(
    log: &SharedLog,
    commands: &TopicInfo,
    partition: u32,
    from: u64,
    (correlation, sender): (CorrelationId, &AgentId),
) -> bool {
    match log
        .poll(commands, partition, from, LOOKAHEAD_POLL, Duration::ZERO)
        .await
    {
        Ok(records) => {
            Cancels::among(&records).cancel_after(from.saturating_sub(1), correlation, sender)
        }
        Err(error) => {
            tracing::debug!(%error, partition, "could not read past a command for its cancel");
            false
        }
    }
}

/// Resolves once a cancel of the command with `correlation` is found in
/// `partition` of `commands` at or after offset `from`, starting after
/// [`LOOKAHEAD_AFTER`]. Runs as long as it is awaited: the worker races it
/// against the handler. A failed read is tried again after a pause.
pub(crate) async fn cancel_requested(
    log: &SharedLog,
    commands: &TopicInfo,
    partition: u32,
    from: u64,
    (correlation, sender): (CorrelationId, &AgentId),
) {
    tokio::time::sleep(LOOKAHEAD_AFTER).await;
    read_on(log, commands, partition, from, "a cancel", |record| {
        envelope_of(record)
            .is_ok_and(|envelope| is_cancel_of(&envelope, correlation, sender))
            .then_some(())
    })
    .await
}

/// What `find` makes of the first record at or after offset `from` of
/// `partition` for which it makes something, waiting for records as they
/// come; damaged ranges are stepped over, a failed read (of `what`, for
/// the diagnostics) is tried again after a pause. Runs as long as it is
/// awaited: its callers race it against a handler or bound it.
pub(crate) async fn read_on<T>(
    log: &SharedLog,
    topic: &TopicInfo,
    partition: u32,
    from: u64,
    what: &str,
    mut find: impl FnMut(&LogRecord) -> Option<T>,
) -> T {
    let mut next = from;
    let mut failures = 0u32;
    loop {
        match log
            .poll(topic, partition, next, LOOKAHEAD_POLL, DEFAULT_POLL_WAIT)
            .await
        {
            Ok(records) => {
                failures = 0;
                if let Some(found) = records.iter().find_map(&mut find) {
                    return found;
                }
                if let Some(last) = records.last() {
                    next = last.position.offset + 1;
                }
            }
            Err(LogError::Corrupt(damage)) => next = damage.next_offset(),
            Err(error) => {
                failures += 1;
                tracing::debug!(%error, partition, "reading on for {what} failed; trying again");
                tokio::time::sleep(crate::retry::backoff(failures)).await;
            }
        }
    }
}

/// A command of a conversation that has no answer yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenCommand {
    /// Where the command is, as [`crate::Producer::cancel`] takes it.
    pub sent: crate::Sent,
    /// Who sent it: only that sender's cancel counts.
    pub source: AgentId,
    /// The agent it was sent to.
    pub target: Option<AgentId>,
    /// The operation it asks for.
    pub operation: Option<String>,
}

/// The commands among `records` (one conversation's, as a
/// [`Replay`](crate::replay::Replay) reads them) that neither have a
/// terminal answer (a `response`, an `error`, the last chunk of a stream)
/// nor a cancel from their sender: those a cancel can still stop.
pub fn open_commands(records: &[crate::replay::ReplayRecord]) -> Vec<OpenCommand> {
    let envelopes: Vec<_> = records
        .iter()
        .filter_map(|record| record.envelope().map(|e| (record, e)))
        .collect();
    let closed = |correlation: CorrelationId, sender: &AgentId| {
        envelopes.iter().any(|(_, e)| {
            e.correlation == Some(correlation)
                && (matches!(e.kind, Kind::Response | Kind::Error)
                    || (e.kind == Kind::Chunk && e.last)
                    || is_cancel_of(e, correlation, sender))
        })
    };
    envelopes
        .iter()
        .filter(|(_, e)| e.kind == Kind::Command)
        .filter_map(|(record, e)| {
            let correlation = e.correlation?;
            (!closed(correlation, &e.source)).then(|| OpenCommand {
                sent: crate::Sent {
                    record: e.record,
                    conversation: e.conversation,
                    correlation: Some(correlation),
                    topic: record.topic.clone(),
                    partition: record.position.partition,
                },
                source: e.source.clone(),
                target: e.target.clone(),
                operation: e.operation.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use agdx_wire::{ConversationId, LogPosition, RecordId};
    use bytes::Bytes;

    use super::*;

    fn at(offset: u64, envelope: AgentEnvelope) -> LogRecord {
        LogRecord {
            position: LogPosition {
                stream: 1,
                topic: 1,
                partition: 0,
                offset,
            },
            timestamp_micros: offset,
            headers: Vec::new(),
            payload: Bytes::from(envelope.encode()),
        }
    }

    fn cancel(offset: u64, correlation: CorrelationId, sender: &str) -> LogRecord {
        at(
            offset,
            AgentEnvelope::status_task(
                RecordId::from_u128(100 + u128::from(offset)),
                ConversationId::from_u128(1),
                AgentId::new(sender).unwrap(),
                correlation,
                TaskState::Canceled,
            ),
        )
    }

    #[test]
    fn a_batch_cancels_a_command_only_by_its_sender_and_only_after_it() {
        let (mine, other) = (CorrelationId::from_u128(7), CorrelationId::from_u128(8));
        let asker = AgentId::new("asker").unwrap();
        let records = vec![
            cancel(3, mine, "asker"),
            cancel(5, other, "stranger"),
            at(
                6,
                AgentEnvelope::status_task(
                    RecordId::from_u128(9),
                    ConversationId::from_u128(1),
                    asker.clone(),
                    other,
                    TaskState::Working,
                ),
            ),
        ];
        let cancels = Cancels::among(&records);
        assert!(cancels.cancel_after(2, mine, &asker), "cancelled after it");
        assert!(
            !cancels.cancel_after(3, mine, &asker),
            "a cancel before a command (of an earlier copy) does not count"
        );
        assert!(
            !cancels.cancel_after(0, other, &asker),
            "neither a stranger's cancel nor a working state cancels it"
        );
        let stranger = AgentId::new("stranger").unwrap();
        assert!(cancels.cancel_after(4, other, &stranger));
        assert!(!cancels.cancel_after(5, other, &stranger));
    }
}
