//! Task states as a command's sender asked for them: a command carrying
//! [`TASK_STATES_KEY`] is answered with `status` `task` records as it goes
//! (`submitted` and `working` when its handler starts, then `completed`,
//! `failed` or `canceled` before its answer). Without it a worker publishes
//! none of its own, so a plain ask costs nothing more.

use agdx_wire::{AgentEnvelope, Metadata, Scalar};

/// The metadata key (a boolean) by which a command asks for task states.
/// The runtime's own key, not one of the wire's pinned keys: other AGDX
/// implementations carry it along and ignore it.
pub const TASK_STATES_KEY: &str = "agdx.task_states";

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_key_is_pinned() {
        assert_eq!(TASK_STATES_KEY, "agdx.task_states");
    }
}
