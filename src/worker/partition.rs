//! One partition of a pool: read in order, handle each record, and flush
//! (publish, then commit) in runs.
//!
//! A partition task polls from its group's committed offset, runs the steps
//! of docs/runtime.md §4 on each record and gathers what they leave to publish.
//! Replies of consecutive fast records go out together, but never wait for
//! a slow handler: once the oldest of them has waited the flush interval
//! while a handler runs, they are published and committed alongside it, so
//! each reply goes out about as soon as its own handler finished, in order.
//! See [`super::flush`] for how a run is published and committed.

use std::collections::BTreeSet;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use agdx_wire::AgentEnvelope;

use crate::cancel::Cancels;
use crate::fence::{FenceError, Fences, Handover, Standing};

use crate::idempotency::StoreError;
use crate::log::{DEFAULT_POLL_WAIT, LogError, LogRecord, TopicInfo};
use crate::record::{RecordError, envelope_of};
use crate::routing::partition_of;

use super::context::PartitionContext;
use super::flush::{BatchError, Settled, Unflushed, flush};
use super::process::{Disposition, Later, Outcome, ProcessError};

/// A partition and the fence token its task holds it under.
pub(super) type Held = (u32, u64);

/// A record's envelope, or why it could not be read. Boxed: it passes
/// through several futures on its way to the handler's request, and a
/// pointer moves where the envelope itself would be copied each time.
type Decoded = Result<Box<AgentEnvelope>, RecordError>;

/// Takes one partition over from its previous holder, then reads it in
/// order until cancelled, until a newer holder claims it, or until another
/// member asks for it.
pub(super) async fn partition_loop(
    ctx: Arc<PartitionContext>,
    partition: u32,
    cancel: CancellationToken,
) {
    let Some(fence) = take_over(&ctx, partition, &cancel).await else {
        return;
    };
    let handing = AbortOnDropHandle::new(tokio::spawn(keep_handing(
        ctx.fences.clone(),
        fence,
        ctx.member.clone(),
        ctx.config.handover_wait / 4,
    )));
    let mut reading = Reading::default();
    let mut failures = 0u32;
    let mut checked = Instant::now();
    loop {
        match turn(
            &ctx,
            (partition, fence),
            &mut reading,
            &mut checked,
            &cancel,
        )
        .await
        {
            Ok(Turn::Again) => failures = 0,
            Ok(Turn::Stop) => break,
            Ok(Turn::Fenced) => {
                tracing::warn!(
                    partition,
                    fence,
                    member = %ctx.member,
                    "a newer holder claimed the partition; dropping what this holder had not yet written and stopping its work here"
                );
                ctx.fenced_out(partition, fence);
                return;
            }
            Ok(Turn::HandedOver) => {
                tracing::info!(
                    partition,
                    fence,
                    member = %ctx.member,
                    "another member asked for the partition; handing it over after publishing what this holder handled"
                );
                ctx.fenced_out(partition, fence);
                break;
            }
            Err(error) => {
                failures += 1;
                if error.is_damage() {
                    tracing::error!(%error, partition, "the log's storage is damaged; retrying, but the partition stays where it is until the log is repaired");
                } else {
                    tracing::warn!(%error, partition, "retrying after a failure; nothing was committed");
                }
                if crate::retry::back_off(failures, &cancel).await {
                    break;
                }
            }
        }
    }
    drop(handing);
    release(&ctx, partition, fence).await;
}

/// While another member asks for the partition held under `fence`, says
/// every `every` that this holder is alive and finishing, so the newcomer
/// waits for its release instead of taking it for a crashed holder. Runs
/// until aborted (the partition loop's end) or the holder is fenced.
async fn keep_handing(fences: Arc<Fences>, fence: u64, member: String, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        match fences.standing(fence).await {
            Ok(Standing::Asked) => {
                if let Err(error) = fences.handing(fence, &member).await {
                    tracing::debug!(%error, fence, "could not say the partition is being handed over");
                }
            }
            Ok(Standing::Stale) => return,
            Ok(Standing::Current) => {}
            Err(error) => tracing::debug!(%error, fence, "could not read the partition claims"),
        }
    }
}

/// How long a partition task waits for its release to reach the log.
const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// How often a member waiting for a handover reads the claims.
const HANDOVER_CHECK_EVERY: Duration = Duration::from_millis(250);

/// How often a holder reads the claims between polls, to see a request for
/// its partition while it handles only unkeyed records (a keyed one reads
/// them before its handler runs).
const STANDING_CHECK_EVERY: Duration = Duration::from_secs(1);

