//! Signing envelopes (docs/wire.md, "Signing").
//!
//! A [`Signer`] holds one Ed25519 secret key. It signs the envelope's
//! signing input (`agdx.signature.v1`, the bound [`SignatureContext`] if
//! any, then the canonical envelope without its signature) and puts the
//! [`Signature`] in the envelope, replacing any signature already there.
//! Ed25519 is deterministic: the same key and envelope give the same bytes
//! in every implementation.
//!
//! ```
//! use agdx::trust::{KeyEntry, KeyKind, KeyRegistry, Observed, Signer, Verifier};
//! use agdx::wire::{AgentEnvelope, AgentId, ConversationId, RecordId};
//!
//! let signer = Signer::from_seed(&[1; 32]);
//! let event = AgentEnvelope::event(
//!     RecordId::from_u128(1),
//!     ConversationId::from_u128(2),
//!     AgentId::new("ledger")?,
//!     b"paid".to_vec(),
//! );
//! let signed = signer.sign(event, None);
//!
//! let mut registry = KeyRegistry::new();
//! registry.insert(KeyEntry::new(AgentId::new("ledger")?, KeyKind::Agent, signer.public_key(), None, None))?;
//! let verified = Verifier::new(registry).verify(&signed.encode(), &Observed::file(0))?;
//! assert_eq!(verified.principal.as_str(), "ledger");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::path::Path;

use agdx_wire::{
    AgentEnvelope, ContentType, ED25519_SIGNATURE_LEN, Signature, SignatureContext, WIRE_VERSION,
    signing_input,
};
use ed25519_dalek::{Signer as _, SigningKey};

use super::key::{self, KeyFileError, KeyId, PublicKey, SEED_LEN};

/// Which parts of a record's headers a signature binds (its
/// [`SignatureContext`]); a verifier then requires the record's `agdx.ct`
/// and `agdx.av` headers to say the same.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContextBinding {
    /// Bind the body's content type (`agdx.ct`).
    pub content_type: bool,
    /// Bind the envelope wire version (`agdx.av`).
    pub agent_version: bool,
}

impl ContextBinding {
    /// Bind nothing: the signature covers the envelope alone.
    pub const NONE: Self = Self {
        content_type: false,
        agent_version: false,
    };
    /// Bind both the content type and the wire version.
    pub const ALL: Self = Self {
        content_type: true,
        agent_version: true,
    };

    /// The context for a record whose body has `content_type`; `None` when
    /// nothing is bound.
    pub fn context_for(self, content_type: ContentType) -> Option<SignatureContext> {
        (self.content_type || self.agent_version).then(|| SignatureContext {
            content_type: self.content_type.then_some(content_type),
            agent_version: self.agent_version.then_some(WIRE_VERSION),
        })
    }
}

/// An Ed25519 signing key with its id; signs envelopes and bytes.
///
/// The secret never appears in `Debug` output or in errors.
#[derive(Clone)]
pub struct Signer {
    key: SigningKey,
    public: PublicKey,
    key_id: KeyId,
    binding: ContextBinding,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("key_id", &self.key_id)
            .field("binding", &self.binding)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// The signer of a 32-byte Ed25519 seed.
    pub fn from_seed(seed: &[u8; SEED_LEN]) -> Self {
        Self::from_key(SigningKey::from_bytes(seed))
    }

    fn from_key(key: SigningKey) -> Self {
        // An Ed25519 public key derived from a seed is never weak: it is a
        // multiple of the base point by a clamped scalar.
        let public = PublicKey::from_bytes(&key.verifying_key().to_bytes())
            .unwrap_or_else(|_| unreachable!("a derived public key has large order"));
        Self {
            key_id: public.key_id(),
            key,
            public,
            binding: ContextBinding::NONE,
        }
    }

    /// A new key from the operating system's randomness.
    pub fn generate() -> Result<Self, KeyFileError> {
        Ok(Self::from_seed(&*key::random_seed()?))
    }

    /// Reads a secret key file (64 hex characters, whitespace ignored),
    /// refusing one that the group or others can access.
    pub fn from_key_file(path: &Path) -> Result<Self, KeyFileError> {
        key::read_seed(path).map(Self::from_key)
    }

    /// Writes this key's seed to a new file with mode `0600`; an existing
    /// file is never replaced.
    pub fn write_key_file(&self, path: &Path) -> Result<(), KeyFileError> {
        key::write_seed(path, &self.key)
    }

    /// Binds a context into every signature made by
    /// [`sign_record`](Self::sign_record).
    pub fn with_binding(mut self, binding: ContextBinding) -> Self {
        self.binding = binding;
        self
    }

    /// What [`sign_record`](Self::sign_record) binds.
    pub fn binding(&self) -> ContextBinding {
        self.binding
    }

    /// The public key (enroll it in a key registry).
    pub fn public_key(&self) -> PublicKey {
        self.public
    }

    /// The key id signatures carry.
    pub fn key_id(&self) -> KeyId {
        self.key_id
    }

    /// Signs arbitrary bytes (for edge protocols with their own framing).
    pub fn sign_bytes(&self, message: &[u8]) -> [u8; ED25519_SIGNATURE_LEN] {
        self.key.sign(message).to_bytes()
    }

    /// Signs `envelope`, binding `context` when given; any signature it
    /// carried is replaced.
    pub fn sign(
        &self,
        mut envelope: AgentEnvelope,
        context: Option<SignatureContext>,
    ) -> AgentEnvelope {
        // The signing input holds the context, so the signature field is in
        // place (with empty bytes) before the input is built.
        let mut signature = Signature::ed25519(self.key_id.to_bytes(), [0; ED25519_SIGNATURE_LEN]);
        signature.context = context;
        envelope.signature = Some(signature);
        let bytes = self.sign_bytes(&signing_input(&envelope));
        if let Some(signature) = envelope.signature.as_mut() {
            signature.bytes = bytes.to_vec();
        }
        envelope
    }

    /// Signs an envelope about to be appended with a body of
    /// `content_type`, binding what [`with_binding`](Self::with_binding) said.
    pub fn sign_record(&self, envelope: AgentEnvelope, content_type: ContentType) -> AgentEnvelope {
        self.sign(envelope, self.binding.context_for(content_type))
    }
}
