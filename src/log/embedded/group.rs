//! Consumer groups of the embedded log: membership leases and sticky,
//! balanced partition ownership shared through the database.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};

use super::{Core, Fault, TopicRow, blocking, now_micros};
use crate::log::{GroupMember, LogError, lock};

/// How long a membership (and with it its partitions) outlives its last
/// renewal: five times the longest a renewal waits for the lease database.
pub const LEASE: Duration = Duration::from_secs(3);

/// How often a member's background task renews its lease and rebalances.
pub const RENEW_EVERY: Duration = Duration::from_millis(500);

/// What a member handle and its renewal task share.
struct Shared {
    core: Arc<Core>,
    topic: Arc<TopicRow>,
    group: String,
    member: String,
    /// Set by `leave` and by dropping the handle; no renewal runs after it.
    stopped: AtomicBool,
    /// When the last renewal finished.
    renewed: std::sync::Mutex<Instant>,
}

/// A live member of an embedded consumer group.
///
/// A background task renews the lease every [`RENEW_EVERY`]. Dropping the
/// handle stops the task and leaves the rows behind, as a crashed process
/// would: the partitions move to the other members once the lease expires.
/// [`GroupMember::leave`] deletes the rows, handing the partitions over at
/// once.
pub(super) struct EmbeddedMember {
    shared: Arc<Shared>,
    renewer: tokio::task::JoinHandle<()>,
}

impl EmbeddedMember {
    /// Joins `group` on `topic`: registers, claims a first share and starts
    /// the renewal task.
    pub(super) async fn join(
        core: Arc<Core>,
        topic: Arc<TopicRow>,
        group: &str,
    ) -> Result<Self, LogError> {
        let shared = Arc::new(Shared {
            core,
            topic,
            group: group.to_owned(),
            member: format!("{}-p{}", ulid::Ulid::new(), std::process::id()),
            stopped: AtomicBool::new(false),
            renewed: std::sync::Mutex::new(Instant::now()),
        });
        renew(&shared).await?;
        let renewer = tokio::spawn(renew_forever(Arc::downgrade(&shared)));
        Ok(EmbeddedMember { shared, renewer })
    }
}

impl Drop for EmbeddedMember {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.renewer.abort();
    }
}

#[async_trait]
impl GroupMember for EmbeddedMember {
    fn member_id(&self) -> String {
        self.shared.member.clone()
    }

    async fn assigned(&self) -> Result<Vec<u32>, LogError> {
        renew(&self.shared).await
    }

    async fn leave(self: Box<Self>) -> Result<(), LogError> {
        self.shared.stopped.store(true, Ordering::SeqCst);
        self.renewer.abort();
        let shared = self.shared.clone();
        blocking(move || {
            let core = &shared.core;
            core.with_groups(|conn| leave(conn, shared.topic.key, &shared.group, &shared.member))
        })
        .await
    }
}

/// Renews the member's lease and returns the partitions it owns now.
async fn renew(shared: &Arc<Shared>) -> Result<Vec<u32>, LogError> {
    let task = shared.clone();
    let owned = blocking(move || {
        task.core.with_groups(|conn| {
            // Checked under the connection's lock, which `leave` takes too:
            // a renewal already on its way cannot re-register a member that
            // has just left.
            if task.stopped.load(Ordering::SeqCst) {
                return Ok(Vec::new());
            }
            rebalance(conn, &task.topic, &task.group, &task.member)
        })
    })
    .await?;
    *lock(&shared.renewed) = Instant::now();
    Ok(owned)
}

/// The background renewal: runs until the handle goes away.
async fn renew_forever(shared: std::sync::Weak<Shared>) {
    loop {
        tokio::time::sleep(RENEW_EVERY / 2).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        if shared.stopped.load(Ordering::SeqCst) {
            return;
        }
        if lock(&shared.renewed).elapsed() < RENEW_EVERY {
            continue;
        }
        if let Err(error) = renew(&shared).await {
            tracing::warn!(%error, member = %shared.member, group = %shared.group, "cannot renew the consumer group lease; retrying");
        }
    }
}

