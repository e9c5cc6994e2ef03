//! Waiting on other connections, shared by the process's two kinds of
//! SQLite file: the embedded log and the processed-key store.
//!
//! Both are opened by many connections at once (several workers of one
//! process, several processes), so both need the same two waits: a busy
//! handler for the write lock, and a retry for the one case where SQLite
//! fails at once instead of calling that handler.

use std::time::Duration;

/// A busy handler that waits for another connection's write lock: short
/// sleeps, giving up (`SQLITE_BUSY`) after about 10 s.
pub(crate) fn busy_wait(attempt: i32) -> bool {
    match attempt {
        0..100 => std::thread::sleep(Duration::from_millis(1)),
        100..2_000 => std::thread::sleep(Duration::from_millis(5)),
        _ => return false,
    }
    true
}

/// Runs `open` again while it fails with an error `busy` says is
/// `SQLITE_BUSY`, for as long as [`busy_wait`] would wait.
///
/// `open` makes a new connection and switches the file to WAL mode.
/// Connections switching a new file at once can deadlock (each holds a read
/// lock and wants the exclusive one); SQLite then fails one of them at once
/// instead of calling its busy handler, and that one must start over on a
/// new connection.
pub(crate) fn open_retrying<T, E>(
    mut open: impl FnMut() -> Result<T, E>,
    busy: impl Fn(&E) -> bool,
) -> Result<T, E> {
    let mut attempt = 0;
    loop {
        match open() {
            Err(error) if busy(&error) && busy_wait(attempt) => attempt += 1,
            outcome => return outcome,
        }
    }
}

/// Whether `error` is `SQLITE_BUSY`: another connection held a lock.
pub(crate) fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(error, rusqlite::Error::SqliteFailure(e, _) if e.code == rusqlite::ErrorCode::DatabaseBusy)
}

/// Whether `error` says the database file is damaged: SQLite found it
/// malformed (`SQLITE_CORRUPT`) or not a database at all (`SQLITE_NOTADB`).
#[cfg(feature = "embedded")]
pub(crate) fn is_damage(error: &rusqlite::Error) -> bool {
    matches!(error, rusqlite::Error::SqliteFailure(e, _)
        if matches!(e.code, rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase))
}

/// Whether `error` is `SQLITE_FULL`: the disk (or the file system's quota)
/// has no room for the write.
#[cfg(feature = "embedded")]
pub(crate) fn is_full(error: &rusqlite::Error) -> bool {
    matches!(error, rusqlite::Error::SqliteFailure(e, _) if e.code == rusqlite::ErrorCode::DiskFull)
}
