//! Waking polls that wait for records.
//!
//! Every log directory open in this process has one [`DirWake`], shared by
//! all [`EmbeddedLog`](super::EmbeddedLog) handles on it (the process-global
//! registry is keyed by the database file's canonical path). It wakes a
//! waiting poll in two ways:
//!
//! - **Same process:** after an append commits, the appender wakes the
//!   pollers of that partition through a per-partition [`Notify`] at once.
//!   While a poll waits on the partition, the appender also leaves the
//!   records it committed there ([`PartitionWake::take`]), so the woken
//!   poll hands them out without reading the database again (a round trip
//!   through a blocking thread and SQLite, the larger part of an embedded
//!   ask's wake-up). A poll that was not waiting, or whose offset is not
//!   in the latest append, reads the database as always.
//! - **Other processes:** while at least one poll waits, a watcher thread
//!   reads SQLite's `PRAGMA data_version` (a read of the WAL index, no
//!   query) on each of this process's writer connections and, when another
//!   process has committed, wakes every waiting poll of the directory to
//!   read again. A connection's `data_version` moves only for other
//!   connections' commits, so this process's own commits (already
//!   signalled per partition) wake nobody else: otherwise each append would
//!   have every waiting poll of the process read the database again. The
//!   watcher checks when the file system reports a write to the
//!   directory's bell, `appends.bell`, which every process writes a byte to
//!   after each commit of an append, and every 50 ms in case an event was
//!   missed (or a writer does not ring: an earlier version, a tool); where
//!   the file system reports nothing, every 2–5 ms. So an idle poll costs
//!   next to nothing, and another process's commit wakes it at once. The
//!   thread ends a second after the last waiting poll gave up waiting.
//!
//!   The watcher watches the bell rather than the database and its WAL
//!   because a commit writes the WAL page by page: watching it cost every
//!   write of every process an event, and this process's watcher a wake-up
//!   per burst of them, about a tenth of a busy worker's CPU.
//!
//! A poll arms both notifications *before* it reads, so a record committed
//! between its read and its wait still wakes it.
//!
//! A poll that found nothing at an offset notes [`DirWake::changes`]; the
//! next poll of that partition from that offset, seeing the same number
//! (nothing appended in this process, no commit seen elsewhere, the
//! watcher running all along), goes straight to waiting instead of reading
//! the database again. That is what keeps an idle worker, polling each of
//! its partitions in turn, from reading the database dozens of times a
//! second.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use notify::{RecommendedWatcher, RecursiveMode, Watcher as _};
use tokio::sync::Notify;

use super::schema::BELL_FILE;
use super::{Durability, connect};
use crate::log::{LogRecord, POLL_BYTES_BUDGET, lock};

/// Without file events: shortest pause between two checks of the database
/// for other processes' commits.
const WATCH_MIN_INTERVAL: Duration = Duration::from_millis(2);
/// Longest such pause, reached after a run of checks that found nothing.
const WATCH_MAX_INTERVAL: Duration = Duration::from_millis(5);
/// With file events: the longest pause between two checks, in case an
/// event was missed (events wake the watcher at once).
const WATCH_EVENT_FALLBACK: Duration = Duration::from_millis(50);
/// How long the watcher thread lingers once no poll waits.
const WATCH_LINGER: Duration = Duration::from_secs(1);

/// The directories open in this process, by database file.
static DIRS: LazyLock<Mutex<HashMap<PathBuf, Weak<DirWake>>>> = LazyLock::new(Default::default);

/// The wake-up hub of one log directory in this process.
pub(super) struct DirWake {
    db: PathBuf,
    partitions: Mutex<HashMap<(i64, u32), Arc<PartitionWake>>>,
    external: Notify,
    /// This process's writer connections on the database.
    writers: Mutex<Vec<Weak<Mutex<rusqlite::Connection>>>>,
    /// Counts what may have changed the database for this process: its
    /// appends, other connections' commits the watcher saw, and the
    /// watcher starting or stopping. See [`DirWake::changes`].
    changes: AtomicU64,
    watcher: Mutex<Watcher>,
    /// The directory's bell, opened at the first commit; `None` when it
    /// cannot be (other processes then see this one's commits within
    /// their watchers' fallback interval).
    bell: OnceLock<Option<File>>,
}

