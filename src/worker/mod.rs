//! Worker pools: consumer-group members that handle commands and commit
//! only after the reply is on the log (docs/runtime.md §4).
//!
//! A [`Worker`] joins the consumer group of its agent on `agent.commands`,
//! and with the inbox routing ([`crate::CommandRouting::Inbox`]) on its
//! agent's inbox topic too. Each partition it owns is read in order by one
//! task; different partitions (of either topic) run concurrently, at most
//! `concurrency` at a time. For each record the ten
//! steps run (decode, must-understand, target, signature gate, deadline,
//! idempotency, dispatch, retries, dead letters, reply) and the pool then
//! publishes the replies and dead-letter capsules and **only then** commits
//! the offset.
//! A publish that may pass later is retried in place; an answer that can
//! never be published becomes a small `internal` error and a dead letter, so
//! no record holds its partition up. A handler that panics fails that one
//! record (dead letter with the panic message), not the pool.
//!
//! With [`WorkerConfig::verifier`] the pool admits only commands signed by
//! an enrolled key (step 4), and with [`WorkerConfig::grants`] only those
//! whose signer may invoke the operation; with [`WorkerConfig::quarantine`]
//! it stops taking work while its agent is quarantined by an operator
//! (finishing and committing the record in hand, keeping its membership)
//! and resumes when the quarantine is lifted.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog) -> Result<(), Box<dyn std::error::Error>> {
//! use agdx::{Producer, TopologyConfig};
//! use agdx::wire::AgentId;
//! use agdx::worker::{EchoHandler, Worker, WorkerConfig};
//! use tokio_util::sync::CancellationToken;
//!
//! let topology = TopologyConfig::new("agents").ensure(log.as_ref()).await?;
//! let producer = Producer::new(log, topology, AgentId::new("echo")?);
//! let shutdown = CancellationToken::new();
//! let worker = Worker::new(producer, WorkerConfig::default()).handle("hello", EchoHandler);
//! worker.run(shutdown).await?; // until shutdown.cancel()
//! # Ok(()) }
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;

use crate::claim_check::ClaimCheck;
use crate::clock::{SharedClock, system_clock};
use crate::idempotency::{KeyRetention, ProcessedKeys, StoreError};
use crate::log::{GroupMember, LogError, TopicInfo};
use crate::metrics::PoolMetrics;
use crate::retry::RetryPolicy;
use crate::trust::{Grants, Pause, Verifier};

mod admission;
mod call_files;
mod context;
mod exec;
mod exec_report;
mod flush;
mod handler;
mod heartbeat;
mod invoke;
mod partition;
mod process;
mod process_group;
mod tasks;

use admission::Handlers;
use context::PartitionContext;
pub use exec::{EXIT_RETRYABLE, ExecHandler, ExecOutput};
pub use exec_report::ReportError;
pub use handler::{
    EchoHandler, FnHandler, Handler, HandlerError, HandlerReply, Request, handler_fn,
};
pub use heartbeat::DEFAULT_PROGRESS_INTERVAL;
#[cfg(feature = "testing")]
pub(crate) use invoke::panic_message;
use partition::partition_loop;
use process::{Disposition, Processor};
use tasks::PartitionTasks;

