//! Consumer group membership on Kafka.
//!
//! Every [`KafkaMember`] is a librdkafka consumer of its own that subscribes
//! to the topic with the cooperative-sticky assignor and never reads through
//! it: it pauses each partition it is given (the log's reader does the
//! reading) and only learns its share from the rebalance callbacks, which a
//! thread of its own serves.
//!
//! With cooperative rebalancing a member gives up only the partitions that
//! move, and the group waits for it to do so. A member whose user reports
//! its work in hand ([`GroupMember::working_on`], as a worker pool does)
//! holds each revoked partition in the revocation callback until a report
//! made after [`GroupMember::assigned`] stopped listing it no longer names
//! it: the records in hand are finished, their replies published and their
//! offsets committed before the next owner starts. The wait ends at the
//! `handover` limit of the connection string at the latest, and never
//! happens when the partitions are lost (the member was taken for dead) or
//! when the member leaves.
//!
//! Commits go through the member of this process that owns the partition
//! (including one that is handing it over), so they carry that member's
//! generation; a group without live members anywhere takes commits from
//! outside it, as Kafka allows. A commit for a partition that a member of
//! another process owns is refused with [`LogError::NotOwner`].

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use super::context::Quiet;
use super::errors::request_error;
use super::reader::blocking;
use super::records::kafka_partition;
use super::target::KafkaTarget;
use crate::log::{GroupMember, LogError, lock};

/// How long a commit may take.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Live members of this process, for routing offset commits.
static MEMBERS: Mutex<Vec<Weak<Handle>>> = Mutex::new(Vec::new());

fn registry() -> MutexGuard<'static, Vec<Weak<Handle>>> {
    lock(&MEMBERS)
}

/// What a member knows of its share, shared with its rebalance callbacks.
#[derive(Default)]
struct Share {
    /// Partitions owned and not being handed over.
    owned: BTreeSet<u32>,
    /// Partitions revoked whose hand-over waits for the member's work.
    revoking: BTreeSet<u32>,
    /// Partitions [`GroupMember::assigned`] has listed since they came.
    seen: BTreeSet<u32>,
    /// Counts revocations; a work report counts only when it comes after
    /// an `assigned` call that saw the latest one.
    revocations: u64,
    /// The revocation count the last `assigned` call saw.
    seen_revocation: u64,
    /// The last work report and the revocation count its `assigned` call saw.
    working: Option<(BTreeSet<u32>, u64)>,
    /// Rebalances that gave this member its share (the first ends the join).
    assignments: u64,
    /// Set when the member leaves or is dropped: nothing waits any more.
    closing: bool,
}

struct Shared {
    topic: String,
    handover: Duration,
    share: Mutex<Share>,
    changed: Condvar,
}

impl Shared {
    fn share(&self) -> MutexGuard<'_, Share> {
        lock(&self.share)
    }

    /// The partitions of this member's topic in a rebalance list.
    fn partitions_in(&self, list: &TopicPartitionList) -> Vec<u32> {
        list.elements()
            .iter()
            .filter(|element| element.topic() == self.topic)
            .filter_map(|element| u32::try_from(element.partition()).ok())
            .collect()
    }

    fn assign(&self, partitions: &[u32]) {
        let mut share = self.share();
        share.owned.extend(partitions);
        share.assignments += 1;
        self.changed.notify_all();
    }

    /// Takes `partitions` away; unless they are lost, waits for the
    /// member's user to finish its work on them (see the module docs).
    fn revoke(&self, partitions: &[u32], lost: bool) {
        let mut share = self.share();
        share.revocations += 1;
        let revocation = share.revocations;
        let waits: Vec<u32> = partitions
            .iter()
            .copied()
            .filter(|p| share.seen.contains(p))
            .collect();
        for p in partitions {
            share.owned.remove(p);
            share.seen.remove(p);
            share.revoking.insert(*p);
        }
        self.changed.notify_all();
        if !lost && !share.closing && share.working.is_some() && !waits.is_empty() {
            let deadline = Instant::now() + self.handover;
            loop {
                let done = share.closing
                    || share.working.as_ref().is_some_and(|(working, saw)| {
                        *saw >= revocation && waits.iter().all(|p| !working.contains(p))
                    });
                if done {
                    break;
                }
                let now = Instant::now();
                if now >= deadline {
                    tracing::warn!(
                        partitions = ?waits,
                        "the member did not finish its work on revoked partitions within the hand-over limit; letting them go"
                    );
                    break;
                }
                share = self
                    .changed
                    .wait_timeout(share, deadline - now)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0;
            }
        }
        for p in partitions {
            share.revoking.remove(p);
        }
    }

    fn close(&self) {
        self.share().closing = true;
        self.changed.notify_all();
    }
}