#[derive(Default)]
struct Watcher {
    /// Polls waiting now.
    waiting: usize,
    /// Whether the watcher thread runs.
    running: bool,
}

/// What the watcher last saw of one writer connection (held weakly: a
/// closed log's connection goes at once).
struct SeenWriter {
    writer: Weak<Mutex<rusqlite::Connection>>,
    version: Option<i64>,
    /// Whether its number moved since the watcher last woke polls.
    moved: bool,
}

/// The bell beside database file `db`, created when missing.
fn open_bell(db: &Path) -> std::io::Result<File> {
    File::options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(db.with_file_name(BELL_FILE))
}

/// A connection's `PRAGMA data_version`.
fn data_version(conn: &rusqlite::Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "data_version", |row| row.get(0))
}

/// The records of one append, from offset `first` on.
pub(super) struct Handoff {
    pub first: u64,
    pub records: Vec<LogRecord>,
}

/// The wake-up of one partition in this process.
#[derive(Default)]
pub(super) struct PartitionWake {
    notify: Notify,
    /// Polls of this process waiting on the partition.
    waiting: AtomicUsize,
    /// The latest append of this process, kept while polls wait.
    latest: Mutex<Option<Arc<Handoff>>>,
}

impl PartitionWake {
    /// Notified when this process commits an append to the partition.
    pub(super) fn notify(&self) -> &Notify {
        &self.notify
    }

    /// Counts a poll as waiting on the partition while the guard lives.
    pub(super) fn waiting(self: &Arc<Self>) -> WaitingHere {
        self.waiting.fetch_add(1, Ordering::SeqCst);
        WaitingHere(self.clone())
    }

    /// Up to `max` records from offset `from` of the latest append, as a
    /// poll of the database would return them (within its byte budget);
    /// `None` when `from` is not in it.
    pub(super) fn take(&self, from: u64, max: u32) -> Option<Vec<LogRecord>> {
        let latest = lock(&self.latest).clone()?;
        let skip = usize::try_from(from.checked_sub(latest.first)?).ok()?;
        if skip >= latest.records.len() {
            return None;
        }
        let mut bytes = 0;
        let mut out = Vec::new();
        for record in latest.records.iter().skip(skip).take(max as usize) {
            bytes += record.payload.len();
            out.push(record.clone());
            if bytes >= POLL_BYTES_BUDGET {
                break;
            }
        }
        Some(out)
    }
}

/// A poll waiting on one partition (see [`PartitionWake::waiting`]).
pub(super) struct WaitingHere(Arc<PartitionWake>);

impl Drop for WaitingHere {
    fn drop(&mut self) {
        if self.0.waiting.fetch_sub(1, Ordering::SeqCst) == 1 {
            // Nobody waits: keep no records alive.
            *lock(&self.0.latest) = None;
        }
    }
}

/// Registers a waiting poll with the cross-process watcher while it lives.
pub(super) struct Waiting(Arc<DirWake>);

impl Drop for Waiting {
    fn drop(&mut self) {
        lock(&self.0.watcher).waiting -= 1;
    }
}

impl DirWake {
    /// The hub for database file `db` (a canonical path).
    pub(super) fn for_db(db: &Path) -> Arc<DirWake> {
        let mut dirs = lock(&DIRS);
        if let Some(hub) = dirs.get(db).and_then(Weak::upgrade) {
            return hub;
        }
        dirs.retain(|_, hub| hub.strong_count() > 0);
        let hub = Arc::new(DirWake {
            db: db.to_owned(),
            partitions: Mutex::default(),
            external: Notify::new(),
            writers: Mutex::default(),
            changes: AtomicU64::new(0),
            watcher: Mutex::default(),
            bell: OnceLock::new(),
        });
        dirs.insert(db.to_owned(), Arc::downgrade(&hub));
        hub
    }

