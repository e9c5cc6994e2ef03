//! Errors inside the embedded log, and the log errors they become: a full
//! disk, a damaged file, or another storage failure, each said as such (so
//! "file is not a database" never comes with advice about disk space).

use std::path::Path;

use crate::log::LogError;
use crate::sqlite;

/// An error inside the backend: SQLite's, or already a log error.
#[derive(Debug)]
pub(super) enum Fault {
    Sql(rusqlite::Error),
    Log(LogError),
}

impl From<rusqlite::Error> for Fault {
    fn from(error: rusqlite::Error) -> Self {
        Fault::Sql(error)
    }
}

impl From<LogError> for Fault {
    fn from(error: LogError) -> Self {
        Fault::Log(error)
    }
}

impl Fault {
    /// The log error, naming the database file for SQLite's errors: a
    /// full disk, a damaged file, or another storage failure.
    pub(super) fn into_log(self, db: &Path) -> LogError {
        match self {
            Fault::Log(error) => error,
            Fault::Sql(error) if sqlite::is_damage(&error) => LogError::Damaged {
                location: db.display().to_string(),
                reason: format!("SQLite cannot read it: {error}"),
                source: Some(error.into()),
            },
            Fault::Sql(error) if sqlite::is_full(&error) => LogError::StorageFull {
                reason: format!("{}: {error}", db.display()),
                source: Some(error.into()),
            },
            Fault::Sql(error) => LogError::Storage {
                reason: format!("{}: {error}", db.display()),
                source: Some(error.into()),
            },
        }
    }
}

/// A failed file operation on the log directory as a log error: a full
/// disk, or another storage failure.
pub(super) fn io_failure(what: String, error: std::io::Error) -> LogError {
    let reason = format!("{what}: {error}");
    if error.kind() == std::io::ErrorKind::StorageFull {
        LogError::StorageFull {
            reason,
            source: Some(error.into()),
        }
    } else {
        LogError::Storage {
            reason,
            source: Some(error.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite_error(code: i32) -> Fault {
        Fault::Sql(rusqlite::Error::SqliteFailure(
            rusqlite::ffi::Error::new(code),
            None,
        ))
    }

    #[test]
    fn only_a_full_disk_is_said_to_need_space() {
        let db = Path::new("/logs/a/log.sqlite3");
        let full = sqlite_error(rusqlite::ffi::SQLITE_FULL).into_log(db);
        assert!(matches!(full, LogError::StorageFull { .. }), "{full:?}");
        assert!(full.to_string().contains("free space"), "{full}");
        for code in [rusqlite::ffi::SQLITE_NOTADB, rusqlite::ffi::SQLITE_CORRUPT] {
            let damaged = sqlite_error(code).into_log(db);
            assert!(matches!(damaged, LogError::Damaged { .. }), "{damaged:?}");
            assert!(!damaged.to_string().contains("free space"), "{damaged}");
            assert!(damaged.to_string().contains("log.sqlite3"), "{damaged}");
        }
        let other = sqlite_error(rusqlite::ffi::SQLITE_READONLY).into_log(db);
        assert!(matches!(other, LogError::Storage { .. }), "{other:?}");
        assert!(!other.to_string().contains("free space"), "{other}");
        let no_room = std::io::Error::from(std::io::ErrorKind::StorageFull);
        assert!(matches!(
            io_failure("cannot create the log directory x".into(), no_room),
            LogError::StorageFull { .. }
        ));
        let denied = std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        assert!(matches!(
            io_failure("cannot create the log directory x".into(), denied),
            LogError::Storage { .. }
        ));
    }

    /// A program can look at SQLite's or the system's error under the log
    /// error it became.
    #[test]
    fn the_error_underneath_is_the_source() {
        let db = Path::new("/logs/a/log.sqlite3");
        let code = |error: &LogError| match error.cause() {
            Some(crate::log::Cause::Sqlite(sql)) => sql.sqlite_error_code(),
            other => panic!("{error:?} keeps no SQLite error: {other:?}"),
        };
        let read_only = sqlite_error(rusqlite::ffi::SQLITE_READONLY).into_log(db);
        assert_eq!(code(&read_only), Some(rusqlite::ErrorCode::ReadOnly));
        let full = sqlite_error(rusqlite::ffi::SQLITE_FULL).into_log(db);
        assert_eq!(code(&full), Some(rusqlite::ErrorCode::DiskFull));
        let damaged = sqlite_error(rusqlite::ffi::SQLITE_CORRUPT).into_log(db);
        assert_eq!(code(&damaged), Some(rusqlite::ErrorCode::DatabaseCorrupt));
        let denied = io_failure(
            "cannot create the log directory x".into(),
            std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        );
        match denied.cause() {
            Some(crate::log::Cause::Io(io)) => {
                assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied)
            }
            other => panic!("{denied:?} keeps no system error: {other:?}"),
        }
    }
}