/// How a worker pool behaves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Consumer group; `None` uses the agent's name, so every process of one
    /// agent shares the work.
    pub group: Option<String>,
    /// Partitions handled at the same time.
    pub concurrency: usize,
    /// Retries of retryable handler failures.
    pub retry: RetryPolicy,
    /// Records read per poll.
    pub poll_batch: u32,
    /// Replies of consecutive fast records are published together for at
    /// most this long before the offset is committed.
    pub flush_interval: Duration,
    /// Feature bits this worker implements (`must_understand`).
    pub understood_features: u64,
    /// Directory of the processed-key store; `None` disables idempotency.
    pub state_dir: Option<PathBuf>,
    /// How long and how many processed idempotency keys are kept.
    pub key_retention: KeyRetention,
    /// How often group membership is checked for moved partitions.
    pub rebalance_every: Duration,
    /// How long a member given a partition waits for its previous holder
    /// to hand it over (docs/runtime.md, "Fencing") before claiming it
    /// anyway. A holder that stopped cleanly hands over at once; this wait
    /// is paid only after one crashed or was cut off from the log. A holder
    /// still finishing says so about every quarter of this wait, and each
    /// time the wait starts over (up to six times this in all). Each claim
    /// declares its member's wait (at most ten minutes count), and a
    /// newcomer waits the longer of its own and the holder's; readers
    /// trust a read of the claims for half of it.
    pub handover_wait: Duration,
    /// While a handler runs longer than this, a `status` `progress` record
    /// goes to its requester every interval (which keeps it waiting).
    pub progress_interval: Duration,
    /// A handler still running after this long is stopped and its command
    /// dead-lettered (`deadline_exceeded`); `None`: no limit.
    pub handler_limit: Option<Duration>,
    /// How long the agent card the pool publishes stays true; it is
    /// published again before half of it has passed.
    pub card_ttl: Duration,
    /// The version the agent card names.
    pub agent_version: Option<String>,
    /// Step 4: admit only commands that verify against this key registry;
    /// others are dead-lettered `rejected` and answered `unauthorized`.
    pub verifier: Option<Verifier>,
    /// Which verified principals may invoke which operations (needs
    /// `verifier`); a command without a grant is dead-lettered `rejected`
    /// and answered `unauthorized` with check `forbidden`.
    pub grants: Option<Grants>,
    /// Pause while an operator key of this registry has quarantined the
    /// agent (control facts on `agent.registry`).
    pub quarantine: Option<Verifier>,
    /// Once told to stop, how long the pool waits for the handlers still
    /// running; then it stops them (an `--exec` command's processes are
    /// killed), leaves their records uncommitted for the next member, and
    /// leaves the group. `None`: as long as they take.
    pub shutdown_grace: Option<Duration>,
    /// Once a running command is cancelled, how long its handler has to
    /// heed [`Request::cancelled`] (an `--exec` command gets SIGTERM)
    /// before it is stopped (the command's processes get SIGKILL).
    pub cancel_grace: Duration,
}

/// How long a member waits for a partition's previous holder to hand it
/// over, unless configured otherwise: longer than a holder takes to notice a
/// request (at most a second between records) and to publish what it has.
pub const DEFAULT_HANDOVER_WAIT: Duration = Duration::from_secs(5);

/// How long a cancelled handler has to stop by itself, unless configured
/// otherwise.
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_secs(5);

/// How long a stopping pool waits for its handlers, unless configured otherwise.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

impl Default for WorkerConfig {
    fn default() -> Self {
        Self {
            group: None,
            concurrency: 8,
            retry: RetryPolicy::default(),
            poll_batch: 256,
            flush_interval: Duration::from_millis(5),
            understood_features: 0,
            state_dir: None,
            key_retention: KeyRetention::default(),
            rebalance_every: Duration::from_millis(250),
            handover_wait: DEFAULT_HANDOVER_WAIT,
            progress_interval: heartbeat::DEFAULT_PROGRESS_INTERVAL,
            handler_limit: None,
            card_ttl: crate::cards::DEFAULT_CARD_TTL,
            agent_version: None,
            verifier: None,
            grants: None,
            quarantine: None,
            shutdown_grace: Some(DEFAULT_SHUTDOWN_GRACE),
            cancel_grace: DEFAULT_CANCEL_GRACE,
        }
    }
}

/// Why a worker pool stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The log failed in a way the pool cannot ride out.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The processed-key store could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Grants were given without a verifier: a principal is only known
    /// once its signature verified.
    #[error(
        "grants need a verifier: a command's principal is known only once its signature verified; set WorkerConfig::verifier too"
    )]
    GrantsWithoutVerifier,
}

impl WorkerError {
    /// Whether starting the pool again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            WorkerError::Log(e) => e.is_retryable(),
            WorkerError::Store(e) => e.is_retryable(),
            WorkerError::GrantsWithoutVerifier => false,
        }
    }
}

