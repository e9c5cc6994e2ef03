//! Agent presence: an agent announcing where it can be reached.

use crate::agent_id::AgentId;
use crate::payload::wire_payload;
use crate::table::{Agent, Text, Uint, wire_struct};
use crate::validation::{Problem, Subject, ValidationError};

/// The presence capsule version this crate writes and accepts.
pub const PRESENCE_VERSION: u32 = 1;

wire_struct! {
    /// An agent is up, and where its inbox is.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct AgentPresence {
        cbor: "agent presence",
        json: "agent presence",
        keys: field;
        /// Capsule version (wire key `v`); must be [`PRESENCE_VERSION`].
        pub version: u32 [V = "v", Uint, required],
        /// The agent.
        pub agent: AgentId [AGENT = "agent", Agent, required],
        /// Where to reach it.
        pub inbox: Option<String> [INBOX = "inbox", Text, optional],
    }
}

impl AgentPresence {
    /// Presence of `agent` at the current version.
    pub fn new(agent: AgentId, inbox: Option<String>) -> Self {
        Self {
            version: PRESENCE_VERSION,
            agent,
            inbox,
        }
    }

    /// The version must be [`PRESENCE_VERSION`].
    pub fn validate(&self) -> Result<(), ValidationError> {
        if self.version != PRESENCE_VERSION {
            return Err(Problem::invalid(
                format!(
                    "version {} is not supported, only {PRESENCE_VERSION}",
                    self.version
                ),
                "write presence with AgentPresence::new",
            )
            .at(Subject::Capsule("agent presence"), field::V));
        }
        Ok(())
    }
}

wire_payload!(AgentPresence, "presence");
#[cfg(feature = "json")]
crate::table::json_payload!(AgentPresence);
