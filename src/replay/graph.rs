//! The causal graph: records linked by `cause`, walked up (ancestors), down
//! (descendants) or both from any record — the read modes of the IOA
//! message graph, over the log.
//!
//! A node is a record id (a record appended twice, e.g. redriven, is one
//! node with two appearances); a record without an id (a chunk) is a node
//! of its own, keyed by its position. Edges run from a record to its
//! `cause`, and to the further causes its [`META_CAUSES`] metadata names.
//! Shapes are whatever the records make: a thread (each record caused by
//! the one before), a tree (several records caused by one), or a DAG merge
//! (one node with several causes: a record naming more than one, or the
//! appearances of one record naming different causes).
//!
//! [`CausalGraph::from_records`] is the walk itself, pure, over records the
//! caller has; [`causal_graph`] loads the records from the log first: the
//! start record's conversation, then, upwards, each parent outside it,
//! found directly at its `cause_at` position when the child names one.
//!
//! ```
//! use agdx::replay::{CausalGraph, Direction, NodeKey, ReplayItem, ReplayRecord};
//! use agdx::wire::*;
//! # fn rec(offset: u64, e: AgentEnvelope) -> ReplayRecord {
//! #     ReplayRecord { topic: "t".into(), position: LogPosition { stream: 1, topic: 1, partition: 0, offset },
//! #         timestamp_micros: offset, content_type: ContentType::Raw, payload: e.encode().into(), item: ReplayItem::Envelope(Box::new(e)) }
//! # }
//! let (conv, me) = (ConversationId::from_u128(9), AgentId::new("a").unwrap());
//! let ask = AgentEnvelope::command(RecordId::from_u128(1), conv, me.clone(), CorrelationId::from_u128(5), Some("q"), b"?".to_vec());
//! let answer = AgentEnvelope::response(RecordId::from_u128(2), conv, me, CorrelationId::from_u128(5), b"!".to_vec())
//!     .with_cause(RecordId::from_u128(1), None);
//! let graph = CausalGraph::from_records(
//!     [rec(0, ask), rec(1, answer)],
//!     &NodeKey::Record(RecordId::from_u128(1)),
//!     Direction::Down,
//! ).unwrap();
//! assert_eq!(graph.children(graph.start()), &[NodeKey::Record(RecordId::from_u128(2))]);
//! ```

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::str::FromStr;

use agdx_wire::{AgentEnvelope, AgentId, ConversationId, LogPosition, RecordId};

use crate::log::{Damage, SharedLog};
use crate::topology::Topology;

use super::reader::{Replay, ReplayError, ReplayRecord, record_at, record_at_near};

/// Which part of the graph a walk returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Direction {
    /// Ancestors only (upstream), and the start.
    Up,
    /// Descendants only (downstream), and the start.
    Down,
    /// Ancestors and descendants.
    #[default]
    Both,
}

/// A node of the causal graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NodeKey {
    /// A record with an id, wherever (and however often) it appears.
    Record(RecordId),
    /// A record without an id (a chunk), by its position.
    Position(LogPosition),
}

impl NodeKey {
    /// The node a record is.
    pub fn of(record: &ReplayRecord) -> Self {
        match record.record_id() {
            Some(id) => NodeKey::Record(id),
            None => NodeKey::Position(record.position),
        }
    }
}

impl fmt::Display for NodeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NodeKey::Record(id) => write!(f, "{id}"),
            NodeKey::Position(position) => write!(f, "{position}"),
        }
    }
}

/// A record id, or a position `stream/topic/partition/offset`.
impl FromStr for NodeKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.contains('/') {
            return s.parse().map(NodeKey::Position).map_err(|e| {
                format!("{e}; a position is stream/topic/partition/offset, e.g. 1/1/3/42")
            });
        }
        s.parse().map(NodeKey::Record).map_err(|e| {
            format!(
                "{e}; give a 26-character record id or a position stream/topic/partition/offset"
            )
        })
    }
}

/// One node: every appearance of the record, and its neighbours within the
/// walked graph.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GraphNode {
    /// The node.
    pub key: NodeKey,
    /// Each appearance of the record, in log order (usually one).
    pub records: Vec<ReplayRecord>,
    /// Its causes within the graph, in log order.
    pub parents: Vec<NodeKey>,
    /// What it caused within the graph, in log order.
    pub children: Vec<NodeKey>,
}

