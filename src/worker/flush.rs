//! Steps 9 and 10 of docs/runtime.md §4 for a run of records: publish their
//! replies and dead letters, and only then commit the run's last offset,
//! through [`Log::append_and_commit`](crate::log::Log::append_and_commit):
//! one transaction on the embedded log, appends then the commit elsewhere.
//!
//! Only what may pass is retried. A retryable failure (the log cannot be
//! reached, a blob could not be written) is tried again with backoff, in
//! place, until it passes or the partition stops: no handler runs again
//! for it. A record whose answer can never be published (a reply over the
//! log's record limit, one the wire rules refuse) must not hold its
//! partition up either: its answer is replaced by a small `internal` error
//! where someone waits, the command is dead-lettered saying why, and the
//! run is committed as usual.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::Ordering;

use agdx_wire::{DeadLetter, DeadLetterReason, ErrorBody, ErrorCode, Kind, LogPosition};
use bytes::Bytes;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::dlq::{MAX_DETAIL_BYTES, dead_letter, dead_letter_record, fit_to_log, shorten};
use crate::log::{Append, LogError, OffsetCommit, OutgoingRecord, TopicInfo};
use crate::producer::{Prepared, ProduceError};

use crate::fence::{FenceError, fence_header};

use super::context::PartitionContext;
use super::partition::Held;
use super::process::{Disposition, Outcome, ProcessError};

