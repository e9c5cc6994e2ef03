//! The processed-key store: exactly-once effects over at-least-once delivery.
//!
//! When a worker finishes a command that carries an idempotency key, it
//! records the replies it published under (agent, source, key) **before**
//! publishing them. A command arriving again with a processed key does not
//! run the handler; the stored replies are published again, addressed to
//! the new command.
//!
//! The store is a SQLite file in the worker's state directory, so it
//! survives restarts and is shared by the worker processes of one machine
//! that use the same directory. It is also derived state: each `response` to
//! a keyed command repeats the key. A key is not tied to a conversation, so
//! its first reply may sit in any partition, written by any process; before
//! a worker handles keyed commands it catches up with `agent.responses`
//! ([`ProcessedKeys::catch_up`]): it reads every partition from where it
//! last stopped and records each keyed response of its agent. A process that
//! takes over partitions it has never seen therefore knows every key whose
//! reply is on the log, which is every key whose command was committed.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use agdx_wire::{AgentEnvelope, AgentId, ContentType, IdempotencyKey, Kind};
use rusqlite::{Connection, OptionalExtension, params};

use crate::log::{LogError, SharedLog, TopicInfo};
use crate::producer::Outgoing;
use crate::record::{content_type_of, envelope_of};

/// Why the processed-key store failed.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database could not be opened, read or written.
    #[error("processed-key store {path}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What SQLite reported.
        #[source]
        source: rusqlite::Error,
    },
    /// The state directory could not be created.
    #[error("cannot create the state directory {path}: {source}")]
    Io {
        /// The directory that could not be created.
        path: PathBuf,
        /// What the file system reported.
        #[source]
        source: std::io::Error,
    },
    /// A stored reply no longer decodes (the file was damaged or edited).
    #[error(
        "processed-key store {path}: a stored reply is damaged ({detail}); stop the worker and delete the file: it is rebuilt from the replies on the log"
    )]
    Damaged {
        /// The database file.
        path: PathBuf,
        /// Why the stored reply does not decode.
        detail: String,
    },
    /// Reading the log while rebuilding failed.
    #[error("rebuilding the processed-key store from the log failed: {0}")]
    Log(#[from] LogError),
    /// A blocking task failed.
    #[error("processed-key store task failed: {0}")]
    Task(String),
}

impl StoreError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Sqlite { .. } => true,
            StoreError::Io { .. } => false,
            StoreError::Damaged { .. } => false,
            StoreError::Log(e) => e.is_retryable(),
            StoreError::Task(_) => true,
        }
    }
}

/// Who a key belongs to: the handling agent, the requesting source and the key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyScope {
    /// The agent whose worker handled the command.
    pub agent: AgentId,
    /// The agent that sent the command.
    pub source: AgentId,
    /// The command's idempotency key.
    pub key: IdempotencyKey,
}

/// The durable processed-key store (see the module docs).
#[derive(Clone)]
pub struct ProcessedKeys {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
    /// One catch-up at a time: concurrent ones would read the same records.
    catching_up: Arc<tokio::sync::Mutex<()>>,
}

const FILE: &str = "processed-keys.sqlite3";

