//! Asking: send a command and wait for its reply (docs/runtime.md §5).
//!
//! A [`Requester`] registers a waiter for the command's correlation
//! **before** sending, then reads the replies from the one partition of
//! `agent.responses` the conversation maps to, starting at the tail it
//! observed before sending. The first terminal reply wins: a `response`, an
//! `error`, or the end of a chunk stream (reassembled with the rules of
//! [`StreamAssembler`]); later replies for the same correlation (a worker
//! that crashed after replying publishes again) are ignored.
//!
//! A reply carrying a fence token (`agdx.fence`) whose partition a newer
//! holder has claimed since is ignored ([`crate::Fences`]): a worker that
//! lost its partition while paused cannot answer for its successor.
//!
//! One reader per reply partition serves every waiter on it, and stops once
//! nobody has waited there for [`READER_LINGER`], so an idle requester reads
//! nothing; the next ask starts a reader again at the tail. The linger keeps
//! a reader for asks in quick succession, which then skip looking up the
//! tail. After sending, the requester tells the log a reply is expected on
//! the partition ([`crate::log::Log::expect`]), so a log that waits by
//! asking again asks eagerly for a moment before it backs off.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog) -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use agdx::{Answer, CommandRequest, Producer, Requester, TopologyConfig};
//! use agdx::wire::AgentId;
//!
//! let topology = TopologyConfig::new("agents").ensure(log.as_ref()).await?;
//! let requester = Requester::new(Producer::new(log, topology, AgentId::new("cli")?));
//! let request = CommandRequest::new("hello", b"hi".to_vec()).to(AgentId::new("echo")?);
//! match requester.ask(request, Duration::from_secs(10)).await? {
//!     Answer::Response(reply) => println!("{}", String::from_utf8_lossy(&reply.body)),
//!     Answer::Streamed { body, .. } => println!("{}", String::from_utf8_lossy(&body)),
//! }
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agdx_wire::{
    AgentEnvelope, AgentId, Bytes, ChannelId, ContentType, CorrelationId, ErrorBody, ErrorCode,
    LogPosition, TaskState, TokenUsage,
};
use dashmap::DashMap;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use crate::cards::{WorkerSeen, worker_seen};
use crate::claim_check::ClaimCheckError;
use crate::clock::{SharedClock, system_clock};
use crate::fence::Fences;
use crate::log::{DEFAULT_POLL_WAIT, LogError, SharedLog, TopicInfo};
use crate::producer::{CommandRequest, ProduceError, Producer, Sent};
use crate::reassembly::{StreamCounters, StreamEnd};
use crate::record::envelope_of;

mod watch;

use crate::routing::partition_of;
use crate::trust::Verifier;
pub use watch::ReplyWatch;
use watch::instant_after;
// For a bridge that answers a prompt it read back from the log.
#[cfg(feature = "bridge-a2a")]
pub(crate) use watch::send_input;

