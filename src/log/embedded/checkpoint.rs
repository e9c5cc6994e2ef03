//! Checkpoints off the commit path.
//!
//! In WAL mode every commit appends pages to `log.sqlite3-wal`; a
//! checkpoint copies them into the database file and fsyncs it, so the WAL
//! can start over. SQLite's own policy runs that copy inside the commit
//! that took the WAL past 1,000 pages, on the committing thread: with the
//! log's single writer, every appender of the process waited for it (a
//! third of the writer's time under a steady load).
//!
//! Here the writer's connection only notes how many pages the WAL holds
//! after each commit (SQLite's WAL hook, which replaces its automatic
//! checkpoints on that connection), and once that reaches
//! [`CHECKPOINT_PAGES`] it wakes a thread of its own that runs a passive
//! checkpoint on another connection, while the writer goes on committing.
//! Past that size every commit wakes it again: checkpoints that follow the
//! commits closely keep each database fsync short and leave the writer's
//! own checkpoint (below) next to nothing to copy. Waking it only once per
//! 1,000 pages of growth copied less but made durable appends 5–15% slower.
//! Passive checkpoints never block writers or readers and copy only whole
//! commits, so nothing about durability changes: a commit is durable once
//! its WAL frames are fsynced, before any checkpoint, as before.
//!
//! A WAL starts over only at a write that begins after a checkpoint copied
//! all of it, which under a steady stream of commits the thread rarely
//! manages between two of them. So once the WAL reaches [`INLINE_PAGES`]
//! the writer checkpoints itself after its commit, as SQLite would have:
//! that copies only what the thread has not yet copied, and its next
//! commit starts the WAL over. The WAL stays bounded whatever happens to
//! the thread.

use std::cell::Cell;
use std::ffi::c_int;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

use rusqlite::Connection;
use rusqlite::hooks::Wal;

use super::lock;
use super::schema::{Durability, connect};

/// WAL pages after which a commit wakes the checkpoint thread: SQLite's
/// own default for automatic checkpoints.
pub(super) const CHECKPOINT_PAGES: i32 = 1_000;

/// WAL pages after which the writer checkpoints itself, after its commit,
/// so that the WAL starts over (32 MiB of 8 KiB pages).
pub(super) const INLINE_PAGES: i32 = 4 * CHECKPOINT_PAGES;

thread_local! {
    /// The WAL's pages after the last commit on this thread's connection
    /// with the hook installed (the group commit's blocking thread).
    static WAL_PAGES: Cell<c_int> = const { Cell::new(0) };
}

/// Makes `conn` note its WAL's size after each commit instead of running
/// SQLite's automatic checkpoints.
pub(super) fn install(conn: &Connection) {
    conn.wal_hook(Some(note_pages));
}

fn note_pages(_wal: &Wal, pages: c_int) -> rusqlite::Result<()> {
    WAL_PAGES.with(|noted| noted.set(pages));
    Ok(())
}

/// The checkpoint thread of one open log, started at its first use;
/// dropping this stops it after the checkpoint it is running.
pub(super) struct Checkpointer {
    shared: Arc<Shared>,
}

struct Shared {
    db: PathBuf,
    state: Mutex<State>,
    wake: Condvar,
}

#[derive(Default)]
struct State {
    /// A commit found the WAL at or over [`CHECKPOINT_PAGES`].
    due: bool,
    stop: bool,
    /// The thread runs.
    running: bool,
}

impl Checkpointer {
    /// The checkpointer of the database file `db`.
    pub fn new(db: PathBuf) -> Self {
        Self {
            shared: Arc::new(Shared {
                db,
                state: Mutex::default(),
                wake: Condvar::new(),
            }),
        }
    }

    /// Called on the thread that just committed on `conn` (which has the
    /// hook installed): wakes the checkpoint thread when the WAL has grown
    /// to [`CHECKPOINT_PAGES`], or checkpoints on `conn` at once when it
    /// has reached [`INLINE_PAGES`].
    pub fn after_commit(&self, conn: &Connection) {
        let pages = WAL_PAGES.with(|noted| noted.replace(0));
        if pages >= INLINE_PAGES {
            checkpoint(conn, "the writer");
        } else if pages >= CHECKPOINT_PAGES {
            self.nudge();
        }
    }

    fn nudge(&self) {
        let mut state = lock(&self.shared.state);
        state.due = true;
        if state.running {
            self.shared.wake.notify_one();
            return;
        }
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("agdx-checkpoint".into())
            .spawn(move || shared.run());
        match started {
            Ok(_) => state.running = true,
            // The writer checkpoints itself at INLINE_PAGES; the next
            // commit over CHECKPOINT_PAGES tries to start the thread again.
            Err(error) => tracing::warn!(%error, "could not start the log's checkpoint thread"),
        }
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.wake.notify_all();
    }
}

impl Shared {
    /// The thread: one passive checkpoint per wake-up until stopped.
    fn run(&self) {
        let conn = match connect(&self.db, Durability::Full, false) {
            Ok(conn) => conn,
            Err(fault) => {
                let error = fault.into_log(&self.db);
                tracing::warn!(%error, "the log's checkpoint thread could not open the database; the writer checkpoints instead");
                lock(&self.state).running = false;
                return;
            }
        };
        loop {
            {
                let mut state = lock(&self.state);
                while !state.due && !state.stop {
                    state = self
                        .wake
                        .wait(state)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
                if state.stop {
                    state.running = false;
                    return;
                }
                state.due = false;
            }
            checkpoint(&conn, "the checkpoint thread");
        }
    }
}

/// A passive checkpoint on `conn`. A failure only leaves the WAL longer
/// until the next one: the records are durable in it all the same.
fn checkpoint(conn: &Connection, by: &str) {
    let ran = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |row| {
        Ok((row.get::<_, i64>(1)?, row.get::<_, i64>(2)?))
    });
    match ran {
        Ok((pages, copied)) => tracing::trace!(by, pages, copied, "checkpointed the log's WAL"),
        Err(error) => {
            tracing::debug!(%error, by, "a checkpoint of the log's WAL failed; the next one copies what it left")
        }
    }
}
