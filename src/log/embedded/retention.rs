//! Retention: removing a topic's records once they are older than its
//! retention, never those a reader holds.
//!
//! A topic created with [`Retention::For`] has a row in `retention`. A
//! sweep deletes, per partition, the records older than that age from the
//! start of the partition, but never the one a hold names (`holds`, one per
//! reader and partition: the offset it reads on from, for
//! [`HOLD_LIFETIME`] after it was last placed) nor any after it,
//! and never the partition's last record, so offsets go on from where they
//! were and the high-water marks still match. The first offset left is
//! kept in `low_water` in the same transaction: a read from below it starts
//! there, while a gap at or above it is still damage (see the `read`
//! module).
//!
//! The log sweeps by itself after its appends, at most once every
//! [`SWEEP_EVERY`] per process and at most [`SWEEP_BATCH`] records at a
//! time so an append never waits long behind one;
//! [`EmbeddedLog::apply_retention`] sweeps everything due at a given time.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{EmbeddedLog, Fault, LogError, TopicInfo, TopicRow, blocking, lock, topic_row};
use crate::log::Retention;

/// How often a process sweeps after its appends.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// How long a hold lasts unless placed again: a reader that has not
/// renewed its hold for this long (the runtime's views do at least
/// hourly while they run) no longer keeps records from going.
pub const HOLD_LIFETIME: Duration = Duration::from_secs(30 * 86_400);

/// Most records one automatic sweep deletes.
const SWEEP_BATCH: u64 = 20_000;

/// Records a sweep removed from one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncated {
    /// The topic.
    pub topic: TopicInfo,
    /// The partition.
    pub partition: u32,
    /// How many records went.
    pub removed: u64,
    /// The first offset the partition now holds.
    pub first: u64,
}

/// Records `retention` for a topic just created (nothing for keeping
/// everything, which is what a topic without a row does).
pub(super) fn set(conn: &Connection, topic_key: i64, retention: Retention) -> Result<(), Fault> {
    if let Some(age) = retention.max_age() {
        let micros = i64::try_from(age.as_micros()).unwrap_or(i64::MAX);
        conn.execute(
            "INSERT INTO retention (topic_key, max_age_micros) VALUES (?1, ?2)
             ON CONFLICT (topic_key) DO UPDATE SET max_age_micros = excluded.max_age_micros",
            params![topic_key, micros],
        )?;
    }
    Ok(())
}

/// The first offset `part` holds after a sweep removed records before it;
/// `None` when none was removed.
pub(super) fn low_water(
    conn: &Connection,
    topic_key: i64,
    part: u32,
) -> Result<Option<u64>, Fault> {
    let first: Option<i64> = conn
        .prepare_cached("SELECT first FROM low_water WHERE topic_key = ?1 AND part = ?2")?
        .query_row(params![topic_key, part], |row| row.get(0))
        .optional()?;
    Ok(first.and_then(|f| u64::try_from(f).ok()))
}

/// Deletes what is due at `now_micros`, at most `budget` records; returns
/// what went, per partition.
fn sweep(conn: &mut Connection, now_micros: i64, budget: u64) -> Result<Vec<Truncated>, Fault> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let topics: Vec<(TopicRow, i64)> = {
        let mut stmt = tx.prepare_cached(
            "SELECT t.topic_key, s.name, t.name, s.id, t.id, t.partitions, r.max_age_micros
             FROM retention r JOIN topics t ON t.topic_key = r.topic_key JOIN streams s ON s.id = t.stream_id",
        )?;
        let rows = stmt.query_map([], |row| Ok((topic_row(row)?, row.get::<_, i64>(6)?)))?;
        let mut topics = Vec::new();
        for row in rows {
            let (topic, age) = row?;
            if let Ok(topic) = topic {
                topics.push((topic, age));
            }
        }
        topics
    };
    let mut left = budget;
    let mut truncated = Vec::new();
    for (topic, age) in topics {
        let cutoff = now_micros.saturating_sub(age);
        for part in 0..topic.info.partitions.get() {
            if left == 0 {
                break;
            }
            let live_holds = now_micros.saturating_sub(HOLD_LIFETIME.as_micros() as i64);
            if let Some(cut) = cut_partition(&tx, &topic, part, cutoff, live_holds, left)? {
                left = left.saturating_sub(cut.removed);
                truncated.push(cut);
            }
        }
    }
    tx.commit()?;
    Ok(truncated)
}

