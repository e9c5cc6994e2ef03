//! Reading what a status `card`, `quarantine` or `unquarantine` carries.
//!
//! The validator puts no constraint on a status body: any body, or none, is
//! valid on the wire, so a peer's record is never refused for it. The body
//! conventions (an encoded [`AgentCard`], the UTF-8 [`AgentId`] being
//! (un)quarantined) are checked here instead, by whoever reads them: the
//! registry and quarantine folds call [`AgentEnvelope::card_body`] and
//! [`AgentEnvelope::control_fact`] and skip what they cannot use.
//!
//! ```
//! use agdx_wire::*;
//! let fact = AgentEnvelope::status_quarantine(
//!     RecordId::from_u128(1),
//!     ConversationId::from_u128(2),
//!     AgentId::new("operator")?,
//!     &AgentId::new("rogue")?,
//!     true,
//! );
//! assert_eq!(fact.control_fact()?.agent.as_str(), "rogue");
//! // Valid on the wire, but no use to the registry:
//! let bare = AgentEnvelope::status(
//!     RecordId::from_u128(1),
//!     ConversationId::from_u128(2),
//!     AgentId::new("summarizer")?,
//!     StatusOperation::Card,
//!     Vec::new(),
//! );
//! assert_eq!(bare.validate(), Ok(()));
//! assert!(matches!(bare.card_body(), Err(StatusBodyError::Empty { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;

use crate::agent_id::{AgentId, AgentIdError};
use crate::card::AgentCard;
use crate::envelope::AgentEnvelope;
use crate::kind::Kind;
use crate::operation::StatusOperation;
use crate::payload::WireError;

/// A quarantine control fact: `agent` is quarantined, or released. Honour it
/// only when the envelope carries a valid operator signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlFact {
    /// The agent the fact is about.
    pub agent: AgentId,
    /// `true` for `quarantine`, `false` for `unquarantine`.
    pub quarantined: bool,
}

/// Why a status envelope's body is not what its operation conventionally
/// carries. The envelope itself may well be valid: skip it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum StatusBodyError {
    /// The envelope is not a status with the operation asked for.
    #[error(
        "{} is not a status {}",
        Described { kind: *kind, operation: operation.as_deref() },
        Wanted(wanted)
    )]
    NotThisStatus {
        /// The operations the reader can use.
        wanted: &'static [StatusOperation],
        /// The envelope's kind.
        kind: Kind,
        /// The envelope's operation.
        operation: Option<String>,
    },
    /// The status carries no body.
    #[error("a status `{operation}` without a body carries nothing to read")]
    Empty {
        /// The status operation.
        operation: StatusOperation,
    },
    /// A `card` body that is not a valid encoded [`AgentCard`].
    #[error("the body of a status `card` is not a valid agent card: {0}")]
    NotACard(#[source] WireError),
    /// A control fact whose body is not UTF-8.
    #[error("the body of a status `{operation}` is not UTF-8 text, so it names no agent")]
    NotUtf8 {
        /// The status operation.
        operation: StatusOperation,
    },
    /// A control fact whose body is text but not an agent id.
    #[error("the body of a status `{operation}` is not an agent id: {source}")]
    NotAnAgentId {
        /// The status operation.
        operation: StatusOperation,
        /// The agent-id rule the text breaks.
        source: AgentIdError,
    },
}

/// "a status `progress`", "an event envelope", ... for error messages.
struct Described<'a> {
    kind: Kind,
    operation: Option<&'a str>,
}

impl fmt::Display for Described<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let article = match self.kind {
            Kind::Event | Kind::Error => "an",
            Kind::Command | Kind::Response | Kind::Chunk | Kind::Status => "a",
        };
        match (self.kind, self.operation) {
            (Kind::Status, Some(op)) => write!(f, "a status `{op}`"),
            (Kind::Status, None) => f.write_str("a status without an operation"),
            (kind, _) => write!(f, "{article} {kind} envelope"),
        }
    }
}

/// "`quarantine` or `unquarantine`".
struct Wanted(&'static [StatusOperation]);

impl fmt::Display for Wanted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, op) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(" or ")?;
            }
            write!(f, "`{op}`")?;
        }
        Ok(())
    }
}

impl AgentEnvelope {
    /// The operation of a `status` envelope, when it is one of the closed
    /// vocabulary; `None` for other kinds.
    pub fn status_operation(&self) -> Option<StatusOperation> {
        (self.kind == Kind::Status)
            .then(|| self.operation.as_deref()?.parse().ok())
            .flatten()
    }

    fn not_this_status(&self, wanted: &'static [StatusOperation]) -> StatusBodyError {
        StatusBodyError::NotThisStatus {
            wanted,
            kind: self.kind,
            operation: self.operation.clone(),
        }
    }

    /// The agent card a status `card` carries, decoded and checked against
    /// the card caps.
    pub fn card_body(&self) -> Result<AgentCard, StatusBodyError> {
        if self.status_operation() != Some(StatusOperation::Card) {
            return Err(self.not_this_status(&[StatusOperation::Card]));
        }
        if self.body.is_empty() {
            return Err(StatusBodyError::Empty {
                operation: StatusOperation::Card,
            });
        }
        AgentCard::decode_valid(&self.body).map_err(StatusBodyError::NotACard)
    }

    /// The control fact a status `quarantine` or `unquarantine` carries: the
    /// agent its body names. Whether to honour it (an operator signature) is
    /// the reader's decision.
    pub fn control_fact(&self) -> Result<ControlFact, StatusBodyError> {
        let operation = match self.status_operation() {
            Some(op @ (StatusOperation::Quarantine | StatusOperation::Unquarantine)) => op,
            _ => {
                return Err(self.not_this_status(&[
                    StatusOperation::Quarantine,
                    StatusOperation::Unquarantine,
                ]));
            }
        };
        if self.body.is_empty() {
            return Err(StatusBodyError::Empty { operation });
        }
        let text =
            std::str::from_utf8(&self.body).map_err(|_| StatusBodyError::NotUtf8 { operation })?;
        let agent = AgentId::new(text)
            .map_err(|source| StatusBodyError::NotAnAgentId { operation, source })?;
        Ok(ControlFact {
            agent,
            quarantined: operation == StatusOperation::Quarantine,
        })
    }
}
