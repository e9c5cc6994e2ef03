//! Live agent cards: who is running, read from `agent.registry`.
//!
//! A running worker pool member publishes its [`AgentCard`] (the agent's
//! name, version, the operations it handles as capabilities, and a TTL) as
//! a `status` `card` record when it starts, again before half the TTL has
//! passed, and a last card with a TTL of zero (its leaving) when it stops
//! gracefully. Each card names the publishing member in the envelope's
//! metadata ([`META_MEMBER`]), so one agent's members are told apart.
//!
//! [`LiveAgents`] folds the registry into who is live now: a member is live
//! while its newest card is younger than that card's TTL (60 s when the
//! card names none). It decodes each card body itself and counts what it
//! cannot use (the wire puts no rule on a `status` body).
//!
//! All cards of one agent land in one partition (their conversation is
//! derived from the agent's name), so [`worker_seen`] answers "is anyone
//! serving this agent" from the newest records of that partition alone.

use std::collections::{BTreeMap, HashSet};
use std::time::Duration;

use agdx_wire::{
    AgentCard, AgentEnvelope, AgentId, CapabilityDescriptor, ContentType, Kind, Metadata,
    StatusOperation,
};
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::clock::SharedClock;
use crate::ids::new_record_id;
use crate::log::{LogError, SharedLog, TopicInfo};
use crate::producer::{Outgoing, ProduceError, Producer};
use crate::routing::{card_conversation, partition_of};
use crate::topology::Topology;
use crate::view;

/// How long a card stays true when it names no TTL, and the TTL a worker
/// gives its card unless configured otherwise.
pub const DEFAULT_CARD_TTL: Duration = Duration::from_secs(60);

/// Metadata key of a card record naming the pool member that published it.
pub const META_MEMBER: &str = "agdx.member";

/// A worker re-publishes its card at least this often, whatever its TTL,
/// so a reader looking back twice this far finds every live worker.
pub const MAX_REPUBLISH: Duration = Duration::from_secs(300);

/// The skill id a card lists for a worker that handles every operation.
pub const ANY_OPERATION: &str = "*";

/// How far back [`worker_seen`] looks.
const LOOKBACK: Duration = Duration::from_secs(2 * MAX_REPUBLISH.as_secs());

/// Records read per step when scanning the registry backwards.
const SCAN: u64 = 256;

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// The card a worker publishes: its agent's name, `version`, one capability
/// per operation (and [`ANY_OPERATION`] when it has a fallback), `ttl`.
pub fn worker_card(
    agent: &AgentId,
    version: Option<&str>,
    operations: &[String],
    fallback: bool,
    ttl: Duration,
) -> AgentCard {
    let mut capabilities: Vec<CapabilityDescriptor> = operations
        .iter()
        .map(|op| CapabilityDescriptor::new(op.clone()))
        .collect();
    if fallback {
        capabilities.push(CapabilityDescriptor::new(ANY_OPERATION));
    }
    capabilities.truncate(agdx_wire::CARD_MAX_CAPABILITIES);
    AgentCard {
        name: Some(agent.to_string()),
        version: version.map(str::to_owned),
        capabilities,
        ttl_micros: Some(micros(ttl)),
    }
}

/// Publishes `card` as `producer`'s agent, naming `member`.
pub async fn publish_card(
    producer: &Producer,
    card: &AgentCard,
    member: &str,
) -> Result<(), ProduceError> {
    let agent = producer.source();
    let mut metadata = Metadata::new();
    metadata.insert(META_MEMBER, member.to_owned());
    let envelope = AgentEnvelope::status_card(
        new_record_id(),
        card_conversation(agent),
        agent.clone(),
        card,
    )
    .with_metadata(metadata);
    let registry = producer.topology().registry.clone();
    producer
        .publish_one(&registry, Outgoing::new(envelope, ContentType::Cbor))
        .await
        .map(|_| ())
}