impl ProcessedKeys {
    /// Opens (creating when needed) the store in directory `dir`.
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let path = dir.join(FILE);
        let sqlite = |source| StoreError::Sqlite {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let conn = Connection::open(&path).map_err(sqlite)?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(sqlite)?;
        conn.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=FULL;
             CREATE TABLE IF NOT EXISTS processed (
                 agent TEXT NOT NULL, source TEXT NOT NULL, key TEXT NOT NULL,
                 replies BLOB NOT NULL,
                 PRIMARY KEY (agent, source, key)) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS rebuilt (
                 agent TEXT NOT NULL, stream_id INTEGER NOT NULL, topic_id INTEGER NOT NULL,
                 partition INTEGER NOT NULL, next_offset INTEGER NOT NULL,
                 PRIMARY KEY (agent, stream_id, topic_id, partition)) WITHOUT ROWID;",
        )
        .map_err(sqlite)?;
        Ok(Self {
            path,
            conn: Arc::new(Mutex::new(conn)),
            catching_up: Arc::default(),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let conn = self.conn.clone();
        let path = self.path.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = crate::log::lock(&conn);
            f(&mut conn).map_err(|source| StoreError::Sqlite { path, source })
        })
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
    }

    /// The stored replies of a processed key, `None` when it was never processed.
    pub async fn get(&self, scope: &KeyScope) -> Result<Option<Vec<Outgoing>>, StoreError> {
        let (agent, source, key) = (
            scope.agent.to_string(),
            scope.source.to_string(),
            scope.key.to_string(),
        );
        let blob: Option<Vec<u8>> = self
            .with_conn(move |c| {
                c.prepare_cached(
                    "SELECT replies FROM processed WHERE agent = ?1 AND source = ?2 AND key = ?3",
                )?
                .query_row(params![agent, source, key], |row| row.get(0))
                .optional()
            })
            .await?;
        blob.map(|b| {
            decode_replies(&b).map_err(|detail| StoreError::Damaged {
                path: self.path.clone(),
                detail,
            })
        })
        .transpose()
    }

    /// Records processed keys with their replies, all in one transaction.
    /// A key already present keeps its first replies.
    pub async fn put_all(&self, entries: Vec<(KeyScope, Vec<Outgoing>)>) -> Result<(), StoreError> {
        if entries.is_empty() {
            return Ok(());
        }
        self.with_conn(move |c| {
            let tx = c.transaction()?;
            {
                let mut insert = tx.prepare_cached(
                    "INSERT OR IGNORE INTO processed (agent, source, key, replies) VALUES (?1, ?2, ?3, ?4)",
                )?;
                for (scope, replies) in &entries {
                    insert.execute(params![
                        scope.agent.as_str(),
                        scope.source.as_str(),
                        scope.key.as_str(),
                        encode_replies(replies)
                    ])?;
                }
            }
            tx.commit()
        })
        .await
    }

    /// Reads every partition of `responses` from where the last catch-up
    /// for `agent` stopped up to its end, and records every keyed `response`
    /// that `agent` published. Returns how many keys it added.
    pub async fn catch_up(
        &self,
        log: &SharedLog,
        responses: &TopicInfo,
        agent: &AgentId,
    ) -> Result<usize, StoreError> {
        let _one_at_a_time = self.catching_up.lock().await;
        let mut added = 0;
        for partition in 0..responses.partitions {
            added += self
                .catch_up_partition(log, responses, partition, agent)
                .await?;
        }
        Ok(added)
    }

    async fn catch_up_partition(
        &self,
        log: &SharedLog,
        responses: &TopicInfo,
        partition: u32,
        agent: &AgentId,
    ) -> Result<usize, StoreError> {
        let ids = (
            agent.to_string(),
            responses.stream_id,
            responses.topic_id,
            partition,
        );
        let key = ids.clone();
        let mut next: u64 = self
            .with_conn(move |c| {
                c.prepare_cached(
                    "SELECT next_offset FROM rebuilt WHERE agent = ?1 AND stream_id = ?2 AND topic_id = ?3 AND partition = ?4",
                )?
                .query_row(params![key.0, key.1, key.2, key.3], |row| row.get::<_, i64>(0))
                .optional()
            })
            .await?
            .map_or(0, |n| u64::try_from(n).unwrap_or(0));
        let Some(last) = log.last_offset(responses, partition).await? else {
            return Ok(0);
        };
        let mut added = 0;
        while next <= last {
            let records = match log
                .poll(responses, partition, next, 1024, std::time::Duration::ZERO)
                .await
            {
                Ok(records) => records,
                // A damaged reply holds no key anyone can read; step over it.
                Err(LogError::Corrupt {
                    position, reason, ..
                }) => {
                    tracing::warn!(%position, %reason, "skipping a damaged reply while catching up with processed keys");
                    next = position.offset + 1;
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let Some(tail) = records.last() else { break };
            next = tail.position.offset + 1;
            let mut entries = Vec::new();
            for record in &records {
                let Ok(envelope) = envelope_of(record) else {
                    continue;
                };
                if let Some(scope) = keyed_response_scope(&envelope, agent) {
                    entries.push((
                        scope,
                        vec![Outgoing::new(envelope, content_type_of(record))],
                    ));
                }
            }
            added += entries.len();
            self.put_all(entries).await?;
            let key = ids.clone();
            let next_offset = i64::try_from(next).unwrap_or(i64::MAX);
            self.with_conn(move |c| {
                c.prepare_cached(
                    "INSERT INTO rebuilt (agent, stream_id, topic_id, partition, next_offset) VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (agent, stream_id, topic_id, partition) DO UPDATE SET next_offset = excluded.next_offset",
                )?
                .execute(params![key.0, key.1, key.2, key.3, next_offset])
                .map(|_| ())
            })
            .await?;
        }
        Ok(added)
    }
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

/// Replies are stored as a sequence of (content-type code u8, length u32 BE, envelope bytes).
fn encode_replies(replies: &[Outgoing]) -> Vec<u8> {
    let mut out = Vec::new();
    for reply in replies {
        let bytes = reply.envelope.encode();
        out.push(reply.content_type.code());
        out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

fn decode_replies(mut blob: &[u8]) -> Result<Vec<Outgoing>, String> {
    let mut replies = Vec::new();
    while let [ct, a, b, c, d, rest @ ..] = blob {
        let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
        let bytes = rest
            .get(..len)
            .ok_or_else(|| format!("a reply claims {len} bytes, {} remain", rest.len()))?;
        let envelope = AgentEnvelope::decode(bytes).map_err(|e| e.to_string())?;
        replies.push(Outgoing::new(envelope, ContentType::from_code(*ct)));
        blob = &rest[len..];
    }
    if blob.is_empty() {
        Ok(replies)
    } else {
        Err(format!("{} stray bytes at the end", blob.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agdx_wire::{ConversationId, CorrelationId, RecordId};

    #[test]
    fn stored_replies_decode_to_what_was_stored() {
        let env = AgentEnvelope::response(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            AgentId::new("a").unwrap(),
            CorrelationId::from_u128(3),
            b"ok".to_vec(),
        );
        let replies = vec![
            Outgoing::new(env.clone(), ContentType::Json),
            Outgoing::new(env, ContentType::Raw),
        ];
        assert_eq!(decode_replies(&encode_replies(&replies)).unwrap(), replies);
        let blob = encode_replies(&replies);
        assert!(decode_replies(&blob[..blob.len() - 1]).is_err());
    }
}