impl GraphNode {
    /// The first appearance.
    pub fn first(&self) -> &ReplayRecord {
        &self.records[0]
    }
}

/// The result of a walk: the start, the nodes reached, and the causes named
/// but not found on the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CausalGraph {
    start: NodeKey,
    direction: Direction,
    nodes: BTreeMap<NodeKey, GraphNode>,
    order: Vec<NodeKey>,
    missing: BTreeSet<RecordId>,
    damaged: Vec<Damage>,
}

/// The metadata key naming a record's further causes, beyond `cause`: an
/// array of record ids (text). A record with several parents at once (a
/// DAG merge in one record, such as an IOA message referring to several
/// messages) names the first in `cause` and the others here, in order.
pub const META_CAUSES: &str = "causes";

/// A record's causes: `cause`, then those of [`META_CAUSES`] (entries that
/// are not record ids are no causes).
pub fn causes_of(envelope: &AgentEnvelope) -> impl Iterator<Item = RecordId> + '_ {
    let more = envelope
        .metadata
        .as_ref()
        .and_then(|m| m.get(META_CAUSES))
        .and_then(|v| v.as_array())
        .unwrap_or_default();
    envelope
        .cause
        .into_iter()
        .chain(more.iter().filter_map(|v| v.as_str()?.parse().ok()))
}

/// The records a walk can see, indexed.
#[derive(Default)]
struct Index {
    records: BTreeMap<NodeKey, Vec<ReplayRecord>>,
    children: HashMap<RecordId, BTreeSet<NodeKey>>,
}

impl Index {
    fn new(records: impl IntoIterator<Item = ReplayRecord>) -> Self {
        let mut index = Index::default();
        let mut seen = BTreeSet::new();
        for record in records {
            if !seen.insert(record.position) {
                continue;
            }
            let key = NodeKey::of(&record);
            for cause in record.envelope().into_iter().flat_map(causes_of) {
                index.children.entry(cause).or_default().insert(key);
            }
            index.records.entry(key).or_default().push(record);
        }
        for appearances in index.records.values_mut() {
            appearances.sort_by_key(ReplayRecord::order_key);
        }
        index
    }

    /// The causes the appearances of `key` name, in log order, deduplicated.
    fn causes(&self, key: &NodeKey) -> Vec<RecordId> {
        let mut causes = Vec::new();
        for record in self.records.get(key).into_iter().flatten() {
            for cause in record.envelope().into_iter().flat_map(causes_of) {
                if !causes.contains(&cause) {
                    causes.push(cause);
                }
            }
        }
        causes
    }

    fn first_order(&self, key: &NodeKey) -> (u64, LogPosition) {
        self.records[key][0].order_key()
    }
}

impl CausalGraph {
    /// Walks from `start` over `records` in `direction`; `None` when no
    /// record is the start. Records may come in any order and more than once.
    pub fn from_records(
        records: impl IntoIterator<Item = ReplayRecord>,
        start: &NodeKey,
        direction: Direction,
    ) -> Option<Self> {
        let index = Index::new(records);
        Self::walk(&index, start, direction)
    }

    fn walk(index: &Index, start: &NodeKey, direction: Direction) -> Option<Self> {
        let start = resolve_start(index, start)?;
        let mut reached = BTreeSet::from([start]);
        let mut missing = BTreeSet::new();
        if direction != Direction::Down {
            let mut queue = VecDeque::from([start]);
            while let Some(key) = queue.pop_front() {
                for cause in index.causes(&key) {
                    let parent = NodeKey::Record(cause);
                    if !index.records.contains_key(&parent) {
                        missing.insert(cause);
                    } else if reached.insert(parent) {
                        queue.push_back(parent);
                    }
                }
            }
        }
        if direction != Direction::Up {
            let mut queue = VecDeque::from([start]);
            let mut below = BTreeSet::from([start]);
            while let Some(key) = queue.pop_front() {
                let NodeKey::Record(id) = key else { continue };
                for child in index.children.get(&id).into_iter().flatten() {
                    reached.insert(*child);
                    if below.insert(*child) {
                        queue.push_back(*child);
                    }
                }
            }
        }
        // Edges among the reached nodes only.
        let mut nodes: BTreeMap<NodeKey, GraphNode> = reached
            .iter()
            .map(|key| {
                let node = GraphNode {
                    key: *key,
                    records: index.records[key].clone(),
                    parents: Vec::new(),
                    children: Vec::new(),
                };
                (*key, node)
            })
            .collect();
        let mut order: Vec<NodeKey> = reached.iter().copied().collect();
        order.sort_by_key(|key| index.first_order(key));
        for key in &order {
            for cause in index.causes(key) {
                let parent = NodeKey::Record(cause);
                if parent != *key && nodes.contains_key(&parent) {
                    if let Some(node) = nodes.get_mut(key) {
                        node.parents.push(parent);
                    }
                    if let Some(node) = nodes.get_mut(&parent) {
                        node.children.push(*key);
                    }
                }
            }
        }
        Some(CausalGraph {
            start,
            direction,
            nodes,
            order,
            missing,
            damaged: Vec::new(),
        })
    }

