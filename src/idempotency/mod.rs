//! The processed-key store: exactly-once effects over at-least-once delivery.
//!
//! When a worker finishes a command that carries an idempotency key, it
//! records the replies it publishes under (agent, source, key) **before**
//! publishing them. A command arriving again with a processed key does not
//! run the handler; the stored replies are published again, addressed to
//! the new command.
//!
//! Three things make "once" hold:
//!
//! - **Routing.** Our producer sends a keyed command without an explicit
//!   conversation to the conversation derived from (target, source, key)
//!   ([`conversation_for_key`](crate::conversation_for_key)), so every retry
//!   of a key lands in one partition, which one group member at a time
//!   handles, in order.
//! - **Claims.** Within a process, a worker claims the key
//!   ([`ProcessedKeys::claim`]) before it looks it up and keeps the claim
//!   until the outcome is recorded, so two partitions never run one key at
//!   once: the later arrival waits and publishes the stored replies.
//! - **Rebuilding from the log.** Each `response` to a keyed command
//!   repeats the key, so a process that takes a partition over catches up
//!   with the replies on the log ([`ProcessedKeys::catch_up`]) before it
//!   handles keyed commands there: it reads the conversation's partition of
//!   `agent.responses` from where it last stopped.
//!
//! What holds, exactly:
//!
//! - Keys sent by our producer (derived conversation, or one conversation
//!   per key chosen by the caller): the effect runs **once**, across
//!   processes and hosts, with each process keeping a store of its own.
//!   The exceptions are those of any consumer group: a handler that was
//!   running when its process died, or when its partition moved to another
//!   member, may run again (at least once).
//! - One key sent in **two conversations** (a caller's own conversation
//!   ids, or a foreign producer): within one process, still once (claims
//!   and the shared store); across hosts, **at least once**, since the two
//!   conversations may sit in partitions owned by different hosts, which
//!   only see each other's replies once their own partitions reach them.
//! - Keys are kept for [`KeyRetention::max_age`] after the log accepted the
//!   command (7 days by default) and at most [`KeyRetention::max_keys`] per
//!   agent (100,000; the oldest go first). A key sent again after that runs
//!   again.
//! - Only `response` replies can be rebuilt from the log: the key of a
//!   keyed event, or of a command answered by a chunk stream, is known only
//!   to the stores of the processes that handled it.
//!
//! The store is a SQLite file in the worker's state directory, shared by the
//! workers of one machine that use the same directory. Every row belongs to
//! one log ([`ProcessedKeys::identity`]: the log's address, and the name and
//! id of the stream and topic of the replies), and before it answers for an
//! agent the store checks that the records it learnt from (the last command
//! it recorded and the last reply it caught up with, per partition) are
//! still on that log. When they are not (a fresh server at the same
//! address, an embedded log recreated at the same path) it forgets that
//! log's keys and starts afresh, rebuilding them from the replies there: it
//! never answers from another log's history.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agdx_wire::{AgentId, IdempotencyKey};
use dashmap::DashMap;
use rusqlite::{Connection, OptionalExtension, params};

use crate::log::{LogError, LogRecord, SharedLog, TopicInfo};
use crate::producer::Outgoing;

mod catch_up;
mod claims;
mod codec;
mod marks;
mod schema;

use claims::Claims;
pub use claims::KeyClaim;
use codec::{decode_replies, encode_replies};
use marks::Mark;

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
    /// The file was written by a newer agdx.
    #[error(
        "processed-key store {path} was written by a newer agdx (format {version}); run that agdx, or give this worker another state directory"
    )]
    Newer {
        /// The database file.
        path: PathBuf,
        /// The format version found.
        version: i32,
    },
    /// Reading the log while rebuilding failed.
    #[error("rebuilding the processed-key store from the log failed: {0}")]
    Log(#[from] LogError),
    /// A blocking task failed.
    #[error("processed-key store task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

impl StoreError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            StoreError::Sqlite { .. } => true,
            StoreError::Io { .. } => false,
            StoreError::Damaged { .. } => false,
            StoreError::Newer { .. } => false,
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

/// How long, and how many, processed keys are kept.
///
/// ```
/// use std::time::Duration;
/// use agdx::KeyRetention;
/// let retention = KeyRetention::default();
/// assert_eq!(retention.max_age, Duration::from_secs(7 * 24 * 3600));
/// assert_eq!(retention.max_keys, 100_000);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRetention {
    /// A key older than this is forgotten: sent again, it runs again. Its
    /// age counts from when the log accepted its command (for a key rebuilt
    /// from the log, its reply), by the log's clock.
    pub max_age: Duration,
    /// Most keys kept per agent and log; beyond it the oldest are forgotten.
    pub max_keys: u64,
}

