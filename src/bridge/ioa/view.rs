//! The bridge's view of the log: nodes, tokens, spaces and messages, built
//! only by reading IOA records back ([`View::apply`]) and so rebuilt the
//! same after a restart. Nothing is ever written here first: a request
//! appends to the log and waits until its record has come back.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use agdx_wire::{ConversationId, RecordId};

use crate::replay::{CausalGraph, Direction, NodeKey};

use super::model::{IdentityBinding, MessageOut, NodeOut, SpaceInfo, normalize_tags};
use super::records::{DurableFact, IoaRecord, StoredMessage};

/// One space: its name, tags, members and messages in log order.
#[derive(Debug)]
pub(crate) struct Space {
    pub id: ConversationId,
    pub name: String,
    pub tags: Vec<String>,
    /// Member node id → the description it joined with (its latest).
    pub members: BTreeMap<String, String>,
    pub messages: Vec<Arc<StoredMessage>>,
}

/// What a space-scoped read returns, in IOA's order of precedence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Mode {
    /// The subgraph around a message.
    Related(RecordId, Direction),
    /// Every message.
    All,
    /// The messages addressed to a node: naming it in `refs.nodes`, or
    /// broadcast (no refs at all), and not sent by it.
    For(String),
    /// The roots: messages without any ref.
    Roots,
}

impl Mode {
    /// Whether a read in this mode shows `message`, for the modes that can
    /// tell from the message alone (not [`Mode::Related`]).
    fn shows(&self, message: &StoredMessage) -> bool {
        match self {
            Mode::All => true,
            Mode::For(node) => addressed_to(message, node),
            Mode::Roots => message.refs.is_broadcast(),
            Mode::Related(..) => false,
        }
    }
}

/// Everything the bridge knows, as read from the log.
#[derive(Debug, Default)]
pub(crate) struct View {
    nodes: BTreeMap<String, NodeOut>,
    /// Hex SHA-256 of a token → its node.
    tokens: HashMap<String, String>,
    /// `(namespace, subject)` → the node holding that identity.
    holders: HashMap<(String, String), String>,
    /// Node id → the identities it holds, by namespace then subject.
    identities: HashMap<String, Vec<IdentityBinding>>,
    spaces: HashMap<ConversationId, Space>,
    /// Message id → its space and index there.
    messages: HashMap<RecordId, (ConversationId, usize)>,
    /// Every message in the order this view took it in.
    arrival: Vec<RecordId>,
    /// Every IOA record taken in, so a writer can wait for its own.
    applied: HashSet<RecordId>,
    /// Every fact but messages, in the order taken in: what a snapshot of
    /// the view keeps.
    durable: Vec<DurableFact>,
}

impl View {
    /// Takes one record in. A record seen before (appended twice) changes nothing.
    pub fn apply(&mut self, record: IoaRecord) {
        let durable = DurableFact::of(&record);
        let before = self.applied.len();
        self.take(record);
        if let Some(fact) = durable
            && self.applied.len() > before
        {
            self.durable.push(fact);
        }
    }

    /// Every fact but messages taken in so far, in order.
    pub fn durable(&self) -> &[DurableFact] {
        &self.durable
    }

    fn take(&mut self, record: IoaRecord) {
        match record {
            IoaRecord::Node { record, node } => {
                if !self.applied.insert(record) {
                    return;
                }
                // The first registration of a name defines the node, as the
                // reference keeps a node's first name, description and meta.
                self.nodes
                    .entry(node.id.clone())
                    .or_insert_with(|| NodeOut {
                        id: node.id.clone(),
                        name: node.name.clone(),
                        description: node.description.clone(),
                        meta: node.meta.clone(),
                        identities: Vec::new(),
                    });
                if let Some(hash) = node.token_sha256 {
                    self.tokens.entry(hash).or_insert(node.id);
                }
            }
            IoaRecord::Join {
                record,
                space,
                node,
                join,
            } => {
                if !self.applied.insert(record) {
                    return;
                }
                let entry = self.spaces.entry(space).or_insert_with(|| Space {
                    id: space,
                    name: join.name.clone(),
                    tags: Vec::new(),
                    members: BTreeMap::new(),
                    messages: Vec::new(),
                });
                entry.tags = normalize_tags(entry.tags.iter().chain(&join.tags));
                entry.members.insert(node, join.description);
            }
            IoaRecord::Identity {
                record,
                node,
                identity,
            } => {
                if !self.applied.insert(record) {
                    return;
                }
                let unbound = identity.unbound;
                let binding = identity.binding();
                let key = (binding.namespace.clone(), binding.subject.clone());
                match self.holders.get(&key).cloned() {
                    // Held by another node: this binding lost the race.
                    Some(holder) if holder != node => {}
                    Some(_) if unbound => {
                        self.holders.remove(&key);
                        if let Some(held) = self.identities.get_mut(&node) {
                            held.retain(|b| !b.is(&key.0, &key.1));
                        }
                    }
                    Some(_) => {
                        // The holder binds it again: new claims.
                        let held = self.identities.entry(node).or_default();
                        if let Some(old) = held.iter_mut().find(|b| b.is(&key.0, &key.1)) {
                            *old = binding;
                        }
                    }
                    None if unbound => {}
                    None => {
                        self.holders.insert(key, node.clone());
                        // Sorted: bindings of different identities sit in
                        // different partitions, so the order they were taken
                        // in is no order a restart keeps.
                        let held = self.identities.entry(node).or_default();
                        let at = held.partition_point(|b| {
                            (&b.namespace, &b.subject) < (&binding.namespace, &binding.subject)
                        });
                        held.insert(at, binding);
                    }
                }
            }
            IoaRecord::Message(message) => {
                let Some(space) = self.spaces.get_mut(&message.space) else {
                    // A conversation nobody joined is no IOA space.
                    return;
                };
                if !self.applied.insert(message.id) {
                    return;
                }
                self.messages
                    .insert(message.id, (message.space, space.messages.len()));
                self.arrival.push(message.id);
                space.messages.push(Arc::new(*message));
            }
        }
    }

