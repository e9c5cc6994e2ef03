//! Reading records back, and telling damage from the end of a partition.
//!
//! Offsets are dense: an append takes the offsets right after the
//! partition's last record and only retention deletes records, from the
//! start of a partition up to its low-water mark (see the `retention`
//! module). So besides each
//! record's checksum and header block, a read checks that offsets run on
//! without a gap; whatever the database cannot give back is reported as a
//! [`Damage`] naming the offsets, never passed over:
//!
//! - a record failing its checksum, or whose headers do not decode: that
//!   record;
//! - a gap before the next record the database returns: the offsets in
//!   the gap;
//! - nothing from the offset asked for on, though the partition's last
//!   offset lies beyond it (a damaged page can end a scan early): the
//!   offsets up to that last one;
//! - SQLite reporting the page it needs malformed: the offsets up to the
//!   next one a lookup past the damage reaches (found by doubling the
//!   distance, then halving it: a few dozen lookups at most).
//!
//! Records the database lost at the end of a partition (a WAL cut short)
//! leave no gap to see here; the high-water marks catch those when the
//! log is opened (see the `marks` module).

use agdx_wire::LogPosition;
use rusqlite::{Connection, OptionalExtension, params};

use super::{Fault, LogError, LogRecord, TopicRow, codec, retention};
use crate::log::{Damage, POLL_BYTES_BUDGET};
use crate::sqlite;

/// Reads up to `max` records of `part` from offset `from`, checking each
/// one and that no offset is missing.
pub(super) fn read_records(
    conn: &Connection,
    topic: &TopicRow,
    part: u32,
    from: u64,
    max: u32,
) -> Result<Vec<LogRecord>, Fault> {
    let mut out = Vec::new();
    match scan(conn, topic, part, from, max, &mut out) {
        Ok(()) => {}
        Err(Fault::Sql(error)) if sqlite::is_damage(&error) => {
            if out.is_empty() {
                let damage = unreadable_from(conn, topic, part, from, &error)?;
                return Err(LogError::Corrupt(damage).into());
            }
            // The next poll, starting there, reports it to the reader.
            tracing::debug!(%error, partition = part, topic = %topic.info.topic, "a damaged page in the embedded log");
        }
        Err(fault) => return Err(fault),
    }
    if out.is_empty()
        && let Some(damage) = missing_to_last(conn, topic, part, from)?
    {
        return Err(LogError::Corrupt(damage).into());
    }
    Ok(out)
}

/// The scan itself: adds readable records to `out` until the first one
/// that is not (which fails the scan when it comes first).
fn scan(
    conn: &Connection,
    topic: &TopicRow,
    part: u32,
    from: u64,
    max: u32,
    out: &mut Vec<LogRecord>,
) -> Result<(), Fault> {
    let Ok(start) = i64::try_from(from) else {
        return Ok(());
    };
    let mut stmt = conn.prepare_cached(
        "SELECT off, ts, headers, payload, checksum FROM records
         WHERE topic_key = ?1 AND part = ?2 AND off >= ?3 ORDER BY off LIMIT ?4",
    )?;
    let mut rows = stmt.query(params![topic.key, part, start, max])?;
    let mut expected = from;
    let mut bytes = 0usize;
    while let Some(row) = rows.next()? {
        let stored: i64 = row.get(0)?;
        // The query asks for offsets from `from` on, so only damage makes
        // one negative; it reads as a record that fails its checks.
        let offset = u64::try_from(stored).unwrap_or(expected);
        // Retention removed the records before the partition's low-water
        // mark: a read from below it starts there.
        if offset > expected
            && out.is_empty()
            && let Some(first) = retention::low_water(conn, topic.key, part)?
        {
            expected = expected.max(first);
        }
        let damage = if offset > expected {
            Some(Damage::range(
                topic.info.position(part, expected),
                offset - 1,
                "missing: the database holds no record at these offsets though it holds later ones (its file was damaged or changed behind the log's back)",
            ))
        } else {
            match checked(row, topic.info.position(part, offset), stored) {
                Ok(record) => {
                    bytes += record.payload.len();
                    out.push(record);
                    expected = offset + 1;
                    if bytes >= POLL_BYTES_BUDGET {
                        return Ok(());
                    }
                    None
                }
                Err(reason) => Some(Damage::record(topic.info.position(part, offset), reason)),
            }
        };
        if let Some(damage) = damage {
            if out.is_empty() {
                return Err(LogError::Corrupt(damage).into());
            }
            // The next poll, starting there, reports it to the reader.
            tracing::debug!(%damage, "damaged records in the embedded log");
            return Ok(());
        }
    }
    Ok(())
}

