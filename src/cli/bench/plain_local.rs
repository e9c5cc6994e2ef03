//! The baselines of the embedded log: plain SQLite with the log's schema
//! and settings, and the disk itself. Nothing of AGDX is in either.
//!
//! - [`PlainSqlite`]: a database of its own with the `records` and
//!   `group_offsets` tables of `log.sqlite3`, WAL, `synchronous=FULL`,
//!   8 KiB pages; a batch of rows (and, for a consumer, its offset) in one
//!   transaction. What the embedded log could be at best with SQLite's
//!   write path: every byte goes to the WAL, then again to the database
//!   file when SQLite checkpoints.
//! - [`PlainDisk`]: a file of its own, written in full before the run so
//!   its blocks exist; each batch is written where the last ended and
//!   `fdatasync`ed. What the disk allows for a durable append of that size.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::Path;

use rusqlite::{Connection, params};

/// Where replies and commands live in a [`PlainSqlite`] (its `topic_key`).
pub(super) const COMMANDS: i64 = 1;
/// See [`COMMANDS`].
pub(super) const REPLIES: i64 = 2;

/// The bytes a plain row carries as its headers: as many as the three
/// agent headers of an agdx record take in the log's encoding (names,
/// kinds, lengths and values of `agdx.ct`, `agdx.av` and
/// `gen_ai.conversation.id`).
const HEADERS: [u8; 66] = [0; 66];

/// A row read back: its offset, headers and payload.
pub(super) type Row = (i64, Vec<u8>, Vec<u8>);

/// Plain SQLite with the embedded log's schema and settings.
pub(super) struct PlainSqlite {
    conn: Connection,
}

impl PlainSqlite {
    /// A new database at `path`.
    pub fn create(path: &Path) -> rusqlite::Result<Self> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "page_size", 8192)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.execute_batch(
            "CREATE TABLE records (
                topic_key INTEGER NOT NULL, part INTEGER NOT NULL, off INTEGER NOT NULL,
                ts INTEGER NOT NULL, headers BLOB NOT NULL, payload BLOB NOT NULL,
                checksum INTEGER NOT NULL,
                PRIMARY KEY (topic_key, part, off)) WITHOUT ROWID;
             CREATE TABLE group_offsets (
                topic_key INTEGER NOT NULL, grp TEXT NOT NULL, part INTEGER NOT NULL,
                off INTEGER NOT NULL,
                PRIMARY KEY (topic_key, grp, part)) WITHOUT ROWID;",
        )?;
        Ok(Self { conn })
    }

    /// Appends `payloads` to `(topic_key, part)` from offset `first` and,
    /// with `commit`, stores `(topic_key, part, offset)` as the consumer's
    /// offset, all in one transaction.
    pub fn append<P: AsRef<[u8]>>(
        &mut self,
        (topic_key, part): (i64, i64),
        first: i64,
        payloads: &[P],
        commit: Option<(i64, i64, i64)>,
    ) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut insert =
                tx.prepare_cached("INSERT INTO records VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0)")?;
            for (k, payload) in payloads.iter().enumerate() {
                let off = first + k as i64;
                insert.execute(params![
                    topic_key,
                    part,
                    off,
                    off,
                    &HEADERS[..],
                    payload.as_ref()
                ])?;
            }
            if let Some(offset) = commit {
                tx.prepare_cached(
                    "INSERT INTO group_offsets VALUES (?1, 'plain', ?2, ?3)
                     ON CONFLICT (topic_key, grp, part) DO UPDATE SET off = excluded.off",
                )?
                .execute(params![offset.0, offset.1, offset.2])?;
            }
        }
        tx.commit()
    }

    /// Up to `limit` records of `(topic_key, part)` from offset `from`:
    /// each one's offset, headers and payload.
    pub fn read(
        &self,
        (topic_key, part): (i64, i64),
        from: i64,
        limit: u32,
    ) -> rusqlite::Result<Vec<Row>> {
        self.conn
            .prepare_cached(
                "SELECT off, headers, payload FROM records
                 WHERE topic_key = ?1 AND part = ?2 AND off >= ?3 ORDER BY off LIMIT ?4",
            )?
            .query_map(params![topic_key, part, from, limit], |row| {
                Ok((row.get(0)?, row.get(1)?, row.get(2)?))
            })?
            .collect()
    }
}

/// A preallocated file appended to and `fdatasync`ed batch by batch.
pub(super) struct PlainDisk {
    file: File,
    /// Where the next batch goes.
    end: u64,
}

impl PlainDisk {
    /// A file of `capacity` bytes at `path`, written with zeros and synced
    /// so that its blocks exist before the first append.
    pub fn create(path: &Path, capacity: u64) -> std::io::Result<Self> {
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < capacity {
            let n = (capacity - at).min(zeros.len() as u64);
            file.write_all_at(&zeros[..n as usize], at)?;
            at += n;
        }
        file.sync_all()?;
        Ok(Self { file, end: 0 })
    }

    /// Writes `bytes` after the last batch and `fdatasync`s; where it went.
    pub fn append(&mut self, bytes: &[u8]) -> std::io::Result<u64> {
        let at = self.end;
        self.file.write_all_at(bytes, at)?;
        self.file.sync_data()?;
        self.end += bytes.len() as u64;
        Ok(at)
    }

    /// Reads `into.len()` bytes from `at`.
    pub fn read(&self, at: u64, into: &mut [u8]) -> std::io::Result<()> {
        self.file.read_exact_at(into, at)
    }
}
