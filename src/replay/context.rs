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
    let mut turns = turns_of(records, policy.counter.as_ref());
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

/// Every turn of `records`, oldest first (a stream where its first chunk is).
fn turns_of(records: &[ReplayRecord], counter: &dyn TokenCounter) -> Vec<Turn> {
    let mut turns: Vec<Turn> = Vec::new();
    let mut streams: HashMap<ChannelId, (usize, StreamAssembler)> = HashMap::new();
    for record in records {
        let Some(e) = record.envelope() else {
            continue;
        };
        match (e.kind, e.channel) {
            (Kind::Command | Kind::Event | Kind::Response, _) => {
                turns.push(turn(record, e, default_role(e), e.body.clone(), counter));
            }
            (Kind::Chunk, Some(channel)) => {
                let (at, assembler) = streams.entry(channel).or_insert_with(|| {
                    turns.push(turn(record, e, default_role(e), Vec::new(), counter));
                    (turns.len() - 1, StreamAssembler::new(channel))
                });
                for event in assembler.push(e, record.timestamp_micros) {
                    if let StreamEvent::Chunk { body, .. } = event {
                        turns[*at].body.extend_from_slice(&body);
                    }
                }
                if e.metadata.as_ref().and_then(role_of).is_some() {
                    turns[*at].role = default_role(e);
                }
            }
            _ => {}
        }
    }
    for turn in &mut turns {
        turn.tokens = counter.count(&turn.body);
    }
    turns
}

fn turn(
    record: &ReplayRecord,
    e: &AgentEnvelope,
    role: Role,
    body: Vec<u8>,
    counter: &dyn TokenCounter,
) -> Turn {
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
        tokens: counter.count(&body),
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
