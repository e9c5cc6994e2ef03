//! The embedded log: a durable, multi-process log in one local directory.
//!
//! It needs no server: every process that opens the same directory sees the
//! same streams, records, consumer groups and committed offsets, so a `send`
//! in one shell reaches a `worker` in another. It is built on SQLite
//! (bundled, no system library needed).
//!
//! # On disk
//!
//! The directory (created when missing) holds three SQLite databases in
//! WAL mode, each with its `-wal` and `-shm` companions: `log.sqlite3` with
//! the records and offsets, `groups.sqlite3` with the consumer groups'
//! leases, kept apart so that renewing a lease never waits behind an append
//! (see *Consumer groups*), and `marks.sqlite3` with the high-water marks
//! (see *Damage*). All are marked with `application_id` "AGDX" and a format
//! version in `user_version`; another program's database, or another
//! format, is refused with [`LogError::Incompatible`] (a log made before
//! the leases moved out is upgraded when opened, one made before the marks
//! gets them). Their tables:
//!
//! | file | table | one row per | holds |
//! | --- | --- | --- | --- |
//! | `log` | `streams` | stream | name, numeric id |
//! | `log` | `topics` | topic | stream id, numeric id, name, partition count |
//! | `log` | `records` | record | partition, offset, timestamp, headers, payload, checksum |
//! | `log` | `group_offsets` | (group, partition) | the committed offset |
//! | `groups` | `group_members` | live group member | lease expiry, its process's token |
//! | `groups` | `group_owners` | owned partition | the member that owns it |
//! | `marks` | `marks` | partition with records | the offset after its last acknowledged record |
//!
//! Records are addressed like Apache Iggy's: stream ids and topic ids are
//! given by the log, counting from 1 (topic ids within their stream);
//! partitions count from 0; offsets count from 0 in each partition. The
//! record table's primary key is (topic, partition, offset), so a poll is
//! one range scan. Each record carries the log's timestamp in epoch
//! microseconds, never lower than the one before it in its partition, and
//! its typed headers, stored ordered by name (the blob format and the
//! limits, which are Iggy's, are described in the `codec` module).
//!
//! # Durability
//!
//! An append is one `BEGIN IMMEDIATE` transaction: it takes the database's
//! write lock, reads the partition's last offset and inserts the batch at
//! the offsets after it, so appends from any number of threads and processes
//! never interleave within a batch, never reuse an offset and never lose a
//! record. Commits of records and offsets run with `synchronous=FULL`: when
//! [`Log::append`] returns, the records are in the fsynced WAL and survive
//! `kill -9` of any process and a power cut. Concurrent appends in one
//! process share a transaction (group commit): one blocking thread at a
//! time commits everything queued, and goes on while writes arrived during
//! its commit, so one fsync serves every appender that queued meanwhile. A
//! worker's replies and its offset commit ([`Log::append_and_commit`]) are
//! one transaction: the offset never moves without its replies.
//!
//! # Damage
//!
//! SQLite never exposes a half-written transaction, but it trusts its
//! files: damaged bytes can change records, make it skip them, or (in the
//! WAL, at recovery) drop whole acknowledged commits without a word. None
//! of that is served as if nothing happened:
//!
//! - every record stores an xxh3-64 checksum of its offset, timestamp,
//!   headers and payload, and offsets are dense, so a poll meeting a
//!   record failing its checksum, a gap, a scan that ends before the
//!   partition's last offset or a page SQLite reports malformed returns
//!   the records before it and then [`LogError::Corrupt`] naming the
//!   damaged offsets, never damaged bytes (the `read` module); committing
//!   the last of them for a group steps over them;
//! - high-water marks, kept in their own file, make a log whose database
//!   lost records at its end refuse to open ([`LogError::Damaged`]) rather
//!   than serve less (the `marks` module, which also says why marks and
//!   not SQLite's checksum VFS shim);
//! - [`EmbeddedLog::verify`] checks a whole log (`PRAGMA quick_check`,
//!   marks, every record) and [`EmbeddedLog::accept_loss`] gives up what a
//!   damaged database lost.
//!
//! A full disk is [`LogError::StorageFull`]; a file SQLite finds malformed
//! or not a database at all, [`LogError::Damaged`].
//!
//! # Waiting polls
//!
//! A poll with a wait returns as soon as a record arrives: at once for an
//! append in the same process, within a few milliseconds for one in another
//! process (the `wake` module explains how).
//!
//! # Consumer groups
//!
//! A member registers in `group_members` with a lease of [`LEASE`] (3 s)
//! that a background task renews every [`RENEW_EVERY`] (0.5 s), as does each
//! call to [`GroupMember::assigned`]. Renewals write only to
//! `groups.sqlite3`, whose write lock nothing but renewals and leaves take,
//! each for a few milliseconds; a renewal gives up waiting for it after
//! 0.6 s and is tried again, so however long an append holds the records'
//! write lock, live members keep their leases. Ownership is sticky and balanced: on
//! each renewal a member keeps the partitions it owns up to its fair share
//! (live members sorted by id; each gets ⌊P/n⌋ or ⌈P/n⌉), releases extras
//! and claims free partitions. A partition row names one owner, so two live
//! members never hold the same partition.
//!
//! When a member leaves, its rows go at once and the others take its
//! partitions on their next renewal; when its process dies (or the handle is
//! dropped without leaving), they take them once its lease has expired. An
//! old owner may still be finishing a record when its partition moves:
//! delivery is at least once, and committing is what acknowledges. An offset
//! commit for a partition that a live member of *another process* owns is
//! refused with [`LogError::NotOwner`] (as Iggy refuses it), so a member that
//! lost its partition to another process cannot move the new owner's offset
//! back; with no live owner, or an owner in this process, the commit is
//! stored. Processes are told apart by a random token each draws, not by
//! process id (two containers sharing the directory can both be pid 1).
//! The commit names no member, so members of one process are not told
//! apart, just as on Iggy (see [`Log::store_offset`]).
//!
//! # Connections
//!
//! One writer (records and offsets), one for group leases on their own file
//! (`synchronous=NORMAL`: a lease is void after a reboot anyway) and a small
//! pool of readers, all used on Tokio's blocking threads, never on the async
//! workers; plus the cross-process watcher's connection on its own thread.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::{Connection, params};