/// Why an ask did not produce an answer.
#[derive(Debug, thiserror::Error)]
pub enum AskError {
    /// The command could not be sent.
    #[error(transparent)]
    Produce(#[from] ProduceError),
    /// Reading replies failed.
    #[error("reading replies failed: {0}")]
    Log(#[from] LogError),
    /// The agent answered with an error.
    #[error("error {}: {}", .0.code.name(), .0.message.as_deref().unwrap_or("(no message)"))]
    Remote(ErrorBody),
    /// The reply stream ended without finishing (gap or abandoned).
    #[error("the reply stream ended early: {}", describe_end(.0))]
    StreamBroken(StreamEnd),
    /// A claim-checked reply body could not be fetched or verified.
    #[error("the reply body could not be resolved: {0}")]
    ClaimCheck(#[from] ClaimCheckError),
    /// No terminal reply arrived in time.
    #[error("{}", timeout_message(target.as_ref(), operation, correlation, waited, worker, log))]
    Timeout {
        /// The agent asked, when the command named one.
        target: Option<AgentId>,
        /// The operation asked for (empty when the command named none).
        operation: String,
        /// The correlation the replies were awaited under.
        correlation: CorrelationId,
        /// How long the ask waited after sending, to the millisecond.
        waited: Duration,
        /// Whether a live worker for the target was seen on the registry.
        worker: WorkerSeen,
        /// The log the command waits on, as [`Log::describe`](crate::log::Log::describe)
        /// names it: a worker on another log never sees it.
        log: String,
    },
}

impl AskError {
    /// Whether asking again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            AskError::Produce(e) => e.is_retryable(),
            AskError::Log(e) => e.is_retryable(),
            AskError::Remote(body) => body.retryable,
            AskError::StreamBroken(_) => true,
            AskError::ClaimCheck(e) => e.is_retryable(),
            AskError::Timeout { .. } => true,
        }
    }
}

fn timeout_message(
    target: Option<&AgentId>,
    operation: &str,
    correlation: &CorrelationId,
    waited: &Duration,
    worker: &WorkerSeen,
    log: &str,
) -> String {
    let Some(agent) = target else {
        return format!(
            "no reply to operation '{operation}' (correlation {correlation}) within {waited:?} on {log}; the command named no agent: is any worker running on this log?"
        );
    };
    let head = format!(
        "no reply from {agent} to operation '{operation}' (correlation {correlation}) within {waited:?} on {log}"
    );
    match worker {
        WorkerSeen::Unchecked => {
            format!("{head}; is a worker for '{agent}' running on this log?")
        }
        WorkerSeen::Live { .. } => format!(
            "{head}; a worker for '{agent}' is live (its card is fresh) but did not answer in time: it may be busy with earlier commands of this conversation; wait longer, or look at the conversation's timeline"
        ),
        WorkerSeen::Gone { .. } => format!(
            "{head}; no worker for '{agent}' is live (workers were seen, but left or their cards expired); the command waits on the log"
        ),
        WorkerSeen::Never => format!(
            "{head}; no worker for '{agent}' was seen on this log (no agent card on the registry); the command waits on the log"
        ),
    }
}

fn describe_end(end: &StreamEnd) -> String {
    match end {
        StreamEnd::Finished { finish_reason, .. } => format!(
            "finished ({})",
            finish_reason.as_deref().unwrap_or("no reason")
        ),
        StreamEnd::Failed(e) => {
            format!("failed: {}", e.message.as_deref().unwrap_or(e.code.name()))
        }
        StreamEnd::Gap { expected, received } => {
            format!("gap: chunk {expected} is missing (got {received})")
        }
        StreamEnd::Abandoned { deadline_micros } => {
            format!("abandoned: its deadline {deadline_micros} µs passed")
        }
    }
}

/// One reply record as read from the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The decoded envelope; a claim-checked one still carries the BodyRef
    /// as its body (the resolved bytes are in [`Reply::body`]).
    pub envelope: AgentEnvelope,
    /// Where the reply sits in `agent.responses`.
    pub position: LogPosition,
    /// When the log accepted the reply, epoch microseconds (server clock).
    pub timestamp_micros: u64,
    /// The body's codec (`agdx.ct`); for a claim-checked body, the codec
    /// its sender named in the `agdx.ref.ct` metadata (`raw` when none).
    pub content_type: ContentType,
    /// The body, fetched and verified when it was claim-checked.
    pub body: Bytes,
    /// Whether the body came through the blob store.
    pub claim_checked: bool,
}

/// The answer to an ask.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A single `response`; or, for a task that ended `completed` with no
    /// other answer (a handler that answered with its task state alone),
    /// the `status` record that said so.
    Response(Box<Reply>),
    /// A chunk stream that finished: the chunks' bytes in order.
    Streamed {
        /// The chunks' bytes, concatenated in sequence order.
        body: Vec<u8>,
        /// Why the writer ended the stream (`stop`, `length`, ...), when it said.
        finish_reason: Option<String>,
        /// The tokens the writer reported spending, when it did.
        usage: Option<TokenUsage>,
        /// Chunks applied, and duplicate or late records dropped.
        counters: StreamCounters,
    },
}

