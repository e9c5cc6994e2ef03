//! The [`Replay`] reader: one conversation's records, read back raw from
//! the conversation's partition of each topic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use agdx_wire::{
    AgentEnvelope, AgentId, ContentType, ConversationId, DeadLetter, FoldSnapshot, LogPosition,
    RecordId,
};
use bytes::Bytes;

use crate::log::{Damage, LogError, LogRecord, SharedLog, TopicInfo};
use crate::record::content_type_of;
use crate::routing::partition_of;
use crate::topology::Topology;

/// Records one poll of one partition asks for.
const POLL_BATCH: u32 = 1000;

/// Why replaying failed.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// The log failed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The record asked for is not on the log (or not where it was looked for).
    #[error("{0}")]
    NotFound(String),
    /// A position names a stream or topic this topology does not have.
    #[error(
        "position {position} is not in stream '{stream}' (stream id {stream_id}) or not in one of its agent topics; use a position printed by this log, or read the stream it is in"
    )]
    ForeignPosition {
        /// The position given.
        position: LogPosition,
        /// The stream the topology is in.
        stream: String,
        /// That stream's id.
        stream_id: u32,
    },
    /// A partition returned nothing before the last offset it had when
    /// the read began: the backend did not deliver records it holds (a
    /// broker too slow to fetch them in time, say). Never taken for the
    /// end, which would leave records out without a word.
    #[error(
        "partition {partition} of '{stream}/{topic}' returned no records from offset {from} on, though its last offset is {last}; try again, and if it keeps happening, check the log server"
    )]
    Short {
        /// The stream's name.
        stream: String,
        /// The topic's name.
        topic: String,
        /// The partition.
        partition: u32,
        /// Where the read found nothing.
        from: u64,
        /// The partition's last offset when the read began.
        last: u64,
    },
    /// Appending to the log failed (snapshots, redrives).
    #[error(transparent)]
    Produce(#[from] crate::producer::ProduceError),
    /// A fold's state (or a redrive's mark) could not be encoded or decoded.
    #[error("fold state: {0}")]
    State(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl ReplayError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ReplayError::Log(e) => e.is_retryable(),
            ReplayError::NotFound(_) => false,
            ReplayError::ForeignPosition { .. } => false,
            ReplayError::Short { .. } => true,
            ReplayError::Produce(e) => e.is_retryable(),
            ReplayError::State(_) => false,
        }
    }
}

/// What a replayed record carries, decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplayItem {
    /// An agent envelope (decoded as it is, valid or not).
    Envelope(Box<AgentEnvelope>),
    /// A dead-letter capsule and, when its payload decodes, the original
    /// envelope.
    DeadLetter {
        /// The capsule.
        capsule: DeadLetter,
        /// The envelope it set aside, when the payload decodes.
        original: Option<Box<AgentEnvelope>>,
    },
    /// A fold snapshot.
    Snapshot(FoldSnapshot),
}

/// One record read back, raw bytes and decoded view together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayRecord {
    /// The topic's name.
    pub topic: String,
    /// Where it sits.
    pub position: LogPosition,
    /// When the log accepted it, epoch microseconds (server clock).
    pub timestamp_micros: u64,
    /// The `agdx.ct` header (`raw` when absent).
    pub content_type: ContentType,
    /// The payload exactly as stored.
    pub payload: Bytes,
    /// The payload decoded.
    pub item: ReplayItem,
}

impl ReplayRecord {
    /// Decodes a record of `topic`; `None` when the payload is neither an
    /// envelope, a dead-letter capsule nor a fold snapshot.
    pub fn decode(topic: &str, record: LogRecord) -> Option<Self> {
        let item = if let Ok(envelope) = AgentEnvelope::decode_shared(&record.payload) {
            ReplayItem::Envelope(Box::new(envelope))
        } else if let Ok(capsule) = DeadLetter::decode(&record.payload) {
            let original = AgentEnvelope::decode(&capsule.payload).ok().map(Box::new);
            ReplayItem::DeadLetter { capsule, original }
        } else if let Ok(snapshot) = FoldSnapshot::decode(&record.payload) {
            ReplayItem::Snapshot(snapshot)
        } else {
            return None;
        };
        Some(Self {
            topic: topic.to_owned(),
            position: record.position,
            timestamp_micros: record.timestamp_micros,
            content_type: content_type_of(&record),
            payload: record.payload,
            item,
        })
    }

    /// The conversation it belongs to (a dead letter: its original's).
    pub fn conversation(&self) -> Option<ConversationId> {
        match &self.item {
            ReplayItem::Envelope(e) => Some(e.conversation),
            ReplayItem::DeadLetter { original, .. } => original.as_ref().map(|e| e.conversation),
            ReplayItem::Snapshot(s) => Some(s.conversation),
        }
    }

