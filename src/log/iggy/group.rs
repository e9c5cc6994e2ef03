//! Consumer group membership on Iggy.
//!
//! Iggy ties a membership to the TCP connection (the server-side client)
//! that joined, so every [`IggyMember`] has a connection of its own. Closing
//! it (leave, drop, process death) makes the server drop the member at once
//! and rebalance; a hung member whose heartbeats stop is dropped when the
//! server verifies heartbeats.
//!
//! The server reports a group's members with their partitions but under
//! member ids that say nothing about which connection is which, so a member
//! finds its own share by asking the server whether it owns a partition:
//! a group poll from an offset past the end with an explicit partition id.
//! The server answers it with the partition's id and current offset when
//! this member owns the partition, and with zeros otherwise, without
//! delivering or recording anything. Only partition 0 can be ambiguous
//! (an owned partition 0 holding at most one record also answers zeros);
//! the group's member list settles that, and in the one case it cannot
//! (partition 0 alone on one member while another member has none) a
//! commit at an impossible offset does: the server refuses it as an invalid
//! offset when this member owns the partition and as an unresolved consumer
//! when it does not, and stores nothing either way. The client logs every
//! refusal as an error, so that answer is kept until the group's members or
//! their partitions change.
//!
//! Storing a group offset requires the storing connection to be a member
//! that owns the partition, so commits made through [`super::IggyLog`] are
//! routed to a live member of this process that owns the partition (one that
//! did not list it when last asked is checked by a poll first, so a commit
//! is refused only when the partition moved since). When the
//! group has no live member at all, a short-lived member joins, commits and
//! leaves. When another process's member owns the partition, the commit is
//! refused with [`LogError::NotOwner`]. A commit names no member, so one
//! from a local member that lost the partition to another local member goes
//! through the new owner (see [`crate::log::Log::store_offset`]). Reading a
//! group offset needs no membership.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use async_trait::async_trait;
use iggy::prelude::{
    Consumer, ConsumerGroupClient, ConsumerGroupDetails, ConsumerOffsetClient, Identifier,
    IggyError, MessageClient, PollingStrategy, SystemClient,
};

use super::connection::{Connection, IggyTarget};
use super::errors::topic_error;
use crate::log::{GroupMember, LogError, TopicInfo, lock};

/// Live members of this process, for routing offset commits.
static MEMBERS: Mutex<Vec<Weak<Member>>> = Mutex::new(Vec::new());

/// The registry of live members.
fn registry() -> MutexGuard<'static, Vec<Weak<Member>>> {
    lock(&MEMBERS)
}

/// What the server says about this member and one partition.
enum Ownership {
    Owned,
    NotOwned,
    /// Partition 0 answered like an unowned one; see the module docs.
    Unclear,
    /// This connection is not a member (any more).
    NotMember,
}

/// The group's members and their partitions, sorted by member id.
type MemberList = Vec<(u32, Vec<u32>)>;

/// The outcome of a commit attempt through one member.
enum Commit {
    Stored,
    NotOwner,
}

/// A membership: its own connection and what it last learned it owns.
struct Member {
    target: IggyTarget,
    connection: Connection,
    topic: TopicInfo,
    group: String,
    id: String,
    owned: Mutex<Vec<u32>>,
    /// The member list when partition 0 was last settled by a commit probe,
    /// and whether this member owned it then.
    zero_probed: Mutex<Option<(MemberList, bool)>>,
}

/// Numeric identifiers of a topic's stream and topic.
fn topic_ids(topic: &TopicInfo) -> Result<(Identifier, Identifier), LogError> {
    let numeric = |id: u32| {
        Identifier::numeric(id)
            .map_err(|e| LogError::InvalidInput(format!("Iggy rejects the id {id}: {e}")))
    };
    Ok((numeric(topic.stream_id)?, numeric(topic.topic_id)?))
}

/// The identifier of a consumer group by name.
fn group_ident(group: &str) -> Result<Identifier, LogError> {
    Identifier::named(group).map_err(|e| {
        LogError::InvalidInput(format!(
            "invalid consumer group name {group:?} ({e}); use 1 to 255 bytes"
        ))
    })
}