impl Default for KeyRetention {
    fn default() -> Self {
        Self {
            max_age: Duration::from_secs(7 * 24 * 3600),
            max_keys: 100_000,
        }
    }
}

impl KeyRetention {
    /// The oldest recording time still kept at `now_micros`.
    fn cutoff(&self, now_micros: u64) -> i64 {
        let age = u64::try_from(self.max_age.as_micros()).unwrap_or(u64::MAX);
        to_sql(now_micros.saturating_sub(age))
    }
}

/// The durable processed-key store (see the module docs). Cheap to clone;
/// clones share the database connection and the claims.
#[derive(Clone)]
pub struct ProcessedKeys {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    conn: Arc<Mutex<Connection>>,
    log: SharedLog,
    /// Every commands topic the pool reads (`agent.commands`, inboxes).
    commands: Vec<TopicInfo>,
    responses: TopicInfo,
    identity: String,
    retention: KeyRetention,
    claims: Arc<Claims>,
    /// One catch-up per reply partition at a time: concurrent ones would
    /// read the same records. Partitions catch up independently.
    catching_up: DashMap<u32, Arc<tokio::sync::Mutex<()>>>,
    /// Agents whose rows were checked against the log since opening.
    verified: tokio::sync::Mutex<HashSet<AgentId>>,
}

const FILE: &str = "processed-keys.sqlite3";

