//! IOA's operations, validated as the reference server validates them (same
//! checks, same order, same statuses), each write appended to the log and
//! answered once it has been read back.

use agdx_wire::{AgentId, RecordId};
use rand::RngCore;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::replay::Direction;

use super::model::{
    AuthRegister, AuthResponse, IdentityBinding, MessageOut, NodeCreate, NodeOut, Refs,
    SendMessage, SpaceCreate, SpaceInfo, SpaceWithRoots, is_object, normalize_tags,
    space_conversation, too_deep, too_deep_error,
};
use super::records::{self, MAX_PARENTS, NodeRecord};
use super::view::{Mode, Space, View, addressed_to, message_out, window};
use super::{IoaBridge, IoaError};

/// Who a request acts as, once authenticated.
#[derive(Debug, Clone, Default)]
pub(crate) struct Caller {
    /// The node: a bearer token's, or the one `X-Node-ID` names.
    pub node: Option<String>,
    /// Named with the access key alone, which may register any node (as
    /// `POST /auth/register` does), so `ioa_space` and `ioa_send` register
    /// it on the fly when it is new.
    pub by_key: bool,
}

/// The options of a space-scoped read.
#[derive(Debug, Clone, Default)]
pub(crate) struct ReadOptions {
    pub message_id: String,
    pub direction: String,
    pub after: String,
    pub limit: Option<usize>,
    pub all: bool,
}

/// The filters of `GET /messages`.
#[derive(Debug, Clone, Default)]
pub(crate) struct MessageFilter {
    pub space_id: String,
    pub message_id: String,
    pub node_id: String,
    pub sender: String,
    pub ref_message: String,
    pub ref_node: String,
    pub after: String,
    pub limit: Option<usize>,
}

fn space_not_found(id: &str) -> IoaError {
    IoaError::NotFound(format!("Space '{id}' not found"))
}

/// The SHA-256 of a token, hex: what the log keeps instead of the token.
pub(crate) fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn node_id(name: &str) -> Result<AgentId, IoaError> {
    AgentId::new(name).map_err(|e| {
        IoaError::InvalidInput(format!(
            "name '{name}' cannot be a node here: {e} (a node's name is its agent id on the log)"
        ))
    })
}

/// The node a write acts as, and whether it still has to be registered:
/// only a node named with the access key may be new.
fn caller_node(view: &View, caller: &Caller) -> Result<(String, bool), IoaError> {
    let Some(node) = caller.node.as_deref().filter(|n| !n.is_empty()) else {
        return Err(IoaError::InvalidInput(
            "caller node identity is required (a bearer token, or X-Node-ID with the access key)"
                .into(),
        ));
    };
    if view.node(node).is_some() {
        return Ok((node.to_owned(), false));
    }
    if caller.by_key {
        node_id(node)?;
        return Ok((node.to_owned(), true));
    }
    Err(IoaError::InvalidInput(format!(
        "caller node '{node}' not found"
    )))
}

/// Identities as a registration or a binding gives them: each normalized,
/// none twice.
fn normalize_identities(given: Vec<IdentityBinding>) -> Result<Vec<IdentityBinding>, IoaError> {
    let mut out: Vec<IdentityBinding> = Vec::with_capacity(given.len());
    for (i, binding) in given.into_iter().enumerate() {
        let binding = binding
            .normalized()
            .map_err(|e| IoaError::InvalidInput(format!("identities[{i}]: {e}")))?;
        if out
            .iter()
            .any(|b| b.is(&binding.namespace, &binding.subject))
        {
            return Err(IoaError::InvalidInput(format!(
                "identities[{i}]: duplicate identity '{}'/'{}'",
                binding.namespace, binding.subject
            )));
        }
        out.push(binding);
    }
    Ok(out)
}