    /// The node the walk started from.
    pub fn start(&self) -> &NodeKey {
        &self.start
    }

    /// The direction walked.
    pub fn direction(&self) -> Direction {
        self.direction
    }

    /// A node of the graph.
    pub fn node(&self, key: &NodeKey) -> Option<&GraphNode> {
        self.nodes.get(key)
    }

    /// Every node, in log order of first appearance (so every cause comes
    /// before what it caused, for records appended in causal order).
    pub fn nodes(&self) -> impl Iterator<Item = &GraphNode> {
        self.order.iter().map(|key| &self.nodes[key])
    }

    /// How many nodes were reached.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether only the start was reached (it always is).
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// The nodes without a cause in the graph, in log order: the tops of the
    /// drawing.
    pub fn roots(&self) -> Vec<&NodeKey> {
        self.order
            .iter()
            .filter(|key| self.nodes[*key].parents.is_empty())
            .collect()
    }

    /// The causes of a node within the graph.
    pub fn parents(&self, key: &NodeKey) -> &[NodeKey] {
        self.nodes.get(key).map_or(&[], |n| &n.parents)
    }

    /// What a node caused within the graph.
    pub fn children(&self, key: &NodeKey) -> &[NodeKey] {
        self.nodes.get(key).map_or(&[], |n| &n.children)
    }

    /// Causes named by reached records that are not on the log where the
    /// walk looked.
    pub fn missing(&self) -> impl Iterator<Item = &RecordId> {
        self.missing.iter()
    }

    /// The damaged records [`causal_graph`] stepped over while loading the
    /// walk's records (any of them may have belonged to the graph).
    pub fn damaged(&self) -> &[Damage] {
        &self.damaged
    }
}

/// The start as a node of the index: a position that belongs to a record
/// with an id is that record's node.
fn resolve_start(index: &Index, start: &NodeKey) -> Option<NodeKey> {
    if index.records.contains_key(start) {
        return Some(*start);
    }
    let NodeKey::Position(position) = start else {
        return None;
    };
    index
        .records
        .iter()
        .find(|(_, appearances)| appearances.iter().any(|r| r.position == *position))
        .map(|(key, _)| *key)
}

/// Most conversations an upward walk loads before it stops following causes
/// into further conversations.
const MAX_CONVERSATIONS: usize = 64;

/// Where a walk starts: a record id, optionally with the conversation to
/// look in, or a position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GraphStart {
    /// The record.
    pub node: NodeKey,
    /// Its conversation, when known: only that conversation's partitions
    /// are searched for a record id. Without it every partition of the
    /// agent topics is.
    pub conversation: Option<ConversationId>,
}

