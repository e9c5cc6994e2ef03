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

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agdx_wire::{AgentEnvelope, AgentId, LogPosition, RecordId, StatusBodyError, StatusOperation};
use serde::{Deserialize, Serialize};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::key::KeyId;
use super::registry::KeyKind;
use super::time::format_time;
use super::verify::{Verifier, VerifyError};
use crate::log::{LogError, LogRecord, SharedLog, TopicInfo, lock};
use crate::topology::Topology;
use crate::view;

mod snapshot;

use snapshot::RawFact;

/// The metadata key a control fact's reason travels in.
pub const META_REASON: &str = "reason";

/// An applied control fact: where an agent stands and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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
    /// The record as read, kept to verify again from a snapshot; dropped
    /// for facts no longer in force when a snapshot is taken.
    raw: Option<RawFact>,
}

impl Fact {
    /// The order facts apply in: log timestamp, then position.
    fn order(&self) -> (u64, u32, u32, u32, u64) {
        let p = self.status.position;
        (
            self.status.since_micros,
            p.stream,
            p.topic,
            p.partition,
            p.offset,
        )
    }
}

/// How many ignored facts a fold keeps, the newest: a writer flooding the
/// registry with unsigned facts must not grow it without bound.
pub const MAX_IGNORED: usize = 1000;

/// Applies control facts from registry records (see the module docs).
#[derive(Debug, Clone)]
pub struct QuarantineFold {
    verifier: Verifier,
    /// One fact per record id, the first in log-timestamp order: a copy
    /// published again is judged `replayed` at once and kept no longer.
    facts: HashMap<RecordId, Fact>,
    /// The record ids of facts a later fact about the same agent overrode
    /// when a snapshot was taken: all that is left to know of them is that
    /// a copy of one is `replayed`, whatever its order (a copy of a fact
    /// overridden is overridden too).
    spent: HashSet<RecordId>,
    rejected: VecDeque<IgnoredFact>,
}

/// A control fact that verified: what it says and who signed it.
struct Checked {
    agent: AgentId,
    quarantined: bool,
    by: AgentId,
    key_id: KeyId,
    record: RecordId,
    reason: Option<String>,
}

impl QuarantineFold {
    /// A fold trusting the operator keys of `verifier`'s registry.
    pub fn new(verifier: Verifier) -> Self {
        Self {
            verifier,
            facts: HashMap::new(),
            spent: HashSet::new(),
            rejected: VecDeque::new(),
        }
    }

    /// Takes one registry record in. Records that are not control facts
    /// (cards, damaged ones) are passed over; returns whether the record
    /// was a control fact that verified (so the state may have changed).
    pub fn push(&mut self, record: &LogRecord) -> bool {
        let raw = RawFact::of(record);
        let checked = match self.check(&raw) {
            Ok(Some(checked)) => checked,
            Ok(None) => return false,
            Err((quarantined, why)) => {
                self.ignore(IgnoredFact {
                    position: record.position,
                    timestamp_micros: record.timestamp_micros,
                    operation: operation_name(quarantined),
                    why,
                });
                return false;
            }
        };
        let fact = Fact {
            status: QuarantineStatus {
                agent: checked.agent,
                quarantined: checked.quarantined,
                by: checked.by,
                key_id: checked.key_id,
                since_micros: record.timestamp_micros,
                reason: checked.reason,
                record: checked.record,
                position: record.position,
            },
            raw: Some(raw),
        };
        let record = fact.status.record;
        let applied_before = self.spent.contains(&record)
            || self
                .facts
                .get(&record)
                .is_some_and(|first| first.order() <= fact.order());
        let replayed = if applied_before {
            fact
        } else {
            match self.facts.insert(record, fact) {
                Some(later) => later,
                None => return true,
            }
        };
        self.ignore(IgnoredFact {
            position: replayed.status.position,
            timestamp_micros: replayed.status.since_micros,
            operation: operation_name(replayed.status.quarantined),
            why: IgnoredWhy::Replayed(replayed.status.record),
        });
        true
    }

    fn ignore(&mut self, fact: IgnoredFact) {
        if self.rejected.len() == MAX_IGNORED {
            self.rejected.pop_front();
        }
        self.rejected.push_back(fact);
    }

