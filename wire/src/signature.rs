//! Signatures over an envelope, and the context a signature binds.

use crate::dictionary::{ContentType, SignatureScheme};
use crate::payload::wire_payload;
use crate::table::{Capsule, Dict, Hex, Uint, wire_struct};
use crate::validation::{Problem, Subject, ValidationError};

/// Length of an Ed25519 key id: the first 8 bytes of SHA-256 over the key.
pub const ED25519_KEY_ID_LEN: usize = 8;
/// Length of an Ed25519 signature.
pub const ED25519_SIGNATURE_LEN: usize = 64;

wire_struct! {
    /// What a signature binds besides the envelope: when set, the record's
    /// `agdx.ct` / `agdx.av` headers must equal these values.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct SignatureContext {
        cbor: "signature context",
        json: "signature context",
        keys: context_field;
        /// The body's content type.
        pub content_type: Option<ContentType> [CONTENT_TYPE = "content_type", Dict, optional],
        /// The envelope wire version.
        pub agent_version: Option<u32> [AGENT_VERSION = "agent_version", Uint, optional],
    }
}

wire_struct! {
    /// A signature over an envelope (see [`signing_input`](crate::signing_input)).
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct Signature {
        cbor: "signature",
        json: "signature",
        keys: field;
        /// How it was made.
        pub scheme: SignatureScheme [SCHEME = "scheme", Dict, required],
        /// Which key made it (Ed25519: 8 bytes).
        pub key_id: Vec<u8> [KEY_ID = "key_id", Hex, required],
        /// The signature (Ed25519: 64 bytes).
        pub bytes: Vec<u8> [BYTES = "bytes", Hex, required],
        /// The bound context, if any.
        pub context: Option<SignatureContext> [CONTEXT = "context", Capsule, optional],
    }
}

impl SignatureContext {
    /// A signature context has no rules beyond its shape; always `Ok`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

impl Signature {
    /// An Ed25519 signature without a bound context.
    pub fn ed25519(key_id: [u8; ED25519_KEY_ID_LEN], bytes: [u8; ED25519_SIGNATURE_LEN]) -> Self {
        Self {
            scheme: SignatureScheme::Ed25519,
            key_id: key_id.to_vec(),
            bytes: bytes.to_vec(),
            context: None,
        }
    }

    /// Binds a context (content type and wire version) into the signature.
    pub fn with_context(mut self, context: SignatureContext) -> Self {
        self.context = Some(context);
        self
    }

    /// Scheme 1 (Ed25519) needs an 8-byte key id and a 64-byte signature;
    /// other schemes pass through unchecked.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let subject = Subject::Capsule("signature");
        if self.scheme == SignatureScheme::Ed25519 {
            if self.key_id.len() != ED25519_KEY_ID_LEN {
                return Err(Problem::invalid(
                    format!(
                        "an ed25519 key id is {ED25519_KEY_ID_LEN} bytes, got {}",
                        self.key_id.len()
                    ),
                    "the key id is the first 8 bytes of SHA-256 over the 32-byte verifying key",
                )
                .at(subject, field::KEY_ID));
            }
            if self.bytes.len() != ED25519_SIGNATURE_LEN {
                return Err(Problem::invalid(
                    format!(
                        "an ed25519 signature is {ED25519_SIGNATURE_LEN} bytes, got {}",
                        self.bytes.len()
                    ),
                    "put the raw 64-byte Ed25519 signature here",
                )
                .at(subject, field::BYTES));
            }
        }
        Ok(())
    }
}

wire_payload!(SignatureContext, "signature-context");
wire_payload!(Signature, "signature");
#[cfg(feature = "json")]
crate::table::json_payload!(SignatureContext);
#[cfg(feature = "json")]
crate::table::json_payload!(Signature);