/// The node already holding one of `identities`, if any; identities held
/// by two different nodes cannot name one caller.
fn holder_of(view: &View, identities: &[IdentityBinding]) -> Result<Option<String>, IoaError> {
    let held: Vec<(&IdentityBinding, &str)> = identities
        .iter()
        .filter_map(|b| Some((b, view.holder(&b.namespace, &b.subject)?)))
        .collect();
    let Some((_, first)) = held.first() else {
        return Ok(None);
    };
    if held.iter().any(|(_, holder)| holder != first) {
        let list: Vec<String> = held
            .iter()
            .map(|(b, holder)| format!("'{}'/'{}' is bound to '{holder}'", b.namespace, b.subject))
            .collect();
        return Err(IoaError::InvalidInput(format!(
            "the identities belong to different nodes ({}); register with the identities of one node",
            list.join(", ")
        )));
    }
    Ok(Some((*first).to_owned()))
}

fn identity_args(namespace: &str, subject: &str) -> Result<(), IoaError> {
    if namespace.trim().is_empty() || subject.trim().is_empty() {
        return Err(IoaError::InvalidInput(
            "identity namespace and subject are required".into(),
        ));
    }
    Ok(())
}

/// What [`own_node`] refuses a caller to do to another node's identities.
const CHANGE_IDENTITIES: &str = "change the identities of";
/// What [`own_node`] refuses a caller to do to another node's inbox (its
/// `inbox` and its event stream).
pub(crate) const READ_INBOX: &str = "read the inbox of";

/// A node binds and unbinds identities of its own only, and reads its own
/// inbox only: `doing` says which.
pub(crate) fn own_node(caller: &str, node: &str, doing: &str) -> Result<(), IoaError> {
    if caller != node {
        return Err(IoaError::Forbidden(format!(
            "node '{caller}' cannot {doing} node '{node}'; use {node}'s own token"
        )));
    }
    Ok(())
}

impl IoaBridge {
    /// `POST /auth/register`: a new bearer token for the node that holds
    /// one of `identities` or else for the node named `name` (registered
    /// now unless it exists); the identities it does not hold yet are bound
    /// to it.
    pub(crate) async fn register(&self, body: AuthRegister) -> Result<AuthResponse, IoaError> {
        if body.access_key.as_deref() != Some(self.inner.config.access_key.as_str()) {
            return Err(IoaError::Forbidden("invalid access key".into()));
        }
        let name = body.name.unwrap_or_default();
        if name.trim().is_empty() {
            return Err(IoaError::InvalidInput("name is required".into()));
        }
        node_id(&name)?;
        let identities = normalize_identities(body.identities.unwrap_or_default())?;
        // One registration at a time here, so two registering the same new
        // identity at once make one node, not two.
        let _one_at_a_time = self.inner.registering.lock().await;
        let holder = self.inner.shared.read(|v| holder_of(v, &identities))?;
        let id = holder.unwrap_or(name);
        let agent = node_id(&id)?;
        let mut secret = [0u8; 32];
        rand::rng().fill_bytes(&mut secret);
        let token = hex::encode(secret);
        let existing = self.inner.shared.read(|v| v.node(&id).cloned());
        let node = existing.unwrap_or_else(|| NodeOut {
            id: id.clone(),
            name: id.clone(),
            description: body.description.unwrap_or_default(),
            meta: body.meta.unwrap_or_default(),
            identities: Vec::new(),
        });
        self.write_node(&agent, &node, Some(token_hash(&token)))
            .await?;
        // Identities the node holds keep their claims (a registration
        // naming one is no update; `PUT /nodes/{id}/identities` is).
        let unheld: Vec<&IdentityBinding> = self.inner.shared.read(|v| {
            identities
                .iter()
                .filter(|b| v.holder(&b.namespace, &b.subject) != Some(id.as_str()))
                .collect()
        });
        for binding in unheld {
            self.bind(&agent, binding).await?;
        }
        Ok(AuthResponse {
            id: node.id,
            name: node.name,
            token,
        })
    }

