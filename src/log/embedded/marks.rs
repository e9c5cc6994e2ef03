//! High-water marks: how far each partition's acknowledged records reach,
//! kept outside the records' database so that the log notices when that
//! database holds fewer.
//!
//! SQLite trusts its own files. At recovery it ends the WAL at the first
//! frame whose checksum fails, silently dropping that commit and every
//! later one, acknowledged appends included; a damaged page can end a scan
//! early without an error. Either way the database serves fewer records
//! than the log acknowledged, and nothing inside it can tell. So after each
//! commit the log raises, per partition, the offset after its last record
//! in `marks.sqlite3`, a file with its own WAL; opening the log compares
//! every mark with the offsets the records' database holds and refuses a
//! log that lost records ([`LogError::Damaged`], naming each range), and
//! `EmbeddedLog::verify` reports them. Giving them up (as if restoring an
//! older backup) lowers the marks to what is left
//! ([`super::EmbeddedLog::accept_loss`]).
//!
//! Why marks and not SQLite's checksum VFS shim (`cksumvfs`): the shim
//! checksums the pages of the database file and fails a read of a damaged
//! one, but a WAL frame failing its checksum still ends the WAL silently at
//! recovery, which is how acknowledged records vanish with no process
//! running; it is also no part of the bundled SQLite (a C extension to
//! build and register), needs every existing database rebuilt with
//! reserved bytes per page, and says which page is damaged, not which
//! records. Damage within the database is caught without it: each record
//! carries a checksum, offsets are dense (a gap in a partition is damage),
//! SQLite reports the malformed pages it meets, and `verify` runs
//! `PRAGMA quick_check`.
//!
//! A mark is raised once the commit it follows is durable and before its
//! appenders hear of it, so it never runs ahead of the records; a crash in
//! between leaves it behind, which only narrows what the next open checks.
//! Marks only rise (processes raise them in whatever order their commits
//! end), and the file is written with `synchronous=NORMAL`: a power cut may
//! set marks back, never forward.

use std::fmt;

use rusqlite::{Connection, TransactionBehavior, params};

use super::{Fault, LogError, SELECT_TOPIC, TopicRow, topic_row};

/// One partition's mark: its topic, the partition, and the offset after
/// its last acknowledged record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Mark {
    /// The topic's row in the records' database.
    pub key: i64,
    pub stream: String,
    pub topic: String,
    pub part: u32,
    pub next: u64,
}

impl Mark {
    /// The mark of `part` of `row` at `next`.
    pub fn of(row: &TopicRow, part: u32, next: u64) -> Self {
        Self {
            key: row.key,
            stream: row.info.stream.clone(),
            topic: row.info.topic.clone(),
            part,
            next,
        }
    }
}

/// Raises the marks of `raises` (never lowers one), in one transaction.
pub(super) fn raise(conn: &mut Connection, raises: &[Mark]) -> Result<(), Fault> {
    if raises.is_empty() {
        return Ok(());
    }
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut upsert = tx.prepare_cached(
            "INSERT INTO marks (topic_key, part, stream, topic, next) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (topic_key, part) DO UPDATE SET next = excluded.next
             WHERE excluded.next > marks.next",
        )?;
        for mark in raises {
            let next = i64::try_from(mark.next).unwrap_or(i64::MAX);
            upsert.execute(params![mark.key, mark.part, mark.stream, mark.topic, next])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Every stored mark.
pub(super) fn stored(marks: &Connection) -> Result<Vec<Mark>, Fault> {
    let rows = marks
        .prepare("SELECT topic_key, part, stream, topic, next FROM marks")?
        .query_map([], |r| {
            let next: i64 = r.get(4)?;
            Ok(Mark {
                key: r.get(0)?,
                part: r.get(1)?,
                stream: r.get(2)?,
                topic: r.get(3)?,
                next: u64::try_from(next).unwrap_or(0),
            })
        })?
        .collect::<Result<_, _>>()?;
    Ok(rows)
}

/// A partition whose records' database holds fewer records than its mark
/// says the log acknowledged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// The topic's row in the records' database (as the mark names it).
    key: i64,
    /// The stream's name.
    pub stream: String,
    /// The topic's name.
    pub topic: String,
    /// The stream's and the topic's numbers, `None` when the database
    /// lost the topic itself.
    pub ids: Option<(u32, u32)>,
    /// The partition.
    pub partition: u32,
    /// The offset after the last record the database holds (0: none).
    pub held: u64,
    /// The offset after the last record the log acknowledged.
    pub acknowledged: u64,
}

impl Lost {
    /// How many acknowledged records are gone.
    pub fn count(&self) -> u64 {
        self.acknowledged - self.held
    }
}

impl fmt::Display for Lost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (stream, topic, partition) = (&self.stream, &self.topic, self.partition);
        let last = self.acknowledged - 1;
        write!(
            f,
            "'{stream}/{topic}' partition {partition} lost offsets {} to {last} ({} records): the log acknowledged offsets up to {last}, ",
            self.held,
            self.count()
        )?;
        match (self.ids, self.held) {
            (None, _) => write!(f, "but its database no longer has the topic"),
            (Some(_), 0) => write!(f, "but its database holds none of them"),
            (Some(_), held) => write!(f, "but its database holds them only up to {}", held - 1),
        }
    }
}