/// One step of a watched reply, in log order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyEvent {
    /// A `status` record (task state or progress) for the request.
    Status(Reply),
    /// The terminal `response`.
    Response(Reply),
    /// The terminal `error` (not part of a stream).
    Error(ErrorBody),
    /// The next chunk of the reply stream.
    Chunk {
        /// Its position in the stream, from 0.
        sequence: u64,
        /// Its bytes (never empty: empty chunks are not reported).
        body: Bytes,
    },
    /// The writer started the stream over on a new channel (it was
    /// restarted mid-stream): discard the chunks received so far.
    StreamRestarted {
        /// The new stream's channel; its chunks follow from sequence 0.
        channel: ChannelId,
    },
    /// The reply stream ended.
    StreamEnd(StreamEnd),
}

impl ReplyEvent {
    /// Whether nothing follows this event.
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            ReplyEvent::Response(_) | ReplyEvent::Error(_) | ReplyEvent::StreamEnd(_)
        )
    }
}

/// How long an ask that saw a terminal task state waits for the answer
/// that usually comes with it before the state is the outcome.
pub const TERMINAL_STATE_GRACE: Duration = Duration::from_millis(500);

/// The outcome of a task that ended in a terminal state with no other
/// answer: `completed` answers with the status; the others are errors.
pub(crate) fn task_outcome(status: Reply) -> Result<Answer, AskError> {
    let state = status.envelope.task_state.unwrap_or(TaskState::Unknown);
    let code = match state {
        TaskState::Completed => return Ok(Answer::Response(Box::new(status))),
        TaskState::Canceled => ErrorCode::Cancelled,
        TaskState::Rejected => ErrorCode::InvalidRequest,
        _ => ErrorCode::Internal,
    };
    let message = String::from_utf8_lossy(&status.body).into_owned();
    let message = if message.is_empty() {
        format!("the task ended {} with no other answer", state.name())
    } else {
        message
    };
    Err(AskError::Remote(ErrorBody::new(code).with_message(message)))
}

/// How long a reply reader goes on once nobody waits on its partition:
/// after it, a requester that asks nothing reads nothing.
pub const READER_LINGER: Duration = Duration::from_secs(1);

/// Who waits for which correlation, and on which reply partition.
type Waiters = DashMap<CorrelationId, Waiter>;

/// One ask waiting for its replies.
struct Waiter {
    partition: u32,
    replies: mpsc::UnboundedSender<(AgentEnvelope, crate::log::LogRecord)>,
}

/// The reply readers, one per partition while someone waits there.
type Readers = Mutex<HashMap<u32, JoinHandle<()>>>;

/// Sends commands and waits for their replies. A [`ReplyWatch`] it
/// returns hears its replies also after the requester is dropped.
pub struct Requester {
    producer: Producer,
    clock: SharedClock,
    verifier: Option<Verifier>,
    unverified: Arc<AtomicU64>,
    waiters: Arc<Waiters>,
    readers: Arc<Readers>,
    fences: Arc<Fences>,
    cancel_on_give_up: bool,
}

impl Drop for Requester {
    fn drop(&mut self) {
        // A reader a watch still waits on goes on for it, as one busy
        // deciding whether to stop (holding the lock) does: each stops by
        // itself once its waiters are gone. The others stop now.
        if let Ok(mut readers) = self.readers.try_lock() {
            readers.retain(|&partition, reader| {
                let serving = waits_on(&self.waiters, partition);
                if !serving {
                    reader.abort();
                }
                serving
            });
        }
    }
}

impl Requester {
    /// A requester sending through `producer` (its source is the asker).
    pub fn new(producer: Producer) -> Self {
        let fences = Fences::new(
            producer.log().clone(),
            producer.topology().snapshots.clone(),
        );
        Self {
            fences,
            producer,
            clock: system_clock(),
            verifier: None,
            unverified: Arc::default(),
            waiters: Arc::new(DashMap::new()),
            readers: Arc::new(Mutex::new(HashMap::new())),
            cancel_on_give_up: true,
        }
    }

    /// Whether an [`ask`](Requester::ask) that gives up (its timeout
    /// passed, or its future was dropped: a caller that went away) cancels
    /// its command, so that its handler stops instead of answering nobody.
    /// On by default; off, the command runs on and its answer lands on the
    /// log for whoever reads it later.
    pub fn cancel_on_give_up(mut self, cancel: bool) -> Self {
        self.cancel_on_give_up = cancel;
        self
    }

