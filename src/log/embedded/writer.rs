//! Writing: the group commit. Appends and offset commits of this process
//! are queued and one blocking thread at a time commits everything queued
//! in one transaction (see *Durability* in the module above).

use std::sync::Arc;

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use tokio::sync::oneshot;

use super::wake::Handoff;
use super::{Core, Fault, LogError, LogRecord, TopicRow, codec, group, lock, marks, now_micros};

/// One change of a group-commit transaction.
pub(super) enum Write {
    Append {
        row: Arc<TopicRow>,
        part: u32,
        records: Vec<Encoded>,
    },
    Commit {
        topic_key: i64,
        group: String,
        part: u32,
        offset: i64,
    },
}

/// Writes queued together for the next group commit: they land in the same
/// transaction, all or none, and `done` hears the outcome.
pub(super) struct Queued {
    writes: Vec<Write>,
    done: oneshot::Sender<Result<(), LogError>>,
}

/// A record checked and ready to insert.
pub(super) struct Encoded {
    pub headers: Vec<u8>,
    pub payload: bytes::Bytes,
}

impl Core {
    /// The group-commit loop, run by one blocking thread at a time: commits
    /// everything queued in one transaction, reports to each writer, and
    /// goes on while writes arrived meanwhile (their writers are already
    /// waiting), so one fsync serves every writer that queued during the
    /// previous one.
    fn flush(&self) {
        loop {
            let queued = {
                let mut queue = lock(&self.queue);
                if queue.writes.is_empty() {
                    queue.flushing = false;
                    drop(queue);
                    self.sweep_if_due();
                    return;
                }
                std::mem::take(&mut queue.writes)
            };
            self.commit(queued);
        }
    }

    /// One group commit.
    fn commit(&self, queued: Vec<Queued>) {
        let mut conn = lock(&self.writer);
        let committed = commit_writes(&mut conn, queued.iter().flat_map(|q| &q.writes));
        if committed.is_ok() {
            self.checkpoints.after_commit(&conn);
        }
        drop(conn);
        match committed {
            Ok(appended) => {
                self.raise_marks(&queued, &appended);
                // Before any append is acknowledged, so a process told of
                // one (by its appender) finds the bell rung for it too.
                if !appended.is_empty() {
                    self.wake.ring();
                }
                let mut appended = appended.into_iter();
                for Queued { writes, done } in queued {
                    for write in writes {
                        let Write::Append { row, part, records } = write else {
                            continue;
                        };
                        let Some((first, timestamp)) = appended.next() else {
                            continue;
                        };
                        self.wake.appended((row.key, part), || {
                            handoff(&row, part, first, timestamp, records)
                        });
                    }
                    let _ = done.send(Ok(()));
                }
            }
            Err(fault) => {
                let error = fault.into_log(&self.db);
                for q in queued {
                    let _ = q.done.send(Err(error.clone()));
                }
            }
        }
    }

    /// Raises the high-water marks of the partitions a group commit
    /// appended to (`appended`: each append's first offset, in order). A
    /// mark that cannot be raised stays behind, which only narrows what
    /// the next open checks: the records are durable all the same, so the
    /// appends still succeed.
    fn raise_marks(&self, queued: &[Queued], appended: &[(u64, u64)]) {
        let appends = queued
            .iter()
            .flat_map(|q| &q.writes)
            .filter_map(|w| match w {
                Write::Append { row, part, records } => Some((row, *part, records.len() as u64)),
                Write::Commit { .. } => None,
            });
        let raises: Vec<marks::Mark> = appends
            .zip(appended)
            .map(|((row, part, count), (first, _))| marks::Mark::of(row, part, first + count))
            .collect();
        if let Err(fault) = marks::raise(&mut lock(&self.marks), &raises) {
            let error = fault.into_log(&self.marks_db);
            tracing::warn!(%error, "the log's high-water marks could not be raised; the next open checks less of what was just appended");
        }
    }
}

