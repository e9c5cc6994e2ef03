//! A conversation's turns assembled for a prompt: [`Replay::context`] and
//! the pure [`assemble`] under it.
//!
//! A turn is a command or an event (role `user`), a response (`assistant`)
//! or a whole chunk stream (`assistant`, its chunks joined in sequence
//! order); the pinned `role` metadata key, when a record carries it, says
//! otherwise, and a record naming a `tool` without a role is a `tool` turn.
//! Statuses, errors, dead letters and snapshots are not turns.
//!
//! A [`ContextPolicy`] keeps some of them; its parts compose, applied in
//! this order: the causal branch of one record (it and its ancestors by
//! `cause`, with the streams answering them), the roles asked for, the last N turns, then a token budget
//! (the newest turns whose counts fit, counted by a pluggable
//! [`TokenCounter`]; [`BytesPerToken`], a byte count / 4, by default).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use agdx_wire::{AgentEnvelope, AgentId, ChannelId, ContentType, Kind, LogPosition, RecordId};

use super::reader::{Replay, ReplayError, ReplayRecord};
use crate::reassembly::{StreamAssembler, StreamEvent};

/// Who a turn speaks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A person or a calling agent.
    User,
    /// The agent answering.
    Assistant,
    /// A tool's call or result.
    Tool,
    /// Instructions.
    System,
}

impl Role {
    /// The role's name, as the `role` metadata key writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::System => "system",
        }
    }

    /// The role named `name` (`user`, `assistant`, `tool`, `system`).
    pub fn from_name(name: &str) -> Option<Role> {
        Some(match name {
            "user" => Role::User,
            "assistant" => Role::Assistant,
            "tool" => Role::Tool,
            "system" => Role::System,
            _ => return None,
        })
    }
}

/// Counts the tokens of a turn's body, for [`ContextPolicy::budget`].
pub trait TokenCounter: Send + Sync {
    /// The tokens `body` takes.
    fn count(&self, body: &[u8]) -> usize;
}

/// A token per four bytes, rounded up: a rough count that needs no model's
/// vocabulary.
#[derive(Debug, Clone, Copy, Default)]
pub struct BytesPerToken;

impl TokenCounter for BytesPerToken {
    fn count(&self, body: &[u8]) -> usize {
        body.len().div_ceil(4)
    }
}

/// Which turns a context keeps (every part optional; they compose).
#[derive(Clone)]
pub struct ContextPolicy {
    /// Only the last this many turns.
    pub last: Option<usize>,
    /// Only the newest turns whose token counts add up to at most this.
    pub budget: Option<usize>,
    /// Only turns of these roles.
    pub roles: Option<Vec<Role>>,
    /// Only this record and its ancestors by `cause`.
    pub branch_of: Option<RecordId>,
    /// How tokens are counted.
    pub counter: Arc<dyn TokenCounter>,
}

impl Default for ContextPolicy {
    fn default() -> Self {
        Self {
            last: None,
            budget: None,
            roles: None,
            branch_of: None,
            counter: Arc::new(BytesPerToken),
        }
    }
}

impl std::fmt::Debug for ContextPolicy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ContextPolicy")
            .field("last", &self.last)
            .field("budget", &self.budget)
            .field("roles", &self.roles)
            .field("branch_of", &self.branch_of)
            .finish_non_exhaustive()
    }
}

impl ContextPolicy {
    /// Keeps the last `n` turns.
    pub fn last(mut self, n: usize) -> Self {
        self.last = Some(n);
        self
    }
    /// Keeps the newest turns within `tokens`.
    pub fn budget(mut self, tokens: usize) -> Self {
        self.budget = Some(tokens);
        self
    }
    /// Keeps turns of `roles` only.
    pub fn roles(mut self, roles: impl IntoIterator<Item = Role>) -> Self {
        self.roles = Some(roles.into_iter().collect());
        self
    }
    /// Keeps `record` and its ancestors only.
    pub fn branch_of(mut self, record: RecordId) -> Self {
        self.branch_of = Some(record);
        self
    }
    /// Counts tokens with `counter`.
    pub fn counter(mut self, counter: impl TokenCounter + 'static) -> Self {
        self.counter = Arc::new(counter);
        self
    }
}

