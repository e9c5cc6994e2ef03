//! The mapping between IOA and the log: which AGDX record each IOA fact is,
//! and how a record read back becomes that fact again.
//!
//! | IOA | record | topic | conversation | body (`json`) |
//! | --- | --- | --- | --- | --- |
//! | a node registers (or gets another token) | `event` `ioa.node`, source = the node | `agent.registry` | the node's card conversation | [`NodeRecord`]: the node, and the SHA-256 of a new token |
//! | a node joins a space | `status` `progress`, metadata `ioa` = `join`, source = the node | `agent.commands` | the space's ([`space_conversation`]) | the `SpaceCreate` (name, description, tags) |
//! | a message | `event` `ioa.message`, source = the sender | `agent.commands` | the space's | the `SendMessage` exactly as the client sent it |
//! | a node binds an external identity (or gives it up) | `event` `ioa.identity`, source = the node | `agent.registry` | the identity's ([`identity_conversation`]) | [`IdentityRecord`]: namespace, subject, claims (or `unbound`) |
//!
//! An identity is held by the node whose binding comes first in the
//! identity's conversation (one partition, so every bridge agrees); a later
//! binding by another node changes nothing until the holder unbinds.
//!
//! A message's shared semantics are envelope fields: `source` is the
//! sender, `cause` the first of `refs.messages` (with `cause_at`, its
//! position), the other parents of a merge are the `causes` metadata
//! ([`META_CAUSES`], which the causal graph follows too), and when the
//! message has a single recipient it is the `target`. `refs` itself stays
//! in the body with the rest of the IOA data, as the sender wrote it.
//! A join and a space's messages share one partition of one topic, so a
//! space's history is totally ordered and its join always comes first.
//! Every record carries this bridge's id in `bridge_hops`, stamped by the
//! bridge's producer ([`Producer::with_bridge_hop`](crate::Producer::with_bridge_hop)).

use agdx_wire::{
    AgentEnvelope, AgentId, ContentType, ConversationId, Kind, LogPosition, Metadata, RecordId,
    Scalar, StatusOperation,
};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::Outgoing;
use crate::ids::new_record_id;
use crate::log::LogRecord;
use crate::replay::{META_CAUSES, ReplayRecord};

use super::model::{
    IdentityBinding, MAX_JSON_DEPTH, Refs, SendMessage, SpaceCreate, identity_conversation,
    is_empty_object, is_object, space_conversation, too_deep,
};

/// The operation of a node's registration event.
pub const OP_NODE: &str = "ioa.node";
/// The operation of a message event.
pub const OP_MESSAGE: &str = "ioa.message";
/// The operation of an identity's binding event.
pub const OP_IDENTITY: &str = "ioa.identity";
/// The metadata key marking a status `progress` record as a join (value [`JOIN`]).
pub const META_IOA: &str = "ioa";
/// The value of [`META_IOA`] on a join.
pub const JOIN: &str = "join";

/// The body of a node's registration record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct NodeRecord {
    pub id: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
    #[serde(default)]
    pub meta: Map<String, Value>,
    /// Hex SHA-256 of a bearer token minted for the node; the token itself
    /// is never written anywhere.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_sha256: Option<String>,
}

/// The body of an identity's binding record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct IdentityRecord {
    pub namespace: String,
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Map<String, Value>>,
    /// The node gives the identity up.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unbound: bool,
}

impl IdentityRecord {
    /// The binding it makes (or gives up).
    pub fn binding(self) -> IdentityBinding {
        IdentityBinding {
            namespace: self.namespace,
            subject: self.subject,
            claims: self.claims,
        }
    }
}

/// A message read back from the log.
#[derive(Debug, Clone)]
pub(crate) struct StoredMessage {
    pub id: RecordId,
    pub space: ConversationId,
    pub sender: String,
    pub timestamp_micros: u64,
    pub position: LogPosition,
    pub content_type: String,
    pub content: Box<RawValue>,
    pub refs: Refs,
    pub meta: Option<Box<RawValue>>,
    pub content_schema: Option<Box<RawValue>>,
    /// The record itself, for the causal-graph walk.
    pub record: ReplayRecord,
}

