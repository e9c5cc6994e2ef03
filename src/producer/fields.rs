//! What a reply carries beside its body: [`ReplyFields`].

use agdx_wire::{AgentEnvelope, MetaKey, Metadata, Scalar, TaskState, TokenUsage};

/// The fields a handler may set on its `response`, or a stream on its final
/// chunk: how it ended, what it cost, the tool involved, where the task
/// stands, and small facts for routing and policy (metadata).
///
/// ```
/// use agdx::ReplyFields;
/// use agdx::wire::TokenUsage;
/// let fields = ReplyFields::default()
///     .finish_reason("stop")
///     .usage(TokenUsage::new(812, 64))
///     .metadata("model", "small-1");
/// assert_eq!(fields.usage.map(|u| u.output_tokens), Some(64));
/// ```
///
/// The envelope rules decide where each may go (docs/wire.md): a
/// `task_state` only on a response, `finish_reason` and `usage` on a
/// response or a stream's final chunk. Metadata keys the runtime sets
/// itself (the fence, bridge hops) keep the runtime's value.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplyFields {
    /// Why the answer ended: `stop`, `length`, `tool_call`, ...
    pub finish_reason: Option<String>,
    /// The tokens the answer cost.
    pub usage: Option<TokenUsage>,
    /// The tool involved.
    pub tool: Option<String>,
    /// Where the task stands (a response only).
    pub task_state: Option<TaskState>,
    /// Small facts for routing and policy.
    pub metadata: Option<Metadata>,
}

impl ReplyFields {
    /// Sets why the answer ended.
    pub fn finish_reason(mut self, reason: impl Into<String>) -> Self {
        self.finish_reason = Some(reason.into());
        self
    }

    /// Sets the tokens the answer cost.
    pub fn usage(mut self, usage: TokenUsage) -> Self {
        self.usage = Some(usage);
        self
    }

    /// Sets the tool involved.
    pub fn tool(mut self, tool: impl Into<String>) -> Self {
        self.tool = Some(tool.into());
        self
    }

    /// Sets where the task stands.
    pub fn task_state(mut self, state: TaskState) -> Self {
        self.task_state = Some(state);
        self
    }

    /// Adds one metadata entry.
    pub fn metadata(mut self, key: impl Into<MetaKey>, value: impl Into<Scalar>) -> Self {
        self.metadata
            .get_or_insert_with(Metadata::new)
            .insert(key, value);
        self
    }

    /// Whether no field is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Sets these fields on `envelope` (in place: the envelope is large);
    /// metadata entries are added to what it carries, never replacing an
    /// entry already there.
    pub(crate) fn apply_to(self, envelope: &mut AgentEnvelope) {
        if self.finish_reason.is_some() {
            envelope.finish_reason = self.finish_reason;
        }
        if self.usage.is_some() {
            envelope.usage = self.usage;
        }
        if self.tool.is_some() {
            envelope.tool = self.tool;
        }
        if self.task_state.is_some() {
            envelope.task_state = self.task_state;
        }
        if let Some(added) = self.metadata {
            let metadata = envelope.metadata.get_or_insert_with(Metadata::new);
            for (key, value) in added {
                if metadata.get(&key).is_none() {
                    metadata.insert(key, value);
                }
            }
        }
    }
}
