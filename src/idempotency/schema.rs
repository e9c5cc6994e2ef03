//! The store's database file: its settings, its tables, and what happens to
//! a file an older agdx wrote.
//!
//! Every row names the log it describes (`log`, see
//! [`super::ProcessedKeys::identity`]), so one state directory can serve
//! workers of several logs and streams without one answering from another's
//! history. `kept` counts each (log, agent)'s keys, kept up to date by
//! triggers, so trimming to the newest N keys needs no scan. `rebuilt`
//! holds where each reply partition's catch-up stopped, `marks` the records
//! that show which log the rows came from (see `marks.rs`).

use rusqlite::{Connection, TransactionBehavior};
use std::path::Path;

use crate::sqlite;

/// `PRAGMA user_version` of the tables below.
const VERSION: i32 = 2;

const TABLES: &str = "
CREATE TABLE processed (
    log             TEXT    NOT NULL,
    agent           TEXT    NOT NULL,
    source          TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    replies         BLOB    NOT NULL,
    recorded_micros INTEGER NOT NULL,
    PRIMARY KEY (log, agent, source, key)
);
CREATE INDEX processed_by_age ON processed (log, agent, recorded_micros);
CREATE TABLE kept (
    log   TEXT    NOT NULL,
    agent TEXT    NOT NULL,
    keys  INTEGER NOT NULL,
    PRIMARY KEY (log, agent)
) WITHOUT ROWID;
CREATE TRIGGER processed_added AFTER INSERT ON processed BEGIN
    INSERT INTO kept (log, agent, keys) VALUES (NEW.log, NEW.agent, 1)
        ON CONFLICT (log, agent) DO UPDATE SET keys = keys + 1;
END;
CREATE TRIGGER processed_removed AFTER DELETE ON processed BEGIN
    UPDATE kept SET keys = keys - 1 WHERE log = OLD.log AND agent = OLD.agent;
END;
CREATE TABLE rebuilt (
    log         TEXT    NOT NULL,
    agent       TEXT    NOT NULL,
    partition   INTEGER NOT NULL,
    next_offset INTEGER NOT NULL,
    PRIMARY KEY (log, agent, partition)
) WITHOUT ROWID;
CREATE TABLE marks (
    log       TEXT    NOT NULL,
    agent     TEXT    NOT NULL,
    topic_id  INTEGER NOT NULL,
    partition INTEGER NOT NULL,
    offset    INTEGER NOT NULL,
    timestamp INTEGER NOT NULL,
    digest    INTEGER NOT NULL,
    PRIMARY KEY (log, agent, topic_id, partition)
) WITHOUT ROWID;
";

/// What opening found in the file.
pub(super) enum Opened {
    /// The current tables, new or as they were.
    Current,
    /// A file from an agdx before the store named its log: its tables were
    /// dropped (the store is rebuilt from the log).
    Replaced,
}

/// Opens the database at `path`, creating or replacing the tables as needed.
/// Fails with the version found when a newer agdx wrote the file.
pub(super) fn open(path: &Path) -> Result<(Connection, Opened), OpenError> {
    let mut conn = sqlite::open_retrying(
        || {
            let conn = Connection::open(path)?;
            conn.busy_handler(Some(sqlite::busy_wait))?;
            conn.execute_batch("PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;")?;
            Ok(conn)
        },
        sqlite::is_busy,
    )?;
    // One process at a time sets the tables up.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let version: i32 = tx.query_row("PRAGMA user_version", [], |row| row.get(0))?;
    let opened = match version {
        VERSION => Opened::Current,
        newer if newer > VERSION => return Err(OpenError::Newer(newer)),
        _ => {
            let old = tx.query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN ('processed', 'rebuilt')",
                [],
                |row| row.get::<_, i64>(0),
            )? > 0;
            tx.execute_batch("DROP TABLE IF EXISTS processed; DROP TABLE IF EXISTS rebuilt;")?;
            tx.execute_batch(TABLES)?;
            tx.pragma_update(None, "user_version", VERSION)?;
            if old {
                Opened::Replaced
            } else {
                Opened::Current
            }
        }
    };
    tx.commit()?;
    Ok((conn, opened))
}

/// Why the database could not be opened.
pub(super) enum OpenError {
    Sqlite(rusqlite::Error),
    /// Written by a newer agdx (this `user_version`).
    Newer(i32),
}

impl From<rusqlite::Error> for OpenError {
    fn from(error: rusqlite::Error) -> Self {
        OpenError::Sqlite(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier};

    #[test]
    fn workers_opening_a_new_store_at_once_all_open_it() {
        const OPENERS: usize = 8;
        for _ in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = Arc::new(dir.path().join("keys.sqlite3"));
            let start = Arc::new(Barrier::new(OPENERS));
            let openers: Vec<_> = (0..OPENERS)
                .map(|_| {
                    let (path, start) = (path.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        open(&path).map(|_| ())
                    })
                })
                .collect();
            for opener in openers {
                match opener.join().unwrap() {
                    Ok(()) => {}
                    Err(OpenError::Sqlite(error)) => panic!("an opener failed: {error}"),
                    Err(OpenError::Newer(version)) => panic!("an opener saw version {version}"),
                }
            }
        }
    }
}
