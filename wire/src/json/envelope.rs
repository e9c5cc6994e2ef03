//! The JSON view of the agent envelope.

use serde_json::Value;

use super::JsonCodec;
use super::error::JsonError;
use super::scalar::{DictJson, metadata_from, metadata_json};
use super::value::{
    Fields, Obj, boolean, bytes_from, bytes_json, nested_from, nested_json, parse, show, text, uint,
};
use crate::agent_id::{AgentId, IdempotencyKey};
use crate::envelope::AgentEnvelope;
use crate::error_body::ErrorBody;
use crate::id::{ChannelId, ConversationId, CorrelationId, RecordId};
use crate::kind::Kind;
use crate::position::LogPosition;
use crate::signature::Signature;
use crate::usage::TokenUsage;

impl JsonCodec for AgentEnvelope {
    fn to_json(&self) -> Value {
        let body = (!self.body.is_empty()).then_some(&self.body);
        Obj::default()
            .put("kind", self.kind.as_str())
            .opt("record", self.record, show)
            .put("conversation", show(self.conversation))
            .put("source", self.source.as_str())
            .opt("target", self.target.as_ref(), show)
            .opt("cause", self.cause, show)
            .opt("cause_at", self.cause_at, show)
            .opt("correlation", self.correlation, show)
            .opt("channel", self.channel, show)
            .opt("idempotency_key", self.idempotency_key.as_ref(), show)
            .opt("deadline_micros", self.deadline_micros, Value::from)
            .opt("sequence", self.sequence, Value::from)
            .opt("last", self.last.then_some(true), Value::from)
            .opt("finish_reason", self.finish_reason.clone(), Value::from)
            .opt("task_state", self.task_state, DictJson::to_json)
            .opt("operation", self.operation.clone(), Value::from)
            .opt("tool", self.tool.clone(), Value::from)
            .opt("usage", self.usage.as_ref(), JsonCodec::to_json)
            .opt("metadata", self.metadata.as_ref(), metadata_json)
            .opt(
                "must_understand",
                (self.must_understand != 0).then_some(self.must_understand),
                Value::from,
            )
            .opt("body", body, |b| match self.kind {
                Kind::Error => nested_json::<ErrorBody>(b),
                _ => bytes_json(b),
            })
            .opt("signature", self.signature.as_ref(), JsonCodec::to_json)
            .done()
    }

    fn from_json(json: Value) -> Result<Self, JsonError> {
        let mut f = Fields::new("envelope", json)?;
        let kind: Kind = f.req_map("kind", parse)?;
        let record = f.map("record", parse::<RecordId>)?;
        let conversation = f.req_map("conversation", parse::<ConversationId>)?;
        let source = f.req_map("source", parse::<AgentId>)?;
        let mut e = AgentEnvelope::bare(kind, conversation, source);
        e.record = record;
        e.target = f.map("target", parse::<AgentId>)?;
        e.cause = f.map("cause", parse::<RecordId>)?;
        e.cause_at = f.map("cause_at", parse::<LogPosition>)?;
        e.correlation = f.map("correlation", parse::<CorrelationId>)?;
        e.channel = f.map("channel", parse::<ChannelId>)?;
        e.idempotency_key = f.map("idempotency_key", parse::<IdempotencyKey>)?;
        e.deadline_micros = f.map("deadline_micros", uint)?;
        e.sequence = f.map("sequence", uint)?;
        e.last = f.map("last", boolean)?.unwrap_or(false);
        e.finish_reason = f.map("finish_reason", text)?;
        e.task_state = f.map("task_state", DictJson::from_json)?;
        e.operation = f.map("operation", text)?;
        e.tool = f.map("tool", text)?;
        e.usage = f.map("usage", TokenUsage::from_json)?;
        e.metadata = f.map("metadata", metadata_from)?;
        e.must_understand = f.map("must_understand", uint)?.unwrap_or(0);
        e.body = f
            .map("body", |j| match kind {
                Kind::Error => nested_from::<ErrorBody>(j),
                _ => bytes_from(j),
            })?
            .unwrap_or_default();
        e.signature = f.map("signature", Signature::from_json)?;
        f.finish()?;
        Ok(e)
    }
}
