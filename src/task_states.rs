//! Task states as a command's sender asked for them: a command carrying
//! [`TASK_STATES_KEY`] is answered with `status` `task` records as it goes
//! (`submitted` and `working` when its handler starts, then `completed`,
//! `failed` or `canceled` before its answer). Without it a worker publishes
//! none of its own, so a plain ask costs nothing more.
//!
//! A handler that needs more from its caller asks for it
//! (`Request::ask_input`): a `status` `task` `input-required` carrying the
//! prompt as its body. The caller answers with a command in the same
//! conversation, from the same source, caused by that status and carrying
//! [`INPUT_FOR_KEY`] (`ReplyWatch::provide_input`); the waiting handler
//! reads it and goes on, and the pool skips it as a command of its own.

use std::time::Duration;

use agdx_wire::{AgentEnvelope, AgentId, Bytes, CorrelationId, Kind, Metadata, RecordId, Scalar};

use crate::log::{SharedLog, TopicInfo};
use crate::record::envelope_of;

/// The metadata key (a boolean) by which a command asks for task states.
/// The runtime's own key, not one of the wire's pinned keys: other AGDX
/// implementations carry it along and ignore it.
pub const TASK_STATES_KEY: &str = "agdx.task_states";

/// The metadata key (the asking command's correlation, as text) that
/// marks a command as the input a waiting handler asked for.
pub const INPUT_FOR_KEY: &str = "agdx.input_for";

/// The operation an input command carries.
pub const INPUT_OPERATION: &str = "agdx.input";

/// The correlation `command` is the input for, when it is one.
pub fn input_for(command: &AgentEnvelope) -> Option<&str> {
    command
        .metadata
        .as_ref()
        .and_then(|m| m.get(INPUT_FOR_KEY))
        .and_then(Scalar::as_str)
}

/// Whether `command` asks for task states.
pub fn task_states_requested(command: &AgentEnvelope) -> bool {
    command
        .metadata
        .as_ref()
        .and_then(|m| m.get(TASK_STATES_KEY))
        == Some(&Scalar::Bool(true))
}

/// `metadata` asking for task states.
pub(crate) fn asking_for_task_states(metadata: Option<Metadata>) -> Metadata {
    metadata.unwrap_or_default().with(TASK_STATES_KEY, true)
}

/// Why [`Request::ask_input`](crate::worker::Request::ask_input) got no
/// input.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    /// The request is an event, or was not read from a pool's log: nobody
    /// can answer.
    #[error("nobody can answer: the request is an event, or was not read from a commands topic")]
    NoCaller,
    /// The prompt could not be published.
    #[error("publishing the prompt failed: {0}")]
    Produce(#[from] crate::ProduceError),
    /// No input came in time.
    #[error("no input came within {0:?}")]
    TimedOut(Duration),
    /// The command was cancelled while its handler waited.
    #[error("the command was cancelled while it waited for input")]
    Cancelled,
}

/// The input a caller gave: the body of the first command at or after
/// offset `from` of `partition` that `sender` sent as the input for
/// `correlation` answering the prompt record `prompt`. Reads as long as it
/// is awaited.
pub(crate) async fn input_arrived(
    log: &SharedLog,
    commands: &TopicInfo,
    partition: u32,
    from: u64,
    (correlation, sender, prompt): (CorrelationId, &AgentId, Option<RecordId>),
) -> Bytes {
    let correlation = correlation.to_string();
    crate::cancel::read_on(log, commands, partition, from, "the input", |record| {
        let envelope = envelope_of(record).ok()?;
        let answers = envelope.kind == Kind::Command
            && envelope.source == *sender
            && input_for(&envelope) == Some(correlation.as_str())
            && (prompt.is_none() || envelope.cause == prompt);
        answers.then_some(envelope.body)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_pinned() {
        assert_eq!(TASK_STATES_KEY, "agdx.task_states");
        assert_eq!(INPUT_FOR_KEY, "agdx.input_for");
        assert_eq!(INPUT_OPERATION, "agdx.input");
    }
}