use super::{
    Append, Damage, GroupMember, Log, LogError, LogRecord, OffsetCommit, OutgoingRecord, TopicInfo,
    lock,
};
use crate::clock::{Clock, SystemClock};
use fault::{Fault, io_failure};
use schema::{DB_FILE, Durability, GROUPS_FILE, MARKS_FILE, connect};
use topics::{BY_ID, BY_NAME, SELECT_TOPIC, ensure_topic, find_topic, topic_row};
use wake::DirWake;
use writer::{Encoded, Queue, Write, submit};

mod checkpoint;
mod codec;
mod fault;
mod group;
mod marks;
mod read;
mod retention;
mod schema;
mod topics;
mod verify;
mod wake;
mod writer;

pub use group::{LEASE, RENEW_EVERY};
pub use marks::Lost;
pub use retention::{HOLD_LIFETIME, SWEEP_EVERY, Truncated};

/// Largest payload of one record: 64 MB, the same limit as Apache Iggy's
/// (`MAX_PAYLOAD_SIZE`), so a record fits both backends or neither.
pub const MAX_RECORD_BYTES: usize = 64_000_000;

/// Longest stream, topic or group name, in bytes (Iggy's limit too).
const MAX_NAME_BYTES: usize = 255;

/// Idle reader connections kept for reuse.
const IDLE_READERS: usize = 4;

/// The embedded log backend. Cheap to share behind an `Arc`; every method
/// may be called concurrently.
pub struct EmbeddedLog {
    core: Arc<Core>,
}

/// What the handle, its blocking tasks and its group members share.
struct Core {
    /// The directory as the user named it, for messages.
    dir: PathBuf,
    /// The database file, canonical.
    db: PathBuf,
    /// The group lease database file, canonical.
    groups_db: PathBuf,
    /// The high-water mark database file, canonical.
    marks_db: PathBuf,
    /// Shared with the watcher (see the `wake` module), which reads it to
    /// tell other processes' commits from this one's.
    writer: Arc<Mutex<Connection>>,
    /// Writes waiting for the writer (group commit).
    queue: Mutex<Queue>,
    groups: Mutex<Connection>,
    marks: Mutex<Connection>,
    readers: Mutex<Vec<Connection>>,
    topics: Mutex<HashMap<(u32, u32), Arc<TopicRow>>>,
    /// Per partition, the offset its last poll found nothing at and the
    /// [`DirWake::changes`] taken before that read.
    found_nothing: Mutex<HashMap<(i64, u32), (u64, u64)>>,
    wake: Arc<DirWake>,
    /// When this process last swept for retention, epoch microseconds.
    last_sweep: std::sync::atomic::AtomicI64,
    /// Copies the writer's WAL into the database, off the commit path.
    checkpoints: checkpoint::Checkpointer,
}