/// Says on the log that this holder writes nothing more on `partition`, so
/// its next holder claims it at once and readers keep what it wrote.
async fn release(ctx: &PartitionContext, partition: u32, fence: u64) {
    match tokio::time::timeout(RELEASE_WAIT, ctx.fences.release(fence, &ctx.member)).await {
        Ok(Ok(())) => {
            tracing::info!(partition, fence, member = %ctx.member, "released the partition")
        }
        Ok(Err(error)) => {
            tracing::warn!(%error, partition, "could not release the partition; its next holder waits before claiming it")
        }
        Err(_) => {
            tracing::warn!(partition, wait = ?RELEASE_WAIT, "releasing the partition took too long; its next holder waits before claiming it")
        }
    }
}

/// Asks for `partition`, waits for its previous holder to release it (at
/// most [`super::WorkerConfig::handover_wait`], or the longer wait the
/// holder declared), and claims it before anything of it is read: the
/// claim's offset is the fence token. Asks again when another member's
/// claim overtook the request. `None` when cancelled first.
async fn take_over(
    ctx: &PartitionContext,
    partition: u32,
    cancel: &CancellationToken,
) -> Option<u64> {
    let commands = &ctx.commands;
    let wait = ctx.config.handover_wait;
    // Ends when cancelled or claimed: every turn after the first follows
    // another member's claim of the partition.
    loop {
        let request = retrying(cancel, partition, "asking for the partition", || {
            ctx.fences
                .request(commands, &ctx.group, partition, &ctx.member)
        })
        .await?;
        let handover = tokio::select! {
            _ = cancel.cancelled() => return None,
            handover = ctx.fences.handover(request, wait, HANDOVER_CHECK_EVERY) => handover,
        };
        let claimed = match handover {
            Handover::Released => claim(ctx, partition, request, cancel).await?,
            Handover::TimedOut => {
                tracing::warn!(
                    partition,
                    ?wait,
                    member = %ctx.member,
                    "the partition's previous holder did not hand it over (it stopped, or is cut off from the log); claiming it, so what it had in hand runs again here"
                );
                claim(ctx, partition, request, cancel).await?
            }
            Handover::Overtaken => None,
        };
        if let Some(fence) = claimed {
            tracing::info!(partition, fence, member = %ctx.member, "claimed the partition");
            return Some(fence);
        }
        tracing::info!(partition, member = %ctx.member, "another member claimed the partition after this one asked for it; asking again");
    }
}

/// Claims `partition` on the terms of `request` (see
/// [`Fences::claim_requested`]), letting an attempt under way finish even
/// when `cancel` fires: a claim whose append reached the log but was never
/// released would make the next holder wait out the whole handover for it.
/// A claim that lands after `cancel` is released at once. `None` when
/// cancelled; `Some(None)` when another member's claim overtook `request`.
async fn claim(
    ctx: &PartitionContext,
    partition: u32,
    request: u64,
    cancel: &CancellationToken,
) -> Option<Option<u64>> {
    let mut failures = 0u32;
    loop {
        match ctx
            .fences
            .claim_requested(request, &ctx.member, ctx.config.handover_wait)
            .await
        {
            Ok(Some(fence)) if cancel.is_cancelled() => {
                release(ctx, partition, fence).await;
                return None;
            }
            Ok(fence) => return Some(fence),
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, partition, "claiming the partition failed; retrying before reading it");
                if crate::retry::back_off(failures, cancel).await {
                    return None;
                }
            }
        }
    }
}

/// Runs `attempt` until it succeeds, backing off after each failure. `None`
/// when cancelled first.
async fn retrying<F, Fut>(
    cancel: &CancellationToken,
    partition: u32,
    what: &str,
    mut attempt: F,
) -> Option<u64>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<u64, FenceError>>,
{
    let mut failures = 0u32;
    loop {
        let result = tokio::select! {
            _ = cancel.cancelled() => return None,
            result = attempt() => result,
        };
        match result {
            Ok(value) => return Some(value),
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, partition, "{what} failed; retrying before reading it");
                if crate::retry::back_off(failures, cancel).await {
                    return None;
                }
            }
        }
    }
}

/// Whether a partition loop goes on.
enum Turn {
    Again,
    Stop,
    /// A newer holder claimed the partition.
    Fenced,
    /// Another member asked for the partition; what was handled is
    /// published and committed.
    HandedOver,
}