    /// Whether the record `id` has been taken in.
    pub fn has_applied(&self, id: &RecordId) -> bool {
        self.applied.contains(id)
    }

    /// The node with this id (without its identities: see [`View::shown`]).
    pub fn node(&self, id: &str) -> Option<&NodeOut> {
        self.nodes.get(id)
    }

    /// The node with this id as IOA shows it, with its identities.
    pub fn shown(&self, id: &str) -> Option<NodeOut> {
        let mut node = self.nodes.get(id)?.clone();
        node.identities = self.identities.get(id).cloned().unwrap_or_default();
        Some(node)
    }

    /// The node holding the identity `(namespace, subject)`.
    pub fn holder(&self, namespace: &str, subject: &str) -> Option<&str> {
        self.holders
            .get(&(namespace.to_owned(), subject.to_owned()))
            .map(String::as_str)
    }

    /// The identity `(namespace, subject)` as `node` holds it.
    pub fn held(&self, node: &str, namespace: &str, subject: &str) -> Option<&IdentityBinding> {
        self.identities
            .get(node)?
            .iter()
            .find(|b| b.is(namespace, subject))
    }

    /// Every node, by name then id.
    pub fn nodes(&self) -> Vec<NodeOut> {
        let mut nodes: Vec<NodeOut> = self.nodes.keys().filter_map(|id| self.shown(id)).collect();
        nodes.sort_by(|a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id)));
        nodes
    }

    /// The node a token's SHA-256 (hex) belongs to.
    pub fn token_node(&self, sha256: &str) -> Option<&NodeOut> {
        self.tokens.get(sha256).and_then(|id| self.nodes.get(id))
    }

    /// The space with this id (its conversation id, in any letter case).
    pub fn space(&self, id: &str) -> Option<&Space> {
        let conversation: ConversationId = id.parse().ok()?;
        self.spaces.get(&conversation)
    }

    /// The space of this conversation.
    pub fn space_of(&self, conversation: &ConversationId) -> Option<&Space> {
        self.spaces.get(conversation)
    }

    /// Every space, by name.
    pub fn spaces(&self) -> Vec<&Space> {
        let mut spaces: Vec<&Space> = self.spaces.values().collect();
        spaces.sort_by(|a, b| (&a.name, a.id).cmp(&(&b.name, b.id)));
        spaces
    }

    /// The spaces `node` joined, by id.
    pub fn spaces_of(&self, node: &str) -> Vec<&Space> {
        let mut spaces: Vec<&Space> = self
            .spaces
            .values()
            .filter(|s| s.members.contains_key(node))
            .collect();
        spaces.sort_by_key(|s| s.id.to_string());
        spaces
    }

    /// A space as IOA shows it: members (with the description each joined
    /// with), by name.
    pub fn space_info(&self, space: &Space) -> SpaceInfo {
        let mut nodes: Vec<NodeOut> = space
            .members
            .iter()
            .filter_map(|(id, description)| {
                let mut node = self.shown(id)?;
                if !description.is_empty() {
                    node.description = description.clone();
                }
                Some(node)
            })
            .collect();
        nodes.sort_by(|a, b| (&a.name, &a.id).cmp(&(&b.name, &b.id)));
        SpaceInfo {
            id: space.id.to_string(),
            name: space.name.clone(),
            tags: space.tags.clone(),
            nodes,
            message_count: space.messages.len(),
        }
    }

    /// A message and where it sits in its space.
    pub fn message(&self, id: &str) -> Option<(&Space, usize, &Arc<StoredMessage>)> {
        let id: RecordId = id.parse().ok()?;
        let (space, index) = self.messages.get(&id)?;
        let space = self.spaces.get(space)?;
        Some((space, *index, &space.messages[*index]))
    }

    /// The index of message `id` in `space`, when it is there.
    pub fn index_in(&self, space: &Space, id: &str) -> Option<usize> {
        self.message(id)
            .filter(|(s, _, _)| s.id == space.id)
            .map(|(_, index, _)| index)
    }

    /// The messages of `space` from index `from` on that a read in `mode`
    /// returns, with their indexes, in log order.
    pub fn select(
        &self,
        space: &Space,
        mode: &Mode,
        from: usize,
    ) -> Vec<(usize, Arc<StoredMessage>)> {
        let Mode::Related(id, direction) = mode else {
            return space
                .messages
                .iter()
                .enumerate()
                .skip(from)
                .filter(|(_, m)| mode.shows(m))
                .map(|(i, m)| (i, m.clone()))
                .collect();
        };
        let records = space.messages.iter().map(|m| m.record.clone());
        let Some(graph) = CausalGraph::from_records(records, &NodeKey::Record(*id), *direction)
        else {
            return Vec::new();
        };
        let reached: BTreeSet<usize> = graph
            .nodes()
            .filter_map(|node| match node.key {
                NodeKey::Record(id) => self.messages.get(&id).map(|(_, i)| *i),
                NodeKey::Position(_) => None,
            })
            .filter(|i| *i >= from)
            .collect();
        reached
            .into_iter()
            .map(|i| (i, space.messages[i].clone()))
            .collect()
    }

    /// Every message of every space, in log time order (timestamp, then
    /// position).
    pub fn all_messages(&self) -> Vec<Arc<StoredMessage>> {
        let mut all: Vec<Arc<StoredMessage>> = self
            .spaces
            .values()
            .flat_map(|s| s.messages.iter().cloned())
            .collect();
        all.sort_by_key(|m| (m.timestamp_micros, m.position));
        all
    }

    /// How many messages this view has taken in.
    pub fn arrived(&self) -> usize {
        self.arrival.len()
    }

    /// The messages taken in from `from` on (in the order taken in), and
    /// where the next call should start.
    pub fn arrived_since(&self, from: usize) -> (Vec<Arc<StoredMessage>>, usize) {
        let new = self.arrival[from.min(self.arrival.len())..]
            .iter()
            .filter_map(|id| {
                let (space, index) = self.messages.get(id)?;
                Some(self.spaces.get(space)?.messages[*index].clone())
            })
            .collect();
        (new, self.arrival.len())
    }

    /// Where message `id` sits in the order taken in.
    pub fn arrival_of(&self, id: &str) -> Option<usize> {
        let id: RecordId = id.parse().ok()?;
        self.arrival.iter().position(|a| *a == id)
    }
}