    /// Uses `clock` for stream abandonment deadlines.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Accepts only replies that verify with `verifier` and are signed by
    /// the agent asked (when the command named one); others are ignored and
    /// counted.
    pub fn with_verifier(mut self, verifier: Verifier) -> Self {
        self.verifier = Some(verifier);
        self
    }

    /// Replies ignored so far because they did not verify (all asks).
    pub fn unverified(&self) -> u64 {
        self.unverified.load(Ordering::Relaxed)
    }

    /// The producer commands go out through.
    pub fn producer(&self) -> &Producer {
        &self.producer
    }

    /// Cancels the command `sent` to `target` ([`Producer::cancel`]): its
    /// worker does not run it, or stops its handler, and answers it with an
    /// `error` `cancelled`.
    pub async fn cancel(&self, sent: &Sent, target: Option<&AgentId>) -> Result<Sent, AskError> {
        Ok(self.producer.cancel(sent, target).await?)
    }

    /// Sends `request` and returns a watch over its replies. The waiter is
    /// registered and the reply partition's tail observed before the command
    /// is sent, so no reply can be missed.
    pub async fn send(&self, request: CommandRequest) -> Result<ReplyWatch, AskError> {
        let target = request.target.clone();
        let operation = request.operation.clone().unwrap_or_default();
        let commands = self
            .producer
            .commands_topic(target.as_ref())
            .await
            .map_err(ProduceError::from)?;
        let (outgoing, correlation) = self.producer.build_command(request);
        let responses = self.producer.topology().responses.clone();
        let partition = partition_of(&responses, outgoing.envelope.conversation);
        let (tx, rx) = mpsc::unbounded_channel();
        self.waiters.insert(
            correlation,
            Waiter {
                partition,
                replies: tx,
            },
        );
        let guard = WaiterGuard {
            waiters: self.waiters.clone(),
            correlation,
        };
        self.ensure_reader(&responses, partition).await?;
        let span = tracing::info_span!(
            "ask",
            conversation = %outgoing.envelope.conversation,
            correlation = %correlation,
            agent = %self.producer.source(),
            topic = %commands.topic,
            operation = %operation,
        );
        let sent = self
            .producer
            .publish_one(&commands, outgoing)
            .instrument(span)
            .await?;
        self.producer.log().expect(&responses, partition);
        Ok(ReplyWatch {
            rx,
            _guard: guard,
            sent,
            target,
            operation,
            correlation,
            sent_at: Instant::now(),
            clock: self.clock.clone(),
            producer: self.producer.clone(),
            verifier: self.verifier.clone(),
            unverified: 0,
            unverified_total: self.unverified.clone(),
            fences: self.fences.clone(),
            fenced: 0,
            stream: None,
            ended: false,
            pending: Vec::new(),
        })
    }