    /// Registers a writer connection of this process on the database.
    pub(super) fn add_writer(&self, writer: &Arc<Mutex<rusqlite::Connection>>) {
        let mut writers = lock(&self.writers);
        writers.retain(|w| w.strong_count() > 0);
        writers.push(Arc::downgrade(writer));
    }

    /// Whether a connection other than this process's writers has committed
    /// since the last call that said so; `None` when this process has no
    /// writer (then any commit counts). Each writer is marked once its
    /// `data_version` moved; once every writer is marked, someone else
    /// committed (a writer's own commits never move its number, and a
    /// commit by another process moves them all), and the marks are
    /// cleared. A writer seen for the first time starts marked, as a
    /// commit may have come just before.
    fn others_committed(&self, seen: &mut Vec<SeenWriter>) -> Option<bool> {
        {
            let mut writers = lock(&self.writers);
            writers.retain(|w| w.strong_count() > 0);
            seen.retain(|s| writers.iter().any(|w| Weak::ptr_eq(w, &s.writer)));
            for writer in writers.iter() {
                if !seen.iter().any(|s| Weak::ptr_eq(&s.writer, writer)) {
                    seen.push(SeenWriter {
                        writer: writer.clone(),
                        version: None,
                        moved: true,
                    });
                }
            }
        }
        for s in seen.iter_mut() {
            let Some(writer) = s.writer.upgrade() else {
                continue;
            };
            let version = data_version(&lock(&writer)).ok();
            s.moved |= version.is_none() || version != s.version;
            s.version = version;
        }
        seen.retain(|s| s.writer.strong_count() > 0);
        if seen.is_empty() {
            return None;
        }
        let all = seen.iter().all(|s| s.moved);
        if all {
            seen.iter_mut().for_each(|s| s.moved = false);
        }
        Some(all)
    }

    /// The wake-up of partition `part` of topic `topic_key`.
    pub(super) fn partition(&self, topic_key: i64, part: u32) -> Arc<PartitionWake> {
        lock(&self.partitions)
            .entry((topic_key, part))
            .or_default()
            .clone()
    }