/// How often a card with `ttl` is published again: a third of the TTL (so
/// well before half of it), at most [`MAX_REPUBLISH`], at least 10 ms.
pub fn republish_every(ttl: Duration) -> Duration {
    (ttl / 3).clamp(Duration::from_millis(10), MAX_REPUBLISH)
}

/// Publishes `card` now and again every [`republish_every`] until
/// `shutdown`, then its leaving (the same card with a TTL of zero).
/// Failures are logged and tried again at the next turn: a card is a
/// sign of life, never a reason to stop working.
pub(crate) async fn keep_card_fresh(
    producer: Producer,
    card: AgentCard,
    member: String,
    shutdown: CancellationToken,
) {
    let ttl = Duration::from_micros(card.ttl_micros.unwrap_or(micros(DEFAULT_CARD_TTL)));
    let mut tick = tokio::time::interval(republish_every(ttl));
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = tick.tick() => {}
        }
        if let Err(error) = publish_card(&producer, &card, &member).await {
            tracing::warn!(%error, "could not publish the agent card; trying again at the next turn");
        }
    }
    let leaving = AgentCard {
        ttl_micros: Some(0),
        ..card
    };
    if let Err(error) = publish_card(&producer, &leaving, &member).await {
        tracing::warn!(%error, "could not publish the agent's leaving; its card expires with its TTL");
    }
}

/// One member's newest card.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Sighting {
    card: AgentCard,
    seen_micros: u64,
}

impl Sighting {
    fn expires_micros(&self) -> u64 {
        let ttl = self.card.ttl_micros.unwrap_or(micros(DEFAULT_CARD_TTL));
        self.seen_micros.saturating_add(ttl)
    }

    fn fresh_at(&self, now_micros: u64) -> bool {
        now_micros < self.expires_micros()
    }
}

/// An agent with at least one live member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAgent {
    /// The agent.
    pub agent: AgentId,
    /// Its newest card.
    pub card: AgentCard,
    /// The operations its live members handle ([`ANY_OPERATION`] for any).
    pub operations: Vec<String>,
    /// Its live members, as they name themselves.
    pub members: Vec<String>,
    /// When its newest card was published, epoch microseconds (log time).
    pub last_seen_micros: u64,
    /// When the last of its live cards expires unless re-published.
    pub expires_micros: u64,
}

/// The registry folded into who is live: the newest card of every member.
///
/// [`LiveAgents::resume`] starts from the view's newest snapshot on
/// `agent.snapshots` ([`crate::view`]) and [`LiveAgents::save_if_due`]
/// writes the next one, so neither start-up nor memory grows with the
/// registry's history: members whose cards have expired are forgotten.
#[derive(Debug, Clone, Default)]
pub struct LiveAgents {
    newest: BTreeMap<(AgentId, String), Sighting>,
    next: BTreeMap<u32, u64>,
    skipped: u64,
    /// The newest log time folded: sightings expired by then are dropped.
    newest_micros: u64,
    /// Records folded since the last snapshot (or the start).
    unsaved: u64,
    /// Whether it started from a snapshot, or saved one since.
    resumed: bool,
    /// When it last saved a snapshot, or started.
    saved_at: Option<std::time::Instant>,
}

/// What a snapshot of [`LiveAgents`] holds: each member's newest card, as
/// the card body's bytes.
#[derive(Serialize, Deserialize)]
struct SavedSighting {
    agent: AgentId,
    member: String,
    #[serde(with = "crate::replay::snapshot::serde_bytes_vec")]
    card: Vec<u8>,
    seen_micros: u64,
}

impl LiveAgents {
    /// The view from its newest snapshot (reading on from where it got
    /// to), or empty when there is none or it cannot be read. Call
    /// [`LiveAgents::catch_up`] to read what follows.
    pub async fn resume(log: &SharedLog, topology: &Topology) -> Self {
        let saved = match view::resume::<Vec<SavedSighting>>(
            log,
            topology,
            &view::CARDS,
            view::CARDS.name,
        )
        .await
        {
            Ok(saved) => saved,
            Err(error) => {
                tracing::warn!(%error, "the live-cards snapshot cannot be read; folding the registry from its start");
                None
            }
        };
        let Some((sightings, next)) = saved else {
            return Self::default();
        };
        let mut agents = Self {
            next,
            resumed: true,
            ..Self::default()
        };
        for saved in sightings {
            let Ok(card) = AgentCard::decode(&saved.card) else {
                agents.skipped += 1;
                continue;
            };
            agents.newest_micros = agents.newest_micros.max(saved.seen_micros);
            agents.newest.insert(
                (saved.agent, saved.member),
                Sighting {
                    card,
                    seen_micros: saved.seen_micros,
                },
            );
        }
        agents
    }