/// Counters of a running pool.
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Handler ran and succeeded.
    pub handled: AtomicU64,
    /// Stored replies published again for a processed key.
    pub deduplicated: AtomicU64,
    /// Not addressed to this agent or nothing to do.
    pub skipped: AtomicU64,
    /// Answered `unsupported` (no handler).
    pub unsupported: AtomicU64,
    /// Dead-lettered.
    pub dead_lettered: AtomicU64,
    /// Cancelled by their senders: not run, or stopped while running.
    pub cancelled: AtomicU64,
    /// Offsets committed (one per flushed batch).
    pub commits: AtomicU64,
    /// Records whose processing was followed by a commit.
    pub committed_records: AtomicU64,
    /// Whether the pool is paused now because its agent is quarantined.
    pub paused: AtomicBool,
    /// Partitions whose record in hand was left uncommitted because the
    /// pool was told to stop now or its shutdown grace ran out.
    pub abandoned: AtomicU64,
}

impl WorkerStats {
    fn count(&self, metrics: &PoolMetrics, disposition: Disposition) {
        let counter = match disposition {
            Disposition::Handled => &self.handled,
            Disposition::Deduplicated => &self.deduplicated,
            Disposition::Skipped => &self.skipped,
            Disposition::Unsupported => &self.unsupported,
            Disposition::DeadLettered => &self.dead_lettered,
            Disposition::Cancelled => &self.cancelled,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        metrics.record_outcome(disposition.label());
    }
}

/// A worker pool member for one agent: handlers by operation, plus the
/// consumer-group machinery.
pub struct Worker {
    producer: crate::producer::Producer,
    config: WorkerConfig,
    handlers: Handlers,
    clock: SharedClock,
    claim_check: Option<ClaimCheck>,
    stats: Arc<WorkerStats>,
}

impl Worker {
    /// A worker answering as the producer's source agent.
    pub fn new(producer: crate::producer::Producer, config: WorkerConfig) -> Self {
        let claim_check = producer.claim_check().cloned();
        Self {
            producer,
            config,
            handlers: Handlers::default(),
            clock: system_clock(),
            claim_check,
            stats: Arc::default(),
        }
    }

    /// Handles `operation` with `handler`.
    pub fn handle(mut self, operation: impl Into<String>, handler: impl Handler) -> Self {
        self.handlers
            .by_operation
            .insert(operation.into(), Arc::new(handler));
        self
    }

    /// Handles every operation without a handler of its own (and commands
    /// without an operation).
    pub fn fallback(mut self, handler: impl Handler) -> Self {
        self.handlers.fallback = Some(Arc::new(handler));
        self
    }

    /// Reads the time (deadlines) from `clock`.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// The pool's counters, readable while it runs.
    pub fn stats(&self) -> Arc<WorkerStats> {
        self.stats.clone()
    }

    /// Runs until `shutdown` is cancelled, then stops polling, finishes and
    /// commits the records in hand (waiting at most
    /// [`WorkerConfig::shutdown_grace`] for them), and leaves the group.
    /// Dropping the future instead stops everything at once: the partition
    /// tasks and the card publisher are aborted, and what was not committed
    /// is read again by the next owner.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), WorkerError> {
        self.run_with_stop_now(shutdown, CancellationToken::new())
            .await
    }