    /// The envelope it carries or, for a dead letter, sets aside.
    fn carried(&self) -> Option<&AgentEnvelope> {
        match &self.item {
            ReplayItem::Envelope(e) => Some(e),
            ReplayItem::DeadLetter { original, .. } => original.as_deref(),
            ReplayItem::Snapshot(_) => None,
        }
    }

    /// The envelope, when the record is one.
    pub fn envelope(&self) -> Option<&AgentEnvelope> {
        match &self.item {
            ReplayItem::Envelope(e) => Some(e),
            _ => None,
        }
    }

    /// The record id of the envelope (chunks may have none).
    pub fn record_id(&self) -> Option<RecordId> {
        self.envelope().and_then(|e| e.record)
    }

    /// Log order: timestamp, then position.
    pub fn order_key(&self) -> (u64, LogPosition) {
        (self.timestamp_micros, self.position)
    }
}

/// Where a [`Replay`] reads next in one topic: the conversation's partition
/// and the next offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    /// The topic.
    pub topic: TopicInfo,
    /// The conversation's partition of it.
    pub partition: u32,
    /// The next offset to read.
    pub next: u64,
}

/// Reads one conversation back from the log: the conversation's partition of
/// each topic (the only place its records can be), from per-partition
/// offsets, keeping the conversation's records and ordering them by log
/// timestamp, then position. Records are shown raw; nothing synthetic is
/// added.
///
/// A reader made with [`Replay::new`] also reads the inbox topics
/// (inbox routing, [`crate::CommandRouting::Inbox`]) of the agents its
/// records name as source or target, as it meets them: a command sent to
/// an inbox shows once a record of the conversation names its target
/// (the target's reply does; a command nobody answered yet is found when
/// another record names the agent).
///
/// ```no_run
/// # async fn demo(log: agdx::log::SharedLog, topology: agdx::Topology, conversation: agdx::wire::ConversationId) -> Result<(), agdx::replay::ReplayError> {
/// use agdx::replay::Replay;
/// let mut replay = Replay::new(log, &topology, conversation);
/// for record in replay.read_to_end().await? {
///     println!("{} {} {:?}", record.topic, record.position, record.envelope().map(|e| e.kind));
/// }
/// # Ok(()) }
/// ```
pub struct Replay {
    log: SharedLog,
    conversation: ConversationId,
    cursors: Vec<Cursor>,
    skipped: u64,
    damaged: Vec<Damage>,
    inboxes: Option<InboxSearch>,
}

/// The inbox topics a [`Replay`] looks for: those of the agents its records
/// name.
struct InboxSearch {
    topology: Topology,
    /// Agents named by the conversation's records so far.
    met: BTreeSet<AgentId>,
    /// Agents whose inbox was looked for.
    looked: BTreeSet<AgentId>,
    /// Where an inbox found is read from.
    start: u64,
    /// Where the inboxes named here are read from instead.
    starts: BTreeMap<String, u64>,
}

impl Replay {
    /// A reader of `conversation` over every agent topic, from offset 0.
    /// It also reads the inboxes of the agents it meets (see [`Replay`]).
    pub fn new(log: SharedLog, topology: &Topology, conversation: ConversationId) -> Self {
        let mut replay = Self::over(log, topology.all().into_iter().cloned(), conversation);
        replay.inboxes = Some(InboxSearch {
            topology: topology.clone(),
            met: BTreeSet::new(),
            looked: BTreeSet::new(),
            start: 0,
            starts: BTreeMap::new(),
        });
        replay
    }

    /// A reader of `conversation` over `topics`, from offset 0.
    pub fn over(
        log: SharedLog,
        topics: impl IntoIterator<Item = TopicInfo>,
        conversation: ConversationId,
    ) -> Self {
        let cursors = topics
            .into_iter()
            .map(|topic| Cursor {
                partition: partition_of(&topic, conversation),
                topic,
                next: 0,
            })
            .collect();
        Self {
            log,
            conversation,
            cursors,
            skipped: 0,
            damaged: Vec::new(),
            inboxes: None,
        }
    }

    /// Starts every topic at `offset` of the conversation's partition
    /// (inboxes found later too).
    pub fn from_offset(mut self, offset: u64) -> Self {
        for cursor in &mut self.cursors {
            cursor.next = offset;
        }
        if let Some(search) = &mut self.inboxes {
            search.start = offset;
        }
        self
    }

    /// Starts `topic` at `offset` (other topics keep their start).
    pub fn from_topic_offset(mut self, topic: &str, offset: u64) -> Self {
        for cursor in self.cursors.iter_mut().filter(|c| c.topic.topic == topic) {
            cursor.next = offset;
        }
        self
    }

