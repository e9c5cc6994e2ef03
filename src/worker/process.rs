//! The ten steps of docs/runtime.md §4 for one record: the admission
//! ([`super::admission`], decided from the record and the time alone), then
//! what needs I/O (the processed-key store, a claim-checked body, the
//! handler call). What to publish comes back as an [`Outcome`]; the pool
//! publishes it and commits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agdx_wire::{
    AgentEnvelope, AgentId, DeadLetter, DeadLetterReason, ErrorBody, ErrorCode, Kind, TaskState,
};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::cancel::{Cancels, LOOKAHEAD_AFTER, cancel_requested, cancelled_next};
use crate::claim_check::{ClaimCheck, ClaimCheckError, resolve_body};
use crate::clock::SharedClock;
use crate::dlq::{MAX_DETAIL_BYTES, dead_letter, shorten};
use crate::fence::{FenceError, Fences, Standing, set_fence};
use crate::idempotency::{KeyScope, ProcessedKeys, StoreError};
use crate::ids::{new_channel_id, new_record_id};
use crate::log::{LogRecord, TopicInfo};
use crate::metrics::PoolMetrics;
use crate::producer::{Outgoing, Producer, ReplyTo};
use crate::record::{RecordError, content_type_of};
use crate::retry::RetryPolicy;
use crate::trust::{Grants, Verifier};

use super::admission::{Admission, Decision, Dispatch, Handlers};
use super::handler::{HandlerReply, Request};
use super::invoke::run_with_retries;

/// The task states a command that asked for them gets as its handler starts.
const STARTED: [TaskState; 2] = [TaskState::Submitted, TaskState::Working];

/// How long a handler runs before the task states of its start go out on
/// their own; a quicker one's go out with its answer.
const STATES_AFTER: Duration = Duration::from_millis(50);

/// What became of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Disposition {
    /// The handler ran and succeeded.
    Handled,
    /// A processed idempotency key: the stored reply was published again.
    Deduplicated,
    /// Not for this agent, or nothing to do.
    Skipped,
    /// No handler for the operation: `unsupported` error.
    Unsupported,
    /// Set aside on the dead-letter topic.
    DeadLettered,
    /// Cancelled by its sender before or while its handler ran.
    Cancelled,
}

impl Disposition {
    /// Every disposition.
    pub const ALL: [Disposition; 6] = [
        Disposition::Handled,
        Disposition::Deduplicated,
        Disposition::Skipped,
        Disposition::Unsupported,
        Disposition::DeadLettered,
        Disposition::Cancelled,
    ];

    /// Its `outcome` label on [`crate::metrics::WORKER_RECORDS`].
    pub fn label(self) -> &'static str {
        match self {
            Disposition::Handled => "handled",
            Disposition::Deduplicated => "deduplicated",
            Disposition::Skipped => "skipped",
            Disposition::Unsupported => "unsupported",
            Disposition::DeadLettered => "dead_lettered",
            Disposition::Cancelled => "cancelled",
        }
    }
}

/// What to publish for one record.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub disposition: Disposition,
    pub replies: Vec<Outgoing>,
    pub dead_letter: Option<DeadLetter>,
    /// Where an `error` goes should the replies turn out unpublishable;
    /// `None` when nobody waits for an answer.
    pub reply_to: Option<ReplyTo>,
}

impl Outcome {
    fn skipped() -> Self {
        Self {
            disposition: Disposition::Skipped,
            replies: Vec::new(),
            dead_letter: None,
            reply_to: None,
        }
    }
}

/// Why a record could not be handled now; it is left uncommitted and read
/// again.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProcessError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("fetching the claim-checked body failed: {0}")]
    Blob(ClaimCheckError),
    #[error("checking the partition's fence failed: {0}")]
    Fence(#[from] FenceError),
    /// A newer holder claimed the partition: nothing of this record may
    /// take effect here any more.
    #[error("a newer holder claimed the partition")]
    Fenced,
    /// Another member asked for the partition: the record is left for it.
    #[error("another member asked for the partition")]
    HandingOver,
}

