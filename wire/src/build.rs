//! Typed constructors, one per kind (and status report), so the runtime
//! never assembles a raw map. Each returns an envelope that passes
//! [`AgentEnvelope::validate`] as long as bodies the kind requires are
//! non-empty; the `with_*` refinements add optional fields.

use std::num::NonZeroU64;

use crate::agent_id::{AgentId, IdempotencyKey};
use crate::body::IntoBody;
use crate::card::AgentCard;
use crate::dictionary::TaskState;
use crate::envelope::AgentEnvelope;
use crate::error_body::ErrorBody;
use crate::id::{ChannelId, ConversationId, CorrelationId, RecordId};
use crate::kind::Kind;
use crate::metadata::Metadata;
use crate::operation::{StatusOperation, StreamPurpose};
use crate::position::LogPosition;
use crate::signature::Signature;
use crate::usage::TokenUsage;

impl AgentEnvelope {
    /// A command: a request that expects a reply, matched by `correlation`.
    /// `body` must be non-empty.
    pub fn command(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        correlation: CorrelationId,
        operation: Option<&str>,
        body: impl IntoBody,
    ) -> Self {
        let mut e = Self::bare(Kind::Command, conversation, source);
        e.record = Some(record);
        e.correlation = Some(correlation);
        e.operation = operation.map(str::to_owned);
        e.body = body.into_body();
        e
    }

    /// The reply to a command, with the command's `correlation`. `body` must
    /// be non-empty.
    pub fn response(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        correlation: CorrelationId,
        body: impl IntoBody,
    ) -> Self {
        let mut e = Self::bare(Kind::Response, conversation, source);
        e.record = Some(record);
        e.correlation = Some(correlation);
        e.body = body.into_body();
        e
    }

    /// A fact, fire-and-forget. `body` must be non-empty.
    pub fn event(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        body: impl IntoBody,
    ) -> Self {
        let mut e = Self::bare(Kind::Event, conversation, source);
        e.record = Some(record);
        e.body = body.into_body();
        e
    }

    /// The opening chunk of a stream (sequence 0), naming its purpose.
    /// `body` must be non-empty unless the chunk is also the last
    /// (see [`as_last`](Self::as_last)).
    pub fn chunk_open(
        conversation: ConversationId,
        source: AgentId,
        correlation: CorrelationId,
        channel: ChannelId,
        purpose: StreamPurpose,
        body: impl IntoBody,
    ) -> Self {
        let mut e = Self::bare(Kind::Chunk, conversation, source);
        e.correlation = Some(correlation);
        e.channel = Some(channel);
        e.sequence = Some(0);
        e.operation = Some(purpose.as_str().to_owned());
        e.body = body.into_body();
        e
    }

    /// A middle chunk of a stream. `body` must be non-empty.
    pub fn chunk(
        conversation: ConversationId,
        source: AgentId,
        correlation: CorrelationId,
        channel: ChannelId,
        sequence: NonZeroU64,
        body: impl IntoBody,
    ) -> Self {
        let mut e = Self::bare(Kind::Chunk, conversation, source);
        e.correlation = Some(correlation);
        e.channel = Some(channel);
        e.sequence = Some(sequence.get());
        e.body = body.into_body();
        e
    }

    /// The final chunk of a stream (`last`), which may be empty and may say
    /// why the stream finished and what it cost.
    #[allow(clippy::too_many_arguments)]
    pub fn chunk_last(
        conversation: ConversationId,
        source: AgentId,
        correlation: CorrelationId,
        channel: ChannelId,
        sequence: NonZeroU64,
        body: impl IntoBody,
        finish_reason: Option<&str>,
        usage: Option<TokenUsage>,
    ) -> Self {
        Self::chunk(conversation, source, correlation, channel, sequence, body)
            .as_last(finish_reason, usage)
    }

    /// Marks a chunk as the last of its stream (a one-chunk stream is
    /// `chunk_open(..).as_last(..)`), with the finish reason and usage.
    pub fn as_last(mut self, finish_reason: Option<&str>, usage: Option<TokenUsage>) -> Self {
        self.last = true;
        self.finish_reason = finish_reason.map(str::to_owned);
        self.usage = usage;
        self
    }

    /// A status `task`: where the task of the request `correlation` stands.
    pub fn status_task(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        correlation: CorrelationId,
        state: TaskState,
    ) -> Self {
        let mut e = Self::status(
            record,
            conversation,
            source,
            StatusOperation::Task,
            Vec::new(),
        );
        e.correlation = Some(correlation);
        e.task_state = Some(state);
        e
    }