/// The rebalance callbacks of a member.
struct MemberContext {
    shared: Arc<Shared>,
}

impl ClientContext for MemberContext {
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        super::context::log(level, facility, message);
    }

    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        super::context::background_error(&error, reason);
    }
}

impl ConsumerContext for MemberContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(list) = rebalance {
            let partitions = self.shared.partitions_in(list);
            tracing::debug!(?partitions, "Kafka revokes partitions");
            self.shared.revoke(&partitions, consumer.assignment_lost());
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(list) => {
                // Members only learn their share; the log's reader reads.
                if list.count() > 0
                    && let Err(error) = consumer.pause(list)
                {
                    tracing::warn!(%error, "cannot pause newly assigned partitions");
                }
                let partitions = self.shared.partitions_in(list);
                tracing::debug!(?partitions, "Kafka assigns partitions");
                self.shared.assign(&partitions);
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(error) => {
                tracing::warn!(%error, "a Kafka consumer group rebalance failed");
            }
        }
    }
}

type MemberConsumer = BaseConsumer<MemberContext>;

/// Which group of which topic on which cluster a member belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
struct GroupKey {
    brokers: String,
    topic: String,
    group: String,
}

/// A live membership, as the registry and the member handle share it.
struct Handle {
    key: GroupKey,
    target: String,
    id: String,
    shared: Arc<Shared>,
    consumer: Mutex<Option<Arc<MemberConsumer>>>,
}

impl Handle {
    fn consumer(&self) -> Option<Arc<MemberConsumer>> {
        lock(&self.consumer).clone()
    }

    /// Whether this member owns `partition` now, handing over included.
    fn holds(&self, partition: u32) -> bool {
        let share = self.shared.share();
        share.owned.contains(&partition) || share.revoking.contains(&partition)
    }

    /// Stops waiting for anything and closes the consumer: it leaves the
    /// group (on whichever thread drops the last handle to it).
    fn close(&self) -> Option<Arc<MemberConsumer>> {
        self.shared.close();
        lock(&self.consumer).take()
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if let Some(consumer) = self.close() {
            super::background::drop_in_background(consumer);
        }
    }
}

/// A live consumer group membership on a consumer of its own.
pub(crate) struct KafkaMember {
    handle: Arc<Handle>,
}

/// How long joining may take before it counts as failed: a join waits for
/// the group's first rebalance, which a broker may hold back while the
/// other members rejoin.
fn join_limit(target: &KafkaTarget) -> Duration {
    target.session_timeout * 3 + Duration::from_secs(10)
}

