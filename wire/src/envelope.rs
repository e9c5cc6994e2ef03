//! The agent envelope: the one CBOR map every agent record carries.

use crate::agent_id::{AgentId, IdempotencyKey};
use crate::cbor::{
    Reader, Seen, required, write_bool, write_bytes, write_map, write_text, write_uint,
};
use crate::dictionary::TaskState;
use crate::error::DecodeError;
use crate::id::{ChannelId, ConversationId, CorrelationId, RecordId};
use crate::kind::Kind;
use crate::metadata::Metadata;
use crate::payload::{Codec, wire_payload};
use crate::position::LogPosition;
use crate::signature::Signature;
use crate::usage::TokenUsage;

/// The envelope's wire keys, in declaration order.
pub(crate) mod field {
    pub const KIND: &str = "kind";
    pub const RECORD: &str = "record";
    pub const CONVERSATION: &str = "conversation";
    pub const SOURCE: &str = "source";
    pub const TARGET: &str = "target";
    pub const CAUSE: &str = "cause";
    pub const CAUSE_AT: &str = "cause_at";
    pub const CORRELATION: &str = "correlation";
    pub const CHANNEL: &str = "channel";
    pub const IDEMPOTENCY_KEY: &str = "idempotency_key";
    pub const DEADLINE_MICROS: &str = "deadline_micros";
    pub const SEQUENCE: &str = "sequence";
    pub const LAST: &str = "last";
    pub const FINISH_REASON: &str = "finish_reason";
    pub const TASK_STATE: &str = "task_state";
    pub const OPERATION: &str = "operation";
    pub const TOOL: &str = "tool";
    pub const USAGE: &str = "usage";
    pub const METADATA: &str = "metadata";
    pub const MUST_UNDERSTAND: &str = "must_understand";
    pub const BODY: &str = "body";
    pub const SIGNATURE: &str = "signature";
}

/// The agent envelope: what every agent record's payload is.
///
/// Fields are in wire declaration order. Build envelopes with the typed
/// constructors ([`command`](Self::command), [`response`](Self::response),
/// [`event`](Self::event), [`chunk_open`](Self::chunk_open),
/// [`chunk`](Self::chunk), [`chunk_last`](Self::chunk_last),
/// [`status_task`](Self::status_task), [`status`](Self::status),
/// [`error`](Self::error)) and the `with_*` refinements; they produce
/// envelopes that pass [`validate`](Self::validate).
///
/// ```
/// use agdx_wire::*;
/// let cmd = AgentEnvelope::command(
///     RecordId::from_u128(1),
///     ConversationId::from_u128(2),
///     AgentId::new("planner")?,
///     CorrelationId::from_u128(3),
///     Some("summarize"),
///     b"summarize incident 42".to_vec(),
/// )
/// .with_target(AgentId::new("summarizer")?);
/// cmd.validate()?;
/// let bytes = cmd.encode();
/// assert_eq!(AgentEnvelope::decode_valid(&bytes)?, cmd);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentEnvelope {
    /// What the envelope is; decides which fields are required or forbidden.
    pub kind: Kind,
    /// This record's id (required except on chunks).
    pub record: Option<RecordId>,
    /// The conversation: the partition key and the trace identity.
    pub conversation: ConversationId,
    /// Who wrote it; a claim unless signed.
    pub source: AgentId,
    /// Who it is for; a routing refinement, never access control.
    pub target: Option<AgentId>,
    /// The causal parent's record id.
    pub cause: Option<RecordId>,
    /// The causal parent's log position (binding-local).
    pub cause_at: Option<LogPosition>,
    /// Pairs a request with its replies.
    pub correlation: Option<CorrelationId>,
    /// Groups a chunk stream.
    pub channel: Option<ChannelId>,
    /// Makes a command's effect happen once.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Absolute deadline, epoch microseconds.
    pub deadline_micros: Option<u64>,
    /// Chunk order within a channel.
    pub sequence: Option<u64>,
    /// Marks a stream's final chunk (or a final status); omitted when false.
    pub last: bool,
    /// Why a response or stream ended (`stop`, `length`, `tool_call`, ...).
    pub finish_reason: Option<String>,
    /// Where a task stands.
    pub task_state: Option<TaskState>,
    /// What is asked or reported; open except on `status` and opening chunks.
    pub operation: Option<String>,
    /// The tool involved.
    pub tool: Option<String>,
    /// Tokens spent (advisory accounting).
    pub usage: Option<TokenUsage>,
    /// Small routing and policy facts.
    pub metadata: Option<Metadata>,
    /// Features the receiver must implement (bitset); omitted when 0.
    pub must_understand: u64,
    /// The content, its codec named out of band (`agdx.ct`); omitted when empty.
    pub body: Vec<u8>,
    /// A signature over the rest of the envelope.
    pub signature: Option<Signature>,
}

