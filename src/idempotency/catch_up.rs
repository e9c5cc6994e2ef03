//! Rebuilding processed keys from the replies on the log.
//!
//! A catch-up reads one partition of `agent.responses` from where the last
//! one stopped and records every keyed `response` the agent published. Each
//! partition keeps its own place and its own lock, so a long first
//! catch-up of one partition holds up only the keyed commands whose replies
//! belong there.

use agdx_wire::{AgentEnvelope, AgentId, Kind};
use rusqlite::{OptionalExtension, params};

use super::marks::{Mark, from_sql};
use super::{KeyScope, ProcessedKeys, StoreError, insert, to_sql, trim};
use crate::log::{LogError, LogRecord};
use crate::producer::Outgoing;
use crate::record::{content_type_of, envelope_of};

/// Records read per poll while catching up.
const CATCH_UP_BATCH: u32 = 1024;

impl ProcessedKeys {
    /// Reads `partition` of the replies from where the last catch-up for
    /// `agent` stopped up to its end, and records every keyed `response`
    /// that `agent` published and that is within the retention at
    /// `now_micros`. Returns how many keys it added.
    pub async fn catch_up(
        &self,
        partition: u32,
        agent: &AgentId,
        now_micros: u64,
    ) -> Result<usize, StoreError> {
        self.verify(agent).await?;
        let lock = self.inner.catching_up.entry(partition).or_default().clone();
        let _one_at_a_time = lock.lock().await;
        let (log, responses) = (&self.inner.log, &self.inner.responses);
        let mut next = self.next_offset(agent, partition).await?;
        let Some(last) = log.last_offset(responses, partition).await? else {
            return Ok(0);
        };
        let mut added = 0;
        while next <= last {
            let records = match log
                .poll(
                    responses,
                    partition,
                    next,
                    CATCH_UP_BATCH,
                    std::time::Duration::ZERO,
                )
                .await
            {
                Ok(records) => records,
                // A damaged reply holds no key anyone can read; step over it.
                Err(LogError::Corrupt(damage)) => {
                    tracing::warn!(%damage, "skipping damaged replies while catching up with processed keys");
                    next = damage.next_offset();
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let Some(tail) = records.last() else { break };
            next = tail.position.offset + 1;
            let entries: Vec<_> = records
                .iter()
                .filter_map(|record| keyed_entry(record, agent))
                .collect();
            added += entries.len();
            self.advance(agent, partition, entries, next, Mark::of(tail), now_micros)
                .await?;
        }
        Ok(added)
    }

    /// Where `agent`'s catch-up of `partition` stopped: the next offset to read.
    async fn next_offset(&self, agent: &AgentId, partition: u32) -> Result<u64, StoreError> {
        let agent = agent.to_string();
        let next = self
            .with_conn(move |c, log| {
                c.prepare_cached(
                    "SELECT next_offset FROM rebuilt WHERE log = ?1 AND agent = ?2 AND partition = ?3",
                )?
                .query_row(params![log, agent, partition], |row| row.get::<_, i64>(0))
                .optional()
            })
            .await?;
        Ok(next.map_or(0, from_sql))
    }

    /// Records the keys a catch-up found, where it now stands and the mark
    /// of the last reply it read, together.
    async fn advance(
        &self,
        agent: &AgentId,
        partition: u32,
        entries: Vec<(KeyScope, Vec<Outgoing>, u64)>,
        next_offset: u64,
        mark: Mark,
        now_micros: u64,
    ) -> Result<(), StoreError> {
        let agent = agent.clone();
        let retention = self.inner.retention;
        self.with_conn(move |c, log| {
            let tx = c.transaction()?;
            insert(&tx, log, &entries)?;
            trim(&tx, log, &agent, retention, now_micros)?;
            mark.keep(&tx, log, &agent)?;
            tx.prepare_cached(
                "INSERT INTO rebuilt (log, agent, partition, next_offset) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (log, agent, partition) DO UPDATE SET next_offset = excluded.next_offset",
            )?
            .execute(params![log, agent.as_str(), partition, to_sql(next_offset)])?;
            tx.commit()
        })
        .await
    }
}

/// The processed key a reply record shows, when it is a keyed `response`
/// published by `agent`; it was recorded when the log accepted the reply.
fn keyed_entry(record: &LogRecord, agent: &AgentId) -> Option<(KeyScope, Vec<Outgoing>, u64)> {
    let envelope = envelope_of(record).ok()?;
    let scope = keyed_response_scope(&envelope, agent)?;
    let reply = Outgoing::new(envelope, content_type_of(record));
    Some((scope, vec![reply], record.timestamp_micros))
}

/// The key scope a `response` published by `agent` answers, when it carries a key.
fn keyed_response_scope(envelope: &AgentEnvelope, agent: &AgentId) -> Option<KeyScope> {
    if envelope.kind != Kind::Response || &envelope.source != agent {
        return None;
    }
    Some(KeyScope {
        agent: agent.clone(),
        source: envelope.target.clone()?,
        key: envelope.idempotency_key.clone()?,
    })
}