    /// After a commit of an append to partition `key`: leaves its records
    /// (`records` runs only when a poll waits there) and wakes this
    /// process's polls of the partition.
    pub(super) fn appended(&self, key: (i64, u32), records: impl FnOnce() -> Option<Handoff>) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        let Some(wake) = lock(&self.partitions).get(&key).cloned() else {
            return;
        };
        let latest = if wake.waiting.load(Ordering::SeqCst) > 0 {
            records().map(Arc::new)
        } else {
            None
        };
        *lock(&wake.latest) = latest;
        wake.notify.notify_waiters();
    }

    /// Tells other processes' watchers that this one committed an append.
    pub(super) fn ring(&self) {
        let bell = self.bell.get_or_init(|| match open_bell(&self.db) {
            Ok(file) => Some(file),
            Err(error) => {
                tracing::debug!(%error, "cannot open the embedded log's bell; other processes see this one's appends at their next timed check");
                None
            }
        });
        if let Some(file) = bell
            && let Err(error) = file.write_at(b"\n", 0)
        {
            tracing::debug!(%error, "cannot ring the embedded log's bell");
        }
    }

    /// While the watcher runs, a number that stays the same as long as
    /// nothing was appended to the database: a poll that found nothing at
    /// an offset and sees the same number again need not read again. `None`
    /// while no watcher runs (other processes' commits would go unseen).
    /// Take it after registering with [`DirWake::wait`]: a watcher that
    /// starts then counts a change once it has its bearings.
    pub(super) fn changes(&self) -> Option<u64> {
        let watcher = lock(&self.watcher);
        watcher.running.then(|| self.changes.load(Ordering::SeqCst))
    }

    /// Counts a possible change and wakes every waiting poll to read again.
    fn changed(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        self.external.notify_waiters();
    }

    /// The notification for commits by other processes (or other
    /// connections): sent to every waiting poll of the directory.
    pub(super) fn external(&self) -> &Notify {
        &self.external
    }

    /// Registers a waiting poll, starting the watcher thread when needed.
    pub(super) fn wait(self: &Arc<Self>) -> Waiting {
        let mut watcher = lock(&self.watcher);
        watcher.waiting += 1;
        if !watcher.running {
            let hub = self.clone();
            let started = std::thread::Builder::new()
                .name("agdx-log-watch".into())
                .spawn(move || hub.watch());
            match started {
                Ok(_) => watcher.running = true,
                Err(error) => {
                    tracing::warn!(%error, "cannot start the embedded log's watcher thread; polls will not see other processes' appends until their wait ends")
                }
            }
        }
        Waiting(self.clone())
    }

    /// Reports rings of the directory's bell on `written`, or `None` when
    /// the file system cannot report them (the watcher then checks on a
    /// short timer).
    fn watch_files(&self, written: std::sync::mpsc::Sender<()>) -> Option<RecommendedWatcher> {
        let bell = self.db.with_file_name(BELL_FILE);
        let handler = move |event: notify::Result<notify::Event>| {
            if event.is_ok() {
                let _ = written.send(());
            }
        };
        let watched = open_bell(&self.db)
            .map_err(notify::Error::io)
            .and_then(|_| notify::recommended_watcher(handler))
            .and_then(|mut watcher| {
                watcher.watch(&bell, RecursiveMode::NonRecursive)?;
                Ok(watcher)
            });
        match watched {
            Ok(watcher) => Some(watcher),
            Err(error) => {
                tracing::debug!(%error, bell = %bell.display(), "no file events for the embedded log; checking for other processes' commits on a timer");
                None
            }
        }
    }

    /// The watcher thread: reports other connections' commits while polls wait.
    fn watch(self: Arc<Self>) {
        let conn = connect(&self.db, Durability::Leases, false);
        let conn = match conn {
            Ok(conn) => conn,
            Err(error) => {
                tracing::warn!(error = %error.into_log(&self.db), "the embedded log's watcher cannot open the database");
                let mut watcher = lock(&self.watcher);
                watcher.running = false;
                self.changes.fetch_add(1, Ordering::SeqCst);
                return;
            }
        };
        // Watch before reading `seen`, so no write goes unreported.
        let (written, events) = std::sync::mpsc::channel();
        let files = self.watch_files(written);
        let mut seen = data_version(&conn).ok();
        let mut writers = Vec::new();
        self.others_committed(&mut writers);
        // Polls that armed their wake-up before `seen` was read may have
        // missed a commit made just before: let them read again.
        self.changed();
        let mut interval = WATCH_MIN_INTERVAL;
        let mut idle_since: Option<Instant> = None;
        loop {
            {
                let mut watcher = lock(&self.watcher);
                if watcher.waiting > 0 {
                    idle_since = None;
                } else if idle_since.get_or_insert_with(Instant::now).elapsed() >= WATCH_LINGER {
                    watcher.running = false;
                    // From now on commits go unseen.
                    self.changes.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
            if files.is_some() {
                // Any number of writes reported by now take one check.
                let _ = events.recv_timeout(WATCH_EVENT_FALLBACK);
                while events.try_recv().is_ok() {}
            } else {
                std::thread::sleep(interval);
            }
            // The watcher's own connection sees every commit; the writers
            // tell whether one came from elsewhere.
            match data_version(&conn) {
                Ok(now) if Some(now) != seen => {
                    seen = Some(now);
                    interval = WATCH_MIN_INTERVAL;
                    if self.others_committed(&mut writers) != Some(false) {
                        self.changed();
                    }
                }
                Ok(_) => interval = (interval + Duration::from_millis(1)).min(WATCH_MAX_INTERVAL),
                Err(error) => {
                    tracing::warn!(%error, db = %self.db.display(), "the embedded log's watcher cannot read the database");
                    interval = WATCH_MAX_INTERVAL;
                    self.changed();
                }
            }
        }
    }
}