    /// Sends `request` and waits up to `timeout` for the first terminal reply.
    pub async fn ask(
        &self,
        request: CommandRequest,
        timeout: Duration,
    ) -> Result<Answer, AskError> {
        let target = request
            .target
            .as_ref()
            .map(|t| t.to_string())
            .unwrap_or_default();
        let mut watch = self.send(request).await?;
        // Dropped before the answer came (the caller went away): the
        // command is cancelled in the background.
        let mut give_up = GiveUp::new(
            self.producer.clone(),
            watch.sent.clone(),
            watch.target.clone(),
        );
        if !self.cancel_on_give_up {
            give_up.disarm();
        }
        let sent_at = Instant::now();
        let mut deadline = instant_after(timeout);
        let mut body = Vec::new();
        // A terminal task state seen, and until when its answer may follow.
        let mut ended: Option<(Reply, Instant)> = None;
        loop {
            let until = ended.as_ref().map_or(deadline, |(_, by)| *by);
            let event = match watch.next_until(until).await {
                Err(AskError::Timeout { .. }) if ended.is_some() => {
                    give_up.disarm();
                    let (status, _) = ended.take().expect("a terminal state");
                    crate::metrics::reply_time(&target, sent_at.elapsed());
                    return task_outcome(status);
                }
                Err(error) => {
                    if matches!(error, AskError::Timeout { .. }) {
                        crate::metrics::ask_timeout(&target);
                        give_up.now().await;
                    }
                    give_up.disarm();
                    return Err(self.explain(error).await);
                }
                Ok(event) => event,
            };
            if event.is_terminal() {
                give_up.disarm();
            }
            if event.is_terminal() {
                crate::metrics::reply_time(&target, sent_at.elapsed());
            }
            match event {
                // A terminal task state is the outcome, unless the answer
                // it comes with follows at once (the runtime's own do).
                ReplyEvent::Status(status)
                    if status.envelope.task_state.is_some_and(|s| s.is_terminal()) =>
                {
                    if ended.is_none() {
                        ended = Some((status, Instant::now() + TERMINAL_STATE_GRACE));
                    }
                }
                // A sign of life: the wait starts over.
                ReplyEvent::Status(_) => deadline = instant_after(timeout),
                ReplyEvent::Response(reply) => return Ok(Answer::Response(Box::new(reply))),
                ReplyEvent::Error(error) => return Err(AskError::Remote(error)),
                ReplyEvent::Chunk { body: chunk, .. } => body.extend_from_slice(&chunk),
                ReplyEvent::StreamRestarted { .. } => body.clear(),
                ReplyEvent::StreamEnd(StreamEnd::Finished {
                    finish_reason,
                    usage,
                }) => {
                    let counters = watch.stream_counters().unwrap_or_default();
                    return Ok(Answer::Streamed {
                        body,
                        finish_reason,
                        usage,
                        counters,
                    });
                }
                ReplyEvent::StreamEnd(StreamEnd::Failed(error)) => {
                    return Err(AskError::Remote(error));
                }
                ReplyEvent::StreamEnd(end) => return Err(AskError::StreamBroken(end)),
            }
        }
    }

    /// A timeout completed with whether a worker for its target was seen.
    pub async fn explain(&self, error: AskError) -> AskError {
        match error {
            AskError::Timeout {
                target: Some(agent),
                operation,
                correlation,
                waited,
                worker: WorkerSeen::Unchecked,
                log,
            } => {
                let producer = &self.producer;
                let worker = worker_seen(producer.log(), producer.topology(), &agent, &self.clock)
                    .await
                    .unwrap_or(WorkerSeen::Unchecked);
                AskError::Timeout {
                    target: Some(agent),
                    operation,
                    correlation,
                    waited,
                    worker,
                    log,
                }
            }
            other => other,
        }
    }

    /// Sends `request` and returns the watch to read its reply stream chunk
    /// by chunk (a plain `response` shows as one chunk and a finish).
    pub async fn ask_stream(&self, request: CommandRequest) -> Result<ReplyWatch, AskError> {
        self.send(request).await
    }

    /// Stops reading replies and waits until the readers are gone, so that
    /// nothing of this requester is still asking the log when the log is
    /// closed (a program about to exit calls it last). Dropping the
    /// requester stops the readers too, without waiting for them, except
    /// those a [`ReplyWatch`] still waits on: a watch outlives its
    /// requester, and its reader stops once the watch is dropped.
    pub async fn close(self) {
        let readers: Vec<_> = self.readers.lock().await.drain().map(|(_, r)| r).collect();
        for reader in &readers {
            reader.abort();
        }
        for reader in readers {
            // Aborted, or ended by itself: either way it reads no more.
            let _ = reader.await;
        }
    }

    async fn ensure_reader(&self, responses: &TopicInfo, partition: u32) -> Result<(), LogError> {
        let mut readers = self.readers.lock().await;
        if readers.get(&partition).is_some_and(|r| !r.is_finished()) {
            return Ok(());
        }
        let log = self.producer.log().clone();
        let from = log
            .last_offset(responses, partition)
            .await?
            .map_or(0, |last| last + 1);
        let reader = tokio::spawn(read_replies(
            log,
            responses.clone(),
            partition,
            from,
            self.waiters.clone(),
            self.readers.clone(),
        ));
        readers.insert(partition, reader);
        Ok(())
    }
}