    /// Verifies a record as a control fact: `Ok(None)` when it is none,
    /// `Err` with the operation it asked for when it is one that does not
    /// count.
    fn check(&self, raw: &RawFact) -> Result<Option<Checked>, (bool, IgnoredWhy)> {
        let Ok(envelope) = AgentEnvelope::decode_valid(&raw.payload) else {
            return Ok(None);
        };
        let quarantined = match envelope.status_operation() {
            Some(StatusOperation::Quarantine) => true,
            Some(StatusOperation::Unquarantine) => false,
            _ => return Ok(None),
        };
        let verified = self
            .verifier
            .verify_decoded(&envelope, &raw.payload, &raw.observed())
            .map_err(|error| (quarantined, IgnoredWhy::Unverified(error)))?;
        if verified.kind != KeyKind::Operator {
            return Err((
                quarantined,
                IgnoredWhy::NotOperator {
                    principal: verified.principal,
                    key_id: verified.key_id,
                },
            ));
        }
        // The validator leaves status bodies alone; the fold checks its own.
        let agent = envelope
            .control_fact()
            .map_err(|error| (quarantined, IgnoredWhy::BadBody(error)))?
            .agent;
        let Some(record) = envelope.record else {
            return Ok(None);
        };
        let reason = envelope
            .metadata
            .as_ref()
            .and_then(|m| m.get(META_REASON))
            .and_then(|v| v.as_str())
            .map(str::to_owned);
        Ok(Some(Checked {
            agent,
            quarantined,
            by: verified.principal,
            key_id: verified.key_id,
            record,
            reason,
        }))
    }

    /// The state the facts so far lead to: applied in log-timestamp order,
    /// each record id once.
    pub fn state(&self) -> QuarantineState {
        let mut facts: Vec<&Fact> = self.facts.values().collect();
        facts.sort_by_key(|f| f.order());
        let mut state = QuarantineState {
            agents: BTreeMap::new(),
            ignored: self.rejected.iter().cloned().collect(),
        };
        for fact in facts {
            state
                .agents
                .insert(fact.status.agent.clone(), fact.status.clone());
        }
        state
    }