/// Queues writes and waits until a group commit has taken them, all in one
/// transaction. Starts the flushing thread unless one runs: that one takes
/// these writes along.
pub(super) async fn submit(core: &Arc<Core>, writes: Vec<Write>) -> Result<(), LogError> {
    let (done, report) = oneshot::channel();
    let start = {
        let mut queue = lock(&core.queue);
        queue.writes.push(Queued { writes, done });
        !std::mem::replace(&mut queue.flushing, true)
    };
    if start {
        let flusher = Flusher {
            core: core.clone(),
            ran: false,
        };
        tokio::task::spawn_blocking(move || flusher.run());
    }
    report.await.unwrap_or_else(|_| {
        Err(LogError::Storage {
            reason: "the write was dropped before it was committed (the log is shutting down)"
                .into(),
            source: None,
        })
    })
}

/// The writes waiting for the writer, and whether a thread flushes them.
#[derive(Default)]
pub(super) struct Queue {
    writes: Vec<Queued>,
    flushing: bool,
}

/// The flushing thread's task. Should it never run (the runtime shuts
/// down) or panic, dropping it fails the queued writes and lets the next
/// write start a new one, so no writer waits forever.
pub(super) struct Flusher {
    core: Arc<Core>,
    ran: bool,
}

impl Flusher {
    fn run(mut self) {
        self.core.flush();
        self.ran = true;
    }
}

impl Drop for Flusher {
    fn drop(&mut self) {
        if !self.ran {
            let mut queue = lock(&self.core.queue);
            queue.flushing = false;
            // Dropping the senders tells each writer.
            queue.writes.clear();
        }
    }
}

/// The group-commit transaction; an SQLite error fails every write in it.
/// Returns the first offset and the timestamp of each append, in order.
fn commit_writes<'w>(
    conn: &mut Connection,
    writes: impl Iterator<Item = &'w Write>,
) -> Result<Vec<(u64, u64)>, Fault> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = now_micros()?;
    let mut appended = Vec::new();
    for write in writes {
        match write {
            Write::Append { row, part, records } => {
                appended.push(append_batch(&tx, row.key, *part, records, now)?);
            }
            Write::Commit {
                topic_key,
                group,
                part,
                offset,
            } => group::store_offset(&tx, *topic_key, group, *part, *offset)?,
        }
    }
    tx.commit()?;
    Ok(appended)
}

/// Inserts one batch after the partition's last record; returns the
/// batch's first offset and its timestamp.
fn append_batch(
    conn: &Connection,
    topic_key: i64,
    part: u32,
    records: &[Encoded],
    now: i64,
) -> Result<(u64, u64), Fault> {
    let last: Option<(i64, i64)> = conn
        .prepare_cached("SELECT off, ts FROM records WHERE topic_key = ?1 AND part = ?2 ORDER BY off DESC LIMIT 1")?
        .query_row(params![topic_key, part], |row| Ok((row.get(0)?, row.get(1)?)))
        .optional()?;
    let (first, timestamp) = match last {
        Some((off, ts)) => (off + 1, ts.max(now)),
        None => (0, now),
    };
    let mut insert = conn.prepare_cached(
        "INSERT INTO records (topic_key, part, off, ts, headers, payload, checksum) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?;
    for (offset, record) in (first..).zip(records) {
        let checksum = codec::checksum(
            offset as u64,
            timestamp as u64,
            &record.headers,
            &record.payload,
        );
        insert.execute(params![
            topic_key,
            part,
            offset,
            timestamp,
            record.headers,
            &record.payload[..],
            checksum as i64
        ])?;
    }
    Ok((first as u64, timestamp as u64))
}

/// The records of a committed append as a poll returns them, for polls of
/// this process waiting on its partition; `None` should a header block not
/// read back (the poll then reads the database).
fn handoff(
    row: &TopicRow,
    part: u32,
    first: u64,
    timestamp: u64,
    records: Vec<Encoded>,
) -> Option<Handoff> {
    let records = records
        .into_iter()
        .zip(first..)
        .map(|(record, offset)| {
            Some(LogRecord {
                position: row.info.position(part, offset),
                timestamp_micros: timestamp,
                headers: codec::decode_headers(&record.headers).ok()?,
                payload: record.payload,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Handoff { first, records })
}