impl ProcessError {
    pub fn is_retryable(&self) -> bool {
        match self {
            ProcessError::Store(e) => e.is_retryable(),
            ProcessError::Blob(e) => e.is_retryable(),
            ProcessError::Fence(e) => e.is_retryable(),
            ProcessError::Fenced | ProcessError::HandingOver => false,
        }
    }
}

/// Everything the steps need, shared by the partitions of a pool.
pub(crate) struct Processor {
    pub agent: AgentId,
    pub producer: Producer,
    pub handlers: Handlers,
    pub store: Option<ProcessedKeys>,
    pub clock: SharedClock,
    pub retry: RetryPolicy,
    pub understood_features: u64,
    pub claim_check: Option<ClaimCheck>,
    pub progress_interval: std::time::Duration,
    pub handler_limit: Option<std::time::Duration>,
    /// How long a cancelled handler has to stop by itself.
    pub cancel_grace: std::time::Duration,
    /// The partition claims, checked before a keyed handler runs and while
    /// any handler runs.
    pub fences: Arc<Fences>,
    /// How often a running handler's fence is checked.
    pub fence_check_every: std::time::Duration,
    /// How long a fence check before a keyed handler may take and still
    /// vouch for the holder (half the handover wait).
    pub fence_fresh_for: std::time::Duration,
    /// Step 4: the verifier and the grants, when configured.
    pub gate: Option<(Verifier, Option<Grants>)>,
    /// The pool's per-record metrics.
    pub metrics: PoolMetrics,
}

/// The records polled after the one in hand, and the cancels among the
/// whole batch (read once per batch).
#[derive(Clone, Copy)]
pub(super) struct Later<'a> {
    /// The rest of the batch.
    pub records: &'a [LogRecord],
    /// Its cancels.
    pub cancels: &'a Cancels,
}