/// Loads what a walk needs from the log and walks it: the start record's
/// conversation and, going up, each cause outside it (read straight from
/// its `cause_at` position when the child names one, and then its own
/// conversation). Descendants are found within the conversations loaded.
pub async fn causal_graph(
    log: &SharedLog,
    topology: &Topology,
    start: GraphStart,
    direction: Direction,
) -> Result<CausalGraph, ReplayError> {
    let mut damaged = Vec::new();
    let first = find_start(log, topology, &start, &mut damaged).await?;
    let mut records = Vec::new();
    let mut loaded = BTreeSet::new();
    let mut pending: Vec<ConversationId> = first.conversation().into_iter().collect();
    records.push(first);
    let mut fetched = BTreeSet::new();
    loop {
        while let Some(conversation) = pending.pop() {
            if loaded.len() >= MAX_CONVERSATIONS || !loaded.insert(conversation) {
                continue;
            }
            let mut replay = Replay::new(log.clone(), topology, conversation);
            records.extend(replay.read_to_end().await?);
            damaged.extend_from_slice(replay.damaged());
        }
        if direction == Direction::Down {
            break;
        }
        let index = Index::new(records.iter().cloned());
        let Some(graph) = CausalGraph::walk(&index, &start.node, Direction::Up) else {
            break;
        };
        // Causes not found yet, with a position to read them from.
        // With each, the agent that wrote the child: a cause in an inbox
        // is in that agent's.
        let jumps: Vec<(LogPosition, AgentId)> = graph
            .nodes()
            .flat_map(|node| node.records.iter())
            .filter_map(|r| r.envelope())
            .filter(|e| e.cause.is_some_and(|c| graph.missing.contains(&c)))
            .filter_map(|e| Some((e.cause_at?, e.source.clone())))
            .filter(|(at, _)| fetched.insert(*at))
            .collect();
        if jumps.is_empty() {
            break;
        }
        for (at, writer) in jumps {
            if let Ok(Some(parent)) = record_at_near(log, topology, at, &writer).await {
                pending.extend(parent.conversation());
                records.push(parent);
            }
        }
    }
    let mut graph = CausalGraph::from_records(records, &start.node, direction)
        .ok_or_else(|| ReplayError::NotFound(format!("record {} is not on the log", start.node)))?;
    // A conversation searched for the start is read again for the walk.
    damaged.sort_by_key(|d| (d.position, d.last));
    damaged.dedup();
    graph.damaged = damaged;
    Ok(graph)
}

/// The start record: read at its position, or searched for by id; the
/// damaged records stepped over on the way go to `damaged`.
async fn find_start(
    log: &SharedLog,
    topology: &Topology,
    start: &GraphStart,
    damaged: &mut Vec<Damage>,
) -> Result<ReplayRecord, ReplayError> {
    let id = match start.node {
        NodeKey::Position(position) => {
            return record_at(log, topology, position).await?.ok_or_else(|| {
                ReplayError::NotFound(format!(
                    "no record at {position} (stream/topic/partition/offset)"
                ))
            });
        }
        NodeKey::Record(id) => id,
    };
    let is_it = |r: &ReplayRecord| r.record_id() == Some(id);
    if let Some(conversation) = start.conversation {
        let mut replay = Replay::new(log.clone(), topology, conversation);
        let records = replay.read_to_end().await?;
        damaged.extend_from_slice(replay.damaged());
        return records.into_iter().find(is_it).ok_or_else(|| {
            ReplayError::NotFound(format!(
                "record {id} is not in conversation {conversation}; check both ids"
            ))
        });
    }
    let topics = [&topology.commands, &topology.responses, &topology.registry];
    for topic in topics {
        for partition in 0..topic.partitions.get() {
            let mut from = 0;
            loop {
                let batch = match log
                    .poll(topic, partition, from, 1000, std::time::Duration::ZERO)
                    .await
                {
                    Ok(batch) => batch,
                    Err(crate::log::LogError::Corrupt(damage)) => {
                        from = damage.next_offset();
                        damaged.push(damage);
                        continue;
                    }
                    Err(error) => return Err(error.into()),
                };
                let Some(last) = batch.last() else { break };
                from = last.position.offset + 1;
                for record in batch {
                    if let Some(found) = ReplayRecord::decode(&topic.topic, record).filter(is_it) {
                        return Ok(found);
                    }
                }
            }
        }
    }
    Err(ReplayError::NotFound(format!(
        "record {id} is on none of the agent topics of stream '{}'; check the id, the stream and the log",
        topology.commands.stream
    )))
}

#[cfg(test)]
mod tests {
    use agdx_wire::{AgentEnvelope, AgentId, ContentType, CorrelationId};

    use super::*;
    use crate::replay::ReplayItem;