    /// A status with `operation` and `body`, as given. Any body is valid on
    /// the wire, but readers expect the operation's convention (an encoded
    /// card, an agent id); prefer [`status_task`](Self::status_task),
    /// [`status_card`](Self::status_card),
    /// [`status_progress`](Self::status_progress) and
    /// [`status_quarantine`](Self::status_quarantine), which cannot get it wrong.
    pub fn status(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        operation: StatusOperation,
        body: impl IntoBody,
    ) -> Self {
        let mut e = Self::bare(Kind::Status, conversation, source);
        e.record = Some(record);
        e.operation = Some(operation.as_str().to_owned());
        e.body = body.into_body();
        e
    }

    /// A status `card`: the source agent publishes its card.
    pub fn status_card(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        card: &AgentCard,
    ) -> Self {
        Self::status(
            record,
            conversation,
            source,
            StatusOperation::Card,
            card.encode(),
        )
    }

    /// A status `progress` with a free-form (possibly empty) body.
    pub fn status_progress(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        body: impl IntoBody,
    ) -> Self {
        Self::status(
            record,
            conversation,
            source,
            StatusOperation::Progress,
            body,
        )
    }

    /// A control fact: `agent` is quarantined (`quarantined: true`) or
    /// released. Only honoured when signed by an operator.
    pub fn status_quarantine(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        agent: &AgentId,
        quarantined: bool,
    ) -> Self {
        let op = if quarantined {
            StatusOperation::Quarantine
        } else {
            StatusOperation::Unquarantine
        };
        Self::status(
            record,
            conversation,
            source,
            op,
            agent.as_str().as_bytes().to_vec(),
        )
    }

    /// An error answering the request `correlation`; the body is `error`
    /// encoded. To end a stream with it, add
    /// [`with_stream_terminal`](Self::with_stream_terminal).
    pub fn error(
        record: RecordId,
        conversation: ConversationId,
        source: AgentId,
        correlation: CorrelationId,
        error: &ErrorBody,
    ) -> Self {
        let mut e = Self::bare(Kind::Error, conversation, source);
        e.record = Some(record);
        e.correlation = Some(correlation);
        e.body = error.encode().into();
        e
    }

    /// Sets the record id (chunks have none by default).
    pub fn with_record(mut self, record: RecordId) -> Self {
        self.record = Some(record);
        self
    }

    /// Routes to `target` (a refinement, never access control).
    pub fn with_target(mut self, target: AgentId) -> Self {
        self.target = Some(target);
        self
    }

    /// Names the causal parent, and its log position when known.
    pub fn with_cause(mut self, cause: RecordId, at: Option<LogPosition>) -> Self {
        self.cause = Some(cause);
        self.cause_at = at;
        self
    }

    /// Sets the correlation (optional on events and non-task statuses).
    pub fn with_correlation(mut self, correlation: CorrelationId) -> Self {
        self.correlation = Some(correlation);
        self
    }

    /// Sets the channel (on an error: see [`with_stream_terminal`](Self::with_stream_terminal)).
    pub fn with_channel(mut self, channel: ChannelId) -> Self {
        self.channel = Some(channel);
        self
    }

    /// Makes an error the terminal of the stream `channel`, at `sequence`.
    pub fn with_stream_terminal(mut self, channel: ChannelId, sequence: u64) -> Self {
        self.channel = Some(channel);
        self.sequence = Some(sequence);
        self
    }

    /// Sets the idempotency key (commands, responses, events).
    pub fn with_idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }

    /// Sets the absolute deadline, epoch microseconds (commands, opening chunks).
    pub fn with_deadline_micros(mut self, deadline_micros: u64) -> Self {
        self.deadline_micros = Some(deadline_micros);
        self
    }

    /// Sets the finish reason (responses, final chunks).
    pub fn with_finish_reason(mut self, finish_reason: impl Into<String>) -> Self {
        self.finish_reason = Some(finish_reason.into());
        self
    }

    /// Sets the task state (responses, errors; status tasks use
    /// [`status_task`](Self::status_task)).
    pub fn with_task_state(mut self, state: TaskState) -> Self {
        self.task_state = Some(state);
        self
    }

    /// Sets the operation (open on commands, responses, events and errors).
    pub fn with_operation(mut self, operation: impl Into<String>) -> Self {
        self.operation = Some(operation.into());
        self
    }

    /// Names the tool involved (not on statuses).
    pub fn with_tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Reports token usage (not on commands; on chunks only the last).
    pub fn with_usage(mut self, usage: TokenUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets the metadata.
    pub fn with_metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }

    /// Marks a status as final.
    pub fn with_last(mut self) -> Self {
        self.last = true;
        self
    }

    /// Sets the features the receiver must understand.
    pub fn with_must_understand(mut self, bits: u64) -> Self {
        self.must_understand = bits;
        self
    }

    /// Attaches a signature (made over [`signing_input`](crate::signing_input)).
    pub fn with_signature(mut self, signature: Signature) -> Self {
        self.signature = Some(signature);
        self
    }
}
