//! Trust: Ed25519 signatures, the key registry, grants and operator-signed
//! quarantine (docs/runtime.md §6, docs/wire.md "Signing").
//!
//! Agent-written fields are claims until verified, and routing does not
//! grant access. This module is where claims become facts:
//!
//! - [`Signer`]: one secret key (from a key file or a seed); signs
//!   envelopes, optionally binding a [`SignatureContext`](agdx_wire::SignatureContext)
//!   ([`ContextBinding`]). [`Producer::with_signer`](crate::Producer::with_signer)
//!   signs everything a producer sends.
//! - [`KeyRegistry`]: trusted configuration (a JSON file), key id →
//!   principal, kind (`agent` | `operator`), public key, validity window.
//! - [`Verifier`]: checks a record against the registry **as of the
//!   record's log timestamp**, so replaying history judges each record by
//!   the keys valid when it landed. Workers use it at step 4
//!   ([`WorkerConfig::verifier`](crate::worker::WorkerConfig::verifier)),
//!   requesters to accept only verified replies
//!   ([`Requester::with_verifier`](crate::Requester::with_verifier)).
//! - [`Grants`]: which verified principals may invoke which operations,
//!   intersected with the grants of the user a command acts for
//!   (`on_behalf_of`).
//! - [`QuarantineFold`] / [`QuarantineWatch`]: operator-signed control facts
//!   on `agent.registry`; a quarantined agent is refused work before it is
//!   sent, and its own worker pool pauses.
//!
//! The wire crate stays crypto-free: it gives the signing input
//! ([`agdx_wire::signing_input`]); everything cryptographic is here.

mod gate;
mod grants;
mod key;
mod quarantine;
mod registry;
mod sign;
mod time;
mod verify;

pub(crate) use gate::admit_with;
pub use gate::{Refusal, admit};
pub use grants::{Forbidden, Grant, GrantParseError, Grants, GrantsFileError};
#[cfg(feature = "bridge-axon")]
pub(crate) use key::read_seed;
pub use key::{
    KeyFileError, KeyId, KeyIdParseError, PUBLIC_KEY_LEN, PublicKey, PublicKeyError, SEED_LEN,
};
pub(crate) use quarantine::Pause;
pub use quarantine::{
    IgnoredFact, IgnoredWhy, META_REASON, QuarantineFold, QuarantineState, QuarantineStatus,
    QuarantineWatch, Quarantined,
};
pub use registry::{KeyEntry, KeyKind, KeyRegistry, RegistryError, Validity};
pub use sign::{ContextBinding, Signer};
pub use time::{TimeParseError, format_time, parse_time};
pub use verify::{Observed, ObservedHeaders, Verified, Verifier, VerifyError};