/// Why a turn of a partition loop failed (it is tried again).
#[derive(Debug, thiserror::Error)]
enum TurnError {
    #[error("reading the committed offset failed: {0}")]
    Offset(LogError),
    #[error("polling commands failed: {0}")]
    Poll(LogError),
    #[error("catching up with processed keys on the log failed: {0}")]
    CatchUp(StoreError),
    #[error("publishing replies or committing failed (the records will be handled again): {0}")]
    Batch(BatchError),
}

impl TurnError {
    /// Whether the log said its storage is damaged.
    fn is_damage(&self) -> bool {
        matches!(self, TurnError::Offset(e) | TurnError::Poll(e) if matches!(e, LogError::Damaged { .. }))
    }
}

/// Where a partition task reads next.
#[derive(Default)]
struct Reading {
    /// The next offset to poll, known once the committed offset was read.
    from: Option<u64>,
    /// The last record of the previous poll, which was full: not handled
    /// yet, it goes first in the next batch, where the records after it
    /// tell whether it was cancelled. Polling on after it keeps reads in
    /// sequence (a Kafka reader goes on with what it fetched).
    carried: Option<LogRecord>,
    /// The envelopes of the batch in hand; kept between batches so that
    /// each decodes into memory already in use, not into fresh pages.
    decoded: Vec<Decoded>,
}

/// One poll of the partition and the handling of what it returned.
async fn turn(
    ctx: &PartitionContext,
    (partition, fence): Held,
    reading: &mut Reading,
    checked: &mut Instant,
    cancel: &CancellationToken,
) -> Result<Turn, TurnError> {
    let processor = &ctx.processor;
    let producer = &processor.producer;
    let log = producer.log();
    let commands = &ctx.commands;
    if let Some(pause) = ctx.pause.as_ref().filter(|_| ctx.paused()) {
        let cancelled = pause.wait_while_quarantined(cancel).await;
        return Ok(if cancelled { Turn::Stop } else { Turn::Again });
    }
    if checked.elapsed() >= STANDING_CHECK_EVERY {
        // A failed read is no reason to stop: polling tells soon enough
        // whether the log is there.
        match ctx.fences.standing(fence).await {
            Ok(Standing::Current) => *checked = Instant::now(),
            Ok(Standing::Asked) => return Ok(Turn::HandedOver),
            Ok(Standing::Stale) => return Ok(Turn::Fenced),
            Err(error) => tracing::debug!(%error, partition, "could not read the partition claims"),
        }
    }
    let next = match reading.from {
        Some(next) => next,
        None => {
            let committed = log
                .committed_offset(commands, &ctx.group, partition)
                .await
                .map_err(TurnError::Offset)?;
            *reading.from.insert(committed.map_or(0, |c| c + 1))
        }
    };
    // A carried record is handled at once should nothing follow it yet.
    let wait = if reading.carried.is_some() {
        Duration::ZERO
    } else {
        DEFAULT_POLL_WAIT
    };
    let polled = tokio::select! {
        _ = cancel.cancelled() => return Ok(Turn::Stop),
        polled = log.poll(commands, partition, next, ctx.config.poll_batch, wait) => polled,
    };
    // Nothing before the carried record is uncommitted.
    let mut cursor = reading
        .carried
        .as_ref()
        .map_or(next, |carried| carried.position.offset);
    let mut carry = None;
    let outcome = match polled {
        Ok(polled) if polled.is_empty() && reading.carried.is_none() => return Ok(Turn::Again),
        Ok(polled) => {
            // The last record of a full poll is carried to the next one:
            // there it has records after it to look for its cancel among,
            // instead of a read of its own.
            let full = polled.len() >= ctx.config.poll_batch as usize;
            let mut records = match reading.carried.take() {
                None => polled,
                Some(carried) => {
                    let mut records = Vec::with_capacity(polled.len() + 1);
                    records.push(carried);
                    records.extend(polled);
                    records
                }
            };
            let handled = records.len() - usize::from(full && records.len() > 1);
            let Ok(_permit) = ctx.permits.clone().acquire_owned().await else {
                return Ok(Turn::Stop);
            };
            let envelopes = decode(&records, &mut reading.decoded);
            if let Some(store) = &processor.store {
                let now = processor.clock.now_micros();
                for replies in keyed_reply_partitions(envelopes, &producer.topology().responses) {
                    if let Err(error) = store.catch_up(replies, &processor.agent, now).await {
                        // Read again from the first record not handled.
                        reading.from = Some(cursor);
                        return Err(TurnError::CatchUp(error));
                    }
                }
            }
            let outcome = handle_batch(
                ctx,
                (partition, fence),
                (&records, envelopes, handled),
                &mut cursor,
                cancel,
            )
            .await;
            if handled < records.len() {
                carry = records.pop();
            }
            outcome
        }
        Err(LogError::Corrupt(_)) if reading.carried.is_some() => {
            // Damage right after a carried record: the record first, alone
            // (committed before anything past it); the next poll, from
            // after it, meets the damage again.
            let carried: Vec<LogRecord> = reading.carried.take().into_iter().collect();
            let envelopes = decode(&carried, &mut reading.decoded);
            handle_batch(
                ctx,
                (partition, fence),
                (&carried, envelopes, 1),
                &mut cursor,
                cancel,
            )
            .await
        }
        Err(LogError::Corrupt(damage)) => {
            // Unreadable records never surface; set them aside as one dead
            // letter (with the payload when only a record's headers were
            // damaged) and step over them.
            tracing::error!(%damage, "stored commands cannot be read; dead-lettering them and going on past them");
            let detail = if damage.count() == 1 {
                damage.reason.clone()
            } else {
                damage.to_string()
            };
            let payload = damage.payload.clone().unwrap_or_default();
            let capsule = crate::dlq::dead_letter(
                damage.position,
                agdx_wire::DeadLetterReason::DecodeFailed,
                1,
                detail,
                payload.to_vec(),
            );
            let mut unflushed = Unflushed::default();
            unflushed.push(Settled {
                // The commit moves past the last of them.
                position: damage.last_position(),
                payload,
                outcome: Outcome {
                    disposition: Disposition::DeadLettered,
                    replies: Vec::new(),
                    dead_letter: Some(capsule),
                    reply_to: None,
                },
            });
            flush(ctx, (partition, fence), unflushed, &mut cursor, cancel).await
        }
        Err(error) => return Err(TurnError::Poll(error)),
    };
    // Whatever was committed is behind us, even when a later flush failed;
    // the poll goes on after a carried record only when all before it were.
    reading.from = Some(match carry {
        Some(record) if outcome.is_ok() && cursor == record.position.offset => {
            let after = cursor + 1;
            reading.carried = Some(record);
            after
        }
        _ => cursor,
    });
    match outcome {
        Ok(()) if cancel.is_cancelled() => Ok(Turn::Stop),
        Ok(()) => Ok(Turn::Again),
        Err(BatchError::Fenced | BatchError::Process(ProcessError::Fenced)) => Ok(Turn::Fenced),
        Err(BatchError::Process(ProcessError::HandingOver)) => Ok(Turn::HandedOver),
        Err(BatchError::Log(LogError::NotOwner { .. })) => {
            tracing::info!(
                partition,
                "the partition moved to another member before the commit; its new owner handles the rest"
            );
            Ok(Turn::Stop)
        }
        Err(error) => Err(TurnError::Batch(error)),
    }
}

