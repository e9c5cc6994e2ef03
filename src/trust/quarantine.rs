//! Quarantine: operator-signed control facts and the fold that applies them
//! (docs/runtime.md §6).
//!
//! A control fact is a `status` record on `agent.registry` with operation
//! `quarantine` or `unquarantine` whose body is the UTF-8 id of the agent
//! concerned (an optional `reason` rides in its metadata). The fold
//! ([`QuarantineFold`]) applies a fact only when
//!
//! - it verifies against the key registry as of the record's log timestamp
//!   (signed, enrolled key, principal = `source`, inside the key's window),
//! - the key is an **operator** key,
//! - its body names an agent,
//! - and its record id has not been applied before: a captured fact
//!   re-published verbatim is dropped.
//!
//! Everything else is ignored and counted, with the reason, so
//! `agdx quarantine --list` can say why a fact changed nothing.
//!
//! Facts are applied in log-timestamp order (then partition and offset),
//! whatever order the partitions are read in, so every reader of the same
//! records reaches the same state. A [`QuarantineWatch`] keeps that state
//! current by following every partition of the registry topic; producers
//! use it to refuse commands to a quarantined agent before sending, and a
//! worker pool pauses while its own agent is quarantined.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agdx_wire::{AgentEnvelope, AgentId, LogPosition, RecordId, StatusBodyError, StatusOperation};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::key::KeyId;
use super::registry::KeyKind;
use super::time::format_time;
use super::verify::{Verifier, VerifyError};
use crate::log::{LogError, LogRecord, SharedLog, TopicInfo, lock};

/// The metadata key a control fact's reason travels in.
pub const META_REASON: &str = "reason";

/// An applied control fact: where an agent stands and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuarantineStatus {
    /// The agent concerned.
    pub agent: AgentId,
    /// Whether it is quarantined now.
    pub quarantined: bool,
    /// The operator whose fact decided it.
    pub by: AgentId,
    /// The operator key that signed it.
    pub key_id: KeyId,
    /// The fact's log timestamp (epoch µs).
    pub since_micros: u64,
    /// The reason the operator gave.
    pub reason: Option<String>,
    /// The fact's record id.
    pub record: RecordId,
    /// Where the fact sits.
    pub position: LogPosition,
}

/// Why a registry record that looked like a control fact changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IgnoredWhy {
    /// It did not verify (unsigned, unknown key, forged, wrong principal,
    /// outside the key's window, ...).
    Unverified(VerifyError),
    /// Signed by a key that is not an operator key.
    NotOperator {
        /// The signer.
        principal: AgentId,
        /// Its key.
        key_id: KeyId,
    },
    /// Its body is not an agent id.
    BadBody(StatusBodyError),
    /// Its record id was applied already (a re-published copy).
    Replayed(RecordId),
}

impl IgnoredWhy {
    /// A short name: the verification check, `not_operator`, `bad_body` or
    /// `replayed`.
    pub fn check(&self) -> &'static str {
        match self {
            IgnoredWhy::Unverified(e) => e.check(),
            IgnoredWhy::NotOperator { .. } => "not_operator",
            IgnoredWhy::BadBody(_) => "bad_body",
            IgnoredWhy::Replayed(_) => "replayed",
        }
    }
}

impl std::fmt::Display for IgnoredWhy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IgnoredWhy::Unverified(e) => write!(f, "{e}"),
            IgnoredWhy::NotOperator { principal, key_id } => write!(
                f,
                "signed by '{principal}' with key {key_id}, an agent key; only operator keys sign control facts"
            ),
            IgnoredWhy::BadBody(why) => write!(f, "{why}"),
            IgnoredWhy::Replayed(record) => write!(
                f,
                "record {record} was applied already; a re-published copy changes nothing"
            ),
        }
    }
}

/// A control fact that changed nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IgnoredFact {
    /// Where it sits.
    pub position: LogPosition,
    /// Its log timestamp (epoch µs).
    pub timestamp_micros: u64,
    /// The operation it asked for: `quarantine` or `unquarantine`.
    pub operation: &'static str,
    /// Why it was ignored.
    pub why: IgnoredWhy,
}

/// The folded state: each agent a fact applied to, and the ignored facts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct QuarantineState {
    agents: BTreeMap<AgentId, QuarantineStatus>,
    ignored: Vec<IgnoredFact>,
}