    /// Binds `binding` to `node` unless it holds it already as given.
    async fn bind(&self, node: &AgentId, binding: &IdentityBinding) -> Result<(), IoaError> {
        let same = self
            .inner
            .shared
            .read(|v| v.held(node.as_str(), &binding.namespace, &binding.subject) == Some(binding));
        if !same {
            let outgoing = records::identity(node, binding, false);
            self.write(&self.inner.topology.registry, outgoing).await?;
        }
        Ok(())
    }

    /// `GET /identities?namespace=&subject=`: the node holding an identity.
    pub(crate) fn resolve_identity(
        &self,
        namespace: &str,
        subject: &str,
    ) -> Result<NodeOut, IoaError> {
        identity_args(namespace, subject)?;
        self.inner
            .shared
            .read(|v| v.holder(namespace, subject).and_then(|id| v.shown(id)))
            .ok_or_else(|| {
                IoaError::NotFound(format!("no node holds identity '{namespace}'/'{subject}'"))
            })
    }

    /// `PUT /nodes/{id}/identities`: the caller binds an identity to itself,
    /// or gives one it holds new claims.
    pub(crate) async fn bind_identity(
        &self,
        caller: &str,
        node: &str,
        binding: IdentityBinding,
    ) -> Result<NodeOut, IoaError> {
        own_node(caller, node, CHANGE_IDENTITIES)?;
        let binding = binding.normalized().map_err(IoaError::InvalidInput)?;
        let agent = node_id(node)?;
        let _one_at_a_time = self.inner.registering.lock().await;
        let holder = self.inner.shared.read(|v| {
            v.holder(&binding.namespace, &binding.subject)
                .map(str::to_owned)
        });
        if let Some(holder) = holder.filter(|h| h != node) {
            return Err(IoaError::InvalidInput(format!(
                "identity '{}'/'{}' is bound to node '{holder}'; it can be bound to another node once '{holder}' unbinds it",
                binding.namespace, binding.subject
            )));
        }
        self.bind(&agent, &binding).await?;
        self.node(node)
    }

    /// `DELETE /nodes/{id}/identities?namespace=&subject=`: the caller gives
    /// up an identity it holds.
    pub(crate) async fn unbind_identity(
        &self,
        caller: &str,
        node: &str,
        namespace: &str,
        subject: &str,
    ) -> Result<NodeOut, IoaError> {
        own_node(caller, node, CHANGE_IDENTITIES)?;
        identity_args(namespace, subject)?;
        let agent = node_id(node)?;
        let _one_at_a_time = self.inner.registering.lock().await;
        let Some(binding) = self
            .inner
            .shared
            .read(|v| v.held(node, namespace, subject).cloned())
        else {
            return Err(IoaError::NotFound(format!(
                "node '{node}' holds no identity '{namespace}'/'{subject}'"
            )));
        };
        let outgoing = records::identity(&agent, &binding, true);
        self.write(&self.inner.topology.registry, outgoing).await?;
        self.node(node)
    }

    /// Registers a new caller named with the access key, with no token
    /// (it gets one from `POST /auth/register` when it wants one).
    async fn register_caller(&self, node: &str) -> Result<(), IoaError> {
        let agent = node_id(node)?;
        let out = NodeOut {
            id: node.to_owned(),
            name: node.to_owned(),
            description: String::new(),
            meta: serde_json::Map::new(),
            identities: Vec::new(),
        };
        self.write_node(&agent, &out, None).await
    }

    /// `POST /nodes`: registers a node without a token; an existing name
    /// answers with the node as it is.
    pub(crate) async fn register_node(&self, body: NodeCreate) -> Result<NodeOut, IoaError> {
        let name = body.name.unwrap_or_default();
        if name.trim().is_empty() {
            return Err(IoaError::InvalidInput("name is required".into()));
        }
        let agent = node_id(&name)?;
        if let Some(node) = self.inner.shared.read(|v| v.shown(&name)) {
            return Ok(node);
        }
        let node = NodeOut {
            id: name.clone(),
            name,
            description: body.description.unwrap_or_default(),
            meta: body.meta.unwrap_or_default(),
            identities: Vec::new(),
        };
        self.write_node(&agent, &node, None).await?;
        Ok(self
            .inner
            .shared
            .read(|v| v.shown(&node.id))
            .unwrap_or(node))
    }

