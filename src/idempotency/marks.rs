//! Telling whether the store's rows came from the log in hand.
//!
//! Whenever the store learns something from the log (a command it recorded
//! the outcome of, a run of replies it caught up with), it keeps a mark in
//! the same transaction: the topic, partition and offset of the record,
//! its log timestamp and a digest of its payload, one per (agent, topic,
//! partition), the latest. Before the store answers for an agent the first
//! time after opening, it reads every mark's record back. If one is gone or
//! differs, the log is not the one the rows came from (a fresh server at
//! the same address, an embedded log recreated at the same path): the
//! agent's keys on it are forgotten and rebuilt from this log's replies.
//! Every row comes with a mark, so a store without marks holds no keys.

use agdx_wire::AgentId;
use rusqlite::params;

use super::{ProcessedKeys, StoreError, to_sql};
use crate::log::{LogError, LogRecord, TopicInfo};

/// A record the store learnt from, as it was when read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Mark {
    topic_id: u32,
    partition: u32,
    offset: u64,
    timestamp_micros: u64,
    digest: u64,
}

impl Mark {
    /// The mark of `record` as read now.
    pub(super) fn of(record: &LogRecord) -> Self {
        Self {
            topic_id: record.position.topic,
            partition: record.position.partition,
            offset: record.position.offset,
            timestamp_micros: record.timestamp_micros,
            digest: xxhash_rust::xxh3::xxh3_64(&record.payload),
        }
    }

    /// Keeps this mark as `agent`'s latest for its topic and partition.
    pub(super) fn keep(
        &self,
        tx: &rusqlite::Transaction<'_>,
        log: &str,
        agent: &AgentId,
    ) -> rusqlite::Result<()> {
        tx.prepare_cached(
            "INSERT INTO marks (log, agent, topic_id, partition, offset, timestamp, digest)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (log, agent, topic_id, partition) DO UPDATE SET
                 offset = excluded.offset, timestamp = excluded.timestamp, digest = excluded.digest",
        )?
        .execute(params![
            log,
            agent.as_str(),
            self.topic_id,
            self.partition,
            to_sql(self.offset),
            to_sql(self.timestamp_micros),
            // Bit for bit: SQLite integers are signed.
            self.digest as i64,
        ])?;
        Ok(())
    }
}

impl ProcessedKeys {
    /// Checks, once per agent after opening, that the rows of `agent` come
    /// from this log; forgets them when a mark shows they do not.
    pub(super) async fn verify(&self, agent: &AgentId) -> Result<(), StoreError> {
        let mut verified = self.inner.verified.lock().await;
        if verified.contains(agent) {
            return Ok(());
        }
        let mut same_log = true;
        for mark in self.marks(agent).await? {
            if !self.still_there(mark).await? {
                same_log = false;
                break;
            }
        }
        if !same_log {
            tracing::warn!(
                store = %self.inner.path.display(),
                log = %self.inner.identity,
                agent = %agent,
                "the processed-key store holds keys of another log at this address (a fresh server, or an embedded log recreated at the same path); forgetting them and rebuilding from this log's replies"
            );
            self.forget(agent).await?;
        }
        verified.insert(agent.clone());
        Ok(())
    }

    /// Whether the record `mark` pins is still at its place.
    async fn still_there(&self, mark: Mark) -> Result<bool, StoreError> {
        let Some(topic) = self.topic(mark.topic_id) else {
            return Ok(false);
        };
        if mark.partition >= topic.partitions.get() {
            return Ok(false);
        }
        let read = self
            .inner
            .log
            .poll(
                topic,
                mark.partition,
                mark.offset,
                1,
                std::time::Duration::ZERO,
            )
            .await;
        Ok(match read {
            Ok(records) => records
                .first()
                .is_some_and(|record| Mark::of(record) == mark),
            Err(LogError::Corrupt(_)) => false,
            Err(error) => return Err(error.into()),
        })
    }

    /// The topic of this store's log numbered `topic_id`.
    fn topic(&self, topic_id: u32) -> Option<&TopicInfo> {
        (self.inner.commands.iter())
            .chain([&self.inner.responses])
            .find(|topic| topic.topic_id == topic_id)
    }

    /// `agent`'s marks on this log.
    async fn marks(&self, agent: &AgentId) -> Result<Vec<Mark>, StoreError> {
        let agent = agent.to_string();
        self.with_conn(move |c, log| {
            c.prepare_cached(
                "SELECT topic_id, partition, offset, timestamp, digest FROM marks
                 WHERE log = ?1 AND agent = ?2",
            )?
            .query_map(params![log, agent], |row| {
                Ok(Mark {
                    topic_id: row.get(0)?,
                    partition: row.get(1)?,
                    offset: from_sql(row.get(2)?),
                    timestamp_micros: from_sql(row.get(3)?),
                    digest: row.get::<_, i64>(4)? as u64,
                })
            })?
            .collect()
        })
        .await
    }
}

/// A stored non-negative integer as u64 (a negative one, which only damage
/// leaves, reads as 0).
pub(super) fn from_sql(value: i64) -> u64 {
    u64::try_from(value).unwrap_or(0)
}