/// Whether the error says the group or this connection's membership is gone.
fn lost_membership(e: &IggyError) -> bool {
    matches!(
        e,
        IggyError::ConsumerGroupMemberNotFound(..)
            | IggyError::ConsumerGroupIdNotFound(..)
            | IggyError::ConsumerGroupNameNotFound(..)
    )
}

impl Member {
    /// Connects, creates the group unless it exists, and joins it.
    async fn join(target: &IggyTarget, topic: &TopicInfo, group: &str) -> Result<Self, LogError> {
        group_ident(group)?;
        let connection = target.connect().await?;
        let member = Self {
            target: target.clone(),
            connection,
            topic: topic.clone(),
            group: group.to_owned(),
            id: String::new(),
            owned: Mutex::new(Vec::new()),
            zero_probed: Mutex::new(None),
        };
        member.enter().await?;
        let me = member
            .connection
            .client()
            .get_me()
            .await
            .map_err(|e| member.error("reading its client id", e))?;
        Ok(Self {
            id: format!("iggy-client-{}", me.client_id),
            ..member
        })
    }

    fn error(&self, doing: &str, e: IggyError) -> LogError {
        let doing = format!("consumer group '{}' {doing}", self.group);
        topic_error(&self.target.describe(), &self.topic, &doing, e)
    }

    /// Creates the group unless it exists and joins it on this connection.
    async fn enter(&self) -> Result<(), LogError> {
        // A new membership has a member id of its own.
        *lock(&self.zero_probed) = None;
        let (stream, topic) = topic_ids(&self.topic)?;
        let client = self.connection.client();
        let group = group_ident(&self.group)?;
        let exists = match client.get_consumer_group(&stream, &topic, &group).await {
            Ok(found) => found.is_some(),
            Err(e) if lost_membership(&e) => false,
            Err(e) => return Err(self.error("looking the group up", e)),
        };
        if !exists {
            match client
                .create_consumer_group(&stream, &topic, &self.group)
                .await
            {
                Ok(_) | Err(IggyError::ConsumerGroupNameAlreadyExists(..)) => {}
                Err(e) => return Err(self.error("creating the group", e)),
            }
        }
        client
            .join_consumer_group(&stream, &topic, &group)
            .await
            .map_err(|e| self.error("joining", e))
    }

    fn consumer(&self) -> Result<Consumer, LogError> {
        Ok(Consumer::group(group_ident(&self.group)?))
    }

    /// Asks the server, by a group poll past the end, whether this member owns `partition`.
    async fn poll_probe(&self, partition: u32) -> Result<Ownership, LogError> {
        let (stream, topic) = topic_ids(&self.topic)?;
        let polled = self
            .connection
            .client()
            .poll_messages(
                &stream,
                &topic,
                Some(partition),
                &self.consumer()?,
                &PollingStrategy::offset(u64::MAX),
                1,
                false,
            )
            .await;
        Ok(match polled {
            Ok(p) if p.partition_id == partition && (partition != 0 || p.current_offset > 0) => {
                Ownership::Owned
            }
            Ok(_) if partition != 0 => Ownership::NotOwned,
            Ok(_) => Ownership::Unclear,
            Err(e) if lost_membership(&e) => Ownership::NotMember,
            Err(e) => return Err(self.error("checking its partitions", e)),
        })
    }

    /// Asks the server, by a commit it must refuse, whether this member owns `partition`.
    async fn commit_probe(&self, partition: u32) -> Result<Ownership, LogError> {
        let (stream, topic) = topic_ids(&self.topic)?;
        let stored = self
            .connection
            .client()
            .store_consumer_offset(
                &self.consumer()?,
                &stream,
                &topic,
                Some(partition),
                u64::MAX,
            )
            .await;
        Ok(match stored {
            Ok(()) | Err(IggyError::InvalidOffset(_)) => Ownership::Owned,
            Err(IggyError::NotResolvedConsumer(_)) => Ownership::NotOwned,
            Err(e) if lost_membership(&e) => Ownership::NotMember,
            Err(e) => return Err(self.error("checking its partitions", e)),
        })
    }