    async fn write_node(
        &self,
        agent: &AgentId,
        node: &NodeOut,
        token_sha256: Option<String>,
    ) -> Result<(), IoaError> {
        let body = NodeRecord {
            id: node.id.clone(),
            name: node.name.clone(),
            description: node.description.clone(),
            meta: node.meta.clone(),
            token_sha256,
        };
        let outgoing = records::node(agent, &body);
        self.write(&self.inner.topology.registry, outgoing).await?;
        Ok(())
    }

    /// Appends a record and waits until it has been read back.
    async fn write(
        &self,
        topic: &crate::log::TopicInfo,
        outgoing: crate::Outgoing,
    ) -> Result<RecordId, IoaError> {
        let sent = self.inner.producer.publish_one(topic, outgoing).await?;
        // Every record this bridge writes is an event or a status, which have ids.
        let id = sent.record.unwrap_or(RecordId::from_u128(0));
        self.read_back(id).await?;
        Ok(id)
    }

    /// The node a bearer token belongs to.
    pub(crate) fn resolve_token(&self, token: &str) -> Option<String> {
        let hash = token_hash(token);
        self.inner
            .shared
            .read(|v| v.token_node(&hash).map(|n| n.id.clone()))
    }

    /// `GET /nodes`.
    pub(crate) fn nodes(&self) -> Vec<NodeOut> {
        self.inner.shared.read(View::nodes)
    }

    /// `GET /nodes/{id}`.
    pub(crate) fn node(&self, id: &str) -> Result<NodeOut, IoaError> {
        self.inner
            .shared
            .read(|v| v.shown(id))
            .ok_or_else(|| IoaError::NotFound(format!("Node '{id}' not found")))
    }

    /// `POST /spaces` and `ioa_space`: creates the space unless it exists
    /// (by name) and makes the caller a member with this description; a
    /// new caller named with the access key is registered first.
    pub(crate) async fn join(
        &self,
        caller: &Caller,
        mut body: SpaceCreate,
    ) -> Result<SpaceInfo, IoaError> {
        let (node, new, fallback) = self.inner.shared.read(|v| {
            let (node, new) = caller_node(v, caller)?;
            let fallback = v.node(&node).map(|n| n.description.clone());
            Ok::<_, IoaError>((node, new, fallback.unwrap_or_default()))
        })?;
        if body.name.trim().is_empty() {
            return Err(IoaError::InvalidInput("Space name is required".into()));
        }
        if body.description.trim().is_empty() {
            body.description = fallback;
        }
        if body.description.trim().is_empty() {
            return Err(IoaError::InvalidInput(
                "Space description is required".into(),
            ));
        }
        body.tags = normalize_tags(&body.tags);
        if new {
            self.register_caller(&node).await?;
        }
        let space = space_conversation(&body.name);
        let unchanged = self.inner.shared.read(|v| {
            v.space_of(&space).is_some_and(|s| {
                s.members.get(&node) == Some(&body.description)
                    && body.tags.iter().all(|t| s.tags.contains(t))
            })
        });
        // Joining again with nothing new writes nothing.
        if !unchanged {
            let agent = node_id(&node)?;
            let outgoing = records::join(&agent, &body);
            self.write(&self.inner.topology.commands, outgoing).await?;
        }
        self.inner.shared.read(|v| {
            v.space_of(&space)
                .map(|s| v.space_info(s))
                .ok_or_else(|| space_not_found(&space.to_string()))
        })
    }

