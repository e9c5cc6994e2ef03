//! The A2A v1 JSON shapes this bridge reads and writes (the protobuf JSON
//! mapping: camelCase fields, `TASK_STATE_*` and `ROLE_*` enum names, parts
//! as `{"text"}`, `{"data"}` or `{"raw"}`), and how they map to AGDX.

use std::str::FromStr;

use agdx_wire::{ContentType, ConversationId, CorrelationId, Metadata, Scalar, TaskState};
use base64::Engine;
use serde_json::{Map, Value, json};

use super::error::A2aError;

/// The metadata key (text) that keeps the client's own context id when it
/// is not a conversation id, so a task read back names it again.
pub const META_CONTEXT_ID: &str = "a2a.context_id";

/// The id of the one artifact a task's reply becomes.
pub const REPLY_ARTIFACT: &str = "reply";

/// A task's id: the conversation and the command's correlation, joined by
/// a dot, so the task can be read back from the log (the conversation
/// names the partitions) by any bridge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskId {
    /// The conversation (the A2A context).
    pub conversation: ConversationId,
    /// The command's correlation.
    pub correlation: CorrelationId,
}

impl std::fmt::Display for TaskId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}", self.conversation, self.correlation)
    }
}

impl FromStr for TaskId {
    type Err = A2aError;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let not_found = || A2aError::TaskNotFound(text.to_owned());
        let (conversation, correlation) = text.split_once('.').ok_or_else(not_found)?;
        Ok(TaskId {
            conversation: conversation.parse().map_err(|_| not_found())?,
            correlation: correlation.parse().map_err(|_| not_found())?,
        })
    }
}

/// The conversation an A2A context id maps to: the id itself when it is a
/// conversation id, else one derived from its text (the same on every
/// bridge, so a context stays one conversation).
pub fn context_conversation(context: &str) -> ConversationId {
    if let Ok(conversation) = ConversationId::from_str(context) {
        return conversation;
    }
    let digest = xxhash_rust::xxh3::xxh3_128(format!("a2a.context:{context}").as_bytes());
    ConversationId::from_u128(digest)
}

/// The A2A name of an AGDX task state.
pub fn state_name(state: TaskState) -> &'static str {
    match state {
        TaskState::Submitted => "TASK_STATE_SUBMITTED",
        TaskState::Working => "TASK_STATE_WORKING",
        TaskState::InputRequired => "TASK_STATE_INPUT_REQUIRED",
        TaskState::Completed => "TASK_STATE_COMPLETED",
        TaskState::Canceled => "TASK_STATE_CANCELED",
        TaskState::Failed => "TASK_STATE_FAILED",
        TaskState::Rejected => "TASK_STATE_REJECTED",
        TaskState::AuthRequired => "TASK_STATE_AUTH_REQUIRED",
        _ => "TASK_STATE_UNSPECIFIED",
    }
}

/// The AGDX task state of an A2A state name (v1 or 0.3 spelling).
pub fn state_of(name: &str) -> Option<TaskState> {
    let plain = name
        .strip_prefix("TASK_STATE_")
        .unwrap_or(name)
        .to_ascii_lowercase()
        .replace('_', "-");
    plain.parse::<TaskState>().ok()
}

/// What an A2A message carries into a command.
#[derive(Debug, Clone, PartialEq)]
pub struct Inbound {
    /// The command body.
    pub body: Vec<u8>,
    /// Its codec.
    pub content_type: ContentType,
    /// The client's context id.
    pub context_id: Option<String>,
    /// The task the message continues.
    pub task_id: Option<String>,
    /// The skill asked for (`metadata.skill`).
    pub skill: Option<String>,
    /// The bridges it already passed (`metadata.bridge_hops`).
    pub hops: Metadata,
}