/// Whether a space-scoped read for `node` shows `message`: addressed to it
/// or broadcast, and not its own.
pub(crate) fn addressed_to(message: &StoredMessage, node: &str) -> bool {
    message.sender != node
        && (message.refs.nodes.iter().any(|n| n == node) || message.refs.is_broadcast())
}

/// IOA's window over a selection: after the cursor (an index in the same
/// order), at most `limit`; without a cursor the *last* `limit`, as the
/// reference does.
pub(crate) fn window<T>(
    selected: Vec<(usize, T)>,
    after: Option<usize>,
    limit: Option<usize>,
) -> Vec<T> {
    let mut items: Vec<T> = selected
        .into_iter()
        .filter(|(i, _)| after.is_none_or(|a| *i > a))
        .map(|(_, item)| item)
        .collect();
    if let Some(limit) = limit {
        if after.is_none() && items.len() > limit {
            items.drain(..items.len() - limit);
        } else {
            items.truncate(limit);
        }
    }
    items
}

/// A message as IOA shows it.
pub(crate) fn message_out(message: &StoredMessage) -> MessageOut {
    MessageOut {
        id: message.id.to_string(),
        space_id: message.space.to_string(),
        sender: message.sender.clone(),
        created_at: rfc3339(message.timestamp_micros),
        content_type: message.content_type.clone(),
        content: message.content.clone(),
        refs: message.refs.clone(),
        meta: message.meta.clone(),
        content_schema: message.content_schema.clone(),
    }
}

/// Epoch microseconds as RFC 3339 in UTC, e.g. `2026-11-30T20:26:55.123456Z`.
pub(crate) fn rfc3339(micros: u64) -> String {
    let at = UNIX_EPOCH + Duration::from_micros(micros);
    humantime::format_rfc3339_micros(at).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_takes_the_last_without_a_cursor_and_the_next_after_one() {
        let selected: Vec<(usize, usize)> = [1, 3, 4, 7, 9].into_iter().map(|i| (i, i)).collect();
        assert_eq!(window(selected.clone(), None, Some(2)), [7, 9]);
        assert_eq!(window(selected.clone(), Some(3), Some(2)), [4, 7]);
        assert_eq!(window(selected.clone(), Some(2), None), [3, 4, 7, 9]);
        assert_eq!(window(selected, Some(9), Some(5)), Vec::<usize>::new());
    }

    #[test]
    fn timestamps_are_rfc3339_utc_with_microseconds() {
        assert_eq!(rfc3339(1_000_000_123_456), "1970-01-12T13:46:40.123456Z");
    }
}