/// A topic as stored: its row key and what the port knows of it.
struct TopicRow {
    key: i64,
    info: TopicInfo,
}

impl TopicRow {
    /// An offset of `partition` read back from the database, where only
    /// damage leaves a negative one.
    fn stored_offset(
        &self,
        partition: u32,
        offset: Option<i64>,
        what: &str,
    ) -> Result<Option<u64>, Fault> {
        offset
            .map(|off| {
                u64::try_from(off).map_err(|_| {
                    Fault::Log(LogError::Corrupt(Damage::record(
                        self.info.position(partition, 0),
                        format!("negative {what}: {off}"),
                    )))
                })
            })
            .transpose()
    }

    /// Whether this row is the topic `info` names (ids are reused only
    /// if the database is replaced, names are checked too).
    fn is(&self, info: &TopicInfo) -> bool {
        self.info.stream == info.stream && self.info.topic == info.topic
    }
}

impl EmbeddedLog {
    /// Opens (creating when needed) the embedded log in directory `path`.
    ///
    /// A log whose database no longer holds every record it acknowledged
    /// (see the `marks` module) is refused with [`LogError::Damaged`]
    /// naming each lost range: [`EmbeddedLog::verify`] reports it in full,
    /// [`EmbeddedLog::accept_loss`] gives those records up.
    ///
    /// This does a little blocking file I/O (creating the directory and the
    /// schema); call it once at start-up.
    pub fn open(path: &Path) -> Result<Self, LogError> {
        let (log, lost) = Self::open_files(path)?;
        if !lost.is_empty() {
            return Err(marks::refusal(&path.display().to_string(), &lost));
        }
        Ok(log)
    }

    /// Opens the files of the log in `path` (creating what is missing) and
    /// compares the high-water marks with the records: the log, and the
    /// partitions that lost records.
    fn open_files(path: &Path) -> Result<(Self, Vec<Lost>), LogError> {
        let location = path.display().to_string();
        std::fs::create_dir_all(path)
            .map_err(|e| io_failure(format!("cannot create the log directory {location}"), e))?;
        let dir = path
            .canonicalize()
            .map_err(|e| io_failure(format!("cannot resolve the log directory {location}"), e))?;
        let db = dir.join(DB_FILE);
        let writer = schema::open(&db, Durability::Full, &location, &schema::RECORDS)
            .map_err(|f| f.into_log(&db))?;
        let groups_db = dir.join(GROUPS_FILE);
        let groups = schema::open(&groups_db, Durability::Leases, &location, &schema::GROUPS)
            .map_err(|f| f.into_log(&groups_db))?;
        let marks_db = dir.join(MARKS_FILE);
        let mut marks = schema::open(&marks_db, Durability::Marks, &location, &schema::MARKS)
            .map_err(|f| f.into_log(&marks_db))?;
        let stored = marks::stored(&marks).map_err(|f| f.into_log(&marks_db))?;
        let (lost, raises) = marks::compare(&writer, &stored).map_err(|f| f.into_log(&db))?;
        marks::raise(&mut marks, &raises).map_err(|f| f.into_log(&marks_db))?;
        // Make the new files' directory entries durable too.
        std::fs::File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| io_failure(format!("cannot sync the log directory {location}"), e))?;
        checkpoint::install(&writer);
        let checkpoints = checkpoint::Checkpointer::new(db.clone());
        let writer = Arc::new(Mutex::new(writer));
        let wake = DirWake::for_db(&db);
        wake.add_writer(&writer);
        let log = EmbeddedLog {
            core: Arc::new(Core {
                dir: path.to_owned(),
                wake,
                db,
                groups_db,
                marks_db,
                writer,
                queue: Mutex::default(),
                groups: Mutex::new(groups),
                marks: Mutex::new(marks),
                readers: Mutex::default(),
                topics: Mutex::default(),
                found_nothing: Mutex::default(),
                last_sweep: std::sync::atomic::AtomicI64::new(0),
                checkpoints,
            }),
        };
        Ok((log, lost))
    }

    /// Opens the embedded log in directory `path` only if one is there
    /// (its database exists); otherwise [`LogError::NoLog`], and nothing
    /// is created. For tools that only read a log.
    pub fn open_existing(path: &Path) -> Result<Self, LogError> {
        let absolute = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        match std::fs::metadata(absolute.join(DB_FILE)) {
            Ok(_) => Self::open(path),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(LogError::NoLog {
                spec: format!("embedded:{}", path.display()),
                path: absolute,
            }),
            Err(e) => Err(LogError::Storage {
                reason: format!("cannot look for the log in {}: {e}", path.display()),
                source: Some(e.into()),
            }),
        }
    }

    /// The directory this log lives in, as given to [`EmbeddedLog::open`].
    pub fn dir(&self) -> &Path {
        &self.core.dir
    }
}

