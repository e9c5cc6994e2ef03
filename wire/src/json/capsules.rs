//! The JSON views of the capsules.

use std::collections::BTreeMap;

use serde_json::Value;

use super::JsonCodec;
use super::error::JsonError;
use super::scalar::{DictJson, metadata_from, metadata_json};
use super::value::{
    Fields, Obj, boolean, bytes_from, bytes_json, hex_from, hex_json, nested_from, nested_json,
    parse, show, text, uint,
};
use crate::agent_id::AgentId;
use crate::body_ref::BodyRef;
use crate::card::{AgentCard, CapabilityDescriptor, ContentRef};
use crate::dead_letter::DeadLetter;
use crate::dictionary::ContentType;
use crate::envelope::AgentEnvelope;
use crate::error_body::ErrorBody;
use crate::id::ConversationId;
use crate::position::LogPosition;
use crate::presence::AgentPresence;
use crate::signature::{Signature, SignatureContext};
use crate::snapshot::FoldSnapshot;
use crate::usage::TokenUsage;

impl JsonCodec for TokenUsage {
    fn to_json(&self) -> Value {
        Obj::default()
            .put("input_tokens", self.input_tokens)
            .put("output_tokens", self.output_tokens)
            .opt(
                "reasoning_output_tokens",
                self.reasoning_output_tokens,
                Value::from,
            )
            .opt(
                "cache_read_input_tokens",
                self.cache_read_input_tokens,
                Value::from,
            )
            .opt(
                "cache_creation_input_tokens",
                self.cache_creation_input_tokens,
                Value::from,
            )
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("usage", json)?;
        let usage = TokenUsage {
            input_tokens: f.req_map("input_tokens", uint)?,
            output_tokens: f.req_map("output_tokens", uint)?,
            reasoning_output_tokens: f.map("reasoning_output_tokens", uint)?,
            cache_read_input_tokens: f.map("cache_read_input_tokens", uint)?,
            cache_creation_input_tokens: f.map("cache_creation_input_tokens", uint)?,
        };
        f.finish()?;
        Ok(usage)
    }
}

impl JsonCodec for SignatureContext {
    fn to_json(&self) -> Value {
        Obj::default()
            .opt("content_type", self.content_type, DictJson::to_json)
            .opt("agent_version", self.agent_version, |v| {
                Value::from(u64::from(v))
            })
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("signature context", json)?;
        let ctx = SignatureContext {
            content_type: f.map("content_type", DictJson::from_json)?,
            agent_version: f.map("agent_version", uint)?,
        };
        f.finish()?;
        Ok(ctx)
    }
}

impl JsonCodec for Signature {
    fn to_json(&self) -> Value {
        Obj::default()
            .put("scheme", self.scheme.to_json())
            .put("key_id", hex_json(&self.key_id))
            .put("bytes", hex_json(&self.bytes))
            .opt("context", self.context.as_ref(), JsonCodec::to_json)
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("signature", json)?;
        let sig = Signature {
            scheme: f.req_map("scheme", DictJson::from_json)?,
            key_id: f.req_map("key_id", hex_from)?,
            bytes: f.req_map("bytes", hex_from)?,
            context: f.map("context", SignatureContext::from_json)?,
        };
        f.finish()?;
        Ok(sig)
    }
}

impl JsonCodec for ErrorBody {
    fn to_json(&self) -> Value {
        Obj::default()
            .put("code", self.code.to_json())
            .opt("message", self.message.clone(), Value::from)
            .put("retryable", self.retryable)
            .opt("detail", self.detail.as_ref(), metadata_json)
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("error body", json)?;
        let body = ErrorBody {
            code: f.req_map("code", DictJson::from_json)?,
            message: f.map("message", text)?,
            retryable: f.map("retryable", boolean)?.unwrap_or(false),
            detail: f.map("detail", metadata_from)?,
        };
        f.finish()?;
        Ok(body)
    }
}

impl JsonCodec for BodyRef {
    fn to_json(&self) -> Value {
        Obj::default()
            .put("reference", self.reference.clone())
            .put("size_bytes", self.size_bytes)
            .put("sha256", hex_json(&self.sha256))
            .opt("encryption", self.encryption, |e| Value::from(u64::from(e)))
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("body ref", json)?;
        let sha = f.req_map("sha256", hex_from)?;
        let body_ref = BodyRef {
            reference: f.req_map("reference", text)?,
            size_bytes: f.req_map("size_bytes", uint)?,
            sha256: sha.as_slice().try_into().map_err(|_| {
                JsonError::Invalid(format!("`sha256` must be 32 bytes, got {}", sha.len()))
            })?,
            encryption: f.map("encryption", uint)?,
        };
        f.finish()?;
        Ok(body_ref)
    }
}

impl JsonCodec for DeadLetter {
    fn to_json(&self) -> Value {
        Obj::default()
            .put("source", show(self.source))
            .put("reason", self.reason.to_json())
            .put("attempts", u64::from(self.attempts))
            .opt("detail", self.detail.clone(), Value::from)
            .put("payload", nested_json::<AgentEnvelope>(&self.payload))
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("dead letter", json)?;
        let dl = DeadLetter {
            source: f.req_map("source", parse::<LogPosition>)?,
            reason: f.req_map("reason", DictJson::from_json)?,
            attempts: f.req_map("attempts", uint)?,
            detail: f.map("detail", text)?,
            payload: f.req_map("payload", nested_from::<AgentEnvelope>)?,
        };
        f.finish()?;
        Ok(dl)
    }
}