/// The envelope of each of `records`, decoded and validated once for all
/// that a batch needs it for (its keys, its cancels, its handling), in
/// `into`, emptied first.
fn decode<'a>(records: &[LogRecord], into: &'a mut Vec<Decoded>) -> &'a mut Vec<Decoded> {
    into.clear();
    into.extend(
        records
            .iter()
            .map(|record| envelope_of(record).map(Box::new)),
    );
    into
}

/// The partitions of `responses` where the replies to the keyed records
/// among `envelopes` go (their conversations' partitions): those a catch-up
/// must read before the records are handled. Undecodable records have no
/// key; they are dead-lettered without looking at keys.
fn keyed_reply_partitions(envelopes: &[Decoded], responses: &TopicInfo) -> BTreeSet<u32> {
    envelopes
        .iter()
        .filter_map(|envelope| envelope.as_ref().ok())
        .filter(|envelope| envelope.idempotency_key.is_some())
        .map(|envelope| partition_of(responses, envelope.conversation))
        .collect()
}

/// Handles the first `handled` of `records` (whose `envelopes` these are)
/// in order (those after them only tell of cancels), publishing and
/// committing in flushes, until `cancel` says to stop.
async fn handle_batch(
    ctx: &PartitionContext,
    held: Held,
    (records, envelopes, handled): (&[LogRecord], &mut Vec<Decoded>, usize),
    cursor: &mut u64,
    cancel: &CancellationToken,
) -> Result<(), BatchError> {
    let mut unflushed = Unflushed::with_capacity(handled);
    let cancels = Cancels::of(records.iter().zip(envelopes.iter()).filter_map(
        |(record, envelope)| Some((record.position.offset, envelope.as_deref().ok()?)),
    ));
    let batch = records
        .iter()
        .zip(envelopes.drain(..))
        .enumerate()
        .take(handled);
    for (at, (record, envelope)) in batch {
        // Stopping (or losing the partition, or a quarantine) ends the batch
        // after the record in hand; the rest stays uncommitted for whoever
        // reads next.
        if cancel.is_cancelled() || ctx.paused() {
            break;
        }
        let later = Later {
            records: &records[at + 1..],
            cancels: &cancels,
        };
        let processed = process_flushing_meanwhile(
            ctx,
            held,
            (record, envelope, later),
            &mut unflushed,
            cursor,
            cancel,
        );
        let outcome = match processed.await? {
            Ok(outcome) => outcome,
            Err(error) => {
                // Commit what was handled before this record, so it does not
                // run again when this one is retried.
                flush(ctx, held, unflushed, cursor, cancel).await?;
                return Err(error.into());
            }
        };
        unflushed.push(Settled {
            position: record.position,
            payload: record.payload.clone(),
            outcome,
        });
        if unflushed.is_due(ctx.config.flush_interval) {
            flush(ctx, held, unflushed.take(), cursor, cancel).await?;
        }
    }
    flush(ctx, held, unflushed, cursor, cancel).await
}