impl AgentEnvelope {
    /// An envelope of `kind` with only the always-required fields set.
    /// Prefer the typed constructors, which fill what each kind needs.
    pub fn bare(kind: Kind, conversation: ConversationId, source: AgentId) -> Self {
        Self {
            kind,
            record: None,
            conversation,
            source,
            target: None,
            cause: None,
            cause_at: None,
            correlation: None,
            channel: None,
            idempotency_key: None,
            deadline_micros: None,
            sequence: None,
            last: false,
            finish_reason: None,
            task_state: None,
            operation: None,
            tool: None,
            usage: None,
            metadata: None,
            must_understand: 0,
            body: Vec::new(),
            signature: None,
        }
    }

    /// Whether this envelope needs a feature outside `understood`; a
    /// receiver must reject it (dead-letter reason `rejected`).
    pub fn requires_unknown_features(&self, understood: u64) -> bool {
        self.must_understand & !understood != 0
    }

    /// Writes the envelope; `with_signature: false` gives the canonical
    /// bytes a signature covers.
    pub(crate) fn write_envelope(&self, out: &mut Vec<u8>, with_signature: bool) {
        let signature = self.signature.as_ref().filter(|_| with_signature);
        let count = 3
            + usize::from(self.record.is_some())
            + usize::from(self.target.is_some())
            + usize::from(self.cause.is_some())
            + usize::from(self.cause_at.is_some())
            + usize::from(self.correlation.is_some())
            + usize::from(self.channel.is_some())
            + usize::from(self.idempotency_key.is_some())
            + usize::from(self.deadline_micros.is_some())
            + usize::from(self.sequence.is_some())
            + usize::from(self.last)
            + usize::from(self.finish_reason.is_some())
            + usize::from(self.task_state.is_some())
            + usize::from(self.operation.is_some())
            + usize::from(self.tool.is_some())
            + usize::from(self.usage.is_some())
            + usize::from(self.metadata.is_some())
            + usize::from(self.must_understand != 0)
            + usize::from(!self.body.is_empty())
            + usize::from(signature.is_some());
        write_map(out, count);
        write_text(out, field::KIND);
        write_text(out, self.kind.as_str());
        if let Some(v) = self.record {
            write_text(out, field::RECORD);
            v.write(out);
        }
        write_text(out, field::CONVERSATION);
        self.conversation.write(out);
        write_text(out, field::SOURCE);
        write_text(out, self.source.as_str());
        if let Some(v) = &self.target {
            write_text(out, field::TARGET);
            write_text(out, v.as_str());
        }
        if let Some(v) = self.cause {
            write_text(out, field::CAUSE);
            v.write(out);
        }
        if let Some(v) = &self.cause_at {
            write_text(out, field::CAUSE_AT);
            v.write(out);
        }
        if let Some(v) = self.correlation {
            write_text(out, field::CORRELATION);
            v.write(out);
        }
        if let Some(v) = self.channel {
            write_text(out, field::CHANNEL);
            v.write(out);
        }
        if let Some(v) = &self.idempotency_key {
            write_text(out, field::IDEMPOTENCY_KEY);
            write_text(out, v.as_str());
        }
        if let Some(v) = self.deadline_micros {
            write_text(out, field::DEADLINE_MICROS);
            write_uint(out, v);
        }
        if let Some(v) = self.sequence {
            write_text(out, field::SEQUENCE);
            write_uint(out, v);
        }
        if self.last {
            write_text(out, field::LAST);
            write_bool(out, true);
        }
        if let Some(v) = &self.finish_reason {
            write_text(out, field::FINISH_REASON);
            write_text(out, v);
        }
        if let Some(v) = self.task_state {
            write_text(out, field::TASK_STATE);
            v.write(out);
        }
        if let Some(v) = &self.operation {
            write_text(out, field::OPERATION);
            write_text(out, v);
        }
        if let Some(v) = &self.tool {
            write_text(out, field::TOOL);
            write_text(out, v);
        }
        if let Some(v) = &self.usage {
            write_text(out, field::USAGE);
            v.write(out);
        }
        if let Some(v) = &self.metadata {
            write_text(out, field::METADATA);
            v.write(out);
        }
        if self.must_understand != 0 {
            write_text(out, field::MUST_UNDERSTAND);
            write_uint(out, self.must_understand);
        }
        if !self.body.is_empty() {
            write_text(out, field::BODY);
            write_bytes(out, &self.body);
        }
        if let Some(v) = signature {
            write_text(out, field::SIGNATURE);
            v.write(out);
        }
    }
}

fn agent_id(r: &mut Reader<'_>, field: &'static str) -> Result<AgentId, DecodeError> {
    AgentId::new(r.text(field)?).map_err(|source| DecodeError::InvalidAgentId { field, source })
}

impl Codec for AgentEnvelope {
    const NAME: &'static str = "envelope";

    fn size_hint(&self) -> usize {
        192 + self.body.len()
    }