/// Reads `params.message`: text parts become one text body, a lone data
/// part a JSON body, a lone raw part its bytes. 0.3's `kind`-tagged parts
/// read the same.
pub fn inbound(params: &Value) -> Result<Inbound, A2aError> {
    let invalid = |why: &str| A2aError::InvalidParams(why.to_owned());
    let message = params
        .get("message")
        .and_then(Value::as_object)
        .ok_or_else(|| invalid("params.message is missing or not an object"))?;
    let parts = message
        .get("parts")
        .and_then(Value::as_array)
        .filter(|p| !p.is_empty())
        .ok_or_else(|| invalid("message.parts is missing or empty"))?;
    let (body, content_type) = body_of(parts)?;
    let text = |key: &str| {
        message
            .get(key)
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let metadata = message.get("metadata").and_then(Value::as_object);
    let skill = metadata
        .and_then(|m| m.get("skill"))
        .and_then(Value::as_str)
        .map(str::to_owned);
    let mut hops = Metadata::new();
    let carried = metadata
        .and_then(|m| m.get(agdx_wire::META_BRIDGE_HOPS))
        .and_then(Value::as_array);
    for hop in carried.into_iter().flatten() {
        let hop = hop
            .as_str()
            .ok_or_else(|| invalid("metadata.bridge_hops holds a value that is not text"))?;
        hops.push_bridge_hop(hop);
    }
    Ok(Inbound {
        body,
        content_type,
        context_id: text("contextId"),
        task_id: text("taskId"),
        skill,
        hops,
    })
}

fn body_of(parts: &[Value]) -> Result<(Vec<u8>, ContentType), A2aError> {
    let mut texts = Vec::new();
    for part in parts {
        if let Some(text) = part.get("text").and_then(Value::as_str) {
            texts.push(text);
            continue;
        }
        if parts.len() > 1 {
            return Err(A2aError::ContentType(
                "a message with several parts must be all text; send data or raw content as its only part".into(),
            ));
        }
        if let Some(data) = part.get("data") {
            // 0.3 wrapped the value as {"kind":"data","data":{...}}; v1 is the Value itself.
            return Ok((
                serde_json::to_vec(data).unwrap_or_default(),
                ContentType::Json,
            ));
        }
        // 0.3 carried bytes as a file part: {"kind":"file","file":{"bytes":...}}.
        let raw = part
            .get("raw")
            .or_else(|| part.get("file").and_then(|f| f.get("bytes")));
        if let Some(raw) = raw.and_then(Value::as_str) {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(raw)
                .map_err(|e| A2aError::InvalidParams(format!("part.raw is not base64: {e}")))?;
            return Ok((bytes, ContentType::Raw));
        }
        return Err(A2aError::ContentType(
            "only text, data and raw parts are carried (a url or file part is not fetched by the bridge)".into(),
        ));
    }
    Ok((texts.concat().into_bytes(), ContentType::Raw))
}

/// The A2A part a reply body becomes: JSON as a data part, UTF-8 as a text
/// part, anything else as raw bytes.
pub fn part_of(body: &[u8], content_type: ContentType) -> Value {
    if content_type == ContentType::Json
        && let Ok(data) = serde_json::from_slice::<Value>(body)
    {
        return json!({"data": data, "mediaType": "application/json"});
    }
    match std::str::from_utf8(body) {
        Ok(text) => json!({"text": text}),
        Err(_) => json!({
            "raw": base64::engine::general_purpose::STANDARD.encode(body),
            "mediaType": "application/octet-stream",
        }),
    }
}

/// An agent's message with one text part.
pub fn agent_message(task: &TaskId, context_id: &str, text: &str) -> Value {
    json!({
        "messageId": format!("{task}.{}", crate::new_record_id()),
        "contextId": context_id,
        "taskId": task.to_string(),
        "role": "ROLE_AGENT",
        "parts": [{"text": text}],
    })
}

/// A task's status object.
pub fn status(state: TaskState, message: Option<Value>, at_micros: u64) -> Value {
    let mut status = Map::new();
    status.insert("state".into(), state_name(state).into());
    if let Some(message) = message {
        status.insert("message".into(), message);
    }
    status.insert("timestamp".into(), timestamp(at_micros).into());
    Value::Object(status)
}

/// RFC 3339 time of epoch microseconds, as protobuf's Timestamp is written.
pub fn timestamp(micros: u64) -> String {
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(micros);
    humantime::format_rfc3339_micros(at).to_string()
}

/// The context id a command names: the client's own (kept in metadata)
/// or the conversation's.
pub fn context_id_of(metadata: Option<&Metadata>, conversation: ConversationId) -> String {
    metadata
        .and_then(|m| m.get(META_CONTEXT_ID))
        .and_then(Scalar::as_str)
        .map_or_else(|| conversation.to_string(), str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_id_round_trips_and_garbage_is_not_found() {
        let id = TaskId {
            conversation: crate::new_conversation_id(),
            correlation: crate::new_correlation_id(),
        };
        assert_eq!(id.to_string().parse::<TaskId>().unwrap(), id);
        let refused = "nope".parse::<TaskId>().unwrap_err();
        assert_eq!(refused.code(), -32001);
    }

    #[test]
    fn states_map_both_ways() {
        for state in [
            TaskState::Submitted,
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Completed,
            TaskState::Canceled,
            TaskState::Failed,
        ] {
            assert_eq!(state_of(state_name(state)), Some(state));
            assert_eq!(state_of(state.name()), Some(state), "0.3 spelling");
        }
        assert_eq!(
            state_name(TaskState::InputRequired),
            "TASK_STATE_INPUT_REQUIRED"
        );
    }

    #[test]
    fn parts_become_bodies_and_back() {
        let text = json!({"message": {"parts": [{"text": "hel"}, {"kind": "text", "text": "lo"}],
            "metadata": {"skill": "echo", "bridge_hops": ["ioa"]}, "contextId": "c1"}});
        let read = inbound(&text).unwrap();
        assert_eq!(read.body, b"hello");
        assert_eq!(read.skill.as_deref(), Some("echo"));
        assert!(read.hops.has_bridge_hop("ioa"));
        assert_eq!(read.context_id.as_deref(), Some("c1"));
        let data = json!({"message": {"parts": [{"data": {"a": 1}}]}});
        let read = inbound(&data).unwrap();
        assert_eq!(
            (read.body, read.content_type),
            (br#"{"a":1}"#.to_vec(), ContentType::Json)
        );
        let url = json!({"message": {"parts": [{"url": "http://x"}]}});
        assert_eq!(inbound(&url).unwrap_err().code(), -32005);
        assert_eq!(inbound(&json!({})).unwrap_err().code(), -32602);
        assert_eq!(part_of(b"hi", ContentType::Raw), json!({"text": "hi"}));
        assert_eq!(
            part_of(br#"{"a":1}"#, ContentType::Json)["data"],
            json!({"a": 1})
        );
        assert!(part_of(&[0xff], ContentType::Raw)["raw"].is_string());
    }

    #[test]
    fn a_foreign_context_is_one_conversation_everywhere() {
        assert_eq!(context_conversation("ctx-1"), context_conversation("ctx-1"));
        assert_ne!(context_conversation("ctx-1"), context_conversation("ctx-2"));
        let conversation = crate::new_conversation_id();
        assert_eq!(
            context_conversation(&conversation.to_string()),
            conversation
        );
    }
}