    /// `ioa_space`: the space joined, with its root messages.
    pub(crate) async fn join_with_roots(
        &self,
        caller: &Caller,
        body: SpaceCreate,
    ) -> Result<SpaceWithRoots, IoaError> {
        let info = self.join(caller, body).await?;
        let start_messages = self.read(&info.id, None, ReadOptions::default())?;
        Ok(SpaceWithRoots {
            info,
            start_messages,
        })
    }

    /// `GET /spaces`.
    pub(crate) fn spaces(&self) -> Vec<SpaceInfo> {
        self.inner
            .shared
            .read(|v| v.spaces().into_iter().map(|s| v.space_info(s)).collect())
    }

    /// `GET /spaces/{id}`.
    pub(crate) fn space(&self, id: &str) -> Result<SpaceInfo, IoaError> {
        self.inner.shared.read(|v| {
            v.space(id)
                .map(|s| v.space_info(s))
                .ok_or_else(|| space_not_found(id))
        })
    }

    /// `POST /spaces/{id}/messages` and `ioa_send`: `body` is the
    /// `SendMessage` JSON, which becomes the record's body unchanged; a new
    /// sender named with the access key is registered first.
    pub(crate) async fn send(
        &self,
        space_id: &str,
        caller: &Caller,
        body: Vec<u8>,
    ) -> Result<MessageOut, IoaError> {
        // Refused before anything is stored: every read including it would
        // break ordinary JSON clients.
        if too_deep(&body) {
            return Err(IoaError::InvalidInput(too_deep_error()));
        }
        let request: SendMessage = serde_json::from_slice(&body)
            .map_err(|e| IoaError::InvalidInput(format!("invalid message: {e}")))?;
        let (space, (sender, new), refs, first_at) = self.inner.shared.read(|v| {
            let space = v.space(space_id).ok_or_else(|| space_not_found(space_id))?;
            let sender = caller_node(v, caller)?;
            let Some(content) = &request.content else {
                return Err(IoaError::InvalidInput("content is required".into()));
            };
            if !is_object(content) {
                return Err(IoaError::InvalidInput(
                    "content must be a JSON object".into(),
                ));
            }
            if request.meta.as_deref().is_some_and(|m| !is_object(m)) {
                return Err(IoaError::InvalidInput("meta must be a JSON object".into()));
            }
            let refs = Refs::complete(request.refs.as_ref());
            let first_at = check_refs(v, space, &refs)?;
            Ok((space.id, sender, refs, first_at))
        })?;
        if let Some(schema) = &request.content_schema {
            check_schema(schema)?;
        }
        if new {
            self.register_caller(&sender).await?;
        }
        let agent = node_id(&sender)?;
        let outgoing = records::message(space, &agent, body, &refs, first_at);
        let id = self.write(&self.inner.topology.commands, outgoing).await?;
        self.inner.shared.read(|v| {
            v.message(&id.to_string())
                .map(|(_, _, m)| message_out(m))
                .ok_or_else(|| IoaError::NotReadBack(id, self.inner.config.read_back))
        })
    }

    /// `GET /spaces/{id}/messages` and `ioa_read`.
    pub(crate) fn read(
        &self,
        space_id: &str,
        caller: Option<&str>,
        options: ReadOptions,
    ) -> Result<Vec<MessageOut>, IoaError> {
        self.inner.shared.read(|v| {
            let (space, mode, after) = read_mode(v, space_id, caller, &options)?;
            let selected = v.select(space, &mode, 0);
            Ok(window(selected, after, options.limit)
                .iter()
                .map(|m| message_out(m))
                .collect())
        })
    }