/// Removes the records of `part` older than `cutoff` (log time, epoch
/// microseconds) before any hold placed since `live_holds` and before its
/// last record, at most `most`.
fn cut_partition(
    conn: &Connection,
    topic: &TopicRow,
    part: u32,
    cutoff: i64,
    live_holds: i64,
    most: u64,
) -> Result<Option<Truncated>, Fault> {
    let key = topic.key;
    let bounds: (Option<i64>, Option<i64>) = conn
        .prepare_cached(
            "SELECT min(off), max(off) FROM records WHERE topic_key = ?1 AND part = ?2",
        )?
        .query_row(params![key, part], |row| Ok((row.get(0)?, row.get(1)?)))?;
    let (Some(first), Some(last)) = bounds else {
        return Ok(None);
    };
    let most = i64::try_from(most).unwrap_or(i64::MAX);
    let window = first.saturating_add(most);
    // Offsets ascend with log time within a partition, so the first record
    // young enough to stay ends what is due; only the next `most` records
    // are looked at, so a sweep reads no more than it may delete.
    let young: i64 = conn
        .prepare_cached(
            "SELECT off FROM records WHERE topic_key = ?1 AND part = ?2 AND off < ?3 AND ts >= ?4 ORDER BY off LIMIT 1",
        )?
        .query_row(params![key, part, window, cutoff], |row| row.get(0))
        .optional()?
        .unwrap_or(window);
    let held: Option<i64> = conn
        .prepare_cached(
            "SELECT min(off) FROM holds WHERE topic_key = ?1 AND part = ?2 AND placed >= ?3",
        )?
        .query_row(params![key, part, live_holds], |row| row.get(0))?;
    let cut = [Some(young), held, Some(last)]
        .into_iter()
        .flatten()
        .min()
        .unwrap_or(first);
    if cut <= first {
        return Ok(None);
    }
    let removed = conn
        .prepare_cached("DELETE FROM records WHERE topic_key = ?1 AND part = ?2 AND off < ?3")?
        .execute(params![key, part, cut])?;
    conn.prepare_cached(
        "INSERT INTO low_water (topic_key, part, first) VALUES (?1, ?2, ?3)
         ON CONFLICT (topic_key, part) DO UPDATE SET first = max(first, excluded.first)",
    )?
    .execute(params![key, part, cut])?;
    Ok(Some(Truncated {
        topic: topic.info.clone(),
        partition: part,
        removed: removed as u64,
        first: cut as u64,
    }))
}

/// Places (or moves) `holder`'s hold on each partition of `from`, in one
/// transaction.
pub(super) fn hold(
    conn: &mut Connection,
    topic_key: i64,
    holder: &str,
    from: &[(u32, u64)],
) -> Result<(), Fault> {
    let placed = micros(SystemTime::now());
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    {
        let mut upsert = tx.prepare_cached(
            "INSERT INTO holds (topic_key, part, holder, off, placed) VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (topic_key, part, holder) DO UPDATE SET off = excluded.off, placed = excluded.placed",
        )?;
        for (part, offset) in from {
            let offset = i64::try_from(*offset).unwrap_or(i64::MAX);
            upsert.execute(params![topic_key, part, holder, offset, placed])?;
        }
    }
    tx.commit()?;
    Ok(())
}

/// Epoch microseconds of `time` as stored.
fn micros(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
}

impl EmbeddedLog {
    /// Removes every record that retention says is due at `now`: those
    /// older than their topic's [`Retention::For`], short of any hold and
    /// of each partition's last record. The log does this by itself after
    /// its appends (at most once a minute per process); this is for tools
    /// and tests that want it done now. Returns what went.
    pub async fn apply_retention(&self, now: SystemTime) -> Result<Vec<Truncated>, LogError> {
        let core = self.core.clone();
        blocking(move || {
            let mut all = Vec::new();
            loop {
                let swept = sweep(&mut lock(&core.writer), micros(now), SWEEP_BATCH)
                    .map_err(|f| f.into_log(&core.db))?;
                if swept.is_empty() {
                    return Ok(all);
                }
                all.extend(swept);
            }
        })
        .await
    }
}

impl super::Core {
    /// Sweeps once when [`SWEEP_EVERY`] has passed since this process last
    /// did; run by the group-commit thread once its queue is empty.
    pub(super) fn sweep_if_due(&self) {
        let now = micros(SystemTime::now());
        let last = self.last_sweep.load(std::sync::atomic::Ordering::Relaxed);
        let every = SWEEP_EVERY.as_micros() as i64;
        if now.saturating_sub(last) < every
            || self
                .last_sweep
                .compare_exchange(
                    last,
                    now,
                    std::sync::atomic::Ordering::Relaxed,
                    std::sync::atomic::Ordering::Relaxed,
                )
                .is_err()
        {
            return;
        }
        match sweep(&mut lock(&self.writer), now, SWEEP_BATCH) {
            Ok(swept) => {
                for cut in swept {
                    tracing::debug!(topic = %cut.topic.topic, partition = cut.partition, removed = cut.removed, first = cut.first, "retention removed old records");
                }
            }
            Err(fault) => {
                let error = fault.into_log(&self.db);
                tracing::warn!(%error, "retention could not remove old records; trying again in a minute");
            }
        }
    }
}