    /// Reads every partition of the registry topic to its end and folds
    /// it: the whole history there is, for audits (the
    /// [`QuarantineWatch`] resumes from a snapshot instead).
    pub async fn read(
        log: &SharedLog,
        registry: &TopicInfo,
        verifier: Verifier,
    ) -> Result<QuarantineState, LogError> {
        let mut fold = Self::new(verifier);
        for partition in 0..registry.partitions.get() {
            let mut push = |records: &[LogRecord]| {
                for record in records {
                    fold.push(record);
                }
            };
            view::read_partition(log, registry, partition, 0, Duration::ZERO, &mut push).await?;
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

/// A watch's fold and how far it read, changed together so a snapshot
/// holds exactly the records before its offsets.
struct Progress {
    fold: QuarantineFold,
    next: BTreeMap<u32, u64>,
    unsaved: u64,
    /// Whether the watch started from a snapshot, or saved one since.
    resumed: bool,
    /// When it last saved a snapshot, or started.
    saved_at: Instant,
    /// The name its snapshots go by ([`instance_of`]).
    instance: String,
}

impl Progress {
    fn take(&mut self, partition: u32, records: &[LogRecord]) -> bool {
        let mut changed = false;
        for record in records {
            changed |= self.fold.push(record);
        }
        if let Some(last) = records.last() {
            self.next.insert(partition, last.position.offset + 1);
        }
        self.unsaved += records.len() as u64;
        changed
    }

    /// The snapshot to save when one is due.
    fn due(&mut self) -> Option<(snapshot::SavedFacts, BTreeMap<u32, u64>, String)> {
        if !view::snapshot_due(self.unsaved, self.resumed, self.saved_at.elapsed()) {
            return None;
        }
        self.unsaved = 0;
        self.resumed = true;
        self.saved_at = Instant::now();
        Some((self.fold.saved(), self.next.clone(), self.instance.clone()))
    }
}

/// The quarantine state kept current by following every partition of the
/// registry topic. Dropping it stops the readers.
///
/// It starts from the newest quarantine snapshot on `agent.snapshots`
/// ([`crate::view`]) and reads only the registry records after it, and
/// saves a snapshot when [`view::snapshot_due`] says so. A
/// snapshot holds the facts in force with their signed records, verified
/// again when a watch resumes from it, and the record ids of the facts
/// they overrode (so that a copy published again stays ignored); a
/// snapshot that fails is passed over and the registry read from its
/// start, so a snapshot cannot make an agent quarantined or free that no
/// operator's signed fact made so.
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
    /// Reads the registry from the newest snapshot to its end (so the
    /// first state is current), then follows it in the background.
    pub async fn start(
        log: SharedLog,
        topology: Topology,
        verifier: Verifier,
    ) -> Result<Self, LogError> {
        let registry = topology.registry.clone();
        let started = Instant::now();
        let instance = instance_of(&verifier);
        let (fold, next) = resume(&log, &topology, verifier, &instance).await;
        let resumed_in = started.elapsed();
        let progress = Arc::new(Mutex::new(Progress {
            fold,
            resumed: !next.is_empty(),
            next,
            unsaved: 0,
            saved_at: Instant::now(),
            instance,
        }));
        for partition in 0..registry.partitions.get() {
            let from = lock(&progress).next.get(&partition).copied().unwrap_or(0);
            let mut push = |records: &[LogRecord]| {
                lock(&progress).take(partition, records);
            };
            let (next, _) =
                view::read_partition(&log, &registry, partition, from, Duration::ZERO, &mut push)
                    .await?;
            lock(&progress).next.insert(partition, next);
        }
        // Saved beside the pool's start rather than before it: a pool waits
        // for this watch before it joins its group. Detached, so that a
        // watch stopped at once still leaves its snapshot.
        {
            let (log, topology, progress) = (log.clone(), topology.clone(), progress.clone());
            tokio::spawn(async move { save_if_due(&log, &topology, &progress).await });
        }
        tracing::debug!(
            resumed = ?resumed_in,
            caught_up = ?started.elapsed(),
            "quarantine watch started"
        );
        let first = lock(&progress).fold.state();
        let (sender, state) = watch::channel(Arc::new(first));
        let sender = Arc::new(sender);
        let stop = CancellationToken::new();
        let readers = (0..registry.partitions.get())
            .map(|partition| {
                tokio::spawn(follow(
                    log.clone(),
                    topology.clone(),
                    partition,
                    progress.clone(),
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

/// The fold from the newest snapshot that verifies, and where to read on.
async fn resume(
    log: &SharedLog,
    topology: &Topology,
    verifier: Verifier,
    instance: &str,
) -> (QuarantineFold, BTreeMap<u32, u64>) {
    let saved = match view::resume::<snapshot::SavedFacts>(
        log,
        topology,
        &view::QUARANTINE,
        instance,
    )
    .await
    {
        Ok(saved) => saved,
        Err(error) => {
            tracing::warn!(%error, "the quarantine snapshot cannot be read; folding the registry from its start");
            None
        }
    };
    let Some((saved, next)) = saved else {
        return (QuarantineFold::new(verifier), BTreeMap::new());
    };
    match QuarantineFold::restore(verifier.clone(), saved) {
        Ok(fold) => (fold, next),
        Err(why) => {
            tracing::warn!(%why, "the quarantine snapshot does not verify; folding the registry from its start");
            (QuarantineFold::new(verifier), BTreeMap::new())
        }
    }
}

/// The name a watch's snapshots go by: the view's and the fingerprint of
/// the keys it trusts. A reader trusting other keys folds another set from
/// the same records, and its snapshot would leave out facts this one
/// holds in force (which retention may since have removed from the
/// registry), so each resumes only from snapshots made with its own keys.
fn instance_of(verifier: &Verifier) -> String {
    let keys = verifier.registry().to_json();
    format!(
        "{}#{:016x}",
        view::QUARANTINE.name,
        xxhash_rust::xxh3::xxh3_64(keys.as_bytes())
    )
}

/// Saves a snapshot when enough was folded since the last.
async fn save_if_due(log: &SharedLog, topology: &Topology, progress: &Mutex<Progress>) {
    let Some((saved, next, instance)) = lock(progress).due() else {
        return;
    };
    if let Err(error) = view::save(log, topology, &view::QUARANTINE, &instance, &next, &saved).await
    {
        tracing::warn!(%error, "could not save a quarantine snapshot; the next start reads further back");
    }
}

/// Follows one partition of the registry, publishing a new state whenever a
/// verified fact arrives.
async fn follow(
    log: SharedLog,
    topology: Topology,
    partition: u32,
    progress: Arc<Mutex<Progress>>,
    sender: Arc<watch::Sender<Arc<QuarantineState>>>,
    stop: CancellationToken,
) {
    let registry = &topology.registry;
    let mut failures = 0u32;
    loop {
        let mut changed = false;
        let from = lock(&progress).next.get(&partition).copied().unwrap_or(0);
        let mut push = |records: &[LogRecord]| {
            changed |= lock(&progress).take(partition, records);
        };
        let read = tokio::select! {
            _ = stop.cancelled() => return,
            read = view::read_partition(&log, registry, partition, from, crate::log::DEFAULT_POLL_WAIT, &mut push) => read,
        };
        match read {
            Ok((next, _)) => {
                failures = 0;
                lock(&progress).next.insert(partition, next);
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
            let state = lock(&progress).fold.state();
            sender.send_replace(Arc::new(state));
        }
        save_if_due(&log, &topology, &progress).await;
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
        topology: Topology,
        verifier: Verifier,
        agent: AgentId,
    ) -> Result<Self, LogError> {
        Ok(Self {
            agent,
            watch: QuarantineWatch::start(log, topology, verifier).await?,
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