/// Reads one reply partition and hands each record to the waiter of its
/// correlation; records nobody waits for are skipped. Stops when nobody
/// waits on the partition any more.
async fn read_replies(
    log: SharedLog,
    topic: TopicInfo,
    partition: u32,
    mut from: u64,
    waiters: Arc<Waiters>,
    readers: Arc<Readers>,
) {
    let mut failures = 0u32;
    let mut idle_since = None;
    loop {
        if waits_on(&waiters, partition) {
            idle_since = None;
        } else if idle_since.get_or_insert_with(Instant::now).elapsed() >= READER_LINGER {
            // Decided under the readers' lock: an ask registers its waiter
            // before it looks for a reader under that lock, so it either is
            // seen here or finds this reader gone and starts another.
            let mut readers = readers.lock().await;
            if !waits_on(&waiters, partition) {
                readers.remove(&partition);
                return;
            }
            idle_since = None;
        }
        match log
            .poll(&topic, partition, from, 512, DEFAULT_POLL_WAIT)
            .await
        {
            Ok(records) => {
                failures = 0;
                for record in records {
                    from = record.position.offset + 1;
                    let envelope = match envelope_of(&record) {
                        Ok(envelope) => envelope,
                        Err(error) => {
                            tracing::debug!(position = %record.position, %error, "skipping a reply record that does not decode");
                            continue;
                        }
                    };
                    let Some(correlation) = envelope.correlation else {
                        continue;
                    };
                    if let Some(waiter) = waiters.get(&correlation) {
                        let _ = waiter.replies.send((envelope, record));
                    }
                }
            }
            Err(LogError::Corrupt(damage)) => {
                tracing::warn!(%damage, "skipping damaged reply records");
                from = damage.next_offset();
            }
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, partition, topic = %topic.topic, "polling replies failed; retrying");
                tokio::time::sleep(crate::retry::backoff(failures)).await;
            }
        }
    }
}

/// Whether an ask waits for replies on `partition`.
fn waits_on(waiters: &Waiters, partition: u32) -> bool {
    waiters.iter().any(|waiter| waiter.partition == partition)
}

/// The command of an ask that is cancelled should the ask give up.
pub(crate) struct GiveUp {
    producer: Producer,
    /// The command and its target, until the ask has its answer (or is
    /// told not to cancel).
    command: Option<(Sent, Option<AgentId>)>,
}

impl GiveUp {
    /// Cancels `sent` to `target` should this be dropped before
    /// [`GiveUp::disarm`].
    pub(crate) fn new(producer: Producer, sent: Sent, target: Option<AgentId>) -> Self {
        Self {
            producer,
            command: Some((sent, target)),
        }
    }

    /// The answer came: nothing to cancel.
    pub(crate) fn disarm(&mut self) {
        self.command = None;
    }

    /// Cancels the command now, once.
    pub(crate) async fn now(&mut self) {
        if let Some((sent, target)) = self.command.take() {
            cancel_quietly(&self.producer, &sent, target.as_ref()).await;
        }
    }
}

impl Drop for GiveUp {
    fn drop(&mut self) {
        let Some((sent, target)) = self.command.take() else {
            return;
        };
        // Outside a runtime (dropped while one shuts down) nothing can be
        // sent; the command then runs to its end.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let producer = self.producer.clone();
            runtime.spawn(async move { cancel_quietly(&producer, &sent, target.as_ref()).await });
        }
    }
}

/// Cancels `sent`; a failure is logged (the ask has already given up).
async fn cancel_quietly(producer: &Producer, sent: &Sent, target: Option<&AgentId>) {
    match producer.cancel(sent, target).await {
        Ok(_) => {
            tracing::debug!(correlation = ?sent.correlation, "cancelled the command of an ask that gave up")
        }
        Err(error) => {
            tracing::warn!(%error, correlation = ?sent.correlation, "could not cancel the command of an ask that gave up; it runs to its end")
        }
    }
}

struct WaiterGuard {
    waiters: Arc<Waiters>,
    correlation: CorrelationId,
}

impl Drop for WaiterGuard {
    fn drop(&mut self) {
        self.waiters.remove(&self.correlation);
    }
}