impl Processor {
    /// Runs the steps for `record` of commands topic `topic`, whose
    /// envelope `decoded` is (see [`crate::record::envelope_of`]), held
    /// under fence token `fence`. Only a
    /// failure that may pass (the processed-key store, fetching a blob,
    /// checking the fence) is an error, and the record is then read again;
    /// [`ProcessError::Fenced`] says a newer holder has the partition.
    pub async fn process(
        &self,
        record: &LogRecord,
        decoded: Result<Box<AgentEnvelope>, RecordError>,
        (commands, later): (&Arc<TopicInfo>, Later<'_>),
        fence: u64,
    ) -> Result<Outcome, ProcessError> {
        // 1. decode and validate (done by the caller, once for its batch)
        let envelope = match decoded {
            Ok(envelope) => envelope,
            Err(error) => {
                tracing::warn!(position = %record.position, %error, "dead-lettering an undecodable record");
                return Ok(self.dead(
                    record,
                    DeadLetterReason::DecodeFailed,
                    1,
                    error.to_string(),
                    None,
                ));
            }
        };
        let span = tracing::info_span!(
            "handle",
            conversation = %envelope.conversation,
            correlation = envelope.correlation.map(tracing::field::display),
            agent = %self.agent,
            topic = %commands.topic,
            operation = envelope.operation.as_deref().unwrap_or(""),
            position = %record.position,
        );
        self.steps(record, (commands, later), envelope, fence)
            .instrument(span)
            .await
    }

    async fn steps(
        &self,
        record: &LogRecord,
        (commands, later): (&Arc<TopicInfo>, Later<'_>),
        envelope: Box<AgentEnvelope>,
        fence: u64,
    ) -> Result<Outcome, ProcessError> {
        let reply_to = match envelope.kind {
            Kind::Command => ReplyTo::for_command(&envelope, Some(record.position))
                .map(|to| to.with_fence(fence)),
            _ => None,
        };
        let registry = self.gate.as_ref().map(|(verifier, _)| verifier.registry());
        let admission = Admission {
            agent: &self.agent,
            understood_features: self.understood_features,
            gate: registry
                .as_deref()
                .zip(self.gate.as_ref().map(|(_, grants)| grants.as_ref())),
            handlers: &self.handlers,
        };
        // One reading of the clock serves the admission and, for a command
        // without a key, the cancel lookahead below.
        let now = self.clock.now_micros();
        let dispatch = match admission.decide(&envelope, record, now) {
            Decision::Skip => return Ok(Outcome::skipped()),
            Decision::Refuse(refused) => {
                if let Some(check) = refused.gate_check {
                    tracing::warn!(check, detail = %refused.detail, "refusing a command at the signature gate");
                }
                return Ok(self.dead(
                    record,
                    refused.reason,
                    1,
                    refused.detail,
                    reply_to.map(|to| ErrorReply::refused(to, refused.error)),
                ));
            }
            Decision::Admit(dispatch) => dispatch,
        };
        // 6. idempotency key already processed
        let scope = envelope.idempotency_key.as_ref().map(|key| KeyScope {
            agent: self.agent.clone(),
            source: envelope.source.clone(),
            key: key.clone(),
        });
        // The claim is held until the key's outcome is recorded (the end of
        // this function): a second arrival of the key in another partition
        // waits for it, then finds the stored replies.
        let _claim = match (&scope, &self.store) {
            (Some(scope), Some(store)) => Some(store.claim(scope).await),
            _ => None,
        };
        match (&scope, &self.store) {
            (Some(scope), Some(store)) => {
                if let Some(replies) = store.get(scope, self.clock.now_micros()).await? {
                    tracing::debug!(key = %scope.key, "idempotency key already processed; publishing the stored reply again");
                    return Ok(Outcome {
                        disposition: Disposition::Deduplicated,
                        replies: reply_to
                            .as_ref()
                            .map(|to| readdress(replies, to))
                            .unwrap_or_default(),
                        dead_letter: None,
                        reply_to,
                    });
                }
            }
            (Some(scope), None) => {
                tracing::warn!(key = %scope.key, "a keyed message arrived but this worker keeps no processed keys (no state directory); its effect may repeat");
            }
            (None, _) => {}
        }
        // A command cancelled before it started is not run. The last record
        // of a batch that waited on the log a while may have its cancel
        // right behind it; a fresh one (the usual case of a pool keeping
        // up) costs no read.
        // (A keyed command may have waited for its key's claim since.)
        let now = if scope.is_some() {
            self.clock.now_micros()
        } else {
            now
        };
        let waited = Duration::from_micros(now.saturating_sub(record.timestamp_micros));
        let cancelled_early = match &reply_to {
            Some(to) if later.records.is_empty() && waited >= LOOKAHEAD_AFTER => {
                cancelled_next(
                    self.producer.log(),
                    commands,
                    record.position.partition,
                    record.position.offset + 1,
                    (to.correlation, &to.target),
                )
                .await
            }
            Some(to) => {
                later
                    .cancels
                    .cancel_after(record.position.offset, to.correlation, &to.target)
            }
            None => false,
        };
        if let Some(to) = reply_to.as_ref().filter(|_| cancelled_early) {
            tracing::info!("the command was cancelled before it started; not running it");
            // Boxed here and below: rare paths, whose futures inline would
            // enlarge this one, which is made and moved for every record.
            return Box::pin(self.cancelled(record, scope, to.clone(), &[])).await;
        }
        // 7. dispatch by operation (decided with the admission)
        let handler = match dispatch {
            Dispatch::Handler(handler) => handler,
            Dispatch::Unsupported(message) => {
                let Some(to) = reply_to else {
                    return Ok(Outcome::skipped());
                };
                let error = ErrorBody::new(ErrorCode::Unsupported).with_message(message);
                return Ok(Outcome {
                    disposition: Disposition::Unsupported,
                    replies: vec![self.producer.error_envelope(&to, &error)],
                    dead_letter: None,
                    reply_to: Some(to),
                });
            }
        };
        let content_type = content_type_of(record);
        let resolved = match resolve_body(self.claim_check.as_ref(), content_type, &envelope).await
        {
            Ok(resolved) => resolved,
            Err(error) if error.is_retryable() => return Err(ProcessError::Blob(error)),
            Err(error) => {
                let message = format!("the claim-checked body was not accepted: {error}");
                let reply = ErrorBody::new(ErrorCode::InvalidRequest).with_message(message.clone());
                return Ok(self.dead(
                    record,
                    DeadLetterReason::Rejected,
                    1,
                    message,
                    reply_to.map(|to| ErrorReply::refused(to, reply)),
                ));
            }
        };
        // A keyed effect runs only while no newer holder has the partition
        // nor asked for it: what a holder handed over runs once, there.
        // Checked last before the handler, so that nothing slow (a blob
        // fetch) lies between the check and the effect.
        if scope.is_some() {
            match self
                .fences
                .standing_within(fence, self.fence_fresh_for)
                .await
                .map_err(FenceError::Log)?
            {
                Standing::Current => {}
                Standing::Asked => return Err(ProcessError::HandingOver),
                Standing::Stale => return Err(ProcessError::Fenced),
            }
        }
        // 8. run the handler, retrying retryable failures
        let operation_label = self.handlers.metric_label(envelope.operation.as_deref());
        let recorder = Arc::new(Mutex::new(Vec::new()));
        let cancel = CancellationToken::new();
        let (content_type, claim_checked) = (resolved.content_type, resolved.claim_checked);
        let request = |envelope, body| Request {
            envelope,
            position: record.position,
            timestamp_micros: record.timestamp_micros,
            content_type,
            body,
            claim_checked,
            attempt: 1,
            producer: self.producer.clone(),
            reply_to: reply_to.clone(),
            fence: Some(fence),
            recorder: recorder.clone(),
            cancel: cancel.clone(),
            commands: Some(commands.clone()),
        };
        // A retry's request: the record decoded again (as it was once), with
        // a claim-checked body kept from the first fetch.
        let kept_body = claim_checked.then(|| resolved.body.clone());
        let again = || {
            let envelope = Box::new(crate::record::envelope_of(record).ok()?);
            let body = kept_body.clone().unwrap_or_else(|| envelope.body.clone());
            Some(request(envelope, body))
        };
        let first = request(envelope, resolved.body);
        let heartbeat = super::heartbeat::Heartbeat {
            producer: &self.producer,
            to: reply_to.as_ref(),
            every: self.progress_interval,
            limit: self.handler_limit,
        };
        let mut states_pending = reply_to.as_ref().is_some_and(|to| to.task_states);
        let result = {
            // A cancel of the command, read on past the batch it came in.
            let read_on_from = later.records.last().unwrap_or(record).position.offset + 1;
            let mut cancelled = std::pin::pin!(async {
                match &reply_to {
                    Some(to) => {
                        cancel_requested(
                            self.producer.log(),
                            commands,
                            record.position.partition,
                            read_on_from,
                            (to.correlation, &to.target),
                        )
                        .await;
                        to.clone()
                    }
                    None => std::future::pending().await,
                }
            });
            // Pinned where they are made rather than moved into pinned
            // copies: the handler's run is kilobytes, made for every record.
            let mut run = std::pin::pin!(run_with_retries(
                handler.as_ref(),
                (first, again),
                || !crate::log::lock(&recorder).is_empty(),
                &self.retry,
                &heartbeat,
                (&self.metrics, operation_label),
            ));
            let mut stale = std::pin::pin!(self.fences.stale_after(fence, self.fence_check_every));
            // Task states go out once the handler has run a moment; a quick
            // one's go out with its answer, in the same append. The timer is
            // made at its first poll: only a handler not done at once (and
            // asked for states) needs one.
            let mut states_due = std::pin::pin!(async { tokio::time::sleep(STATES_AFTER).await });
            // A holder fenced while its handler runs stops it (an `--exec`
            // command's processes are killed): its outcome could not be
            // published anyway, and the new holder runs the command.
            loop {
                tokio::select! {
                    // The handler first: one done at once leaves the timers
                    // below unregistered, and the fence and cancel unread.
                    biased;
                    result = &mut run => break result,
                    () = &mut states_due, if states_pending => {
                        states_pending = false;
                        if let Some(to) = &reply_to {
                            Box::pin(self.publish_states(to, &STARTED)).await;
                        }
                    }
                    () = &mut stale => {
                        tracing::warn!(fence, "a newer holder claimed the partition while the handler ran; stopping the handler");
                        return Err(ProcessError::Fenced);
                    }
                    to = &mut cancelled => {
                        // The handler is told, and given the grace to end what
                        // it started (a stream, a child process) before it is
                        // stopped; either way the answer is `cancelled`.
                        tracing::info!("the command was cancelled while its handler ran; telling the handler to stop");
                        cancel.cancel();
                        if tokio::time::timeout(self.cancel_grace, &mut run).await.is_err() {
                            tracing::info!(grace = ?self.cancel_grace, "the cancelled handler did not stop within its grace; stopping it");
                        }
                        let streamed = crate::log::lock(&recorder).clone();
                        return Box::pin(self.cancelled(record, scope, to, &streamed)).await;
                    }
                }
            }
        };
        let (result, attempts) = result;
        let streamed = crate::log::lock(&recorder).clone();
        // Made before the outcome takes the reply context (not copied for
        // every record to serve the few that ask for states).
        let started: Option<Vec<Outgoing>> =
            reply_to.as_ref().filter(|_| states_pending).map(|to| {
                STARTED
                    .iter()
                    .map(|s| self.producer.status_task_envelope(to, *s))
                    .collect()
            });
        let mut outcome = self
            .outcome_of(
                result,
                record,
                attempts,
                &streamed,
                scope,
                reply_to,
                operation_label,
            )
            .await?;
        if let Some(started) = started {
            outcome.replies.splice(0..0, started);
        }
        Ok(outcome)
    }

    /// What to publish for `record` once its handler returned `result`.
    #[allow(
        clippy::too_many_arguments,
        reason = "the parts of one record's handling"
    )]
    async fn outcome_of(
        &self,
        result: Result<HandlerReply, super::handler::HandlerError>,
        record: &LogRecord,
        attempts: u32,
        streamed: &[Outgoing],
        scope: Option<KeyScope>,
        reply_to: Option<ReplyTo>,
        operation_label: &str,
    ) -> Result<Outcome, ProcessError> {
        match result {
            Err(error) => {
                let reason = if error.retryable {
                    DeadLetterReason::RetryExhausted
                } else {
                    DeadLetterReason::Rejected
                };
                let open_stream = open_stream_end(streamed);
                let detail = format!(
                    "handler failed after {} attempt(s): {}",
                    attempts, error.message
                );
                // The message may be a whole transcript (an `--exec`
                // handler's stderr); the reply carries a note of it.
                let mut body = error.to_body();
                body.message = body.message.map(|m| shorten(m, MAX_DETAIL_BYTES));
                Ok(self.dead(
                    record,
                    reason,
                    attempts,
                    detail,
                    reply_to.map(|to| ErrorReply {
                        open_stream,
                        ..ErrorReply::new(to, body)
                    }),
                ))
            }
            Ok(reply) => {
                // 9. the reply (published by the pool, which then commits: step 10)
                // At most the response and a `completed` status.
                let mut replies = Vec::with_capacity(2);
                match (reply, &reply_to) {
                    (
                        HandlerReply::Body {
                            body,
                            content_type,
                            fields,
                        },
                        Some(to),
                    ) => {
                        let response =
                            self.producer
                                .response_envelope_with(to, body, content_type, fields);
                        // An invalid reply would be refused at publish time, again
                        // and again; answer with an error instead.
                        if let Err(invalid) = response.envelope.validate() {
                            let message =
                                format!("the handler's reply is not a valid response: {invalid}");
                            let error =
                                ErrorBody::new(ErrorCode::Internal).with_message(message.clone());
                            return Ok(self.dead(
                                record,
                                DeadLetterReason::Rejected,
                                attempts,
                                message,
                                Some(ErrorReply::new(to.clone(), error)),
                            ));
                        }
                        replies.push(response);
                    }
                    (HandlerReply::Streamed | HandlerReply::Nothing, Some(_))
                        if streamed.is_empty() =>
                    {
                        tracing::warn!(
                            "the handler published no reply to a command; its sender waits until its timeout"
                        );
                    }
                    _ => {}
                }
                if let Some(to) = reply_to.as_ref().filter(|to| to.task_states) {
                    replies.insert(
                        0,
                        self.producer.status_task_envelope(to, TaskState::Completed),
                    );
                }
                // The effect happened: record the key before anything else, so
                // a crash from here on re-publishes instead of re-running. A
                // reply stream is stored here but cannot be rebuilt from the
                // log by another process (chunks carry no key); only
                // `response` replies can.
                self.remember(scope, streamed, &replies, record).await?;
                for reply in streamed.iter().chain(&replies) {
                    crate::metrics::reply_usage(
                        self.agent.as_str(),
                        operation_label,
                        &reply.envelope,
                    );
                }
                Ok(Outcome {
                    disposition: Disposition::Handled,
                    replies,
                    dead_letter: None,
                    reply_to,
                })
            }
        }
    }