impl ProcessedKeys {
    /// Opens (creating when needed) the store in directory `dir` for the
    /// log `log`, whose commands are on the topics `commands` (the shared
    /// `agent.commands`, and an inbox with the inbox routing) and replies
    /// on `responses`.
    pub fn open(
        dir: &Path,
        log: SharedLog,
        commands: impl IntoIterator<Item = TopicInfo>,
        responses: TopicInfo,
        retention: KeyRetention,
    ) -> Result<Self, StoreError> {
        let path = dir.join(FILE);
        std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let conn = match schema::open(&path) {
            Ok((conn, schema::Opened::Current)) => conn,
            Ok((conn, schema::Opened::Replaced)) => {
                tracing::info!(path = %path.display(), "the processed-key store was in an older format; starting it afresh (it is rebuilt from the replies on the log)");
                conn
            }
            Err(schema::OpenError::Sqlite(source)) => {
                return Err(StoreError::Sqlite { path, source });
            }
            Err(schema::OpenError::Newer(version)) => {
                return Err(StoreError::Newer { path, version });
            }
        };
        let identity = format!(
            "{} stream {}#{} topic {}#{}",
            log.describe(),
            responses.stream,
            responses.stream_id,
            responses.topic,
            responses.topic_id
        );
        Ok(Self {
            inner: Arc::new(Inner {
                path,
                conn: Arc::new(Mutex::new(conn)),
                log,
                commands: commands.into_iter().collect(),
                responses,
                identity,
                retention,
                claims: Arc::default(),
                catching_up: DashMap::new(),
                verified: tokio::sync::Mutex::default(),
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The log this store describes, as its rows name it: the log's
    /// address, and the stream and topic of the replies with their ids.
    pub fn identity(&self) -> &str {
        &self.inner.identity
    }

    async fn with_conn<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection, &str) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T, StoreError> {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || {
            let mut conn = crate::log::lock(&inner.conn);
            f(&mut conn, &inner.identity).map_err(|source| StoreError::Sqlite {
                path: inner.path.clone(),
                source,
            })
        })
        .await
        .map_err(StoreError::Task)?
    }

    /// Claims `scope` for this process, waiting while another task holds
    /// it. Hold the claim from before [`get`](Self::get) until the outcome
    /// is [`put`](Self::put), so one key never runs twice at once.
    pub async fn claim(&self, scope: &KeyScope) -> KeyClaim {
        self.inner.claims.claim(scope).await
    }

    /// The stored replies of a processed key, `None` when it was never
    /// processed or is past its retention at `now_micros`.
    pub async fn get(
        &self,
        scope: &KeyScope,
        now_micros: u64,
    ) -> Result<Option<Vec<Outgoing>>, StoreError> {
        let (agent, source, key) = (
            scope.agent.to_string(),
            scope.source.to_string(),
            scope.key.to_string(),
        );
        let cutoff = self.inner.retention.cutoff(now_micros);
        let blob: Option<Vec<u8>> = self
            .with_conn(move |c, log| {
                c.prepare_cached(
                    "SELECT replies FROM processed
                     WHERE log = ?1 AND agent = ?2 AND source = ?3 AND key = ?4 AND recorded_micros >= ?5",
                )?
                .query_row(params![log, agent, source, key, cutoff], |row| row.get(0))
                .optional()
            })
            .await?;
        blob.map(|b| {
            decode_replies(&b).map_err(|detail| StoreError::Damaged {
                path: self.inner.path.clone(),
                detail,
            })
        })
        .transpose()
    }

    /// Records that the key of `command` (a record of this store's
    /// commands topic) was processed, with its replies. A key already
    /// present keeps its first replies. Keys past the retention at
    /// `now_micros` are dropped.
    pub async fn put(
        &self,
        scope: KeyScope,
        replies: Vec<Outgoing>,
        command: &LogRecord,
        now_micros: u64,
    ) -> Result<(), StoreError> {
        let agent = scope.agent.clone();
        let retention = self.inner.retention;
        let (recorded_micros, mark) = (command.timestamp_micros, Mark::of(command));
        self.with_conn(move |c, log| {
            let tx = c.transaction()?;
            insert(&tx, log, &[(scope, replies, recorded_micros)])?;
            trim(&tx, log, &agent, retention, now_micros)?;
            mark.keep(&tx, log, &agent)?;
            tx.commit()
        })
        .await
    }

    /// Forgets every key of `agent` on this log, where its catch-ups stood
    /// and its marks.
    async fn forget(&self, agent: &AgentId) -> Result<(), StoreError> {
        let agent = agent.to_string();
        self.with_conn(move |c, log| {
            let tx = c.transaction()?;
            for table in ["processed", "rebuilt", "marks"] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE log = ?1 AND agent = ?2"),
                    params![log, agent],
                )?;
            }
            tx.commit()
        })
        .await
    }
}

/// Inserts processed keys (a key already present keeps its first replies).
fn insert(
    tx: &rusqlite::Transaction<'_>,
    log: &str,
    entries: &[(KeyScope, Vec<Outgoing>, u64)],
) -> rusqlite::Result<()> {
    let mut insert = tx.prepare_cached(
        "INSERT OR IGNORE INTO processed (log, agent, source, key, replies, recorded_micros)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    for (scope, replies, recorded_micros) in entries {
        insert.execute(params![
            log,
            scope.agent.as_str(),
            scope.source.as_str(),
            scope.key.as_str(),
            encode_replies(replies),
            to_sql(*recorded_micros),
        ])?;
    }
    Ok(())
}

/// Drops `agent`'s keys past `retention` at `now_micros`: too old, or
/// beyond the newest `max_keys`.
fn trim(
    tx: &rusqlite::Transaction<'_>,
    log: &str,
    agent: &AgentId,
    retention: KeyRetention,
    now_micros: u64,
) -> rusqlite::Result<()> {
    let agent = agent.as_str();
    tx.prepare_cached(
        "DELETE FROM processed WHERE log = ?1 AND agent = ?2 AND recorded_micros < ?3",
    )?
    .execute(params![log, agent, retention.cutoff(now_micros)])?;
    let kept: i64 = tx
        .prepare_cached("SELECT keys FROM kept WHERE log = ?1 AND agent = ?2")?
        .query_row(params![log, agent], |row| row.get(0))
        .optional()?
        .unwrap_or(0);
    let excess = kept.saturating_sub(to_sql(retention.max_keys));
    if excess > 0 {
        tx.prepare_cached(
            "DELETE FROM processed WHERE rowid IN (
                 SELECT rowid FROM processed WHERE log = ?1 AND agent = ?2
                 ORDER BY recorded_micros ASC LIMIT ?3)",
        )?
        .execute(params![log, agent, excess])?;
    }
    Ok(())
}

/// A u64 as SQLite's signed integer, saturating.
fn to_sql(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}