impl QuarantineState {
    /// The agent's status when it is quarantined now.
    pub fn quarantined(&self, agent: &AgentId) -> Option<&QuarantineStatus> {
        self.agents.get(agent).filter(|s| s.quarantined)
    }

    /// Every agent some fact applied to, by agent id.
    pub fn agents(&self) -> impl Iterator<Item = &QuarantineStatus> {
        self.agents.values()
    }

    /// The facts that changed nothing, in the order they were judged.
    pub fn ignored(&self) -> &[IgnoredFact] {
        &self.ignored
    }

    /// How many facts were ignored for each reason (by
    /// [`IgnoredWhy::check`]), sorted by reason.
    pub fn ignored_counts(&self) -> BTreeMap<&'static str, usize> {
        let mut counts = BTreeMap::new();
        for fact in &self.ignored {
            *counts.entry(fact.why.check()).or_default() += 1;
        }
        counts
    }

    /// `Err` when `agent` is quarantined: for refusing work before sending.
    pub fn check(&self, agent: &AgentId) -> Result<(), Quarantined> {
        match self.quarantined(agent) {
            Some(status) => Err(Quarantined::from(status)),
            None => Ok(()),
        }
    }
}

/// An agent is quarantined: nothing is sent to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "agent '{agent}' is quarantined by '{by}' since {}{}",
    format_time(*.since_micros),
    reason.as_ref().map(|r| format!(" ({r})")).unwrap_or_default()
)]
pub struct Quarantined {
    /// The agent.
    pub agent: AgentId,
    /// The operator who quarantined it.
    pub by: AgentId,
    /// Since when (epoch µs).
    pub since_micros: u64,
    /// The reason the operator gave.
    pub reason: Option<String>,
}

impl From<&QuarantineStatus> for Quarantined {
    fn from(status: &QuarantineStatus) -> Self {
        Self {
            agent: status.agent.clone(),
            by: status.by.clone(),
            since_micros: status.since_micros,
            reason: status.reason.clone(),
        }
    }
}

/// A fact that verified with an operator key.
#[derive(Debug, Clone)]
struct Fact {
    status: QuarantineStatus,
}

/// Applies control facts from registry records (see the module docs).
#[derive(Debug, Clone)]
pub struct QuarantineFold {
    verifier: Verifier,
    facts: Vec<Fact>,
    rejected: Vec<IgnoredFact>,
}

impl QuarantineFold {
    /// A fold trusting the operator keys of `verifier`'s registry.
    pub fn new(verifier: Verifier) -> Self {
        Self {
            verifier,
            facts: Vec::new(),
            rejected: Vec::new(),
        }
    }

    /// Takes one registry record in. Records that are not control facts
    /// (cards, damaged ones) are passed over; returns whether the record
    /// was a control fact that verified (so the state may have changed).
    pub fn push(&mut self, record: &LogRecord) -> bool {
        let Ok(envelope) = AgentEnvelope::decode_valid(&record.payload) else {
            return false;
        };
        let quarantined = match envelope.status_operation() {
            Some(StatusOperation::Quarantine) => true,
            Some(StatusOperation::Unquarantine) => false,
            _ => return false,
        };
        let ignore = |why| IgnoredFact {
            position: record.position,
            timestamp_micros: record.timestamp_micros,
            operation: operation_name(quarantined),
            why,
        };
        let verified = match self.verifier.verify_record(&envelope, record) {
            Ok(verified) => verified,
            Err(error) => {
                self.rejected.push(ignore(IgnoredWhy::Unverified(error)));
                return false;
            }
        };
        if verified.kind != KeyKind::Operator {
            self.rejected.push(ignore(IgnoredWhy::NotOperator {
                principal: verified.principal,
                key_id: verified.key_id,
            }));
            return false;
        }
        // The validator leaves status bodies alone; the fold checks its own.
        let agent = match envelope.control_fact() {
            Ok(fact) => fact.agent,
            Err(error) => {
                self.rejected.push(ignore(IgnoredWhy::BadBody(error)));
                return false;
            }
        };
        let Some(record_id) = envelope.record else {
            return false;
        };
        let reason = envelope
            .metadata
            .as_ref()
            .and_then(|m| m.get(META_REASON))
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        self.facts.push(Fact {
            status: QuarantineStatus {
                agent,
                quarantined,
                by: verified.principal,
                key_id: verified.key_id,
                since_micros: record.timestamp_micros,
                reason,
                record: record_id,
                position: record.position,
            },
        });
        true
    }

