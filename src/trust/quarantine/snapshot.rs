//! The quarantine fold saved and restored: the facts in force with their
//! signed records, verified again on the way back in, and the record ids
//! of the facts they overrode, so a copy of one published again stays
//! `replayed`. A snapshot grows by 17 bytes per fact, not by its status.

use std::collections::HashSet;

use agdx_wire::{AgentEnvelope, ContentType, RecordId};
use serde::{Deserialize, Serialize};

use super::{Fact, QuarantineFold, QuarantineStatus};
use crate::log::LogRecord;
use crate::trust::verify::{Observed, ObservedHeaders, Verifier};

/// A control fact's record as read: its bytes and what the log said about
/// it that its signature may be bound to.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct RawFact {
    #[serde(with = "crate::replay::snapshot::serde_bytes_vec")]
    pub payload: Vec<u8>,
    pub timestamp_micros: u64,
    pub content_type: Option<u8>,
    pub wire_version: Option<u32>,
}

impl RawFact {
    pub fn of(record: &LogRecord) -> Self {
        let headers = Observed::of(record).headers;
        Self {
            payload: record.payload.to_vec(),
            timestamp_micros: record.timestamp_micros,
            content_type: headers.and_then(|h| h.content_type).map(ContentType::code),
            wire_version: headers.and_then(|h| h.wire_version),
        }
    }

    pub fn observed(&self) -> Observed {
        Observed {
            timestamp_micros: self.timestamp_micros,
            headers: Some(ObservedHeaders {
                content_type: self.content_type.map(ContentType::from_code),
                wire_version: self.wire_version,
            }),
        }
    }
}

/// What a quarantine snapshot holds.
#[derive(Serialize, Deserialize)]
pub(super) struct SavedFacts {
    facts: Vec<SavedFact>,
    /// Absent from the snapshots of earlier versions, which kept overridden
    /// facts among `facts` instead.
    #[serde(default)]
    spent: Vec<RecordId>,
}

#[derive(Serialize, Deserialize)]
struct SavedFact {
    status: QuarantineStatus,
    raw: Option<RawFact>,
}

impl QuarantineFold {
    /// The fold as a snapshot holds it. The facts no longer in force are
    /// forgotten here, all but their record ids: only the facts in force
    /// are kept whole (and verified again on restore).
    pub(super) fn saved(&mut self) -> SavedFacts {
        let in_force: HashSet<_> = self.state().agents.values().map(|s| s.record).collect();
        let overridden: Vec<RecordId> = self
            .facts
            .keys()
            .filter(|record| !in_force.contains(record))
            .copied()
            .collect();
        for record in overridden {
            self.facts.remove(&record);
            self.spent.insert(record);
        }
        SavedFacts {
            facts: self
                .facts
                .values()
                .map(|f| SavedFact {
                    status: f.status.clone(),
                    raw: f.raw.clone(),
                })
                .collect(),
            spent: self.spent.iter().copied().collect(),
        }
    }

    /// The fold a snapshot holds, once every fact in force in it verifies
    /// against `verifier` as what the snapshot says it is.
    pub(super) fn restore(verifier: Verifier, saved: SavedFacts) -> Result<Self, String> {
        let mut fold = Self::new(verifier);
        fold.spent = saved.spent.into_iter().collect();
        fold.facts = saved
            .facts
            .into_iter()
            .map(|f| {
                let fact = Fact {
                    status: f.status,
                    raw: f.raw,
                };
                (fact.status.record, fact)
            })
            .collect();
        let in_force: HashSet<_> = fold.state().agents.values().map(|s| s.record).collect();
        for fact in fold
            .facts
            .values()
            .filter(|f| in_force.contains(&f.status.record))
        {
            let status = &fact.status;
            let Some(raw) = &fact.raw else {
                return Err(format!(
                    "the fact in force for '{}' comes without its record",
                    status.agent
                ));
            };
            let checked = match fold.check(raw) {
                Ok(Some(checked)) => checked,
                Ok(None) => return Err(format!("record {} is no control fact", status.record)),
                Err((_, why)) => return Err(format!("fact {}: {why}", status.record)),
            };
            let same = checked.agent == status.agent
                && checked.quarantined == status.quarantined
                && checked.by == status.by
                && checked.key_id == status.key_id
                && checked.record == status.record
                && raw.timestamp_micros == status.since_micros
                && AgentEnvelope::decode(&raw.payload).is_ok();
            if !same {
                return Err(format!(
                    "fact {} says something else than its record",
                    status.record
                ));
            }
        }
        Ok(fold)
    }
}
