//! IOA's JSON shapes: what clients send and what the bridge answers, field
//! for field as the reference server (`protocols/models.go`) writes them.
//!
//! Requests are decoded strictly, like the reference (an unknown field is
//! refused). A message's `content`, `meta` and `content_schema` are kept as
//! the client's own bytes ([`RawValue`]) from the request to the log and
//! back, so what a reader gets is byte for byte what the sender wrote.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use agdx_wire::ConversationId;

/// `POST /auth/register`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct AuthRegister {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub access_key: Option<String>,
    #[serde(default)]
    pub meta: Option<Map<String, Value>>,
    /// Identities from other systems to bind to the node; one already bound
    /// to a node makes the registration answer that node.
    #[serde(default)]
    pub identities: Option<Vec<IdentityBinding>>,
}

/// An identity another system owns, bound to one node: `(namespace,
/// subject)` names at most one node on the whole log. `claims` are the
/// owning system's descriptive, non-secret data.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct IdentityBinding {
    #[serde(default)]
    pub namespace: String,
    #[serde(default)]
    pub subject: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claims: Option<Map<String, Value>>,
}

impl IdentityBinding {
    /// The binding as it is kept: namespace and subject trimmed (both
    /// required), empty claims dropped.
    pub fn normalized(mut self) -> Result<Self, String> {
        self.namespace = self.namespace.trim().to_owned();
        self.subject = self.subject.trim().to_owned();
        if self.namespace.is_empty() || self.subject.is_empty() {
            return Err("identity namespace and subject are required".into());
        }
        self.claims = self.claims.filter(|c| !c.is_empty());
        Ok(self)
    }

    /// Whether this is the identity `(namespace, subject)`.
    pub fn is(&self, namespace: &str, subject: &str) -> bool {
        self.namespace == namespace && self.subject == subject
    }
}

/// The answer to a registration: the node and its new bearer token.
#[derive(Debug, Serialize)]
pub(crate) struct AuthResponse {
    pub id: String,
    pub name: String,
    pub token: String,
}

/// `POST /nodes`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NodeCreate {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub meta: Option<Map<String, Value>>,
}

/// `POST /spaces` and the `ioa_space` tool; also the body of a join record.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SpaceCreate {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
}

/// `refs` as a client sends it: either array may be missing.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RefsIn {
    #[serde(default)]
    pub messages: Option<Vec<String>>,
    #[serde(default)]
    pub nodes: Option<Vec<String>>,
}

/// `POST /spaces/{id}/messages` and the `ioa_send` tool: exactly the body
/// of the message's record on the log.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refs: Option<RefsIn>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<Box<RawValue>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_schema: Option<Box<RawValue>>,
}

/// Both arrays of a message's refs, always present (empty when none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Refs {
    /// The messages this one refers to (its causal parents), in the order given.
    pub messages: Vec<String>,
    /// The nodes it is addressed to.
    pub nodes: Vec<String>,
}

impl Refs {
    /// Refs with IOA's defaults filled in.
    pub(crate) fn complete(refs: Option<&RefsIn>) -> Self {
        let refs = refs.cloned().unwrap_or_default();
        Refs {
            messages: refs.messages.unwrap_or_default(),
            nodes: refs.nodes.unwrap_or_default(),
        }
    }

    /// A message without any ref: a root, seen by every node of the space.
    pub fn is_broadcast(&self) -> bool {
        self.messages.is_empty() && self.nodes.is_empty()
    }
}

/// A node as IOA shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct NodeOut {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub description: String,
    pub meta: Map<String, Value>,
    /// The identities bound to the node, by namespace then subject.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub identities: Vec<IdentityBinding>,
}

/// A space as IOA shows it: its members and how many messages it holds.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SpaceInfo {
    pub id: String,
    pub name: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    pub nodes: Vec<NodeOut>,
    pub message_count: usize,
}

/// The `ioa_space` tool's answer: the space and its root messages.
#[derive(Debug, Serialize)]
pub(crate) struct SpaceWithRoots {
    #[serde(flatten)]
    pub info: SpaceInfo,
    pub start_messages: Vec<MessageOut>,
}

/// A message as IOA shows it.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct MessageOut {
    pub id: String,
    pub space_id: String,
    pub sender: String,
    pub created_at: String,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub content_type: String,
    pub content: Box<RawValue>,
    pub refs: Refs,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub meta: Option<Box<RawValue>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content_schema: Option<Box<RawValue>>,
}

/// IOA's error body.
#[derive(Debug, Serialize)]
pub(crate) struct ErrorResponse {
    pub detail: String,
}