/// One turn of a conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Who it speaks for.
    pub role: Role,
    /// Who wrote it.
    pub source: AgentId,
    /// Its record's kind (`chunk` for a stream).
    pub kind: Kind,
    /// Its record id (`None` for a stream: chunks carry none).
    pub record: Option<RecordId>,
    /// The record it answers or follows (`cause`).
    pub cause: Option<RecordId>,
    /// Where it sits (a stream's: its first chunk).
    pub position: LogPosition,
    /// When the log accepted it (a stream's: its first chunk).
    pub timestamp_micros: u64,
    /// Its operation, on a command.
    pub operation: Option<String>,
    /// Its body's codec.
    pub content_type: ContentType,
    /// Its body (a stream's chunks joined).
    pub body: Vec<u8>,
    /// Its tokens, as the policy's counter counts them.
    pub tokens: usize,
}

impl Replay {
    /// Reads the conversation to its end and assembles its turns as
    /// `policy` keeps them (see [`assemble`]).
    pub async fn context(&mut self, policy: &ContextPolicy) -> Result<Vec<Turn>, ReplayError> {
        let records = self.read_to_end().await?;
        Ok(assemble(&records, policy))
    }
}

/// The turns of `records` (one conversation's, in log order) that `policy`
/// keeps, oldest first.
pub fn assemble(records: &[ReplayRecord], policy: &ContextPolicy) -> Vec<Turn> {
    let mut built = Built::default();
    for record in records {
        built.push(record);
    }
    keep(built.turns(), policy)
}

/// The turns of `turns` (every turn, oldest first) that `policy` keeps,
/// their tokens counted by its counter.
pub(crate) fn keep(mut turns: Vec<Turn>, policy: &ContextPolicy) -> Vec<Turn> {
    for turn in &mut turns {
        turn.tokens = policy.counter.count(&turn.body);
    }
    if let Some(record) = policy.branch_of {
        let keep = branch(&turns, record);
        // A stream has no record id: it is on the branch when what it
        // answers is.
        turns.retain(|t| t.record.or(t.cause).is_some_and(|r| keep.contains(&r)));
    }
    if let Some(roles) = &policy.roles {
        turns.retain(|t| roles.contains(&t.role));
    }
    if let Some(last) = policy.last {
        let drop = turns.len().saturating_sub(last);
        turns.drain(..drop);
    }
    if let Some(budget) = policy.budget {
        let mut spent = 0usize;
        let fits = turns
            .iter()
            .rev()
            .take_while(|t| {
                spent = spent.saturating_add(t.tokens);
                spent <= budget
            })
            .count();
        let drop = turns.len() - fits;
        turns.drain(..drop);
    }
    turns
}

/// A turn and what building on it needs: the topic it came from, and for
/// a stream its channel.
#[derive(Debug, Clone)]
pub(crate) struct Placed {
    pub(crate) turn: Turn,
    pub(crate) topic: String,
    pub(crate) channel: Option<ChannelId>,
}

/// Turns built record by record, in the order the records come (each
/// topic's in offset order): a stream's chunks join its turn as they come.
#[derive(Debug, Default)]
pub(crate) struct Built {
    pub(crate) placed: Vec<Placed>,
    /// Streams by channel: their turn's index and their reader.
    streams: HashMap<ChannelId, (usize, StreamAssembler)>,
    /// Channels of streams that ended before the records pushed here (a
    /// context resumed from a snapshot): their late chunks add nothing.
    pub(crate) ended: HashSet<ChannelId>,
    /// The newest log timestamp pushed.
    pub(crate) newest_micros: u64,
}