    /// Whether this member owns partition 0 by [`Self::commit_probe`],
    /// asked again only when the member list differs from the last time.
    /// The same list means the same assignment: a live member keeps its id,
    /// and a lost membership shows as an error of the poll probe before.
    async fn zero_probe(&self, details: &ConsumerGroupDetails) -> Result<Ownership, LogError> {
        let mut members: MemberList = details
            .members
            .iter()
            .map(|m| (m.id, m.partitions.clone()))
            .collect();
        members.sort_unstable();
        if let Some((seen, owned)) = lock(&self.zero_probed).as_ref()
            && *seen == members
        {
            return Ok(if *owned {
                Ownership::Owned
            } else {
                Ownership::NotOwned
            });
        }
        let ownership = self.commit_probe(0).await?;
        if let Ownership::Owned | Ownership::NotOwned = ownership {
            *lock(&self.zero_probed) = Some((members, matches!(ownership, Ownership::Owned)));
        }
        Ok(ownership)
    }

    /// The partitions this member owns, `None` when it is no member.
    async fn ownership(&self) -> Result<Option<Vec<u32>>, LogError> {
        let (stream, topic) = topic_ids(&self.topic)?;
        let details: Option<ConsumerGroupDetails> = self
            .connection
            .client()
            .get_consumer_group(&stream, &topic, &group_ident(&self.group)?)
            .await
            .or_else(|e| {
                if lost_membership(&e) {
                    Ok(None)
                } else {
                    Err(self.error("reading the group", e))
                }
            })?;
        let Some(details) = details else {
            return Ok(None);
        };
        for member in &details.members {
            if let Some(&partition) = member.partitions.iter().find(|&&p| p != 0) {
                match self.poll_probe(partition).await? {
                    Ownership::NotMember => return Ok(None),
                    Ownership::Owned => {
                        let mut owned = member.partitions.clone();
                        owned.sort_unstable();
                        return Ok(Some(owned));
                    }
                    Ownership::NotOwned | Ownership::Unclear => {}
                }
            }
        }
        // This member owns no partition but perhaps 0.
        let ownership = match self.poll_probe(0).await? {
            Ownership::Unclear => {
                let holder = details.members.iter().find(|m| m.partitions.contains(&0));
                let idle = details
                    .members
                    .iter()
                    .filter(|m| m.partitions.is_empty())
                    .count();
                match holder {
                    Some(h) if h.partitions == [0] && idle == 0 => Ownership::Owned,
                    Some(h) if h.partitions == [0] => self.zero_probe(&details).await?,
                    _ => Ownership::NotOwned,
                }
            }
            known => known,
        };
        Ok(match ownership {
            Ownership::NotMember => None,
            Ownership::Owned => Some(vec![0]),
            Ownership::NotOwned | Ownership::Unclear => Some(Vec::new()),
        })
    }

    /// Commits through this member's connection.
    async fn commit(&self, partition: u32, offset: u64) -> Result<Commit, LogError> {
        let (stream, topic) = topic_ids(&self.topic)?;
        let stored = self
            .connection
            .client()
            .store_consumer_offset(&self.consumer()?, &stream, &topic, Some(partition), offset)
            .await;
        match stored {
            Ok(()) => Ok(Commit::Stored),
            Err(IggyError::NotResolvedConsumer(_)) => Ok(Commit::NotOwner),
            Err(e) if lost_membership(&e) => Ok(Commit::NotOwner),
            Err(IggyError::InvalidOffset(_)) => Err(LogError::InvalidInput(format!(
                "cannot commit offset {offset} of partition {partition} of '{}/{}' for group '{}': no record has that offset yet (a committed offset is that of the last record processed)",
                self.topic.stream, self.topic.topic, self.group
            ))),
            Err(e) => Err(self.error(
                &format!("committing offset {offset} of partition {partition}"),
                e,
            )),
        }
    }

    fn last_owned(&self) -> Vec<u32> {
        lock(&self.owned).clone()
    }

    fn is_for(&self, target: &IggyTarget, topic: &TopicInfo, group: &str) -> bool {
        self.target.address() == target.address()
            && self.topic.stream_id == topic.stream_id
            && self.topic.topic_id == topic.topic_id
            && self.group == group
    }
}

/// A live consumer group membership on its own connection.
pub(crate) struct IggyMember {
    member: Arc<Member>,
}