/// The conversation of the space named `name`: the first 16 bytes of
/// SHA-256 over `ioa.space:` and the name. The same name gives the same
/// space on every bridge and after every restart (IOA spaces are
/// idempotent by name), and all of its records share one partition.
///
/// ```
/// use agdx::bridge::ioa::space_conversation;
/// assert_eq!(space_conversation("ops"), space_conversation("ops"));
/// assert_ne!(space_conversation("ops"), space_conversation("Ops"));
/// ```
pub fn space_conversation(name: &str) -> ConversationId {
    let digest = Sha256::new()
        .chain_update(b"ioa.space:")
        .chain_update(name.as_bytes())
        .finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    ConversationId::from_u128(u128::from_be_bytes(first))
}

/// The conversation of the identity `(namespace, subject)`: every record
/// binding or unbinding it shares one partition, so which node holds it is
/// decided by their order there, the same on every bridge.
pub(crate) fn identity_conversation(namespace: &str, subject: &str) -> ConversationId {
    let digest = Sha256::new()
        .chain_update(b"ioa.identity:")
        .chain_update(namespace.as_bytes())
        .chain_update([0u8])
        .chain_update(subject.as_bytes())
        .finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    ConversationId::from_u128(u128::from_be_bytes(first))
}

/// Tags as IOA keeps them: trimmed, without empties, first occurrence wins.
pub(crate) fn normalize_tags<'a>(tags: impl IntoIterator<Item = &'a String>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for tag in tags {
        let tag = tag.trim();
        if !tag.is_empty() && !out.iter().any(|t| t == tag) {
            out.push(tag.to_owned());
        }
    }
    out
}

/// The deepest nesting of objects and arrays a JSON body may have (the body
/// itself is the first level). Any answer that includes such a body (a
/// message in a list, say) stays within the 128 levels serde_json's parser
/// takes by default, below Python's and Go's limits (about 1,000 and
/// 10,000): what one client stores, every ordinary client can read.
pub const MAX_JSON_DEPTH: usize = 64;

/// Whether the JSON text `bytes` nests objects and arrays deeper than
/// [`MAX_JSON_DEPTH`]; counted without recursion, so any depth is cheap to
/// refuse.
pub(crate) fn too_deep(bytes: &[u8]) -> bool {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &byte in bytes {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_JSON_DEPTH {
                    return true;
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    false
}

/// The refusal of a body [`too_deep`] finds.
pub(crate) fn too_deep_error() -> String {
    format!(
        "the JSON nests objects and arrays more than {MAX_JSON_DEPTH} levels deep, which many JSON clients cannot read back; send it flatter"
    )
}

/// Whether a raw JSON value is an object (IOA's `content`, `meta` and
/// `content_schema` must be).
pub(crate) fn is_object(raw: &RawValue) -> bool {
    raw.get().starts_with('{')
}

/// Whether a raw JSON value is `{}` (with any inner whitespace).
pub(crate) fn is_empty_object(raw: &RawValue) -> bool {
    is_object(raw) && raw.get()[1..raw.get().len() - 1].trim().is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_keeps_the_senders_bytes() {
        let body = br#"{"content": {"b": 1,  "a": [2, 1]}, "refs": {"nodes": ["x"]}}"#;
        let message: SendMessage = serde_json::from_slice(body).expect("a message");
        assert_eq!(
            message.content.as_deref().map(RawValue::get),
            Some(r#"{"b": 1,  "a": [2, 1]}"#)
        );
        assert_eq!(
            Refs::complete(message.refs.as_ref()),
            Refs {
                messages: vec![],
                nodes: vec!["x".into()]
            }
        );
    }

    #[test]
    fn unknown_fields_and_trailing_values_are_refused() {
        assert!(serde_json::from_slice::<SendMessage>(br#"{"content":{},"x":1}"#).is_err());
        assert!(serde_json::from_slice::<SendMessage>(br#"{"content":{}} {}"#).is_err());
        assert!(
            serde_json::from_slice::<SendMessage>(br#"{"refs":{"messages":[],"x":[]}}"#).is_err()
        );
    }

    #[test]
    fn nesting_is_counted_outside_strings_only() {
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(!too_deep(deep(MAX_JSON_DEPTH).as_bytes()));
        assert!(too_deep(deep(MAX_JSON_DEPTH + 1).as_bytes()));
        let quoted = format!(r#"{{"a":"{}\"{}"}}"#, "{".repeat(100), "[".repeat(100));
        assert!(
            !too_deep(quoted.as_bytes()),
            "brackets in strings do not nest"
        );
        let unbalanced = "]".repeat(100) + &deep(MAX_JSON_DEPTH + 1);
        assert!(
            too_deep(unbalanced.as_bytes()),
            "closing first never hides depth"
        );
    }

    #[test]
    fn null_content_reads_as_absent_and_empty_objects_are_recognised() {
        let message: SendMessage =
            serde_json::from_slice(br#"{"content": null, "meta": { }}"#).expect("a message");
        assert!(message.content.is_none());
        assert!(message.meta.as_deref().is_some_and(is_empty_object));
        let tags = [
            "a".to_owned(),
            " b ".to_owned(),
            "a".to_owned(),
            " ".to_owned(),
        ];
        assert_eq!(normalize_tags(&tags), ["a", "b"]);
    }
}