    /// The answer to a cancelled command: a `status` `task` `canceled`,
    /// then an `error` `cancelled` (ending a stream the handler left
    /// open), stored for its idempotency key like any outcome.
    async fn cancelled(
        &self,
        record: &LogRecord,
        scope: Option<KeyScope>,
        to: ReplyTo,
        streamed: &[Outgoing],
    ) -> Result<Outcome, ProcessError> {
        let error = ErrorBody::new(ErrorCode::Cancelled)
            .with_message("the command was cancelled by its sender");
        let mut answer = self.producer.error_envelope(&to, &error);
        if let Some((channel, sequence)) = open_stream_end(streamed) {
            answer.envelope = answer.envelope.with_stream_terminal(channel, sequence);
        }
        let replies = vec![
            self.producer.status_task_envelope(&to, TaskState::Canceled),
            answer,
        ];
        self.remember(scope, streamed, &replies, record).await?;
        Ok(Outcome {
            disposition: Disposition::Cancelled,
            replies,
            dead_letter: None,
            reply_to: Some(to),
        })
    }

    /// Publishes `states` of the task answering `to`, in one append; a
    /// failure is logged (task states are advice; the answer still goes).
    async fn publish_states(&self, to: &ReplyTo, states: &[TaskState]) {
        let statuses = states
            .iter()
            .map(|state| self.producer.status_task_envelope(to, *state))
            .collect();
        let responses = &self.producer.topology().responses;
        if let Err(error) = self.producer.publish(responses, statuses).await {
            tracing::warn!(%error, "could not publish the task's states; the command goes on");
        }
    }