/// An IOA fact read back from the log.
#[derive(Debug)]
pub(crate) enum IoaRecord {
    Node {
        record: RecordId,
        node: NodeRecord,
    },
    Join {
        record: RecordId,
        space: ConversationId,
        node: String,
        join: SpaceCreate,
    },
    Message(Box<StoredMessage>),
    Identity {
        record: RecordId,
        node: String,
        identity: IdentityRecord,
    },
}

/// An IOA fact that outlives the records it came from: a snapshot of the
/// bridge's view keeps every node registration, join and identity binding
/// (messages go with the commands topic's retention).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum DurableFact {
    Node {
        record: u128,
        node: NodeRecord,
    },
    Join {
        record: u128,
        space: u128,
        node: String,
        join: SpaceCreate,
    },
    Identity {
        record: u128,
        node: String,
        identity: IdentityRecord,
    },
}

impl DurableFact {
    /// The durable fact `record` is, unless it is a message.
    pub fn of(record: &IoaRecord) -> Option<Self> {
        Some(match record {
            IoaRecord::Node { record, node } => Self::Node {
                record: record.as_u128(),
                node: node.clone(),
            },
            IoaRecord::Join {
                record,
                space,
                node,
                join,
            } => Self::Join {
                record: record.as_u128(),
                space: space.as_u128(),
                node: node.clone(),
                join: join.clone(),
            },
            IoaRecord::Identity {
                record,
                node,
                identity,
            } => Self::Identity {
                record: record.as_u128(),
                node: node.clone(),
                identity: identity.clone(),
            },
            IoaRecord::Message(_) => return None,
        })
    }

    /// The fact as the view takes it in.
    pub fn into_record(self) -> IoaRecord {
        match self {
            Self::Node { record, node } => IoaRecord::Node {
                record: RecordId::from_u128(record),
                node,
            },
            Self::Join {
                record,
                space,
                node,
                join,
            } => IoaRecord::Join {
                record: RecordId::from_u128(record),
                space: ConversationId::from_u128(space),
                node,
                join,
            },
            Self::Identity {
                record,
                node,
                identity,
            } => IoaRecord::Identity {
                record: RecordId::from_u128(record),
                node,
                identity,
            },
        }
    }
}

/// The IOA fact a log record is, if it is one. Records of other agents and
/// records that do not read as what they claim to be are no IOA facts.
pub(crate) fn read(topic: &str, record: LogRecord) -> Option<IoaRecord> {
    let record = ReplayRecord::decode(topic, record)?;
    let envelope = record.envelope()?;
    let id = envelope.record?;
    let operation = envelope.operation.as_deref();
    if matches!(operation, Some(OP_NODE | OP_MESSAGE | OP_IDENTITY)) && too_deep(&envelope.body) {
        // Written past the bridge (which refuses it): served, it would
        // break every read that includes it for ordinary JSON clients.
        tracing::warn!(
            position = %record.position,
            "an IOA record's JSON nests more than {MAX_JSON_DEPTH} levels deep; not served"
        );
        return None;
    }
    match (envelope.kind, operation) {
        (Kind::Event, Some(OP_NODE)) => {
            let node: NodeRecord = serde_json::from_slice(&envelope.body).ok()?;
            (node.id == envelope.source.as_str()).then_some(IoaRecord::Node { record: id, node })
        }
        (Kind::Status, Some(op))
            if op == StatusOperation::Progress.as_str() && is_join(envelope) =>
        {
            let join: SpaceCreate = serde_json::from_slice(&envelope.body).ok()?;
            // A join names its space; one filed under another conversation is bogus.
            (space_conversation(&join.name) == envelope.conversation).then(|| IoaRecord::Join {
                record: id,
                space: envelope.conversation,
                node: envelope.source.as_str().to_owned(),
                join,
            })
        }
        (Kind::Event, Some(OP_MESSAGE)) => {
            let body: SendMessage = serde_json::from_slice(&envelope.body).ok()?;
            let content = body.content.filter(|c| is_object(c))?;
            Some(IoaRecord::Message(Box::new(StoredMessage {
                id,
                space: envelope.conversation,
                sender: envelope.source.as_str().to_owned(),
                timestamp_micros: record.timestamp_micros,
                position: record.position,
                content_type: body.content_type.unwrap_or_default(),
                content,
                refs: Refs::complete(body.refs.as_ref()),
                meta: body.meta.filter(|m| is_object(m) && !is_empty_object(m)),
                content_schema: body
                    .content_schema
                    .filter(|s| is_object(s) && !is_empty_object(s)),
                record,
            })))
        }
        (Kind::Event, Some(OP_IDENTITY)) => {
            let identity: IdentityRecord = serde_json::from_slice(&envelope.body).ok()?;
            let conversation = identity_conversation(&identity.namespace, &identity.subject);
            // Filed under another identity's conversation it would escape
            // that identity's ordering; such a record is bogus.
            (conversation == envelope.conversation).then(|| IoaRecord::Identity {
                record: id,
                node: envelope.source.as_str().to_owned(),
                identity,
            })
        }
        _ => None,
    }
}