    fn record(offset: u64, envelope: AgentEnvelope) -> ReplayRecord {
        ReplayRecord {
            topic: "agent.commands".into(),
            position: LogPosition {
                stream: 1,
                topic: 1,
                partition: 0,
                offset,
            },
            timestamp_micros: offset,
            content_type: ContentType::Raw,
            payload: envelope.encode().into(),
            item: ReplayItem::Envelope(Box::new(envelope)),
        }
    }

    fn event(id: u128, cause: Option<u128>) -> AgentEnvelope {
        let e = AgentEnvelope::command(
            RecordId::from_u128(id),
            ConversationId::from_u128(1),
            AgentId::new("a").expect("an agent id"),
            CorrelationId::from_u128(id),
            Some("op"),
            b"x".to_vec(),
        );
        match cause {
            Some(c) => e.with_cause(RecordId::from_u128(c), None),
            None => e,
        }
    }

    fn key(id: u128) -> NodeKey {
        NodeKey::Record(RecordId::from_u128(id))
    }

    /// Two roots, each with a child; record 5 appears twice, once caused
    /// by each child: one node reached by two paths.
    fn merge() -> Vec<ReplayRecord> {
        vec![
            record(0, event(1, None)),
            record(1, event(2, None)),
            record(2, event(3, Some(1))),
            record(3, event(4, Some(2))),
            record(4, event(5, Some(3))),
            record(5, event(5, Some(4))),
            record(6, event(6, Some(5))),
        ]
    }

    #[test]
    fn a_record_reached_by_two_paths_is_one_node_with_two_parents() {
        let graph = CausalGraph::from_records(merge(), &key(5), Direction::Both).expect("found");
        let node = graph.node(&key(5)).expect("the merge");
        assert_eq!(node.records.len(), 2, "both appearances");
        assert_eq!(node.parents, [key(3), key(4)]);
        assert_eq!(graph.roots(), [&key(1), &key(2)]);
        assert_eq!(graph.children(&key(5)), [key(6)]);
        assert_eq!(graph.len(), 6);
    }

    #[test]
    fn a_record_naming_several_causes_is_a_merge_of_all_of_them() {
        let merged = event(3, Some(1)).with_metadata(agdx_wire::Metadata::new().with(
            META_CAUSES,
            vec![
                RecordId::from_u128(2).to_string().into(),
                "not an id".into(),
            ],
        ));
        let records = vec![
            record(0, event(1, None)),
            record(1, event(2, None)),
            record(2, merged),
            record(3, event(4, Some(3))),
        ];
        let graph =
            CausalGraph::from_records(records.clone(), &key(3), Direction::Both).expect("found");
        assert_eq!(graph.parents(&key(3)), [key(1), key(2)]);
        assert_eq!(graph.roots(), [&key(1), &key(2)]);
        assert_eq!(graph.missing().count(), 0);
        let down = CausalGraph::from_records(records, &key(2), Direction::Down).expect("found");
        let downs: Vec<NodeKey> = down.nodes().map(|n| n.key).collect();
        assert_eq!(
            downs,
            [key(2), key(3), key(4)],
            "found below its second cause"
        );
    }

    #[test]
    fn up_keeps_only_ancestors_and_down_only_descendants() {
        let up = CausalGraph::from_records(merge(), &key(3), Direction::Up).expect("found");
        let ups: Vec<NodeKey> = up.nodes().map(|n| n.key).collect();
        assert_eq!(ups, [key(1), key(3)]);
        let down = CausalGraph::from_records(merge(), &key(3), Direction::Down).expect("found");
        let downs: Vec<NodeKey> = down.nodes().map(|n| n.key).collect();
        assert_eq!(downs, [key(3), key(5), key(6)]);
        assert_eq!(
            down.parents(&key(5)),
            [key(3)],
            "the merge's other cause is not below the start"
        );
    }

    #[test]
    fn a_missing_cause_is_reported_and_a_position_finds_its_record() {
        let records = vec![record(0, event(7, Some(99)))];
        let at = NodeKey::Position(records[0].position);
        let graph = CausalGraph::from_records(records, &at, Direction::Up).expect("found");
        assert_eq!(graph.start(), &key(7));
        assert_eq!(
            graph.missing().collect::<Vec<_>>(),
            [&RecordId::from_u128(99)]
        );
        assert!(CausalGraph::from_records(Vec::new(), &key(1), Direction::Up).is_none());
    }
}