/// Runs the steps for `record`. When replies of earlier records are waiting
/// and the handler is still busy at their flush deadline, they are
/// published (and committed) while it goes on: a fast reply is not held
/// behind a slow handler. The outer error is that flush's.
async fn process_flushing_meanwhile(
    ctx: &PartitionContext,
    held: Held,
    (record, envelope, later): (&LogRecord, Decoded, Later<'_>),
    unflushed: &mut Unflushed,
    cursor: &mut u64,
    cancel: &CancellationToken,
) -> Result<Result<Outcome, ProcessError>, BatchError> {
    // Pinned where it is made: this future, kilobytes large and made for
    // every record, is not moved into a pinned copy; the flush beside it,
    // rarely needed, is boxed so that it does not enlarge this one.
    let processor = &ctx.processor;
    let mut process = pin!(processor.process(record, envelope, (&ctx.commands, later), held.1));
    let Some(due) = unflushed.due_at(ctx.config.flush_interval) else {
        return Ok(process.await);
    };
    tokio::select! {
        // The handler first: one done at once leaves the timer unregistered.
        biased;
        outcome = &mut process => return Ok(outcome),
        _ = tokio::time::sleep_until(due) => {}
    }
    let waiting = unflushed.take();
    Box::pin(flush_while_processing(
        ctx,
        held,
        (record, process),
        waiting,
        cursor,
        cancel,
    ))
    .await
}

/// Publishes (and commits) `waiting` while `process`, the handling of
/// `record`, goes on; the outcome of the handling. The outer error is the
/// flush's.
async fn flush_while_processing(
    ctx: &PartitionContext,
    held: Held,
    (record, process): (
        &LogRecord,
        Pin<&mut impl Future<Output = Result<Outcome, ProcessError>>>,
    ),
    waiting: Unflushed,
    cursor: &mut u64,
    cancel: &CancellationToken,
) -> Result<Result<Outcome, ProcessError>, BatchError> {
    let (flushed, outcome) = tokio::join!(flush(ctx, held, waiting, cursor, cancel), process);
    if let Err(error) = flushed {
        // The partition moved while this record's handler ran: its effect
        // happened, so its replies go out too (the commit is refused again)
        // and the next holder finds them instead of running it again.
        if let (BatchError::Log(LogError::NotOwner { .. }), Ok(outcome)) = (&error, outcome) {
            let mut handled = Unflushed::default();
            handled.push(Settled {
                position: record.position,
                payload: record.payload.clone(),
                outcome,
            });
            if let Err(again) = flush(ctx, held, handled, cursor, cancel).await
                && !matches!(again, BatchError::Log(LogError::NotOwner { .. }))
            {
                tracing::warn!(error = %again, position = %record.position, "could not publish the replies of a record handled while its partition moved; its next holder runs it again");
            }
        }
        return Err(error);
    }
    Ok(outcome)
}