fn is_join(envelope: &AgentEnvelope) -> bool {
    envelope
        .metadata
        .as_ref()
        .and_then(|m| m.get(META_IOA))
        .and_then(Scalar::as_str)
        == Some(JOIN)
}

/// A node's registration record.
pub(crate) fn node(node: &AgentId, body: &NodeRecord) -> Outgoing {
    let envelope = AgentEnvelope::event(
        new_record_id(),
        crate::routing::card_conversation(node),
        node.clone(),
        json(body),
    )
    .with_operation(OP_NODE);
    Outgoing::new(envelope, ContentType::Json)
}

/// `node` binds `binding` (or, `unbound`, gives it up).
pub(crate) fn identity(node: &AgentId, binding: &IdentityBinding, unbound: bool) -> Outgoing {
    let body = IdentityRecord {
        namespace: binding.namespace.clone(),
        subject: binding.subject.clone(),
        claims: binding.claims.clone(),
        unbound,
    };
    let envelope = AgentEnvelope::event(
        new_record_id(),
        identity_conversation(&binding.namespace, &binding.subject),
        node.clone(),
        json(&body),
    )
    .with_operation(OP_IDENTITY);
    Outgoing::new(envelope, ContentType::Json)
}

/// A join of `node` to the space `join.name`.
pub(crate) fn join(node: &AgentId, join: &SpaceCreate) -> Outgoing {
    let envelope = AgentEnvelope::status_progress(
        new_record_id(),
        space_conversation(&join.name),
        node.clone(),
        json(join),
    )
    .with_metadata(Metadata::new().with(META_IOA, JOIN));
    Outgoing::new(envelope, ContentType::Json)
}

/// A message: `body` is the `SendMessage` as the sender wrote it, `refs`
/// its refs with the defaults filled in, `first_at` where the first of
/// `refs.messages` sits.
pub(crate) fn message(
    space: ConversationId,
    sender: &AgentId,
    body: Vec<u8>,
    refs: &Refs,
    first_at: Option<LogPosition>,
) -> Outgoing {
    let mut metadata = Metadata::new();
    let mut parents = refs
        .messages
        .iter()
        .filter_map(|m| m.parse::<RecordId>().ok());
    let mut envelope = AgentEnvelope::event(new_record_id(), space, sender.clone(), body)
        .with_operation(OP_MESSAGE);
    if let Some(first) = parents.next() {
        envelope = envelope.with_cause(first, first_at);
        let more: Vec<Scalar> = parents.map(|p| Scalar::from(p.to_string())).collect();
        if !more.is_empty() {
            metadata.insert(META_CAUSES, more);
        }
    }
    if let [recipient] = refs.nodes.as_slice()
        && let Ok(target) = AgentId::new(recipient.as_str())
    {
        envelope = envelope.with_target(target);
    }
    Outgoing::new(envelope.with_metadata(metadata), ContentType::Json)
}

fn json(value: &impl Serialize) -> Vec<u8> {
    // Serializing these plain structs cannot fail.
    serde_json::to_vec(value).unwrap_or_default()
}

/// The most `refs.messages` one message may have: the parents after the
/// first go in the `causes` metadata, whose value is capped at 1024 bytes
/// (each id takes 27).
pub const MAX_PARENTS: usize = 1 + agdx_wire::METADATA_MAX_VALUE_SIZE / 27;