    /// Starts each topic named in `offsets` at its offset there, inboxes
    /// found later too (other topics keep their start): how a reading
    /// resumes where an earlier one stopped.
    pub fn from_offsets(mut self, offsets: &BTreeMap<String, u64>) -> Self {
        for cursor in &mut self.cursors {
            if let Some(&offset) = offsets.get(&cursor.topic.topic) {
                cursor.next = offset;
            }
        }
        if let Some(search) = &mut self.inboxes {
            search
                .starts
                .extend(offsets.iter().map(|(t, o)| (t.clone(), *o)));
        }
        self
    }

    /// The conversation read.
    pub fn conversation(&self) -> ConversationId {
        self.conversation
    }

    /// Where each topic is read next.
    pub fn cursors(&self) -> &[Cursor] {
        &self.cursors
    }

    /// Records stepped over: damaged, undecodable, or of another
    /// conversation sharing the partition.
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// The damaged records stepped over so far, in the order met (they
    /// may hold records of the conversation: nothing of them can be read).
    pub fn damaged(&self) -> &[Damage] {
        &self.damaged
    }

    /// Reads what is there now in every topic (up to a poll's worth each),
    /// waiting up to `wait` when nothing is; the conversation's records,
    /// in log order. Empty when there is nothing new.
    pub async fn next_batch(&mut self, wait: Duration) -> Result<Vec<ReplayRecord>, ReplayError> {
        let every = vec![true; self.cursors.len()];
        let mut out = Vec::new();
        self.poll_once(&every, wait, &mut out).await?;
        // Inboxes met now are read from the next batch on.
        self.find_inboxes().await?;
        out.sort_by_key(ReplayRecord::order_key);
        Ok(out)
    }

    /// Reads everything there is now, in log order: each topic up to the
    /// last offset its partition had when the read began, however many
    /// records of other conversations lie in between.
    pub async fn read_to_end(&mut self) -> Result<Vec<ReplayRecord>, ReplayError> {
        let mut ends = self.end_offsets().await?;
        let mut all = Vec::new();
        loop {
            while let Some(batch) = self.next_up_to(&ends).await? {
                all.extend(batch);
            }
            let known = ends.len();
            if self.find_inboxes().await? == 0 {
                break;
            }
            ends.extend(self.end_offsets_from(known).await?);
        }
        all.sort_by_key(ReplayRecord::order_key);
        Ok(all)
    }

    /// Adds a cursor for the inbox of each agent met and not yet looked
    /// for, when it exists; how many were added.
    async fn find_inboxes(&mut self) -> Result<usize, ReplayError> {
        let Some(search) = &mut self.inboxes else {
            return Ok(0);
        };
        let mut added = 0;
        let unlooked: Vec<AgentId> = search.met.difference(&search.looked).cloned().collect();
        for agent in unlooked {
            search.looked.insert(agent.clone());
            let Some(topic) = search
                .topology
                .find_inbox(self.log.as_ref(), &agent)
                .await?
            else {
                continue;
            };
            if self.cursors.iter().all(|c| c.topic != topic) {
                let next = search.starts.get(&topic.topic).copied();
                self.cursors.push(Cursor {
                    partition: partition_of(&topic, self.conversation),
                    topic,
                    next: next.unwrap_or(search.start),
                });
                added += 1;
            }
        }
        Ok(added)
    }

    /// The last offset of each cursor's partition now (`None`: empty), for
    /// [`Replay::next_up_to`].
    pub(crate) async fn end_offsets(&self) -> Result<Vec<Option<u64>>, ReplayError> {
        self.end_offsets_from(0).await
    }

    /// [`Replay::end_offsets`] of the cursors from index `first` on.
    async fn end_offsets_from(&self, first: usize) -> Result<Vec<Option<u64>>, ReplayError> {
        let log = &self.log;
        let ends = self.cursors[first..]
            .iter()
            .map(|c| async move { log.last_offset(&c.topic, c.partition).await });
        let ends = futures_util::future::try_join_all(ends).await?;
        Ok(ends)
    }

    /// One poll of each topic not yet read up to its end in `ends`; the
    /// conversation's records it found, in log order (maybe none), or
    /// `None` once every topic is read to its end. A partition that
    /// returns nothing before its end fails the read
    /// ([`ReplayError::Short`]).
    pub(crate) async fn next_up_to(
        &mut self,
        ends: &[Option<u64>],
    ) -> Result<Option<Vec<ReplayRecord>>, ReplayError> {
        let unread: Vec<bool> = self
            .cursors
            .iter()
            .zip(ends.iter())
            .map(|(cursor, end)| end.is_some_and(|end| cursor.next <= end))
            .collect();
        if !unread.contains(&true) {
            return Ok(None);
        }
        let mut out = Vec::new();
        let moved = self.poll_once(&unread, Duration::ZERO, &mut out).await?;
        let stuck = (self.cursors.iter().zip(ends))
            .zip(unread.iter().zip(moved))
            .find(|(_, (polled, moved))| **polled && !moved);
        if let Some(((cursor, end), _)) = stuck {
            return Err(ReplayError::Short {
                stream: cursor.topic.stream.clone(),
                topic: cursor.topic.topic.clone(),
                partition: cursor.partition,
                from: cursor.next,
                last: end.unwrap_or_default(),
            });
        }
        out.sort_by_key(ReplayRecord::order_key);
        Ok(Some(out))
    }

