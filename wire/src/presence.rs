//! Agent presence: an agent announcing where it can be reached.

use crate::agent_id::AgentId;
use crate::cbor::{Reader, Seen, required, write_map, write_text, write_uint};
use crate::error::DecodeError;
use crate::payload::{Codec, wire_payload};
use crate::validation::{Problem, Subject, ValidationError};

/// The presence capsule version this crate writes and accepts.
pub const PRESENCE_VERSION: u32 = 1;

/// An agent is up, and where its inbox is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentPresence {
    /// Capsule version (wire key `v`); must be [`PRESENCE_VERSION`].
    pub version: u32,
    /// The agent.
    pub agent: AgentId,
    /// Where to reach it.
    pub inbox: Option<String>,
}

const V: &str = "v";
const AGENT: &str = "agent";
const INBOX: &str = "inbox";

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
            .at(Subject::Capsule("agent presence"), V));
        }
        Ok(())
    }
}

impl Codec for AgentPresence {
    const NAME: &'static str = "agent presence";

    fn write(&self, out: &mut Vec<u8>) {
        write_map(out, 2 + usize::from(self.inbox.is_some()));
        write_text(out, V);
        write_uint(out, u64::from(self.version));
        write_text(out, AGENT);
        write_text(out, self.agent.as_str());
        if let Some(inbox) = &self.inbox {
            write_text(out, INBOX);
            write_text(out, inbox);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let (mut version, mut agent, mut inbox) = (None, None, None);
        for _ in 0..entries {
            match r.key()? {
                V => {
                    seen.mark(0, V)?;
                    version = Some(r.uint_as(V, "u32")?);
                }
                AGENT => {
                    seen.mark(1, AGENT)?;
                    let text = r.text(AGENT)?;
                    agent =
                        Some(
                            AgentId::new(text).map_err(|source| DecodeError::InvalidAgentId {
                                field: AGENT,
                                source,
                            })?,
                        );
                }
                INBOX => {
                    seen.mark(2, INBOX)?;
                    inbox = Some(r.text(INBOX)?.to_owned());
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(AgentPresence {
            version: required(version, V)?,
            agent: required(agent, AGENT)?,
            inbox,
        })
    }
}

wire_payload!(AgentPresence, "presence");