    /// `GET /nodes/{id}/inbox`: what is addressed to the node (or broadcast)
    /// in every space it joined, spaces by id, each in log order; for the
    /// node itself only.
    pub(crate) fn inbox(
        &self,
        caller: &str,
        node: &str,
        after: &str,
        limit: Option<usize>,
    ) -> Result<Vec<MessageOut>, IoaError> {
        self.inner.shared.read(|v| {
            if v.node(node).is_none() {
                return Err(IoaError::NotFound(format!("Node '{node}' not found")));
            }
            own_node(caller, node, READ_INBOX)?;
            let all: Vec<_> = v
                .spaces_of(node)
                .into_iter()
                .flat_map(|s| s.messages.iter().cloned())
                .collect();
            let cursor = position_of(&all, after);
            if !after.is_empty() && cursor.is_none() {
                return Ok(Vec::new());
            }
            let selected = all
                .into_iter()
                .enumerate()
                .filter(|(_, m)| addressed_to(m, node))
                .collect();
            Ok(window(selected, cursor, limit)
                .iter()
                .map(|m| message_out(m))
                .collect())
        })
    }

    /// `GET /messages`: messages across spaces, in log time order, filtered.
    pub(crate) fn list_messages(
        &self,
        filter: &MessageFilter,
    ) -> Result<Vec<MessageOut>, IoaError> {
        self.inner.shared.read(|v| {
            check_filter(v, filter)?;
            let space = v.space(&filter.space_id).map(|s| s.id);
            let base: Vec<_> = v
                .all_messages()
                .into_iter()
                .filter(|m| {
                    (filter.space_id.is_empty() || space == Some(m.space))
                        && (filter.message_id.is_empty()
                            || m.id.to_string().eq_ignore_ascii_case(&filter.message_id))
                        && (filter.sender.is_empty() || m.sender == filter.sender)
                })
                .collect();
            let cursor = position_of(&base, &filter.after);
            if !filter.after.is_empty() && cursor.is_none() {
                return Ok(Vec::new());
            }
            let has = |list: &[String], want: &str| list.iter().any(|x| x == want);
            let selected = base
                .into_iter()
                .enumerate()
                .filter(|(_, m)| {
                    (filter.node_id.is_empty()
                        || m.sender == filter.node_id
                        || has(&m.refs.nodes, &filter.node_id))
                        && (filter.ref_message.is_empty()
                            || m.refs
                                .messages
                                .iter()
                                .any(|r| r.eq_ignore_ascii_case(&filter.ref_message)))
                        && (filter.ref_node.is_empty() || has(&m.refs.nodes, &filter.ref_node))
                })
                .collect();
            Ok(window(selected, cursor, filter.limit)
                .iter()
                .map(|m| message_out(m))
                .collect())
        })
    }

    /// Whether the log answers (the health checks).
    pub(crate) async fn ready(&self) -> Result<(), IoaError> {
        let topic = &self.inner.topology.commands;
        self.inner.log.last_offset(topic, 0).await?;
        Ok(())
    }
}

/// The mode, space and cursor of a space-scoped read, validated in the
/// reference's order.
pub(crate) fn read_mode<'v>(
    v: &'v View,
    space_id: &str,
    caller: Option<&str>,
    options: &ReadOptions,
) -> Result<(&'v Space, Mode, Option<usize>), IoaError> {
    let space = v.space(space_id).ok_or_else(|| space_not_found(space_id))?;
    let after = match options.after.as_str() {
        "" => None,
        after => Some(v.index_in(space, after).ok_or_else(|| {
            IoaError::InvalidInput(format!("after: '{after}' not found in space '{space_id}'"))
        })?),
    };
    let mode = if !options.message_id.is_empty() {
        let id = &options.message_id;
        let Some((_, _, message)) = v.message(id).filter(|(s, _, _)| s.id == space.id) else {
            return Err(IoaError::NotFound(format!(
                "Message '{id}' not found in space '{space_id}'"
            )));
        };
        let direction = match options.direction.as_str() {
            "" => Direction::Both,
            "upstream" => Direction::Up,
            "downstream" => Direction::Down,
            _ => {
                return Err(IoaError::InvalidInput(
                    "direction must be 'upstream' or 'downstream'".into(),
                ));
            }
        };
        Mode::Related(message.id, direction)
    } else if options.all {
        Mode::All
    } else if let Some(caller) = caller.filter(|c| !c.is_empty()) {
        if v.node(caller).is_none() {
            return Err(IoaError::InvalidInput(format!(
                "caller node '{caller}' not found"
            )));
        }
        Mode::For(caller.to_owned())
    } else {
        Mode::Roots
    };
    Ok((space, mode, after))
}