/// Runs blocking work on Tokio's blocking threads.
async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, LogError> + Send + 'static,
) -> Result<T, LogError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Nothing aborts these tasks: one is cancelled only because the
        // runtime is shutting down, which drops the caller at its next
        // await. Waiting for that says nothing, where an error would be
        // reported (and retried) as a storage failure that is none.
        Err(_) => std::future::pending().await,
    }
}

/// The wall clock in epoch microseconds, as stored (SQLite integers are i64).
fn now_micros() -> Result<i64, Fault> {
    match i64::try_from(SystemClock.now_micros()) {
        Ok(now) if now > 0 => Ok(now),
        _ => Err(Fault::Log(LogError::Storage {
            reason: "the system clock reads before 1970 or after 2262; set it to the right time"
                .into(),
            source: None,
        })),
    }
}

/// Checks a stream, topic or group name.
fn check_name(what: &str, name: &str) -> Result<(), LogError> {
    if name.is_empty() || name.len() > MAX_NAME_BYTES {
        return Err(LogError::InvalidInput(format!(
            "a {what} name must be 1 to {MAX_NAME_BYTES} bytes, got {} bytes ({name:?})",
            name.len()
        )));
    }
    Ok(())
}

impl Core {
    /// Runs `work` with a reader connection from the pool.
    fn with_reader<T>(
        &self,
        work: impl FnOnce(&Connection) -> Result<T, Fault>,
    ) -> Result<T, LogError> {
        let pooled = lock(&self.readers).pop();
        let conn = match pooled {
            Some(conn) => conn,
            None => connect(&self.db, Durability::Full, false).map_err(|f| f.into_log(&self.db))?,
        };
        let result = work(&conn).map_err(|f| f.into_log(&self.db));
        let mut idle = lock(&self.readers);
        if idle.len() < IDLE_READERS {
            idle.push(conn);
        }
        result
    }

    /// Runs `work` with the group-lease connection.
    fn with_groups<T>(
        &self,
        work: impl FnOnce(&mut Connection) -> Result<T, Fault>,
    ) -> Result<T, LogError> {
        work(&mut lock(&self.groups)).map_err(|f| f.into_log(&self.groups_db))
    }

    /// The stored row of `info`'s topic, from the cache or the database.
    fn resolve(&self, info: &TopicInfo) -> Result<Arc<TopicRow>, LogError> {
        let missing = || LogError::NoSuchTopic {
            stream: info.stream.clone(),
            topic: info.topic.clone(),
        };
        let cached = lock(&self.topics)
            .get(&(info.stream_id, info.topic_id))
            .cloned();
        let row = match cached {
            Some(row) => row,
            None => {
                let row = self
                    .with_reader(|conn| {
                        find_topic(conn, BY_ID, params![info.stream_id, info.topic_id])
                    })?
                    .ok_or_else(missing)?;
                let row = Arc::new(row);
                lock(&self.topics).insert((info.stream_id, info.topic_id), row.clone());
                row
            }
        };
        if !row.is(info) {
            return Err(missing());
        }
        Ok(row)
    }

    /// Reads up to `max` records of a partition from offset `from`.
    fn read(
        &self,
        topic: &TopicRow,
        part: u32,
        from: u64,
        max: u32,
    ) -> Result<Vec<LogRecord>, LogError> {
        self.with_reader(|conn| read::read_records(conn, topic, part, from, max))
    }
}

#[async_trait]
impl Log for EmbeddedLog {
    fn describe(&self) -> String {
        format!("embedded:{}", self.core.dir.display())
    }