    /// Records the outcome of `record`'s idempotency key, when it has one
    /// and the pool keeps processed keys: the chunks streamed, then the
    /// replies, published again should the key arrive again.
    async fn remember(
        &self,
        scope: Option<KeyScope>,
        streamed: &[Outgoing],
        replies: &[Outgoing],
        record: &LogRecord,
    ) -> Result<(), StoreError> {
        let (Some(scope), Some(store)) = (scope, &self.store) else {
            return Ok(());
        };
        let stored = streamed.iter().chain(replies).cloned().collect();
        store
            .put(scope, stored, record, self.clock.now_micros())
            .await
    }

    /// A dead letter for `record`, with an `error` reply when someone waits
    /// (ending an open stream when the handler had started one).
    fn dead(
        &self,
        record: &LogRecord,
        reason: DeadLetterReason,
        attempts: u32,
        detail: String,
        reply: Option<ErrorReply>,
    ) -> Outcome {
        let reply_to = reply.as_ref().map(|r| r.to.clone());
        let replies = reply
            .map(
                |ErrorReply {
                     to,
                     error,
                     open_stream,
                     state,
                 }| {
                    let mut outgoing = self.producer.error_envelope(&to, &error);
                    if let Some((channel, sequence)) = open_stream {
                        outgoing.envelope =
                            outgoing.envelope.with_stream_terminal(channel, sequence);
                    }
                    let state = to
                        .task_states
                        .then(|| self.producer.status_task_envelope(&to, state));
                    state.into_iter().chain([outgoing]).collect()
                },
            )
            .unwrap_or_default();
        Outcome {
            disposition: Disposition::DeadLettered,
            replies,
            dead_letter: Some(dead_letter(
                record.position,
                reason,
                attempts,
                detail,
                record.payload.to_vec(),
            )),
            reply_to,
        }
    }
}