    /// Saves a snapshot when [`view::snapshot_due`] says one is due;
    /// returns whether it did.
    pub async fn save_if_due(
        &mut self,
        log: &SharedLog,
        topology: &Topology,
    ) -> Result<bool, crate::replay::ReplayError> {
        let saved_at = *self.saved_at.get_or_insert_with(std::time::Instant::now);
        if !view::snapshot_due(self.unsaved, self.resumed, saved_at.elapsed()) {
            return Ok(false);
        }
        let sightings: Vec<SavedSighting> = self
            .newest
            .iter()
            .map(|((agent, member), sighting)| SavedSighting {
                agent: agent.clone(),
                member: member.clone(),
                card: sighting.card.encode(),
                seen_micros: sighting.seen_micros,
            })
            .collect();
        view::save(
            log,
            topology,
            &view::CARDS,
            view::CARDS.name,
            &self.next,
            &sightings,
        )
        .await?;
        self.unsaved = 0;
        self.resumed = true;
        self.saved_at = Some(std::time::Instant::now());
        Ok(true)
    }

    /// Folds one registry record; anything but a usable card is skipped
    /// (control facts silently, broken cards counted).
    pub fn apply(&mut self, payload: &[u8], timestamp_micros: u64) {
        self.newest_micros = self.newest_micros.max(timestamp_micros);
        let Ok(envelope) = AgentEnvelope::decode(payload) else {
            self.skipped += 1;
            return;
        };
        if envelope.kind != Kind::Status
            || envelope.operation.as_deref() != Some(StatusOperation::Card.as_str())
        {
            return;
        }
        let Some(card) = card_of(&envelope) else {
            self.skipped += 1;
            return;
        };
        let member = envelope
            .metadata
            .as_ref()
            .and_then(|m| m.get(META_MEMBER))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_owned();
        let sighting = Sighting {
            card,
            seen_micros: timestamp_micros,
        };
        let slot = self.newest.entry((envelope.source, member));
        match slot {
            std::collections::btree_map::Entry::Occupied(mut old) => {
                if old.get().seen_micros <= timestamp_micros {
                    old.insert(sighting);
                }
            }
            std::collections::btree_map::Entry::Vacant(empty) => {
                empty.insert(sighting);
            }
        }
    }

    /// Reads what the registry gained since the last call, then forgets
    /// the members whose cards had expired by the newest record read.
    pub async fn catch_up(
        &mut self,
        log: &SharedLog,
        registry: &TopicInfo,
    ) -> Result<(), LogError> {
        for partition in 0..registry.partitions.get() {
            let from = self.next.get(&partition).copied().unwrap_or(0);
            let mut folded = 0u64;
            let mut apply = |records: &[crate::log::LogRecord]| {
                for record in records {
                    self.apply(&record.payload, record.timestamp_micros);
                }
                folded += records.len() as u64;
            };
            let (next, damaged) =
                view::read_partition(log, registry, partition, from, Duration::ZERO, &mut apply)
                    .await?;
            self.skipped += damaged;
            self.unsaved += folded;
            self.next.insert(partition, next);
        }
        let newest = self.newest_micros;
        self.newest.retain(|_, sighting| sighting.fresh_at(newest));
        Ok(())
    }

    /// How many members the view holds (live, or not yet seen to expire).
    pub fn members(&self) -> usize {
        self.newest.len()
    }