    /// Like [`Worker::run`], and cancelling `stop_now` (say, on a second
    /// Ctrl-C) ends the wait for the handlers at once: they are stopped,
    /// their records stay uncommitted for the next member
    /// ([`WorkerStats::abandoned`] counts them), and the pool leaves the
    /// group.
    pub async fn run_with_stop_now(
        self,
        shutdown: CancellationToken,
        stop_now: CancellationToken,
    ) -> Result<(), WorkerError> {
        let agent = self.producer.source().clone();
        let group = self
            .config
            .group
            .clone()
            .unwrap_or_else(|| agent.to_string());
        if self.config.grants.is_some() && self.config.verifier.is_none() {
            return Err(WorkerError::GrantsWithoutVerifier);
        }
        let log = self.producer.log().clone();
        let topics = self
            .producer
            .topology()
            .command_topics(log.as_ref(), &agent)
            .await?;
        let store = match &self.config.state_dir {
            Some(dir) => Some(ProcessedKeys::open(
                dir,
                log.clone(),
                topics.clone(),
                self.producer.topology().responses.clone(),
                self.config.key_retention,
            )?),
            None => None,
        };
        let card = crate::cards::worker_card(
            &agent,
            self.config.agent_version.as_deref(),
            &self.handlers.operations(),
            self.handlers.fallback.is_some(),
            self.config.card_ttl,
        );
        let fences =
            crate::fence::Fences::new(log.clone(), self.producer.topology().snapshots.clone());
        let metrics = PoolMetrics::new(
            agent.as_str(),
            Disposition::ALL.map(Disposition::label),
            self.handlers.operations().iter().map(String::as_str),
        );
        let processor = Arc::new(Processor {
            agent: agent.clone(),
            producer: self.producer.clone(),
            handlers: self.handlers,
            store,
            clock: self.clock,
            retry: self.config.retry,
            understood_features: self.config.understood_features,
            claim_check: self.claim_check,
            progress_interval: self.config.progress_interval,
            handler_limit: self.config.handler_limit,
            cancel_grace: self.config.cancel_grace,
            fences: fences.clone(),
            fence_check_every: self.config.rebalance_every,
            fence_fresh_for: self.config.handover_wait / 2,
            metrics,
            gate: self
                .config
                .verifier
                .clone()
                .map(|v| (v, self.config.grants.clone())),
        });
        // The quarantine watch catches up while the pool joins its groups:
        // no work is taken before both are done, and neither waits on the
        // other.
        let watch_quarantine = async {
            let Some(verifier) = &self.config.quarantine else {
                return Ok(None);
            };
            let topology = self.producer.topology().clone();
            let pause =
                Pause::start(log.clone(), topology, verifier.clone(), agent.clone()).await?;
            let stats = self.stats.clone();
            Ok(Some(Arc::new(pause.on_change(move |paused| {
                stats.paused.store(paused, Ordering::Relaxed)
            }))))
        };
        let join_groups = async {
            let mut joined = Vec::with_capacity(topics.len());
            for commands in topics {
                let group = self.producer.topology().consumer_group(&commands, &group);
                match log.join_group(&commands, &group).await {
                    Ok(member) => joined.push((commands, group, member)),
                    Err(error) => return (joined, Err(error)),
                }
            }
            (joined, Ok(()))
        };
        let (pause, (joined, all_joined)) = tokio::join!(watch_quarantine, join_groups);
        let pause = match (pause, all_joined) {
            (Ok(pause), Ok(())) => pause,
            (Err(error), _) | (Ok(_), Err(error)) => {
                leave_all(joined).await;
                return Err(error.into());
            }
        };
        let permits = Arc::new(Semaphore::new(self.config.concurrency.max(1)));
        let mut readers = Vec::with_capacity(joined.len());
        for (commands, group, member) in joined {
            tracing::info!(agent = %agent, group = %group, topic = %commands.topic, member = %member.member_id(), log = %log.describe(), "worker joined its group");
            let ctx = Arc::new(PartitionContext {
                processor: processor.clone(),
                commands: Arc::new(commands),
                group,
                config: self.config.clone(),
                permits: permits.clone(),
                stats: self.stats.clone(),
                pause: pause.clone(),
                fences: fences.clone(),
                member: member.member_id(),
                fenced: Default::default(),
            });
            readers.push(Reader {
                member,
                ctx,
                tasks: PartitionTasks::default(),
            });
        }
        let card_member = readers
            .first()
            .map(|r| r.ctx.member.clone())
            .unwrap_or_default();
        let card_stop = CancellationToken::new();
        // Aborted with the pool should this future be dropped.
        let cards = AbortOnDropHandle::new(tokio::spawn(crate::cards::keep_card_fresh(
            self.producer.clone(),
            card,
            card_member,
            card_stop.clone(),
        )));
        let mut tick = tokio::time::interval(self.config.rebalance_every);
        let mut lag_every = tokio::time::interval(COMMIT_LAG_EVERY);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = stop_now.cancelled() => break,
                _ = tick.tick() => {}
                _ = lag_every.tick() => {
                    for reader in &readers {
                        let partitions = reader.tasks.partitions();
                        tokio::spawn(measure_commit_lag(reader.ctx.clone(), partitions));
                    }
                    continue;
                }
            }
            for reader in &mut readers {
                reader.follow_assignment(&shutdown).await;
            }
        }
        for reader in &readers {
            reader.tasks.cancel_all();
        }
        let grace = async {
            match self.config.shutdown_grace {
                Some(grace) => tokio::time::sleep(grace).await,
                None => std::future::pending().await,
            }
        };
        let all_ended = async {
            for reader in &mut readers {
                reader.tasks.wait().await;
            }
        };
        let drained = tokio::select! {
            () = all_ended => true,
            () = stop_now.cancelled() => false,
            () = grace => false,
        };
        if !drained {
            let mut abandoned = 0;
            for reader in &mut readers {
                abandoned += reader.tasks.abort().await;
            }
            self.stats
                .abandoned
                .fetch_add(abandoned as u64, Ordering::Relaxed);
            tracing::warn!(
                agent = %agent,
                partitions = abandoned,
                "stopped the handlers still running; their records stay uncommitted for the next member"
            );
        }
        card_stop.cancel();
        if let Err(error) = cards.await {
            tracing::error!(%error, "the card publisher failed");
        }
        let mut left = Ok(());
        for reader in readers {
            if let Err(error) = reader.member.leave().await {
                left = Err(error);
            }
        }
        left?;
        tracing::info!(agent = %agent, "worker left its group");
        Ok(())
    }
}

