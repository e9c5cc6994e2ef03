//! Step 4 of a worker (docs/runtime.md §4): the signature gate and the grants.
//!
//! A command is admitted when it verifies against the worker's key
//! registry (the key's principal is its `source`, valid at the record's log
//! timestamp, a bound context matching the headers) and, when the worker
//! has grants, its signer (and the user it acts for) may invoke the
//! operation. Anything else is refused: the worker dead-letters it
//! `rejected` and answers `unauthorized` with the check that failed.

use agdx_wire::{AgentEnvelope, AgentId, ErrorBody, ErrorCode, META_ON_BEHALF_OF, Metadata};

use super::grants::{Forbidden, Grants};
use super::registry::KeyRegistry;
use super::verify::{Observed, Verified, Verifier, VerifyError, verify_against};
use crate::log::LogRecord;

/// Why a command was refused at step 4.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The signature gate failed.
    #[error("{0}")]
    Unverified(VerifyError),
    /// The signer (or the user it acts for) holds no grant.
    #[error("{0}")]
    Forbidden(Forbidden),
}

impl Refusal {
    /// The failed check: the [`VerifyError::check`] name, or `forbidden`.
    pub fn check(&self) -> &'static str {
        match self {
            Refusal::Unverified(e) => e.check(),
            Refusal::Forbidden(_) => "forbidden",
        }
    }

    /// The message for the sender and the dead letter.
    pub fn message(&self, agent: &AgentId) -> String {
        match self {
            Refusal::Unverified(e) => {
                format!("agent '{agent}' accepts only commands signed by an enrolled key: {e}")
            }
            Refusal::Forbidden(e) => format!("{e} on agent '{agent}'"),
        }
    }

    /// The `error` reply: `unauthorized`, with the failed check in its
    /// detail (`check`), so a program can tell a missing grant from a bad
    /// signature without reading the message.
    pub fn error_body(&self, agent: &AgentId) -> ErrorBody {
        ErrorBody::new(ErrorCode::Unauthorized)
            .with_message(self.message(agent))
            .with_detail(Metadata::new().with("check", self.check()))
    }
}

/// Admits or refuses `envelope`, read from `record`: verification against
/// the verifier's registry as it is now, then the grants when there are any.
pub fn admit(
    verifier: &Verifier,
    grants: Option<&Grants>,
    envelope: &AgentEnvelope,
    record: &LogRecord,
) -> Result<Verified, Refusal> {
    admit_with(&verifier.registry(), grants, envelope, record)
}

/// [`admit`] against `registry`; reads nothing but its arguments.
pub(crate) fn admit_with(
    registry: &KeyRegistry,
    grants: Option<&Grants>,
    envelope: &AgentEnvelope,
    record: &LogRecord,
) -> Result<Verified, Refusal> {
    let verified = verify_against(registry, envelope, &record.payload, &Observed::of(record))
        .map_err(Refusal::Unverified)?;
    if let Some(grants) = grants {
        let user = envelope
            .metadata
            .as_ref()
            .and_then(|m| m.get(META_ON_BEHALF_OF))
            .and_then(|v| v.as_str());
        grants
            .admit(&verified.principal, user, envelope.operation.as_deref())
            .map_err(Refusal::Forbidden)?;
    }
    Ok(verified)
}
