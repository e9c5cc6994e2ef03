//! The database files: connections, their settings, and the schemas.
//!
//! Three files: `log.sqlite3` holds streams, topics, records and committed
//! offsets; `groups.sqlite3` holds the consumer groups' leases and
//! partition owners; `marks.sqlite3` holds the high-water marks (see the
//! `marks` module). Keeping the leases apart means a renewal never waits
//! behind an append (however large) for SQLite's single write lock, so no
//! member's lease can run out because the log was busy; keeping the marks
//! apart means damage to the records' file cannot take them along.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::Fault;
use crate::sqlite;

/// The database of records and offsets inside the log directory.
pub(super) const DB_FILE: &str = "log.sqlite3";

/// The database of group leases inside the log directory.
pub(super) const GROUPS_FILE: &str = "groups.sqlite3";

/// The high-water mark database file inside the log directory.
pub(super) const MARKS_FILE: &str = "marks.sqlite3";

/// The file each process writes a byte to after committing an append, for
/// the other processes' watchers (see the `wake` module).
pub(super) const BELL_FILE: &str = "appends.bell";

/// `PRAGMA application_id` of both files of an agdx log: "AGDX" in ASCII.
const APPLICATION_ID: i32 = 0x4147_4458;

/// One of the log's database files: its tables and format version.
pub(super) struct Database {
    /// What the file holds, for messages.
    what: &'static str,
    /// `PRAGMA user_version`: the on-disk format this code reads and writes.
    version: i32,
    /// The tables of a new file, in parts.
    schema: &'static [&'static str],
    /// Bring a file of an older version to this one, step by step: entry
    /// `k` upgrades version `k + 1` to `k + 2`.
    upgrades: &'static [&'static str],
    /// The page size of a new file (an existing file keeps its own).
    page_size: u32,
}

/// The records and offsets. Version 1 also held the group leases; version 2
/// moved them to [`GROUPS`], and upgrading drops them here (leases are
/// rebuilt by the next renewals). Version 3 added retention: the
/// `retention`, `low_water` and `holds` tables.
pub(super) const RECORDS: Database = Database {
    what: "records",
    version: 3,
    schema: &[RECORDS_SCHEMA, RETENTION_SCHEMA],
    upgrades: &[
        "DROP TABLE group_members; DROP TABLE group_owners;",
        RETENTION_SCHEMA,
    ],
    // Records up to about 2 KiB stay within their B-tree page instead of
    // spilling into overflow pages (at 4 KiB a row over about 1 KiB
    // spills). Not larger: every commit writes each page it touched to the
    // WAL whole, and a group commit of appends to N partitions touches N
    // leaf pages (16 KiB pages made 8 producers append 2.5-2.9x one, 8 KiB
    // ones 2.9-3.3x, with batches of 100 as fast).
    page_size: 8_192,
};

/// The group leases and partition owners.
pub(super) const GROUPS: Database = Database {
    what: "group leases",
    version: 1,
    schema: &[GROUPS_SCHEMA],
    upgrades: &[],
    page_size: 4_096,
};

/// The high-water marks, one per partition that has records.
pub(super) const MARKS: Database = Database {
    what: "high-water marks",
    version: 1,
    schema: &[MARKS_SCHEMA],
    upgrades: &[],
    page_size: 4_096,
};

/// The tables of `log.sqlite3`. See the module documentation of `embedded`
/// for what each holds.
const RECORDS_SCHEMA: &str = "
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
CREATE TABLE group_offsets (
    topic_key INTEGER NOT NULL,
    grp       TEXT    NOT NULL,
    part      INTEGER NOT NULL,
    off       INTEGER NOT NULL,
    PRIMARY KEY (topic_key, grp, part)
) WITHOUT ROWID;
";

/// The retention tables of `log.sqlite3` (see the `retention` module):
/// the age past which a topic's records go, the first offset each
/// partition still holds once some went, and the offsets readers hold.
const RETENTION_SCHEMA: &str = "
CREATE TABLE retention (
    topic_key      INTEGER PRIMARY KEY,
    max_age_micros INTEGER NOT NULL
);
CREATE TABLE low_water (
    topic_key INTEGER NOT NULL,
    part      INTEGER NOT NULL,
    first     INTEGER NOT NULL,
    PRIMARY KEY (topic_key, part)
) WITHOUT ROWID;
CREATE TABLE holds (
    topic_key INTEGER NOT NULL,
    part      INTEGER NOT NULL,
    holder    TEXT    NOT NULL,
    off       INTEGER NOT NULL,
    placed    INTEGER NOT NULL,
    PRIMARY KEY (topic_key, part, holder)
) WITHOUT ROWID;
";