    fn max_record_bytes(&self) -> usize {
        MAX_RECORD_BYTES
    }

    async fn ensure_topic_retained(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
        retention: crate::log::Retention,
    ) -> Result<TopicInfo, LogError> {
        check_name("stream", stream)?;
        check_name("topic", topic)?;
        if partitions == 0 {
            return Err(LogError::InvalidInput(format!(
                "topic '{stream}/{topic}' needs at least one partition, got 0; ask for 1 or more"
            )));
        }
        let core = self.core.clone();
        let (stream, topic) = (stream.to_owned(), topic.to_owned());
        blocking(move || {
            let row = ensure_topic(
                &mut lock(&core.writer),
                &stream,
                &topic,
                partitions,
                retention,
            )
            .map_err(|f| f.into_log(&core.db))?;
            let info = row.info.clone();
            lock(&core.topics).insert((info.stream_id, info.topic_id), Arc::new(row));
            Ok(info)
        })
        .await
    }

    async fn topic(&self, stream: &str, topic: &str) -> Result<Option<TopicInfo>, LogError> {
        let core = self.core.clone();
        let (stream, topic) = (stream.to_owned(), topic.to_owned());
        blocking(move || {
            Ok(core
                .with_reader(|conn| find_topic(conn, BY_NAME, params![stream, topic]))?
                .map(|row| row.info))
        })
        .await
    }

    async fn topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError> {
        self.stream_topics(stream).await
    }

    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError> {
        let write = self.append_write(topic, partition, records).await?;
        submit(&self.core, vec![write]).await
    }

    async fn append_and_commit(
        &self,
        appends: Vec<Append>,
        commit: OffsetCommit,
    ) -> Result<(), LogError> {
        // Refused before any batch is written, as the batches are.
        commit.topic.check_partition(commit.partition)?;
        let mut writes = Vec::with_capacity(appends.len() + 1);
        for append in appends {
            writes.push(
                self.append_write(&append.topic, append.partition, append.records)
                    .await?,
            );
        }
        let checked = self
            .commit_write(
                &commit.topic,
                &commit.group,
                commit.partition,
                commit.offset,
            )
            .await;
        match checked {
            Ok(write) => {
                writes.push(write);
                submit(&self.core, writes).await
            }
            // As appending and then storing would: the records go on the
            // log (a keyed command's reply lets its next owner step over
            // it), the commit is refused.
            Err(refused) => {
                if !writes.is_empty() {
                    submit(&self.core, writes).await?;
                }
                Err(refused)
            }
        }
    }

    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        super::check_poll(topic, partition, max)?;
        let row = self.resolve_partition(topic, partition).await?;
        let deadline = tokio::time::Instant::now() + wait;
        let wake = &self.core.wake;
        let appended = wake.partition(row.key, partition);
        let key = (row.key, partition);
        // Registered before the first read: the watcher runs (so
        // `changes` means something) and appends leave their records.
        let _waiting = (!wait.is_zero()).then(|| (wake.wait(), appended.waiting()));
        let mut first = true;
        let mut woken_here = false;
        loop {
            let local = appended.notify().notified();
            let external = wake.external().notified();
            tokio::pin!(local, external);
            local.as_mut().enable();
            external.as_mut().enable();
            let changes = wake.changes().filter(|_| !wait.is_zero());
            // Nothing changed since this partition's last poll found
            // nothing here: no need to read again before waiting.
            let unchanged = first
                && changes.is_some_and(|now| {
                    lock(&self.core.found_nothing).get(&key) == Some(&(from, now))
                });
            first = false;
            // Woken by an append of this process: its records, if `from`
            // is among them, else the database.
            let handed = woken_here.then(|| appended.take(from, max)).flatten();
            let records = match handed {
                Some(records) => records,
                None if unchanged => Vec::new(),
                None => {
                    let (core, reading) = (self.core.clone(), row.clone());
                    blocking(move || core.read(&reading, partition, from, max)).await?
                }
            };
            if let Some(changes) = changes.filter(|_| records.is_empty()) {
                lock(&self.core.found_nothing).insert(key, (from, changes));
            }
            if !records.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(records);
            }
            woken_here = tokio::select! {
                _ = local => true,
                _ = external => false,
                _ = tokio::time::sleep_until(deadline) => false,
            };
        }
    }

    async fn hold(
        &self,
        topic: &TopicInfo,
        holder: &str,
        from: &[(u32, u64)],
    ) -> Result<(), LogError> {
        let row = self.resolve(topic).await?;
        for (partition, _) in from {
            row.info.check_partition(*partition)?;
        }
        let core = self.core.clone();
        let (holder, from) = (holder.to_owned(), from.to_vec());
        blocking(move || {
            retention::hold(&mut lock(&core.writer), row.key, &holder, &from)
                .map_err(|f| f.into_log(&core.db))
        })
        .await
    }

    async fn last_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        let row = self.resolve_partition(topic, partition).await?;
        let core = self.core.clone();
        blocking(move || {
            core.with_reader(|conn| {
                let last: Option<i64> = conn
                    .prepare_cached(
                        "SELECT max(off) FROM records WHERE topic_key = ?1 AND part = ?2",
                    )?
                    .query_row(params![row.key, partition], |r| r.get(0))?;
                row.stored_offset(partition, last, "offset")
            })
        })
        .await
    }

    async fn join_group(
        &self,
        topic: &TopicInfo,
        group: &str,
    ) -> Result<Box<dyn GroupMember>, LogError> {
        check_name("consumer group", group)?;
        let row = self.resolve(topic).await?;
        Ok(Box::new(
            group::EmbeddedMember::join(self.core.clone(), row, group).await?,
        ))
    }

    async fn store_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), LogError> {
        let write = self.commit_write(topic, group, partition, offset).await?;
        submit(&self.core, vec![write]).await
    }

    async fn committed_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        let row = self.resolve_partition(topic, partition).await?;
        let core = self.core.clone();
        let group = group.to_owned();
        blocking(move || {
            core.with_reader(|conn| {
                let offset = group::committed_offset(conn, row.key, &group, partition)?;
                row.stored_offset(
                    partition,
                    offset,
                    &format!("committed offset of group '{group}'"),
                )
            })
        })
        .await
    }
}