    fn write(&self, out: &mut Vec<u8>) {
        self.write_envelope(out, true);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let (mut kind, mut conversation, mut source) = (None, None, None);
        let (mut record, mut target, mut cause, mut cause_at) = (None, None, None, None);
        let (mut correlation, mut channel, mut idempotency_key) = (None, None, None);
        let (mut deadline_micros, mut sequence, mut finish_reason) = (None, None, None);
        let (mut task_state, mut operation, mut tool, mut usage) = (None, None, None, None);
        let (mut metadata, mut signature) = (None, None);
        let (mut last, mut must_understand, mut body) = (false, 0, Vec::new());
        for _ in 0..entries {
            let key = r.key()?;
            match key {
                field::KIND => {
                    seen.mark(0, field::KIND)?;
                    let text = r.text(field::KIND)?;
                    kind = Some(
                        text.parse::<Kind>()
                            .map_err(|e| DecodeError::UnknownKind(e.0))?,
                    );
                }
                field::RECORD => {
                    seen.mark(1, field::RECORD)?;
                    record = Some(RecordId::read(r, field::RECORD)?);
                }
                field::CONVERSATION => {
                    seen.mark(2, field::CONVERSATION)?;
                    conversation = Some(ConversationId::read(r, field::CONVERSATION)?);
                }
                field::SOURCE => {
                    seen.mark(3, field::SOURCE)?;
                    source = Some(agent_id(r, field::SOURCE)?);
                }
                field::TARGET => {
                    seen.mark(4, field::TARGET)?;
                    target = Some(agent_id(r, field::TARGET)?);
                }
                field::CAUSE => {
                    seen.mark(5, field::CAUSE)?;
                    cause = Some(RecordId::read(r, field::CAUSE)?);
                }
                field::CAUSE_AT => {
                    seen.mark(6, field::CAUSE_AT)?;
                    cause_at = Some(LogPosition::read(r, field::CAUSE_AT)?);
                }
                field::CORRELATION => {
                    seen.mark(7, field::CORRELATION)?;
                    correlation = Some(CorrelationId::read(r, field::CORRELATION)?);
                }
                field::CHANNEL => {
                    seen.mark(8, field::CHANNEL)?;
                    channel = Some(ChannelId::read(r, field::CHANNEL)?);
                }
                field::IDEMPOTENCY_KEY => {
                    seen.mark(9, field::IDEMPOTENCY_KEY)?;
                    idempotency_key = Some(IdempotencyKey::new(r.text(field::IDEMPOTENCY_KEY)?)?);
                }
                field::DEADLINE_MICROS => {
                    seen.mark(10, field::DEADLINE_MICROS)?;
                    deadline_micros = Some(r.uint(field::DEADLINE_MICROS)?);
                }
                field::SEQUENCE => {
                    seen.mark(11, field::SEQUENCE)?;
                    sequence = Some(r.uint(field::SEQUENCE)?);
                }
                field::LAST => {
                    seen.mark(12, field::LAST)?;
                    last = r.bool(field::LAST)?;
                }
                field::FINISH_REASON => {
                    seen.mark(13, field::FINISH_REASON)?;
                    finish_reason = Some(r.text(field::FINISH_REASON)?.to_owned());
                }
                field::TASK_STATE => {
                    seen.mark(14, field::TASK_STATE)?;
                    task_state = Some(TaskState::read(r, field::TASK_STATE)?);
                }
                field::OPERATION => {
                    seen.mark(15, field::OPERATION)?;
                    operation = Some(r.text(field::OPERATION)?.to_owned());
                }
                field::TOOL => {
                    seen.mark(16, field::TOOL)?;
                    tool = Some(r.text(field::TOOL)?.to_owned());
                }
                field::USAGE => {
                    seen.mark(17, field::USAGE)?;
                    usage = Some(TokenUsage::read(r).map_err(|e| e.within(field::USAGE))?);
                }
                field::METADATA => {
                    seen.mark(18, field::METADATA)?;
                    metadata = Some(Metadata::read(r, field::METADATA)?);
                }
                field::MUST_UNDERSTAND => {
                    seen.mark(19, field::MUST_UNDERSTAND)?;
                    must_understand = r.uint(field::MUST_UNDERSTAND)?;
                }
                field::BODY => {
                    seen.mark(20, field::BODY)?;
                    body = r.bytes(field::BODY)?.to_vec();
                }
                field::SIGNATURE => {
                    seen.mark(21, field::SIGNATURE)?;
                    signature = Some(Signature::read(r).map_err(|e| e.within(field::SIGNATURE))?);
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(AgentEnvelope {
            kind: required(kind, field::KIND)?,
            record,
            conversation: required(conversation, field::CONVERSATION)?,
            source: required(source, field::SOURCE)?,
            target,
            cause,
            cause_at,
            correlation,
            channel,
            idempotency_key,
            deadline_micros,
            sequence,
            last,
            finish_reason,
            task_state,
            operation,
            tool,
            usage,
            metadata,
            must_understand,
            body,
            signature,
        })
    }
}

wire_payload!(AgentEnvelope, "envelope");