/// One renewal, in one write transaction:
///
/// 1. extend this member's lease (re-registering it if it had expired);
/// 2. drop expired members and the partitions they owned;
/// 3. compute this member's fair share: live members sorted by id, the
///    first `P mod n` get `⌈P/n⌉` partitions, the others `⌊P/n⌋`;
/// 4. keep owned partitions up to the share, release the highest-numbered
///    extras, and claim the lowest-numbered free partitions to fill it.
///
/// Ownership rows have the partition as primary key, so at no moment do two
/// members hold one partition.
fn rebalance(
    conn: &mut Connection,
    topic: &TopicRow,
    group: &str,
    member: &str,
) -> Result<Vec<u32>, Fault> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let now = now_micros()?;
    let lease_until = now.saturating_add(i64::try_from(LEASE.as_micros()).unwrap_or(i64::MAX));
    let key = topic.key;
    tx.prepare_cached(
        "INSERT INTO group_members (topic_key, grp, member, process, lease_until) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (topic_key, grp, member) DO UPDATE SET lease_until = excluded.lease_until",
    )?
    .execute(params![key, group, member, process_token(), lease_until])?;
    tx.prepare_cached(
        "DELETE FROM group_members WHERE topic_key = ?1 AND grp = ?2 AND lease_until < ?3",
    )?
    .execute(params![key, group, now])?;
    tx.prepare_cached(
        "DELETE FROM group_owners WHERE topic_key = ?1 AND grp = ?2 AND member NOT IN
         (SELECT member FROM group_members WHERE topic_key = ?1 AND grp = ?2)",
    )?
    .execute(params![key, group])?;

    let members: Vec<String> = tx
        .prepare_cached(
            "SELECT member FROM group_members WHERE topic_key = ?1 AND grp = ?2 ORDER BY member",
        )?
        .query_map(params![key, group], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    let rank = members
        .iter()
        .position(|m| m == member)
        .unwrap_or(members.len());
    let share = fair_share(topic.info.partitions.get(), members.len().max(1), rank);

    let mut owned: Vec<u32> = tx
        .prepare_cached("SELECT part FROM group_owners WHERE topic_key = ?1 AND grp = ?2 AND member = ?3 ORDER BY part")?
        .query_map(params![key, group, member], |row| row.get(0))?
        .collect::<Result<_, _>>()?;
    if owned.len() > share {
        let mut release = tx.prepare_cached(
            "DELETE FROM group_owners WHERE topic_key = ?1 AND grp = ?2 AND part = ?3",
        )?;
        for part in owned.split_off(share) {
            release.execute(params![key, group, part])?;
        }
    } else if owned.len() < share {
        let taken: Vec<u32> = tx
            .prepare_cached("SELECT part FROM group_owners WHERE topic_key = ?1 AND grp = ?2")?
            .query_map(params![key, group], |row| row.get(0))?
            .collect::<Result<_, _>>()?;
        let free: Vec<u32> = (0..topic.info.partitions.get())
            .filter(|part| !taken.contains(part))
            .take(share - owned.len())
            .collect();
        let mut claim = tx.prepare_cached(
            "INSERT INTO group_owners (topic_key, grp, part, member) VALUES (?1, ?2, ?3, ?4)",
        )?;
        for part in free {
            claim.execute(params![key, group, part, member])?;
            owned.push(part);
        }
        owned.sort_unstable();
    }
    tx.commit()?;
    Ok(owned)
}

/// How many of `partitions` the member at `rank` among `members` live members owns.
fn fair_share(partitions: u32, members: usize, rank: usize) -> usize {
    let partitions = partitions as usize;
    partitions / members + usize::from(rank < partitions % members)
}

/// Deletes the member and its ownership rows.
fn leave(conn: &mut Connection, key: i64, group: &str, member: &str) -> Result<(), Fault> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    tx.prepare_cached(
        "DELETE FROM group_owners WHERE topic_key = ?1 AND grp = ?2 AND member = ?3",
    )?
    .execute(params![key, group, member])?;
    tx.prepare_cached(
        "DELETE FROM group_members WHERE topic_key = ?1 AND grp = ?2 AND member = ?3",
    )?
    .execute(params![key, group, member])?;
    tx.commit()?;
    Ok(())
}

/// Stores a group's committed offset (inside the caller's transaction).
pub(super) fn store_offset(
    conn: &Connection,
    key: i64,
    group: &str,
    part: u32,
    offset: i64,
) -> Result<(), Fault> {
    conn.prepare_cached(
        "INSERT INTO group_offsets (topic_key, grp, part, off) VALUES (?1, ?2, ?3, ?4)
         ON CONFLICT (topic_key, grp, part) DO UPDATE SET off = excluded.off",
    )?
    .execute(params![key, group, part, offset])?;
    Ok(())
}

/// This process's token in the lease table: random, drawn once. Process
/// ids cannot tell processes apart: two containers sharing a log directory
/// can both be pid 1.
pub(super) fn process_token() -> i64 {
    static TOKEN: LazyLock<i64> = LazyLock::new(|| {
        // 63 random bits: a positive SQLite integer.
        (ulid::Ulid::new().random() as u64 >> 1) as i64
    });
    *TOKEN
}

/// The process token of the live member owning a partition, if one does.
pub(super) fn owner_process(
    conn: &Connection,
    key: i64,
    group: &str,
    part: u32,
) -> Result<Option<i64>, Fault> {
    let now = now_micros()?;
    Ok(conn
        .prepare_cached(
            "SELECT m.process FROM group_owners o JOIN group_members m
               ON m.topic_key = o.topic_key AND m.grp = o.grp AND m.member = o.member
             WHERE o.topic_key = ?1 AND o.grp = ?2 AND o.part = ?3 AND m.lease_until >= ?4",
        )?
        .query_row(params![key, group, part, now], |row| row.get(0))
        .optional()?)
}

/// Reads a group's committed offset.
pub(super) fn committed_offset(
    conn: &Connection,
    key: i64,
    group: &str,
    part: u32,
) -> Result<Option<i64>, Fault> {
    Ok(conn
        .prepare_cached(
            "SELECT off FROM group_offsets WHERE topic_key = ?1 AND grp = ?2 AND part = ?3",
        )?
        .query_row(params![key, group, part], |row| row.get(0))
        .optional()?)
}

#[cfg(test)]
mod tests {
    use super::fair_share;

    #[test]
    fn fair_shares_add_up_and_differ_by_at_most_one() {
        for partitions in 1..=17u32 {
            for members in 1..=20usize {
                let shares: Vec<usize> = (0..members)
                    .map(|rank| fair_share(partitions, members, rank))
                    .collect();
                assert_eq!(shares.iter().sum::<usize>(), partitions as usize);
                let (min, max) = (shares.iter().min().unwrap(), shares.iter().max().unwrap());
                assert!(max - min <= 1, "{partitions} over {members}: {shares:?}");
            }
        }
    }
}