/// The offset after the last record of `part` that `records` holds.
fn held(records: &Connection, topic_key: i64, part: u32) -> Result<u64, Fault> {
    let last: Option<i64> = records
        .prepare_cached("SELECT max(off) FROM records WHERE topic_key = ?1 AND part = ?2")?
        .query_row(params![topic_key, part], |row| row.get(0))?;
    Ok(last.map_or(0, |last| u64::try_from(last).map_or(0, |l| l + 1)))
}

/// Compares the `stored` marks with what `records` holds: the partitions
/// that lost records, and the marks to raise for partitions holding more
/// than their mark (or none yet: a log made before marks, or written by a
/// process that could not raise them), so the next open checks those too.
pub(super) fn compare(
    records: &Connection,
    stored: &[Mark],
) -> Result<(Vec<Lost>, Vec<Mark>), Fault> {
    // A topic without partitions holds no records to compare.
    let topics: Vec<TopicRow> = records
        .prepare(SELECT_TOPIC)?
        .query_map([], topic_row)?
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .flatten()
        .collect();
    let mut lost = Vec::new();
    let mut unknown = Vec::new();
    for mark in stored {
        // The names too: a key the database lost with its topic may have
        // gone to a topic made since.
        let row = topics.iter().find(|t| {
            t.key == mark.key && t.info.stream == mark.stream && t.info.topic == mark.topic
        });
        let held = match row {
            Some(row) if mark.part < row.info.partitions.get() => {
                match held(records, mark.key, mark.part) {
                    Ok(held) => held,
                    Err(fault) => {
                        unknowable(mark, fault)?;
                        unknown.push((mark.key, mark.part));
                        continue;
                    }
                }
            }
            _ => 0,
        };
        if held < mark.next {
            lost.push(Lost {
                key: mark.key,
                stream: mark.stream.clone(),
                topic: mark.topic.clone(),
                ids: row.map(|t| (t.info.stream_id, t.info.topic_id)),
                partition: mark.part,
                held,
                acknowledged: mark.next,
            });
        }
    }
    let mut raises = Vec::new();
    for row in &topics {
        for part in 0..row.info.partitions.get() {
            if unknown.contains(&(row.key, part)) {
                continue;
            }
            let next = held(records, row.key, part)?;
            let mark = stored.iter().find(|m| m.key == row.key && m.part == part);
            if next > 0 && mark.is_none_or(|mark| mark.next < next) {
                raises.push(Mark::of(row, part, next));
            }
        }
    }
    Ok((lost, raises))
}

/// Goes on when the end of `mark`'s partition cannot be read because
/// SQLite finds the page holding it malformed: that is damage the reads
/// of the partition report (and `verify` names), not a reason to refuse
/// the whole log. Any other failure stands.
fn unknowable(mark: &Mark, fault: Fault) -> Result<(), Fault> {
    match fault {
        Fault::Sql(error) if crate::sqlite::is_damage(&error) => {
            tracing::error!(%error, stream = %mark.stream, topic = %mark.topic, partition = mark.part, "the end of a partition of the embedded log cannot be read; its high-water mark cannot be checked");
            Ok(())
        }
        other => Err(other),
    }
}

/// Lowers the marks of `lost` to what the records' database holds: the
/// log gives those records up and opens again, appending from there on.
pub(super) fn accept(marks: &mut Connection, lost: &[Lost]) -> Result<(), Fault> {
    let tx = marks.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut lower =
            tx.prepare("UPDATE marks SET next = ?3 WHERE topic_key = ?1 AND part = ?2")?;
        let mut forget = tx.prepare("DELETE FROM marks WHERE topic_key = ?1 AND part = ?2")?;
        for partition in lost {
            // A topic the database lost altogether leaves no mark behind:
            // its key may be another topic's by now.
            if partition.ids.is_none() {
                forget.execute(params![partition.key, partition.partition])?;
                continue;
            }
            let held = i64::try_from(partition.held).unwrap_or(i64::MAX);
            lower.execute(params![partition.key, partition.partition, held])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// The open's refusal of a log that lost records.
pub(super) fn refusal(location: &str, lost: &[Lost]) -> LogError {
    let ranges: Vec<String> = lost.iter().map(Lost::to_string).collect();
    LogError::Damaged {
        location: location.to_owned(),
        reason: format!(
            "its database no longer holds records it acknowledged ({}); the database file or its WAL was damaged, or replaced by an older copy",
            ranges.join("; ")
        ),
        source: None,
    }
}