impl KafkaMember {
    /// Joins Kafka group `group` on Kafka topic `name` and waits for its first share.
    pub(crate) async fn join(
        target: &KafkaTarget,
        name: &str,
        group: &str,
    ) -> Result<Self, LogError> {
        let shared = Arc::new(Shared {
            topic: name.to_owned(),
            handover: target.handover,
            share: Mutex::new(Share::default()),
            changed: Condvar::new(),
        });
        let describe = target.describe();
        let consumer: MemberConsumer = target
            .member(group)
            .create_with_context(MemberContext {
                shared: shared.clone(),
            })
            .map_err(|e| request_error(&describe, "creating a consumer group member", &e))?;
        consumer
            .subscribe(&[name])
            .map_err(|e| request_error(&describe, &format!("subscribing to {name}"), &e))?;
        let consumer = Arc::new(consumer);
        let serving = shared.clone();
        super::background::serve(&consumer, "agdx-kafka-member", move || {
            !serving.share().closing
        })
        .map_err(|e| LogError::Backend {
            reason: format!("cannot start a Kafka member's thread: {e}"),
            source: Some(e.into()),
        })?;
        let handle = Arc::new(Handle {
            key: GroupKey {
                brokers: target.brokers(),
                topic: name.to_owned(),
                group: group.to_owned(),
            },
            target: describe.clone(),
            id: format!("kafka-{}", ulid::Ulid::new()),
            shared,
            consumer: Mutex::new(Some(consumer)),
        });
        let deadline = tokio::time::Instant::now() + join_limit(target);
        while handle.shared.share().assignments == 0 {
            if tokio::time::Instant::now() >= deadline {
                return Err(LogError::Unavailable {
                    target: describe,
                    reason: format!(
                        "joining consumer group '{group}' on {name} got no partition assignment within {:?}; {}",
                        join_limit(target),
                        super::errors::HINT
                    ),
                    source: None,
                });
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let mut members = registry();
        members.retain(|m| m.strong_count() > 0);
        members.push(Arc::downgrade(&handle));
        Ok(Self { handle })
    }
}

#[async_trait]
impl GroupMember for KafkaMember {
    fn member_id(&self) -> String {
        self.handle.id.clone()
    }

    async fn assigned(&self) -> Result<Vec<u32>, LogError> {
        let mut share = self.handle.shared.share();
        share.seen_revocation = share.revocations;
        let owned: Vec<u32> = share.owned.iter().copied().collect();
        share.seen.extend(&owned);
        Ok(owned)
    }

    async fn working_on(&self, partitions: &[u32]) {
        let shared = &self.handle.shared;
        let mut share = shared.share();
        let saw = share.seen_revocation;
        share.working = Some((partitions.iter().copied().collect(), saw));
        shared.changed.notify_all();
    }

    async fn leave(self: Box<Self>) -> Result<(), LogError> {
        let Some(consumer) = self.handle.close() else {
            return Ok(());
        };
        // Dropping the last handle closes the consumer, which leaves the
        // group. The serving thread lets go of it within a turn; a commit
        // in flight holds it a little longer.
        blocking(move || {
            let deadline = Instant::now() + COMMIT_TIMEOUT;
            while Arc::strong_count(&consumer) > 1 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            drop(consumer);
        })
        .await
    }
}

/// What became of a commit routed to this process's members.
pub(crate) enum Routed {
    /// A member that owns the partition stored it.
    Stored,
    /// This process has members of the group, none of which owns the partition.
    OwnedElsewhere,
    /// This process has no live member of the group.
    NoLocalMember,
}

/// Commits the next offset to read, `next`, of a partition through the
/// member of this process that owns it.
pub(crate) async fn commit_through_members(
    target: &KafkaTarget,
    name: &str,
    group: &str,
    partition: u32,
    next: i64,
) -> Result<Routed, LogError> {
    let key = GroupKey {
        brokers: target.brokers(),
        topic: name.to_owned(),
        group: group.to_owned(),
    };
    let local: Vec<Arc<Handle>> = registry()
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|handle| handle.key == key)
        .collect();
    if local.is_empty() {
        return Ok(Routed::NoLocalMember);
    }
    let Some((handle, consumer)) = local
        .iter()
        .filter(|handle| handle.holds(partition))
        .find_map(|handle| handle.consumer().map(|c| (handle.clone(), c)))
    else {
        return Ok(Routed::OwnedElsewhere);
    };
    let list = commit_list(name, partition, next, &handle.target)?;
    let committed = blocking(move || consumer.commit(&list, CommitMode::Sync)).await?;
    match committed {
        Ok(()) => Ok(Routed::Stored),
        Err(e)
            if matches!(
                e.rdkafka_error_code(),
                Some(
                    RDKafkaErrorCode::IllegalGeneration
                        | RDKafkaErrorCode::UnknownMemberId
                        | RDKafkaErrorCode::RebalanceInProgress
                        | RDKafkaErrorCode::FencedInstanceId
                )
            ) =>
        {
            Ok(Routed::OwnedElsewhere)
        }
        Err(e) => Err(request_error(
            &handle.target,
            &format!(
                "committing offset {next} of partition {partition} of {name} for group '{group}'"
            ),
            &e,
        )),
    }
}

/// Commits the next offset to read of a partition with `consumer`, which is
/// in no group: for groups without live members.
pub(crate) async fn commit_outside(
    describe: &str,
    consumer: Arc<BaseConsumer<Quiet>>,
    name: &str,
    group: &str,
    partition: u32,
    next: i64,
) -> Result<(), LogError> {
    let list = commit_list(name, partition, next, describe)?;
    blocking(move || consumer.commit(&list, CommitMode::Sync))
        .await?
        .map_err(|e| {
            request_error(
                describe,
                &format!("committing offset {next} of partition {partition} of {name} for group '{group}'"),
                &e,
            )
        })
}

/// Whether group `group` has live members, as the cluster reports it.
pub(crate) async fn has_members(
    describe: &str,
    consumer: Arc<BaseConsumer<Quiet>>,
    group: &str,
) -> Result<bool, LogError> {
    let owned = group.to_owned();
    let wanted = owned.clone();
    blocking(move || {
        consumer
            .fetch_group_list(Some(&owned), COMMIT_TIMEOUT)
            .map(|groups| {
                groups
                    .groups()
                    .iter()
                    .any(|g| g.name() == wanted && !g.members().is_empty())
            })
    })
    .await?
    .map_err(|e| {
        request_error(
            describe,
            &format!("describing consumer group '{group}'"),
            &e,
        )
    })
}

fn commit_list(
    name: &str,
    partition: u32,
    next: i64,
    describe: &str,
) -> Result<TopicPartitionList, LogError> {
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(name, kafka_partition(partition), Offset::Offset(next))
        .map_err(|e| request_error(describe, "choosing the offset to commit", &e))?;
    Ok(list)
}
