//! The database file: connections, their settings, and the schema.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::Fault;

/// The database file inside the log directory.
pub(super) const DB_FILE: &str = "log.sqlite3";

/// `PRAGMA application_id` of an agdx log: "AGDX" in ASCII.
const APPLICATION_ID: i32 = 0x4147_4458;

/// `PRAGMA user_version`: the on-disk format version this code reads and writes.
const SCHEMA_VERSION: i32 = 1;

/// The tables. See the module documentation of `embedded` for what each holds.
const SCHEMA: &str = "
CREATE TABLE streams (
    id             INTEGER PRIMARY KEY,
    name           TEXT    NOT NULL UNIQUE,
    created_micros INTEGER NOT NULL
);
CREATE TABLE topics (
    topic_key      INTEGER PRIMARY KEY,
    stream_id      INTEGER NOT NULL REFERENCES streams (id),
    id             INTEGER NOT NULL,
    name           TEXT    NOT NULL,
    partitions     INTEGER NOT NULL,
    created_micros INTEGER NOT NULL,
    UNIQUE (stream_id, id),
    UNIQUE (stream_id, name)
);
CREATE TABLE records (
    topic_key INTEGER NOT NULL,
    part      INTEGER NOT NULL,
    off       INTEGER NOT NULL,
    ts        INTEGER NOT NULL,
    headers   BLOB    NOT NULL,
    payload   BLOB    NOT NULL,
    checksum  INTEGER NOT NULL,
    PRIMARY KEY (topic_key, part, off)
) WITHOUT ROWID;
CREATE TABLE group_members (
    topic_key   INTEGER NOT NULL,
    grp         TEXT    NOT NULL,
    member      TEXT    NOT NULL,
    pid         INTEGER NOT NULL,
    lease_until INTEGER NOT NULL,
    PRIMARY KEY (topic_key, grp, member)
) WITHOUT ROWID;
CREATE TABLE group_owners (
    topic_key INTEGER NOT NULL,
    grp       TEXT    NOT NULL,
    part      INTEGER NOT NULL,
    member    TEXT    NOT NULL,
    PRIMARY KEY (topic_key, grp, part)
) WITHOUT ROWID;
CREATE TABLE group_offsets (
    topic_key INTEGER NOT NULL,
    grp       TEXT    NOT NULL,
    part      INTEGER NOT NULL,
    off       INTEGER NOT NULL,
    PRIMARY KEY (topic_key, grp, part)
) WITHOUT ROWID;
";

/// How hard a connection's commits push data to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Durability {
    /// `synchronous=FULL`: the WAL is fsynced on every commit, so a commit
    /// that returned survives a power cut. Records and committed offsets.
    Full,
    /// `synchronous=NORMAL`: a commit survives the process dying but may be
    /// lost on a power cut. Group leases, which are void after a reboot anyway.
    Leases,
}

/// Waits for another connection's write lock: short sleeps, giving up
/// (`SQLITE_BUSY`, reported as a retryable storage error) after about 10 s.
fn busy_wait(attempt: i32) -> bool {
    match attempt {
        0..100 => std::thread::sleep(Duration::from_millis(1)),
        100..2_000 => std::thread::sleep(Duration::from_millis(5)),
        _ => return false,
    }
    true
}

/// Opens a connection to the database file `db` (which must exist unless
/// `create` is set) with the settings every connection shares.
pub(super) fn connect(
    db: &Path,
    durability: Durability,
    create: bool,
) -> Result<Connection, Fault> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(db, flags)?;
    conn.busy_handler(Some(busy_wait))?;
    let synchronous = match durability {
        Durability::Full => "FULL",
        Durability::Leases => "NORMAL",
    };
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// Switches the database to WAL mode and creates the schema when the file is
/// new; refuses files that are not an agdx log or are of a newer format.
pub(super) fn prepare(conn: &mut Connection, location: &str) -> Result<(), Fault> {
    let mode: String =
        conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(incompatible(
            location,
            format!(
                "the file system does not support SQLite's WAL mode (got journal mode '{mode}'); put the log directory on a local file system"
            ),
        ));
    }
    if format_of(conn)? == (APPLICATION_ID, SCHEMA_VERSION) {
        return Ok(());
    }
    // Not (yet) a log of this format: look again holding the write lock, so
    // that of several processes opening a new directory at once, exactly
    // one creates the schema.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (application_id, version) = format_of(&tx)?;
    if (application_id, version) == (APPLICATION_ID, SCHEMA_VERSION) {
        return Ok(());
    }
    if application_id == APPLICATION_ID {
        return Err(incompatible(
            location,
            format!(
                "its on-disk format is version {version}, this agdx reads version {SCHEMA_VERSION}; use a matching agdx"
            ),
        ));
    }
    let objects: i64 = tx.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
    if objects > 0 || application_id != 0 {
        return Err(incompatible(
            location,
            "it holds another program's SQLite database; point the log at an empty or agdx-made directory".to_owned(),
        ));
    }
    tx.execute_batch(SCHEMA)?;
    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
    tx.commit()?;
    Ok(())
}

/// The database's `application_id` and `user_version`.
fn format_of(conn: &Connection) -> Result<(i32, i32), Fault> {
    let application_id = conn.pragma_query_value(None, "application_id", |row| row.get(0))?;
    let version = conn.pragma_query_value(None, "user_version", |row| row.get(0))?;
    Ok((application_id, version))
}

fn incompatible(location: &str, reason: String) -> Fault {
    Fault::Log(crate::log::LogError::Incompatible {
        location: location.to_owned(),
        reason,
    })
}
