//! Verifying the embedded log end to end, and giving up records it lost.
//!
//! [`EmbeddedLog::verify`] runs SQLite's `PRAGMA quick_check` on each of
//! the log's files (pages, B-trees and the records' order), compares the
//! high-water marks with the records (see the `marks` module), and reads
//! every record of every topic back through the port (checksums, header
//! blocks, no missing offsets; see the `read` module).

use std::path::Path;

use agdx_wire::LogPosition;
use rusqlite::Connection;

use super::marks::{self, Lost};
use super::schema::{DB_FILE, Durability, GROUPS_FILE, MARKS_FILE, connect};
use super::{EmbeddedLog, Fault, LogError, blocking};
use crate::log::Damage;
use crate::log::check::{CheckReport, Finding, check_topics};

impl EmbeddedLog {
    /// Verifies the log in directory `path` end to end and reports what is
    /// damaged: pages SQLite's integrity check names, records the log
    /// acknowledged that its database lost, and records that do not read
    /// back intact. Unlike [`EmbeddedLog::open`] it refuses no damage (it
    /// reports it), and it creates no log: `path` must hold one.
    pub async fn verify(path: &Path) -> Result<CheckReport, LogError> {
        if !path.join(DB_FILE).is_file() {
            return Err(LogError::InvalidInput(format!(
                "there is no embedded log at {}: it holds no {DB_FILE}",
                path.display()
            )));
        }
        let dir = path.to_owned();
        let (mut report, opened) = blocking(move || {
            // Opened first: that creates the files a log made by an older
            // agdx lacks, so each can be checked.
            let opened = Self::open_files(&dir);
            let mut report = CheckReport::default();
            for file in [DB_FILE, GROUPS_FILE, MARKS_FILE] {
                report.findings.extend(
                    quick_check(&dir.join(file))
                        .into_iter()
                        .map(Finding::Storage),
                );
            }
            let opened = match opened {
                Ok((log, lost)) => {
                    report.findings.extend(lost.iter().map(lost_finding));
                    Some(log)
                }
                Err(error @ LogError::Damaged { .. }) => {
                    report.findings.push(Finding::Storage(error.to_string()));
                    None
                }
                Err(error) => return Err(error),
            };
            Ok((report, opened))
        })
        .await?;
        if let Some(log) = opened {
            let topics = log.stored_topics().await?;
            check_topics(&log, &topics, &mut report).await?;
        }
        Ok(report)
    }

    /// Gives up the records the log in `path` acknowledged but its
    /// database no longer holds: lowers the high-water marks to what is
    /// left, so the log opens again and appends go on from there (as after
    /// restoring an older backup). Returns what was given up; nothing when
    /// nothing was lost. Run it with no process using the log.
    pub fn accept_loss(path: &Path) -> Result<Vec<Lost>, LogError> {
        let (log, lost) = Self::open_files(path)?;
        if !lost.is_empty() {
            marks::accept(&mut super::lock(&log.core.marks), &lost)
                .map_err(|f| f.into_log(&log.core.marks_db))?;
        }
        Ok(lost)
    }
}

/// What `PRAGMA quick_check` reports wrong with the database `file`, each
/// line naming the file; nothing when it is sound.
fn quick_check(file: &Path) -> Vec<String> {
    let name = file.file_name().map_or_else(
        || file.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let lines = connect(file, Durability::Leases, false).and_then(|conn| run_quick_check(&conn));
    match lines {
        Ok(lines) => lines
            .into_iter()
            .filter(|line| line != "ok")
            .map(|line| format!("{name}: SQLite's integrity check: {line}"))
            .collect(),
        Err(Fault::Sql(error)) => vec![format!("{name}: SQLite's integrity check stops: {error}")],
        Err(Fault::Log(error)) => vec![format!("{name}: SQLite's integrity check stops: {error}")],
    }
}

fn run_quick_check(conn: &Connection) -> Result<Vec<String>, Fault> {
    let lines = conn
        .prepare("PRAGMA quick_check")?
        .query_map([], |row| row.get::<_, String>(0))?
        .collect::<Result<_, _>>()?;
    Ok(lines)
}

/// A lost range as a finding: lost records of a known topic, or (when the
/// database lost the topic itself) a storage problem naming it.
fn lost_finding(lost: &Lost) -> Finding {
    let Some((stream, topic)) = lost.ids else {
        return Finding::Storage(lost.to_string());
    };
    let position = LogPosition {
        stream,
        topic,
        partition: lost.partition,
        offset: lost.held,
    };
    Finding::Lost {
        stream: lost.stream.clone(),
        topic: lost.topic.clone(),
        damage: Damage::range(
            position,
            lost.acknowledged - 1,
            "lost: the log acknowledged them, but its database no longer holds them (its file or WAL was damaged, or replaced by an older copy)",
        ),
    }
}