fn content_ref_json(c: &ContentRef) -> Value {
    match c {
        ContentRef::ContentType(ct) => Obj::default().put("content_type", ct.name()).done(),
        ContentRef::Schema(id) => Obj::default().put("schema_id", id.clone()).done(),
    }
}

fn content_ref_from(json: Value) -> Result<ContentRef, JsonError> {
    let mut f = Fields::new("content ref", json)?;
    let r = match (
        f.map("content_type", parse::<ContentType>)?,
        f.map("schema_id", text)?,
    ) {
        (Some(ct), None) => ContentRef::ContentType(ct),
        (None, Some(id)) => ContentRef::Schema(id),
        _ => {
            return Err(JsonError::Invalid(
                "a content ref is {\"content_type\": NAME} or {\"schema_id\": TEXT}".into(),
            ));
        }
    };
    f.finish()?;
    Ok(r)
}

fn capability_json(c: &CapabilityDescriptor) -> Value {
    Obj::default()
        .put("skill_id", c.skill_id.clone())
        .opt("input", c.input.as_ref(), content_ref_json)
        .opt("output", c.output.as_ref(), content_ref_json)
        .opt("cost_class", c.cost_class, |v| Value::from(u64::from(v)))
        .opt("latency_class", c.latency_class, |v| {
            Value::from(u64::from(v))
        })
        .opt("max_concurrency", c.max_concurrency, |v| {
            Value::from(u64::from(v))
        })
        .opt("health", c.health, DictJson::to_json)
        .opt("load", c.load, |v| Value::from(u64::from(v)))
        .done()
}

fn capability_from(json: Value) -> Result<CapabilityDescriptor, JsonError> {
    let mut f = Fields::new("capability", json)?;
    let c = CapabilityDescriptor {
        skill_id: f.req_map("skill_id", text)?,
        input: f.map("input", content_ref_from)?,
        output: f.map("output", content_ref_from)?,
        cost_class: f.map("cost_class", uint)?,
        latency_class: f.map("latency_class", uint)?,
        max_concurrency: f.map("max_concurrency", uint)?,
        health: f.map("health", DictJson::from_json)?,
        load: f.map("load", uint)?,
    };
    f.finish()?;
    Ok(c)
}

impl JsonCodec for AgentCard {
    fn to_json(&self) -> Value {
        let caps = (!self.capabilities.is_empty()).then_some(&self.capabilities);
        Obj::default()
            .opt("name", self.name.clone(), Value::from)
            .opt("version", self.version.clone(), Value::from)
            .opt("capabilities", caps, |c| {
                Value::Array(c.iter().map(capability_json).collect())
            })
            .opt("ttl_micros", self.ttl_micros, Value::from)
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("agent card", json)?;
        let card = AgentCard {
            name: f.map("name", text)?,
            version: f.map("version", text)?,
            capabilities: f
                .map("capabilities", |j| match j {
                    Value::Array(items) => items.into_iter().map(capability_from).collect(),
                    _ => Err(JsonError::Expected("an array")),
                })?
                .unwrap_or_default(),
            ttl_micros: f.map("ttl_micros", uint)?,
        };
        f.finish()?;
        Ok(card)
    }
}

impl JsonCodec for AgentPresence {
    fn to_json(&self) -> Value {
        Obj::default()
            .put("v", u64::from(self.version))
            .put("agent", self.agent.as_str())
            .opt("inbox", self.inbox.clone(), Value::from)
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("agent presence", json)?;
        let p = AgentPresence {
            version: f.req_map("v", uint)?,
            agent: f.req_map("agent", parse::<AgentId>)?,
            inbox: f.map("inbox", text)?,
        };
        f.finish()?;
        Ok(p)
    }
}

impl JsonCodec for FoldSnapshot {
    fn to_json(&self) -> Value {
        let as_of = self
            .as_of
            .iter()
            .map(|(p, o)| (p.to_string(), Value::from(*o)))
            .collect();
        Obj::default()
            .put("conversation", show(self.conversation))
            .put("as_of", Value::Object(as_of))
            .put("state", bytes_json(&self.state))
            .done()
    }
    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("fold snapshot", json)?;
        let as_of = f.req_map("as_of", |j| match j {
            Value::Object(entries) => entries
                .into_iter()
                .map(|(p, o)| {
                    let partition = p
                        .parse::<u32>()
                        .map_err(|_| JsonError::Invalid(format!("partition {p:?} is not a u32")))?;
                    Ok((partition, uint(o)?))
                })
                .collect::<Result<BTreeMap<_, _>, JsonError>>(),
            _ => Err(JsonError::Expected("an object of partition -> offset")),
        })?;
        let s = FoldSnapshot {
            conversation: f.req_map("conversation", parse::<ConversationId>)?,
            as_of,
            state: f.req_map("state", bytes_from)?,
        };
        f.finish()?;
        Ok(s)
    }
}