impl Built {
    /// Takes `record` in: a new turn, part of a stream's, or nothing.
    pub(crate) fn push(&mut self, record: &ReplayRecord) {
        let Some(e) = record.envelope() else {
            return;
        };
        self.newest_micros = self.newest_micros.max(record.timestamp_micros);
        let place = |turn, channel| Placed {
            turn,
            topic: record.topic.clone(),
            channel,
        };
        match (e.kind, e.channel) {
            (Kind::Command | Kind::Event | Kind::Response, _) => {
                let turn = turn(record, e, default_role(e), e.body.to_vec());
                self.placed.push(place(turn, None));
            }
            (Kind::Chunk | Kind::Error, Some(channel)) if !self.ended.contains(&channel) => {
                if e.kind == Kind::Error && !self.streams.contains_key(&channel) {
                    return;
                }
                let (at, assembler) = self.streams.entry(channel).or_insert_with(|| {
                    let turn = turn(record, e, default_role(e), Vec::new());
                    self.placed.push(place(turn, Some(channel)));
                    (self.placed.len() - 1, StreamAssembler::new(channel))
                });
                for event in assembler.push(e, record.timestamp_micros) {
                    if let StreamEvent::Chunk { body, .. } = event {
                        self.placed[*at].turn.body.extend_from_slice(&body);
                    }
                }
                if e.kind == Kind::Chunk && e.metadata.as_ref().and_then(role_of).is_some() {
                    self.placed[*at].turn.role = default_role(e);
                }
            }
            _ => {}
        }
    }

    /// Whether the stream on `channel` may still get chunks: it has not
    /// ended, and its opening deadline had not passed at the newest
    /// record pushed.
    pub(crate) fn is_open(&self, channel: ChannelId) -> bool {
        self.streams.get(&channel).is_some_and(|(_, assembler)| {
            !assembler.is_ended()
                && assembler
                    .deadline_micros()
                    .is_none_or(|deadline| deadline >= self.newest_micros)
        })
    }

    /// Every turn, in log order (timestamp, then position), tokens not yet
    /// counted.
    pub(crate) fn turns(&self) -> Vec<Turn> {
        let mut turns: Vec<Turn> = self.placed.iter().map(|p| p.turn.clone()).collect();
        turns.sort_by_key(|t| (t.timestamp_micros, t.position));
        turns
    }
}

fn turn(record: &ReplayRecord, e: &AgentEnvelope, role: Role, body: Vec<u8>) -> Turn {
    Turn {
        role,
        source: e.source.clone(),
        kind: e.kind,
        record: e.record,
        cause: e.cause,
        position: record.position,
        timestamp_micros: record.timestamp_micros,
        operation: e.operation.clone().filter(|_| e.kind == Kind::Command),
        content_type: record.content_type,
        tokens: 0,
        body,
    }
}

/// The role of `e`: its `role` metadata, else by what it is.
fn default_role(e: &AgentEnvelope) -> Role {
    if let Some(role) = e.metadata.as_ref().and_then(role_of) {
        return role;
    }
    match e.kind {
        _ if e.tool.is_some() => Role::Tool,
        Kind::Command | Kind::Event => Role::User,
        _ => Role::Assistant,
    }
}

fn role_of(metadata: &agdx_wire::Metadata) -> Option<Role> {
    metadata
        .get(agdx_wire::META_ROLE)
        .and_then(|v| v.as_str())
        .and_then(Role::from_name)
}

/// `record` and its ancestors by `cause` among `turns`.
fn branch(turns: &[Turn], record: RecordId) -> HashSet<RecordId> {
    let causes: BTreeMap<RecordId, Option<RecordId>> = turns
        .iter()
        .filter_map(|t| t.record.map(|r| (r, t.cause)))
        .collect();
    let mut keep = HashSet::new();
    let mut next = Some(record);
    while let Some(at) = next {
        if !keep.insert(at) {
            break;
        }
        next = causes.get(&at).copied().flatten();
    }
    keep
}