/// The pool's membership on one commands topic and the tasks of the
/// partitions it owns there.
struct Reader {
    member: Box<dyn GroupMember>,
    ctx: Arc<PartitionContext>,
    tasks: PartitionTasks,
}

impl Reader {
    /// Starts and stops partition tasks as the group's assignment says.
    async fn follow_assignment(&mut self, shutdown: &CancellationToken) {
        let Reader { member, ctx, tasks } = self;
        match member.assigned().await {
            Ok(assigned) => tasks.follow(&ctx.claimable(&assigned).await, |partition| {
                let cancel = shutdown.child_token();
                let task = tokio::spawn(partition_loop(ctx.clone(), partition, cancel.clone()));
                (cancel, task)
            }),
            Err(error) => {
                tracing::warn!(%error, topic = %ctx.commands.topic, "could not read the group assignment; keeping the current partitions");
            }
        }
        // A moved partition's task ends after the record in hand, its
        // replies and its commit; a log that waits for that (Kafka) lets
        // the partition go once a report no longer names it.
        member.working_on(&tasks.partitions()).await;
    }
}

/// A group the pool joined: its commands topic, the group's name, the
/// membership.
type Joined = (TopicInfo, String, Box<dyn GroupMember>);

/// Leaves the groups joined so far (a later join, or the quarantine
/// watch, failed).
async fn leave_all(joined: Vec<Joined>) {
    for (commands, _, member) in joined {
        if let Err(error) = member.leave().await {
            tracing::warn!(%error, topic = %commands.topic, "could not leave the group");
        }
    }
}

/// How often the pool measures each partition's commit lag (for metrics).
const COMMIT_LAG_EVERY: Duration = Duration::from_secs(2);

/// Sets the commit-lag gauge of each partition: records on the log after
/// the group's committed offset.
async fn measure_commit_lag(ctx: Arc<PartitionContext>, partitions: Vec<u32>) {
    let (log, commands) = (ctx.processor.producer.log(), &ctx.commands);
    for partition in partitions {
        let last = log.last_offset(commands, partition).await;
        let committed = log.committed_offset(commands, &ctx.group, partition).await;
        if let (Ok(last), Ok(committed)) = (last, committed) {
            let lag = match (last, committed) {
                (Some(last), Some(committed)) => last.saturating_sub(committed),
                (Some(last), None) => last + 1,
                (None, _) => 0,
            };
            crate::metrics::commit_lag(
                ctx.processor.agent.as_str(),
                &commands.topic,
                partition,
                lag,
            );
        }
    }
}