    /// The state the facts so far lead to: applied in log-timestamp order,
    /// each record id once.
    pub fn state(&self) -> QuarantineState {
        let mut facts: Vec<&Fact> = self.facts.iter().collect();
        facts.sort_by_key(|f| {
            let p = f.status.position;
            (
                f.status.since_micros,
                p.stream,
                p.topic,
                p.partition,
                p.offset,
            )
        });
        let mut state = QuarantineState {
            agents: BTreeMap::new(),
            ignored: self.rejected.clone(),
        };
        let mut applied = HashSet::new();
        for fact in facts {
            let status = &fact.status;
            if !applied.insert(status.record) {
                state.ignored.push(IgnoredFact {
                    position: status.position,
                    timestamp_micros: status.since_micros,
                    operation: operation_name(status.quarantined),
                    why: IgnoredWhy::Replayed(status.record),
                });
                continue;
            }
            state.agents.insert(status.agent.clone(), status.clone());
        }
        state
    }

    /// Reads every partition of the registry topic to its end and folds it.
    pub async fn read(
        log: &SharedLog,
        registry: &TopicInfo,
        verifier: Verifier,
    ) -> Result<QuarantineState, LogError> {
        let mut fold = Self::new(verifier);
        for partition in 0..registry.partitions.get() {
            read_partition(
                log,
                registry,
                partition,
                0,
                Duration::ZERO,
                &mut |records| {
                    for record in records {
                        fold.push(record);
                    }
                },
            )
            .await?;
        }
        Ok(fold.state())
    }
}

fn operation_name(quarantined: bool) -> &'static str {
    if quarantined {
        StatusOperation::Quarantine.as_str()
    } else {
        StatusOperation::Unquarantine.as_str()
    }
}

/// Reads a partition from `from` until a poll (waiting up to `wait`) comes
/// back empty, handing each batch to `each`; a damaged record is stepped
/// over. Returns the next offset to read.
async fn read_partition(
    log: &SharedLog,
    topic: &TopicInfo,
    partition: u32,
    mut from: u64,
    wait: Duration,
    each: &mut (dyn FnMut(&[LogRecord]) + Send),
) -> Result<u64, LogError> {
    loop {
        match log.poll(topic, partition, from, 512, wait).await {
            Ok(records) if records.is_empty() => return Ok(from),
            Ok(records) => {
                from = records.last().map_or(from, |r| r.position.offset + 1);
                each(&records);
            }
            Err(LogError::Corrupt(damage)) => {
                tracing::warn!(%damage, "stepping over damaged records of the agent registry");
                from = damage.next_offset();
            }
            Err(error) => return Err(error),
        }
    }
}

/// The quarantine state kept current by following every partition of the
/// registry topic. Dropping it stops the readers.
pub struct QuarantineWatch {
    state: watch::Receiver<Arc<QuarantineState>>,
    stop: CancellationToken,
    readers: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for QuarantineWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuarantineWatch")
            .field("state", &*self.state.borrow())
            .finish_non_exhaustive()
    }
}

impl Drop for QuarantineWatch {
    fn drop(&mut self) {
        self.stop.cancel();
        for reader in &self.readers {
            reader.abort();
        }
    }
}

impl QuarantineWatch {
    /// Reads the registry topic to its end (so the first state is current),
    /// then follows it in the background.
    pub async fn start(
        log: SharedLog,
        registry: TopicInfo,
        verifier: Verifier,
    ) -> Result<Self, LogError> {
        let fold = Arc::new(Mutex::new(QuarantineFold::new(verifier)));
        let mut next = Vec::new();
        for partition in 0..registry.partitions.get() {
            let mut push = |records: &[LogRecord]| {
                let mut fold = lock(&fold);
                for record in records {
                    fold.push(record);
                }
            };
            next.push(
                read_partition(&log, &registry, partition, 0, Duration::ZERO, &mut push).await?,
            );
        }
        let first = lock(&fold).state();
        let (sender, state) = watch::channel(Arc::new(first));
        let sender = Arc::new(sender);
        let stop = CancellationToken::new();
        let readers = (0..registry.partitions.get())
            .zip(next)
            .map(|(partition, from)| {
                tokio::spawn(follow(
                    log.clone(),
                    registry.clone(),
                    partition,
                    from,
                    fold.clone(),
                    sender.clone(),
                    stop.clone(),
                ))
            })
            .collect();
        Ok(Self {
            state,
            stop,
            readers,
        })
    }

