//! What a command asks for, and where a reply goes.

use agdx_wire::{
    AgentEnvelope, AgentId, Bytes, ContentType, ConversationId, CorrelationId, IdempotencyKey,
    IntoBody, LogPosition, Metadata, RecordId,
};

/// A command to send: operation, body and the optional refinements.
///
/// ```
/// use agdx::CommandRequest;
/// use agdx::wire::{AgentId, ContentType};
/// let cmd = CommandRequest::new("summarize", b"{\"id\":42}".to_vec())
///     .to(AgentId::new("summarizer").unwrap())
///     .content_type(ContentType::Json);
/// assert_eq!(cmd.operation.as_deref(), Some("summarize"));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct CommandRequest {
    /// The agent that should handle it; any worker that reads it does when
    /// absent.
    pub target: Option<AgentId>,
    /// What is asked for: a short name, arguments go in the body.
    pub operation: Option<String>,
    /// The payload; claim-checked when the producer has a [`ClaimCheck`](crate::ClaimCheck)
    /// and the body is over its threshold.
    pub body: Bytes,
    /// The body's codec (`raw` unless set).
    pub content_type: ContentType,
    /// Continue this conversation. When absent, a command with an
    /// idempotency key goes to the conversation derived from its target,
    /// source and key ([`conversation_for_key`](crate::conversation_for_key)),
    /// so every retry of the key is handled in one partition, in order; any
    /// other command starts a new conversation.
    pub conversation: Option<ConversationId>,
    /// Pair replies with this id; a fresh one is minted when absent.
    pub correlation: Option<CorrelationId>,
    /// Makes the effect happen once: a worker that already processed this
    /// key for this source answers with the stored replies instead of
    /// running the handler again.
    pub idempotency_key: Option<IdempotencyKey>,
    /// Absolute deadline, epoch microseconds.
    pub deadline_micros: Option<u64>,
    /// Small routing and policy facts carried with the command.
    pub metadata: Option<Metadata>,
    /// Features the receiver must implement (bitset); 0 for none.
    pub must_understand: u64,
    /// The record that caused this command, and where it sits: a command
    /// sent while handling another names it, so the causal graph links them.
    pub cause: Option<(RecordId, Option<LogPosition>)>,
}

impl CommandRequest {
    /// A command asking for `operation` with `body` (raw bytes).
    pub fn new(operation: impl Into<String>, body: impl IntoBody) -> Self {
        Self {
            target: None,
            operation: Some(operation.into()),
            body: body.into_body(),
            content_type: ContentType::Raw,
            conversation: None,
            correlation: None,
            idempotency_key: None,
            deadline_micros: None,
            metadata: None,
            must_understand: 0,
            cause: None,
        }
    }
    /// Addresses the command to `target`.
    pub fn to(mut self, target: AgentId) -> Self {
        self.target = Some(target);
        self
    }
    /// Names the body's codec.
    pub fn content_type(mut self, content_type: ContentType) -> Self {
        self.content_type = content_type;
        self
    }
    /// Continues `conversation`.
    pub fn conversation(mut self, conversation: ConversationId) -> Self {
        self.conversation = Some(conversation);
        self
    }
    /// Uses `correlation` to pair replies.
    pub fn correlation(mut self, correlation: CorrelationId) -> Self {
        self.correlation = Some(correlation);
        self
    }
    /// Makes the effect happen once per `key`.
    pub fn idempotency_key(mut self, key: IdempotencyKey) -> Self {
        self.idempotency_key = Some(key);
        self
    }
    /// Gives up at `deadline_micros` (absolute, epoch microseconds).
    pub fn deadline_micros(mut self, deadline_micros: u64) -> Self {
        self.deadline_micros = Some(deadline_micros);
        self
    }
    /// Attaches metadata.
    pub fn metadata(mut self, metadata: Metadata) -> Self {
        self.metadata = Some(metadata);
        self
    }
    /// Asks the worker for task states as the command goes (`submitted`,
    /// `working`, then `completed`, `failed` or `canceled`; see
    /// [`TASK_STATES_KEY`](crate::TASK_STATES_KEY)). Off by default.
    pub fn task_states(mut self) -> Self {
        self.metadata = Some(crate::task_states::asking_for_task_states(
            self.metadata.take(),
        ));
        self
    }

    /// Requires the receiver to implement these feature bits; one that does
    /// not dead-letters the command and answers `unsupported`.
    pub fn must_understand(mut self, bits: u64) -> Self {
        self.must_understand = bits;
        self
    }
    /// Names the record that caused this command (`cause`) and its position
    /// (`cause_at`, which lets readers jump straight to it).
    pub fn caused_by(mut self, record: RecordId, at: Option<LogPosition>) -> Self {
        self.cause = Some((record, at));
        self
    }
}

/// Where a reply goes and what it answers: built from a command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplyTo {
    /// The command's conversation, which the reply continues.
    pub conversation: ConversationId,
    /// The command's correlation, which the reply repeats.
    pub correlation: CorrelationId,
    /// The command's record id.
    pub cause: Option<RecordId>,
    /// The command's log position.
    pub cause_at: Option<LogPosition>,
    /// The command's source, who waits for the reply.
    pub target: AgentId,
    /// The command's idempotency key, repeated on the response.
    pub idempotency_key: Option<IdempotencyKey>,
    /// The fence token of the partition holder answering (`agdx.fence` on
    /// every reply); `None` outside a worker pool.
    pub fence: Option<u64>,
    /// Whether the command asked for task states
    /// ([`TASK_STATES_KEY`](crate::TASK_STATES_KEY)).
    pub task_states: bool,
}

impl ReplyTo {
    /// The reply context of a command read at `position`; `None` when the
    /// envelope has no correlation (then nobody waits for a reply).
    pub fn for_command(command: &AgentEnvelope, position: Option<LogPosition>) -> Option<Self> {
        Some(Self {
            conversation: command.conversation,
            correlation: command.correlation?,
            cause: command.record,
            cause_at: position,
            target: command.source.clone(),
            idempotency_key: command.idempotency_key.clone(),
            fence: None,
            task_states: crate::task_states::task_states_requested(command),
        })
    }

    /// The same reply context, answering under fence token `fence`.
    pub fn with_fence(mut self, fence: u64) -> Self {
        self.fence = Some(fence);
        self
    }

    /// Points `envelope` back at the request: cause, position and target,
    /// and the holder's fence token when there is one.
    pub fn address(&self, mut envelope: AgentEnvelope) -> AgentEnvelope {
        self.address_in_place(&mut envelope);
        envelope
    }

    /// [`address`](Self::address) in place, so a large envelope is not moved.
    pub(crate) fn address_in_place(&self, envelope: &mut AgentEnvelope) {
        if let Some(cause) = self.cause {
            envelope.cause = Some(cause);
            envelope.cause_at = self.cause_at;
        }
        if let Some(fence) = self.fence {
            crate::fence::set_fence(envelope, fence);
        }
        envelope.target = Some(self.target.clone());
    }
}