impl EmbeddedLog {
    /// Checks and encodes a batch for `partition` of `topic`.
    async fn append_write(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<Write, LogError> {
        super::check_append(topic, partition, &records, MAX_RECORD_BYTES)?;
        let encoded = records
            .into_iter()
            .map(|record| Encoded {
                headers: codec::encode_headers(&record.headers),
                payload: record.payload,
            })
            .collect();
        let row = self.resolve_partition(topic, partition).await?;
        Ok(Write::Append {
            row,
            part: partition,
            records: encoded,
        })
    }

    /// Checks an offset commit, including that no other process's live
    /// member owns the partition.
    async fn commit_write(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<Write, LogError> {
        check_name("consumer group", group)?;
        let offset = i64::try_from(offset).map_err(|_| {
            LogError::InvalidInput(format!("offset {offset} is beyond any partition's range"))
        })?;
        let row = self.resolve_partition(topic, partition).await?;
        // Checked on the lease database before the write is queued, not in
        // the same transaction: the partition may move in between, and the
        // commit then names a record its old owner finished, which at worst
        // has the new owner's later records delivered again.
        let core = self.core.clone();
        let (key, owner_group) = (row.key, group.to_owned());
        let owner = blocking(move || {
            core.with_groups(|conn| group::owner_process(conn, key, &owner_group, partition))
        })
        .await?;
        if owner.is_some_and(|process| process != group::process_token()) {
            return Err(LogError::NotOwner {
                stream: row.info.stream.clone(),
                topic: row.info.topic.clone(),
                group: group.to_owned(),
                partition,
            });
        }
        Ok(Write::Commit {
            topic_key: row.key,
            group: group.to_owned(),
            part: partition,
            offset,
        })
    }

    /// The stored row of a topic: from the cache when it is there, else read
    /// on a blocking thread.
    async fn resolve(&self, topic: &TopicInfo) -> Result<Arc<TopicRow>, LogError> {
        let cached = lock(&self.core.topics)
            .get(&(topic.stream_id, topic.topic_id))
            .cloned();
        if let Some(row) = cached
            && row.is(topic)
        {
            return Ok(row);
        }
        let core = self.core.clone();
        let topic = topic.clone();
        blocking(move || core.resolve(&topic)).await
    }

    /// [`Self::resolve`], for a partition that must exist.
    async fn resolve_partition(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Arc<TopicRow>, LogError> {
        let row = self.resolve(topic).await?;
        row.info.check_partition(partition)?;
        Ok(row)
    }
}