    /// Polls each cursor `which` selects once, at once, waiting up to
    /// `wait`; adds the conversation's records to `out`. Which cursors
    /// moved on.
    async fn poll_once(
        &mut self,
        which: &[bool],
        wait: Duration,
        out: &mut Vec<ReplayRecord>,
    ) -> Result<Vec<bool>, ReplayError> {
        let log = &self.log;
        let polls = self
            .cursors
            .iter()
            .zip(which)
            .map(|(cursor, &poll)| async move {
                if !poll {
                    return None;
                }
                let polled = log
                    .poll(
                        &cursor.topic,
                        cursor.partition,
                        cursor.next,
                        POLL_BATCH,
                        wait,
                    )
                    .await;
                Some(polled)
            });
        let results = futures_util::future::join_all(polls).await;
        let mut moved = vec![false; self.cursors.len()];
        for ((cursor, result), moved) in self.cursors.iter_mut().zip(results).zip(&mut moved) {
            let records = match result {
                None => continue,
                Some(Ok(records)) => records,
                Some(Err(LogError::Corrupt(damage))) => {
                    // Damage never surfaces as records; step over it, and
                    // keep it for whoever reports on the replay.
                    cursor.next = damage.next_offset();
                    self.skipped += damage.count();
                    self.damaged.push(damage);
                    *moved = true;
                    continue;
                }
                Some(Err(error)) => return Err(error.into()),
            };
            *moved = !records.is_empty();
            for record in records {
                cursor.next = record.position.offset + 1;
                match ReplayRecord::decode(&cursor.topic.topic, record) {
                    Some(r) if r.conversation() == Some(self.conversation) => {
                        if let (Some(search), Some(envelope)) = (&mut self.inboxes, r.carried()) {
                            search.met.insert(envelope.source.clone());
                            search.met.extend(envelope.target.clone());
                        }
                        out.push(r);
                    }
                    _ => self.skipped += 1,
                }
            }
        }
        Ok(moved)
    }
}

/// The record at `position`, decoded; `None` when nothing is there.
pub async fn record_at(
    log: &SharedLog,
    topology: &Topology,
    position: LogPosition,
) -> Result<Option<ReplayRecord>, ReplayError> {
    let topic = topic_of(topology, position)?;
    read_at(log, topic, position).await
}

/// [`record_at`], where a position in none of the agent topics may be in
/// `agent`'s inbox (inbox routing): the agent that wrote a record whose
/// `cause_at` it is, as a pool reads its commands there.
pub(crate) async fn record_at_near(
    log: &SharedLog,
    topology: &Topology,
    position: LogPosition,
    agent: &AgentId,
) -> Result<Option<ReplayRecord>, ReplayError> {
    let foreign = match topic_of(topology, position) {
        Ok(topic) => return read_at(log, topic, position).await,
        Err(foreign) => foreign,
    };
    match topology.find_inbox(log.as_ref(), agent).await? {
        Some(inbox) if (inbox.stream_id, inbox.topic_id) == (position.stream, position.topic) => {
            read_at(log, &inbox, position).await
        }
        _ => Err(foreign),
    }
}

/// The record of `topic` at `position`, decoded; `None` when nothing is there.
async fn read_at(
    log: &SharedLog,
    topic: &TopicInfo,
    position: LogPosition,
) -> Result<Option<ReplayRecord>, ReplayError> {
    let mut records = match log
        .poll(
            topic,
            position.partition,
            position.offset,
            1,
            Duration::ZERO,
        )
        .await
    {
        Ok(records) => records,
        Err(LogError::Corrupt(_)) | Err(LogError::NoSuchPartition { .. }) => return Ok(None),
        Err(error) => return Err(error.into()),
    };
    match records.pop() {
        Some(record) if record.position == position => {
            Ok(ReplayRecord::decode(&topic.topic, record))
        }
        _ => Ok(None),
    }
}

/// The agent topic a position points into.
pub(crate) fn topic_of(
    topology: &Topology,
    position: LogPosition,
) -> Result<&TopicInfo, ReplayError> {
    topology
        .all()
        .into_iter()
        .find(|t| t.stream_id == position.stream && t.topic_id == position.topic)
        .ok_or_else(|| ReplayError::ForeignPosition {
            position,
            stream: topology.commands.stream.clone(),
            stream_id: topology.commands.stream_id,
        })
}