/// The tables of `groups.sqlite3`. `process` is the token of the member's
/// process (random, drawn when the process first joins a group; process
/// ids repeat across containers sharing a directory).
const GROUPS_SCHEMA: &str = "
CREATE TABLE group_members (
    topic_key   INTEGER NOT NULL,
    grp         TEXT    NOT NULL,
    member      TEXT    NOT NULL,
    process     INTEGER NOT NULL,
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
";

/// The table of `marks.sqlite3`: per partition, the offset after the last
/// record the log acknowledged (`next`), with the stream and topic names
/// to name it by should the records' database lose the topic itself.
const MARKS_SCHEMA: &str = "
CREATE TABLE marks (
    topic_key INTEGER NOT NULL,
    part      INTEGER NOT NULL,
    stream    TEXT    NOT NULL,
    topic     TEXT    NOT NULL,
    next      INTEGER NOT NULL,
    PRIMARY KEY (topic_key, part)
) WITHOUT ROWID;
";

/// How hard a connection's commits push data to the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Durability {
    /// `synchronous=FULL`: the WAL is fsynced on every commit, so a commit
    /// that returned survives a power cut. Records and committed offsets.
    Full,
    /// `synchronous=NORMAL`: a commit survives the process dying but may be
    /// lost on a power cut. Group leases, which are void after a reboot
    /// anyway (and the change watcher, which never writes).
    Leases,
    /// `synchronous=NORMAL`, waiting for the write lock as long as
    /// [`Durability::Full`]: high-water marks, which a power cut may set
    /// back (they then check less) but never forward.
    Marks,
}

/// Waits for another connection's write lock on the group leases, which
/// only renewals and leaves take, for a few milliseconds each: gives up
/// after about 0.6 s, well within a lease, so a renewal that fails is
/// tried again before the lease runs out.
fn busy_wait_leases(attempt: i32) -> bool {
    match attempt {
        0..100 => std::thread::sleep(Duration::from_millis(1)),
        100..200 => std::thread::sleep(Duration::from_millis(5)),
        _ => return false,
    }
    true
}

/// Each connection's page cache, in KiB (SQLite's negative `cache_size`).
/// SQLite's default of 2 MiB filled slowly as a log grew, a worker's
/// memory with it; a reader's cache is emptied by every commit of another
/// connection anyway, and the writer's hot pages fit in 1 MiB.
const CACHE_KIB: i64 = -1024;

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
    let (synchronous, wait): (_, fn(i32) -> bool) = match durability {
        Durability::Full => ("FULL", sqlite::busy_wait),
        Durability::Leases => ("NORMAL", busy_wait_leases),
        Durability::Marks => ("NORMAL", sqlite::busy_wait),
    };
    conn.busy_handler(Some(wait))?;
    conn.pragma_update(None, "synchronous", synchronous)?;
    conn.pragma_update(None, "cache_size", CACHE_KIB)?;
    conn.set_prepared_statement_cache_capacity(32);
    Ok(conn)
}

/// Opens a connection to the database file `db` (created when missing)
/// and prepares it: WAL mode, the schema of `database`. Starts over on a
/// new connection when another one switching the file to WAL at the same
/// time makes SQLite fail this one at once (see [`sqlite::open_retrying`]).
pub(super) fn open(
    db: &Path,
    durability: Durability,
    location: &str,
    database: &Database,
) -> Result<Connection, Fault> {
    sqlite::open_retrying(
        || {
            let mut conn = connect(db, durability, true)?;
            prepare(&mut conn, location, database)?;
            Ok(conn)
        },
        |fault| matches!(fault, Fault::Sql(e) if sqlite::is_busy(e)),
    )
}

/// Switches the database to WAL mode and creates the schema of `database`
/// when the file is new, or upgrades it from the version before; refuses
/// files that are not an agdx log or are of another format.
fn prepare(conn: &mut Connection, location: &str, database: &Database) -> Result<(), Fault> {
    // Takes effect only on a file not yet written (before WAL mode is on).
    conn.pragma_update(None, "page_size", database.page_size)?;
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
    let current = (APPLICATION_ID, database.version);
    if format_of(conn)? == current {
        return Ok(());
    }
    // Not (yet) a log of this format: look again holding the write lock, so
    // that of several processes opening a new directory at once, exactly
    // one creates (or upgrades) the schema.
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let (application_id, version) = format_of(&tx)?;
    if (application_id, version) == current {
        return Ok(());
    }
    if application_id == APPLICATION_ID {
        let steps = usize::try_from(version - 1)
            .ok()
            .and_then(|from| database.upgrades.get(from..))
            .filter(|steps| !steps.is_empty() && version < database.version);
        if let Some(steps) = steps {
            for step in steps {
                tx.execute_batch(step)?;
            }
            tx.pragma_update(None, "user_version", database.version)?;
            tx.commit()?;
            return Ok(());
        }
        return Err(incompatible(
            location,
            format!(
                "the on-disk format of its {} is version {version}, this agdx reads version {}; use a matching agdx",
                database.what, database.version
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
    for part in database.schema {
        tx.execute_batch(part)?;
    }
    tx.pragma_update(None, "application_id", APPLICATION_ID)?;
    tx.pragma_update(None, "user_version", database.version)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every connection of the log keeps its page cache to `CACHE_KIB`,
    /// so a worker's memory does not grow with the log.
    #[test]
    fn connections_cap_their_page_cache() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let db = dir.path().join("log.sqlite3");
        for (durability, create) in [
            (Durability::Full, true),
            (Durability::Leases, false),
            (Durability::Marks, false),
        ] {
            let conn = connect(&db, durability, create).expect("a connection");
            let cache: i64 = conn
                .pragma_query_value(None, "cache_size", |row| row.get(0))
                .expect("the cache size");
            assert_eq!(cache, CACHE_KIB);
        }
    }
}