    /// Records that looked like cards but could not be used.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Every agent live at `now_micros`, by name.
    pub fn live(&self, now_micros: u64) -> Vec<LiveAgent> {
        let mut agents: BTreeMap<&AgentId, LiveAgent> = BTreeMap::new();
        for ((agent, member), sighting) in &self.newest {
            if !sighting.fresh_at(now_micros) {
                continue;
            }
            let live = agents.entry(agent).or_insert_with(|| LiveAgent {
                agent: agent.clone(),
                card: sighting.card.clone(),
                operations: Vec::new(),
                members: Vec::new(),
                last_seen_micros: sighting.seen_micros,
                expires_micros: sighting.expires_micros(),
            });
            if sighting.seen_micros >= live.last_seen_micros {
                live.card = sighting.card.clone();
                live.last_seen_micros = sighting.seen_micros;
            }
            live.expires_micros = live.expires_micros.max(sighting.expires_micros());
            live.members.push(member.clone());
            for capability in &sighting.card.capabilities {
                if !live.operations.contains(&capability.skill_id) {
                    live.operations.push(capability.skill_id.clone());
                }
            }
        }
        agents.into_values().collect()
    }
}

/// Whether a worker for an agent was seen on the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerSeen {
    /// Not looked up.
    Unchecked,
    /// A member's card is fresh: published at this time (epoch µs).
    Live {
        /// When the newest fresh card was published.
        last_seen_micros: u64,
    },
    /// Cards were seen, but every member left or its card expired.
    Gone {
        /// When the newest card was published.
        last_seen_micros: u64,
    },
    /// No card of the agent in the last ten minutes of the registry.
    Never,
}

impl WorkerSeen {
    /// Whether a live worker was seen.
    pub fn is_live(&self) -> bool {
        matches!(self, WorkerSeen::Live { .. })
    }
}

/// Whether a live worker for `agent` has a fresh card at `clock`'s now,
/// from the newest records of the agent's registry partition (ten minutes
/// back at most).
pub async fn worker_seen(
    log: &SharedLog,
    topology: &Topology,
    agent: &AgentId,
    clock: &SharedClock,
) -> Result<WorkerSeen, LogError> {
    let registry = &topology.registry;
    let partition = partition_of(registry, card_conversation(agent));
    let Some(last) = log.last_offset(registry, partition).await? else {
        return Ok(WorkerSeen::Never);
    };
    let now = clock.now_micros();
    let horizon = now.saturating_sub(micros(LOOKBACK));
    let mut decided = HashSet::new();
    let mut newest: Option<u64> = None;
    let mut end = last + 1;
    while end > 0 {
        let start = end.saturating_sub(SCAN);
        let batch = match log
            .poll(
                registry,
                partition,
                start,
                (end - start) as u32,
                Duration::ZERO,
            )
            .await
        {
            Ok(batch) => batch,
            Err(LogError::Corrupt(_)) => Vec::new(),
            Err(error) => return Err(error),
        };
        for record in batch.iter().rev().filter(|r| r.position.offset < end) {
            if record.timestamp_micros < horizon {
                end = 0;
                break;
            }
            let mut one = LiveAgents::default();
            one.apply(&record.payload, record.timestamp_micros);
            for ((source, member), sighting) in one.newest {
                if &source != agent || !decided.insert(member) {
                    continue;
                }
                newest = Some(newest.unwrap_or(0).max(sighting.seen_micros));
                if sighting.fresh_at(now) {
                    return Ok(WorkerSeen::Live {
                        last_seen_micros: sighting.seen_micros,
                    });
                }
            }
        }
        end = end.min(start);
    }
    Ok(match newest {
        Some(last_seen_micros) => WorkerSeen::Gone { last_seen_micros },
        None => WorkerSeen::Never,
    })
}

/// The card a `status` `card` envelope carries, when its body is one.
pub fn card_of(envelope: &AgentEnvelope) -> Option<AgentCard> {
    (envelope.kind == Kind::Status
        && envelope.operation.as_deref() == Some(StatusOperation::Card.as_str()))
    .then(|| AgentCard::decode_valid(&envelope.body).ok())
    .flatten()
}