/// `refs` must name messages of this space and registered nodes; the
/// position of the first parent, for `cause_at`.
fn check_refs(
    v: &View,
    space: &Space,
    refs: &Refs,
) -> Result<Option<agdx_wire::LogPosition>, IoaError> {
    let mut first_at = None;
    for (i, id) in refs.messages.iter().enumerate() {
        let Some(index) = v.index_in(space, id) else {
            return Err(IoaError::InvalidInput(format!(
                "refs.messages: '{id}' not found in space '{}'",
                space.id
            )));
        };
        if i == 0 {
            first_at = Some(space.messages[index].position);
        }
    }
    if refs.messages.len() > MAX_PARENTS {
        return Err(IoaError::InvalidInput(format!(
            "refs.messages: {} parents, at most {MAX_PARENTS} on this server (the parents after the first are envelope metadata, which is capped); merge in two steps",
            refs.messages.len()
        )));
    }
    for id in &refs.nodes {
        if v.node(id).is_none() {
            return Err(IoaError::InvalidInput(format!(
                "refs.nodes: '{id}' not found"
            )));
        }
    }
    Ok(first_at)
}

/// A `content_schema` must compile as a JSON Schema (it is stored, not
/// applied to any content).
fn check_schema(schema: &serde_json::value::RawValue) -> Result<(), IoaError> {
    let invalid = |e: &dyn std::fmt::Display| {
        IoaError::InvalidInput(format!("content_schema is not valid JSON Schema: {e}"))
    };
    if !is_object(schema) {
        return Err(IoaError::InvalidInput(
            "content_schema must be a JSON object".into(),
        ));
    }
    let value: Value = serde_json::from_str(schema.get()).map_err(|e| invalid(&e))?;
    jsonschema::validator_for(&value).map_err(|e| invalid(&e))?;
    Ok(())
}

fn position_of(list: &[std::sync::Arc<records::StoredMessage>], id: &str) -> Option<usize> {
    if id.is_empty() {
        return None;
    }
    let id: RecordId = id.parse().ok()?;
    list.iter().position(|m| m.id == id)
}

/// The filters of `GET /messages` must name what exists.
fn check_filter(v: &View, filter: &MessageFilter) -> Result<(), IoaError> {
    let space = match filter.space_id.as_str() {
        "" => None,
        id => Some(v.space(id).ok_or_else(|| space_not_found(id))?),
    };
    for (field, node) in [
        ("node_id", &filter.node_id),
        ("sender", &filter.sender),
        ("ref_node", &filter.ref_node),
    ] {
        if !node.is_empty() && v.node(node).is_none() {
            return Err(IoaError::NotFound(format!(
                "{field}: node '{node}' not found"
            )));
        }
    }
    let exists = |id: &str| {
        v.message(id)
            .is_some_and(|(s, _, _)| space.is_none_or(|space| space.id == s.id))
    };
    if !filter.message_id.is_empty() && !exists(&filter.message_id) {
        return Err(IoaError::NotFound(format!(
            "Message '{}' not found",
            filter.message_id
        )));
    }
    if !filter.ref_message.is_empty() && !exists(&filter.ref_message) {
        return Err(IoaError::InvalidInput(format!(
            "ref_message: '{}' not found",
            filter.ref_message
        )));
    }
    if !filter.after.is_empty() && !exists(&filter.after) {
        return Err(IoaError::InvalidInput(format!(
            "after: '{}' not found",
            filter.after
        )));
    }
    Ok(())
}