/// Why a run of records was not committed.
#[derive(Debug, thiserror::Error)]
pub(super) enum BatchError {
    #[error(transparent)]
    Process(#[from] ProcessError),
    #[error(transparent)]
    Produce(#[from] ProduceError),
    #[error(transparent)]
    Log(#[from] LogError),
    #[error("checking the partition's fence failed: {0}")]
    Fence(#[from] FenceError),
    /// A newer holder claimed the partition: nothing is published or
    /// committed.
    #[error("a newer holder claimed the partition")]
    Fenced,
}

impl BatchError {
    fn is_retryable(&self) -> bool {
        match self {
            BatchError::Process(e) => e.is_retryable(),
            BatchError::Produce(e) => e.is_retryable(),
            BatchError::Log(e) => e.is_retryable(),
            BatchError::Fence(e) => e.is_retryable(),
            BatchError::Fenced => false,
        }
    }
}

/// One handled record: where it sat, its bytes (for a dead letter made at
/// publish time) and what it left to publish.
pub(super) struct Settled {
    pub position: LogPosition,
    pub payload: Bytes,
    pub outcome: Outcome,
}

/// Handled records not yet published, oldest first.
#[derive(Default)]
pub(super) struct Unflushed {
    settled: Vec<Settled>,
    since: Option<Instant>,
}

impl Unflushed {
    /// Room for `records` handled records without growing.
    pub fn with_capacity(records: usize) -> Self {
        Self {
            settled: Vec::with_capacity(records),
            since: None,
        }
    }

    /// The records waiting so far, leaving room for as many again: a batch
    /// flushed part by part fills the rest without growing from nothing.
    pub fn take(&mut self) -> Self {
        let room = self.settled.capacity();
        std::mem::replace(self, Self::with_capacity(room))
    }

    /// Adds the next handled record.
    pub fn push(&mut self, settled: Settled) {
        self.since.get_or_insert_with(Instant::now);
        self.settled.push(settled);
    }

    /// When the oldest record will have waited `interval`; `None` when
    /// nothing waits.
    pub fn due_at(&self, interval: std::time::Duration) -> Option<Instant> {
        self.since.map(|since| since + interval)
    }

    /// Whether the oldest record has waited `interval` or longer.
    pub fn is_due(&self, interval: std::time::Duration) -> bool {
        self.due_at(interval)
            .is_some_and(|due| due <= Instant::now())
    }
}

/// What one record puts on the log.
struct Ready {
    replies: Vec<Prepared>,
    dead_letter: Option<(u32, OutgoingRecord)>,
    disposition: Disposition,
}

/// Publishes the replies and dead letters of `unflushed`, then commits its
/// last offset and moves `cursor` past it; nothing of it when a newer
/// holder has claimed the partition ([`BatchError::Fenced`]).
pub(super) async fn flush(
    ctx: &PartitionContext,
    (partition, fence): Held,
    unflushed: Unflushed,
    cursor: &mut u64,
    cancel: &CancellationToken,
) -> Result<(), BatchError> {
    let Some(last_offset) = unflushed.settled.last().map(|s| s.position.offset) else {
        return Ok(());
    };
    let log = ctx.processor.producer.log();
    let (appends, dispositions) = appends_of(ctx, fence, &unflushed, cancel).await?;
    let commit = OffsetCommit {
        topic: TopicInfo::clone(&ctx.commands),
        group: ctx.group.clone(),
        partition,
        offset: last_offset,
    };
    // The first attempt sends the batch built above; a retry builds it again
    // (the same records) rather than every flush paying for a copy.
    let mut built = Some(appends);
    retrying(cancel, "publishing replies and committing", || {
        let built = built.take();
        async {
            // Checked last, right before writing: a stale holder's replies
            // and commit never reach the log once the newer claim is there.
            if ctx.processor.fences.is_stale_lately(fence).await? {
                return Err(BatchError::Fenced);
            }
            let appends = match built {
                Some(appends) => appends,
                None => appends_of(ctx, fence, &unflushed, cancel).await?.0,
            };
            Ok(log.append_and_commit(appends, commit.clone()).await?)
        }
    })
    .await?;
    let stats = &ctx.stats;
    stats.commits.fetch_add(1, Ordering::Relaxed);
    stats
        .committed_records
        .fetch_add(dispositions.len() as u64, Ordering::Relaxed);
    for disposition in dispositions {
        stats.count(&ctx.processor.metrics, disposition);
    }
    *cursor = last_offset + 1;
    Ok(())
}

/// The appends carrying the replies and dead letters of `unflushed`, and
/// the disposition of each of its records.
async fn appends_of(
    ctx: &PartitionContext,
    fence: u64,
    unflushed: &Unflushed,
    cancel: &CancellationToken,
) -> Result<(Vec<Append>, Vec<Disposition>), BatchError> {
    let topology = ctx.processor.producer.topology();
    let mut replies = Vec::with_capacity(unflushed.settled.len());
    let mut dead_letters = Vec::new();
    let mut dispositions = Vec::with_capacity(unflushed.settled.len());
    for settled in &unflushed.settled {
        let ready = retrying(cancel, "preparing replies", || ready(ctx, fence, settled)).await?;
        replies.extend(ready.replies);
        dead_letters.extend(ready.dead_letter);
        dispositions.push(ready.disposition);
    }
    let mut appends = crate::producer::appends(&topology.responses, replies);
    appends.extend(dead_letter_appends(&topology.dlq, dead_letters));
    Ok((appends, dispositions))
}

/// Runs `op` until it passes, fails for good, or `cancel` fires while it
/// waits to try again.
async fn retrying<T, F, Fut>(
    cancel: &CancellationToken,
    doing: &str,
    mut op: F,
) -> Result<T, BatchError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, BatchError>>,
{
    let mut failures = 0u32;
    loop {
        match op().await {
            Ok(value) => return Ok(value),
            Err(error) if error.is_retryable() => {
                failures += 1;
                tracing::warn!(%error, "{doing} failed; trying again (nothing is committed until it passes)");
                if crate::retry::back_off(failures, cancel).await {
                    return Err(error);
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// The records `settled` puts on the log; when its answer cannot be
/// published at all, those of [`unpublishable`] instead.
async fn ready(ctx: &PartitionContext, fence: u64, settled: &Settled) -> Result<Ready, BatchError> {
    let refused = match prepare(ctx, fence, &settled.outcome).await {
        Ok(ready) => return Ok(ready),
        Err(error) if error.is_retryable() => return Err(error.into()),
        Err(refused) => refused,
    };
    tracing::error!(position = %settled.position, error = %refused, "the answer to a command cannot be published; answering with an internal error and dead-lettering the command");
    let instead = unpublishable(ctx, settled, &refused);
    match prepare(ctx, fence, &instead).await {
        Ok(ready) => Ok(ready),
        Err(error) if error.is_retryable() => Err(error.into()),
        Err(error) => {
            // Not even the small error goes out; the dead letter says why.
            tracing::error!(position = %settled.position, %error, "the error reply cannot be published either; only dead-lettering the command");
            Ok(Ready {
                replies: Vec::new(),
                dead_letter: match instead.dead_letter {
                    Some(capsule) => Some(dead_letter_ready(ctx, fence, capsule).await),
                    None => None,
                },
                disposition: Disposition::DeadLettered,
            })
        }
    }
}

/// Prepares every record of `outcome`: its replies for `agent.responses`
/// and its dead letter, made to fit the log.
async fn prepare(
    ctx: &PartitionContext,
    fence: u64,
    outcome: &Outcome,
) -> Result<Ready, ProduceError> {
    let producer = &ctx.processor.producer;
    let responses = &producer.topology().responses;
    let mut replies = Vec::with_capacity(outcome.replies.len());
    for reply in &outcome.replies {
        replies.push(
            producer
                .prepare_one(
                    responses,
                    Cow::Borrowed(&reply.envelope),
                    reply.content_type,
                )
                .await?,
        );
    }
    let dead_letter = match &outcome.dead_letter {
        Some(capsule) => Some(dead_letter_ready(ctx, fence, capsule.clone()).await),
        None => None,
    };
    Ok(Ready {
        replies,
        dead_letter,
        disposition: outcome.disposition,
    })
}

/// The `agent.dlq` record of `capsule`, cut down to fit the log, carrying
/// the holder's fence token in its [`FENCE_HEADER`](crate::fence::FENCE_HEADER).
async fn dead_letter_ready(
    ctx: &PartitionContext,
    fence: u64,
    capsule: DeadLetter,
) -> (u32, OutgoingRecord) {
    let producer = &ctx.processor.producer;
    let limit = producer.log().max_record_bytes();
    let capsule = fit_to_log(capsule, limit, ctx.processor.claim_check.as_ref()).await;
    let (partition, mut record) = dead_letter_record(&producer.topology().dlq, &capsule);
    record.headers.push(fence_header(fence));
    (partition, record)
}

/// The dead letters of a run, one batch per `agent.dlq` partition.
fn dead_letter_appends(dlq: &TopicInfo, dead_letters: Vec<(u32, OutgoingRecord)>) -> Vec<Append> {
    let mut by_partition: BTreeMap<u32, Vec<OutgoingRecord>> = BTreeMap::new();
    for (partition, record) in dead_letters {
        by_partition.entry(partition).or_default().push(record);
    }
    by_partition
        .into_iter()
        .map(|(partition, records)| Append {
            topic: dlq.clone(),
            partition,
            records,
        })
        .collect()
}

/// What a record whose answer was refused with `refused` publishes
/// instead: a small `internal` error where someone waits (ending the reply
/// stream the refused answer would have ended), and a dead letter saying
/// why (the record's own, when it already had one).
fn unpublishable(ctx: &PartitionContext, settled: &Settled, refused: &ProduceError) -> Outcome {
    let processor = &ctx.processor;
    let outcome = &settled.outcome;
    let message = shorten(
        format!(
            "agent '{}' could not publish its answer to this command ({refused}); the command was set aside on the dead-letter topic",
            processor.agent
        ),
        MAX_DETAIL_BYTES,
    );
    let open_stream = outcome.replies.iter().find_map(|reply| {
        let e = &reply.envelope;
        (e.kind == Kind::Error)
            .then_some(())
            .and(e.channel.zip(e.sequence))
    });
    let replies = outcome
        .reply_to
        .as_ref()
        .map(|to| {
            let error = ErrorBody::new(ErrorCode::Internal).with_message(message);
            let mut reply = processor.producer.error_envelope(to, &error);
            if let Some((channel, sequence)) = open_stream {
                reply.envelope = reply.envelope.with_stream_terminal(channel, sequence);
            }
            vec![reply]
        })
        .unwrap_or_default();
    let dead_letter = match &outcome.dead_letter {
        Some(capsule) => {
            let mut capsule = capsule.clone();
            let detail = match capsule.detail.take() {
                Some(detail) => {
                    format!("{detail}; its error reply could not be published: {refused}")
                }
                None => format!("its error reply could not be published: {refused}"),
            };
            capsule.detail = Some(shorten(detail, MAX_DETAIL_BYTES));
            capsule
        }
        None => dead_letter(
            settled.position,
            DeadLetterReason::Rejected,
            1,
            format!("the answer could not be published: {refused}"),
            settled.payload.to_vec(),
        ),
    };
    Outcome {
        disposition: Disposition::DeadLettered,
        replies,
        dead_letter: Some(dead_letter),
        reply_to: outcome.reply_to.clone(),
    }
}