/// The `error` answering a command that is dead-lettered.
struct ErrorReply {
    to: ReplyTo,
    error: ErrorBody,
    /// The channel and next sequence of a stream the handler left open.
    open_stream: Option<(agdx_wire::ChannelId, u64)>,
    /// The task state reported before it, when the command asked for task
    /// states: `rejected` when no handler ran, else `failed`.
    state: TaskState,
}

impl ErrorReply {
    /// The answer to a command that failed once its handler ran.
    fn new(to: ReplyTo, error: ErrorBody) -> Self {
        Self {
            to,
            error,
            open_stream: None,
            state: TaskState::Failed,
        }
    }

    /// The answer to a command refused before any handler ran.
    fn refused(to: ReplyTo, error: ErrorBody) -> Self {
        Self {
            state: TaskState::Rejected,
            ..Self::new(to, error)
        }
    }
}

/// The channel and next sequence of a stream that was opened but not ended.
fn open_stream_end(streamed: &[Outgoing]) -> Option<(agdx_wire::ChannelId, u64)> {
    let last = streamed.last()?;
    let channel = last.envelope.channel?;
    let ended = last.envelope.last || last.envelope.kind == Kind::Error;
    (!ended).then(|| (channel, last.envelope.sequence.map_or(0, |s| s + 1)))
}

/// Stored replies addressed to a new command: its conversation, correlation,
/// cause and source; fresh record and channel ids.
fn readdress(stored: Vec<Outgoing>, to: &ReplyTo) -> Vec<Outgoing> {
    let mut channels = HashMap::new();
    stored
        .into_iter()
        .map(|mut outgoing| {
            let e = &mut outgoing.envelope;
            e.conversation = to.conversation;
            e.correlation = Some(to.correlation);
            e.cause = to.cause;
            e.cause_at = to.cause_at;
            e.target = Some(to.target.clone());
            // A stored signature covers the old addressing; the producer
            // signs the new one when it has a key.
            e.signature = None;
            if e.record.is_some() {
                e.record = Some(new_record_id());
            }
            if let Some(channel) = e.channel {
                e.channel = Some(*channels.entry(channel).or_insert_with(new_channel_id));
            }
            if let Some(fence) = to.fence {
                set_fence(&mut outgoing.envelope, fence);
            }
            outgoing
        })
        .collect()
}