/// The row of the record at `position` (`stored` its offset column) as a
/// record, when its checksum and headers hold; otherwise what is wrong.
fn checked(
    row: &rusqlite::Row<'_>,
    position: LogPosition,
    stored: i64,
) -> Result<LogRecord, String> {
    if stored < 0 {
        return Err(format!("negative offset {stored}"));
    }
    let timestamp: i64 = row.get(1).map_err(|e| e.to_string())?;
    let timestamp =
        u64::try_from(timestamp).map_err(|_| format!("negative timestamp {timestamp}"))?;
    let headers = blob(row, 2)?;
    let payload = blob(row, 3)?;
    let checksum: i64 = row.get(4).map_err(|e| e.to_string())?;
    if codec::checksum(position.offset, timestamp, headers, payload) != checksum as u64 {
        return Err("checksum mismatch".to_owned());
    }
    Ok(LogRecord {
        position,
        timestamp_micros: timestamp,
        headers: codec::decode_headers(headers)?,
        payload: bytes::Bytes::copy_from_slice(payload),
    })
}

/// Column `index` of `row` as a blob.
fn blob<'r>(row: &'r rusqlite::Row<'_>, index: usize) -> Result<&'r [u8], String> {
    let value = row.get_ref(index).map_err(|e| e.to_string())?;
    value.as_blob().map_err(|e| format!("column {index}: {e}"))
}

/// The first offset at or after `at` that the database returns (`None`
/// past the last), or the SQLite error of a lookup that fails.
fn first_from(
    conn: &Connection,
    topic: &TopicRow,
    part: u32,
    at: u64,
) -> rusqlite::Result<Option<u64>> {
    let Ok(at) = i64::try_from(at) else {
        return Ok(None);
    };
    let first: Option<i64> = conn
        .prepare_cached(
            "SELECT off FROM records WHERE topic_key = ?1 AND part = ?2 AND off >= ?3 ORDER BY off LIMIT 1",
        )?
        .query_row(params![topic.key, part, at], |row| row.get(0))
        .optional()?;
    Ok(first.and_then(|off| u64::try_from(off).ok()))
}

/// The last offset of `part` the database holds.
fn last_offset(conn: &Connection, topic: &TopicRow, part: u32) -> rusqlite::Result<Option<u64>> {
    let last: Option<i64> = conn
        .prepare_cached("SELECT max(off) FROM records WHERE topic_key = ?1 AND part = ?2")?
        .query_row(params![topic.key, part], |row| row.get(0))?;
    Ok(last.and_then(|off| u64::try_from(off).ok()))
}

/// A scan from `from` found nothing: the offsets from there to the
/// partition's last one when that lies beyond (looked at in one read
/// transaction, so an append in between is not taken for damage).
fn missing_to_last(
    conn: &Connection,
    topic: &TopicRow,
    part: u32,
    from: u64,
) -> Result<Option<Damage>, Fault> {
    let tx = conn.unchecked_transaction()?;
    let first = first_from(&tx, topic, part, from)?;
    let last = last_offset(&tx, topic, part)?;
    tx.commit()?;
    Ok(match (first, last) {
        (None, Some(last)) if last >= from => Some(Damage::range(
            topic.info.position(part, from),
            last,
            format!(
                "missing: the database returns none of the records from here to its last one, offset {last} (a damaged page ends its scans early)"
            ),
        )),
        _ => None,
    })
}

/// SQLite failed reading `part` at `from` with `error` (a malformed page):
/// the damaged offsets, from `from` to just before the first record a
/// lookup past the damage returns, or to the partition's last offset.
/// When even the last offset cannot be read, the error stands.
fn unreadable_from(
    conn: &Connection,
    topic: &TopicRow,
    part: u32,
    from: u64,
    error: &rusqlite::Error,
) -> Result<Damage, Fault> {
    let reason = format!("SQLite cannot read the page holding them: {error}");
    let last = match last_offset(conn, topic, part)? {
        Some(last) if last >= from => last,
        _ => from,
    };
    // Whether a lookup at `at` gets past the damage, and the record it finds.
    let lookup = |at: u64| match first_from(conn, topic, part, at) {
        Ok(found) => Ok(Some(found)),
        Err(e) if sqlite::is_damage(&e) => Ok(None),
        Err(e) => Err(Fault::Sql(e)),
    };
    let position = topic.info.position(part, from);
    // Double the distance until a lookup succeeds (the last offset is
    // the farthest one tried)...
    let (mut bad, mut good) = (from, None);
    let mut step = 1u64;
    for _ in 0..=u64::BITS {
        let at = from.saturating_add(step).min(last);
        if at <= bad {
            break;
        }
        match lookup(at)? {
            Some(found) => {
                good = Some((at, found));
                break;
            }
            None => bad = at,
        }
        step = step.saturating_mul(2);
    }
    let Some((mut ok, mut found)) = good else {
        return Ok(Damage::range(position, last, reason));
    };
    // ...then halve the step back to the first lookup that does.
    while ok - bad > 1 {
        let mid = bad + (ok - bad) / 2;
        match lookup(mid)? {
            Some(at_mid) => (ok, found) = (mid, at_mid),
            None => bad = mid,
        }
    }
    // `found` is at or after `ok`, which is past `from`.
    let end = found.map_or(last, |first| first - 1);
    Ok(Damage::range(position, end, reason))
}