    /// The current state.
    pub fn state(&self) -> Arc<QuarantineState> {
        self.state.borrow().clone()
    }

    /// A receiver that sees every new state.
    pub fn subscribe(&self) -> watch::Receiver<Arc<QuarantineState>> {
        self.state.clone()
    }

    /// `Err` when `agent` is quarantined now.
    pub fn check(&self, agent: &AgentId) -> Result<(), Quarantined> {
        self.state.borrow().check(agent)
    }
}

/// Follows one partition of the registry, publishing a new state whenever a
/// verified fact arrives.
async fn follow(
    log: SharedLog,
    registry: TopicInfo,
    partition: u32,
    mut from: u64,
    fold: Arc<Mutex<QuarantineFold>>,
    sender: Arc<watch::Sender<Arc<QuarantineState>>>,
    stop: CancellationToken,
) {
    let mut failures = 0u32;
    loop {
        let mut changed = false;
        let mut push = |records: &[LogRecord]| {
            let mut fold = lock(&fold);
            for record in records {
                changed |= fold.push(record);
            }
        };
        let read = tokio::select! {
            _ = stop.cancelled() => return,
            read = read_partition(&log, &registry, partition, from, crate::log::DEFAULT_POLL_WAIT, &mut push) => read,
        };
        match read {
            Ok(next) => {
                failures = 0;
                from = next;
            }
            // Stopping cancels reads in flight; that is no failure.
            Err(_) if stop.is_cancelled() => return,
            Err(error) => {
                failures += 1;
                tracing::warn!(%error, partition, topic = %registry.topic, "reading control facts failed; retrying");
                tokio::time::sleep(crate::retry::backoff(failures)).await;
            }
        }
        if changed {
            let state = lock(&fold).state();
            sender.send_replace(Arc::new(state));
        }
    }
}

/// What a worker pool checks between records: whether its own agent is
/// quarantined, and a way to wait until it is not.
#[derive(Debug)]
pub(crate) struct Pause {
    agent: AgentId,
    watch: QuarantineWatch,
    reporter: Option<JoinHandle<()>>,
}

impl Drop for Pause {
    fn drop(&mut self) {
        if let Some(reporter) = &self.reporter {
            reporter.abort();
        }
    }
}

impl Pause {
    /// Follows the registry for `agent`'s quarantine.
    pub async fn start(
        log: SharedLog,
        registry: TopicInfo,
        verifier: Verifier,
        agent: AgentId,
    ) -> Result<Self, LogError> {
        Ok(Self {
            agent,
            watch: QuarantineWatch::start(log, registry, verifier).await?,
            reporter: None,
        })
    }

    /// Logs every pause and resume, and calls `changed` with whether the
    /// agent is quarantined now (at once, then on every change).
    pub fn on_change(mut self, changed: impl Fn(bool) + Send + 'static) -> Self {
        let mut state = self.watch.subscribe();
        let agent = self.agent.clone();
        self.reporter = Some(tokio::spawn(async move {
            let mut was = None;
            loop {
                let now = state.borrow_and_update().check(&agent).err();
                if Some(now.is_some()) != was {
                    match &now {
                        Some(quarantine) => tracing::warn!(
                            "{quarantine}: this pool takes no new work until the quarantine is lifted (it keeps its group membership)"
                        ),
                        None if was == Some(true) => {
                            tracing::warn!(agent = %agent, "quarantine lifted: taking work again")
                        }
                        None => {}
                    }
                    changed(now.is_some());
                    was = Some(now.is_some());
                }
                if state.changed().await.is_err() {
                    return;
                }
            }
        }));
        self
    }

    /// The quarantine in force, if any.
    pub fn quarantined(&self) -> Option<Quarantined> {
        self.watch.check(&self.agent).err()
    }

    /// Waits while the agent is quarantined; `true` when `cancel` fired
    /// first.
    pub async fn wait_while_quarantined(&self, cancel: &CancellationToken) -> bool {
        let mut state = self.watch.subscribe();
        loop {
            if state.borrow_and_update().quarantined(&self.agent).is_none() {
                return false;
            }
            tokio::select! {
                _ = cancel.cancelled() => return true,
                changed = state.changed() => {
                    // The watch lives as long as `self`; without it there is
                    // nothing to resume on, so only a stop ends the wait.
                    if changed.is_err() {
                        cancel.cancelled().await;
                        return true;
                    }
                }
            }
        }
    }
}