impl IggyMember {
    /// Joins `group` (creating it when needed) on a new connection.
    pub(crate) async fn join(
        target: &IggyTarget,
        topic: &TopicInfo,
        group: &str,
    ) -> Result<Self, LogError> {
        let member = Arc::new(Member::join(target, topic, group).await?);
        let mut members = registry();
        members.retain(|m| m.strong_count() > 0);
        members.push(Arc::downgrade(&member));
        Ok(Self { member })
    }
}

#[async_trait]
impl GroupMember for IggyMember {
    fn member_id(&self) -> String {
        self.member.id.clone()
    }

    /// Asks the server; when this connection lost its membership (the client
    /// reconnected after a network break, or the group was deleted), joins
    /// again first.
    async fn assigned(&self) -> Result<Vec<u32>, LogError> {
        let member = &self.member;
        let owned = match member.ownership().await? {
            Some(owned) => owned,
            None => {
                member.enter().await?;
                member.ownership().await?.ok_or_else(|| LogError::Backend {
                    reason: format!(
                        "consumer group '{}' on '{}/{}' drops this member right after it joins",
                        member.group, member.topic.stream, member.topic.topic
                    ),
                    source: None,
                })?
            }
        };
        lock(&member.owned).clone_from(&owned);
        Ok(owned)
    }

    async fn leave(self: Box<Self>) -> Result<(), LogError> {
        let member = &self.member;
        let (stream, topic) = topic_ids(&member.topic)?;
        let left = member
            .connection
            .client()
            .leave_consumer_group(&stream, &topic, &group_ident(&member.group)?)
            .await;
        member.connection.close().await;
        match left {
            Ok(()) => Ok(()),
            Err(e) if lost_membership(&e) => Ok(()),
            Err(e) => Err(member.error("leaving", e)),
        }
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

/// Stores `group`'s offset of `partition` through a live member of this
/// process that owns the partition, trying first those that last saw it in
/// their share.
pub(crate) async fn commit_through_members(
    target: &IggyTarget,
    topic: &TopicInfo,
    group: &str,
    partition: u32,
    offset: u64,
) -> Result<Routed, LogError> {
    let mut local: Vec<Arc<Member>> = registry()
        .iter()
        .filter_map(Weak::upgrade)
        .filter(|m| m.is_for(target, topic, group))
        .collect();
    if local.is_empty() {
        return Ok(Routed::NoLocalMember);
    }
    local.sort_by_key(|m| !m.last_owned().contains(&partition));
    for member in &local {
        // A commit through a member that does not own the partition is
        // refused, and the client logs the refusal as an error: ask first.
        if !member.last_owned().contains(&partition)
            && let Ownership::NotOwned | Ownership::NotMember = member.poll_probe(partition).await?
        {
            continue;
        }
        if let Commit::Stored = member.commit(partition, offset).await? {
            return Ok(Routed::Stored);
        }
    }
    Ok(Routed::OwnedElsewhere)
}

/// Stores `group`'s offset of `partition` through a member that joins for
/// just this commit: for a group with no live member anywhere, which hands
/// all partitions to whoever joins.
pub(crate) async fn commit_as_temporary_member(
    target: &IggyTarget,
    topic: &TopicInfo,
    group: &str,
    partition: u32,
    offset: u64,
) -> Result<(), LogError> {
    let member = Member::join(target, topic, group).await?;
    let committed = member.commit(partition, offset).await;
    let (stream, topic_id) = topic_ids(topic)?;
    // Closing the connection ends the membership even if leaving fails.
    let _ = member
        .connection
        .client()
        .leave_consumer_group(&stream, &topic_id, &group_ident(group)?)
        .await;
    member.connection.close().await;
    match committed? {
        Commit::Stored => Ok(()),
        Commit::NotOwner => Err(not_owner(topic, group, partition)),
    }
}

/// The error for a commit of a partition another process's member owns.
pub(crate) fn not_owner(topic: &TopicInfo, group: &str, partition: u32) -> LogError {
    LogError::NotOwner {
        stream: topic.stream.clone(),
        topic: topic.topic.clone(),
        group: group.to_owned(),
        partition,
    }
}
