//! The claim check: large bodies travel as a BodyRef to a blob store.
//!
//! A producer puts a body larger than the threshold into the blob store and
//! sends a BodyRef (reference, size, SHA-256) with content type `ref`. A reader
//! fetches the bytes and checks size and digest before anyone sees them; a
//! mismatch is a typed error naming what differs, and the worker dead-letters
//! the record `rejected`.
//!
//! The body's own content type goes in the envelope's metadata under
//! [`META_REF_CONTENT_TYPE`], so the resolved body has it back: the
//! `agdx.ct` header names the BodyRef (`ref`), and the BodyRef has no field
//! for it.

use std::sync::Arc;

use agdx_wire::{AgentEnvelope, BodyRef, Bytes, ContentType, Metadata, WireError};
use sha2::{Digest, Sha256};

use crate::blob::{BlobError, BlobStore};

/// Default threshold: bodies above 256 KiB go to the blob store.
pub const DEFAULT_CLAIM_CHECK_THRESHOLD: usize = 256 * 1024;

/// The metadata key naming the content type of a claim-checked body, as
/// its code (the `agdx.ct` dictionary): this runtime's own key, not one the
/// wire format pins. Absent means `raw`, as from a sender that does not
/// write it.
pub const META_REF_CONTENT_TYPE: &str = "agdx.ref.ct";

/// A blob store and the body size above which it is used.
#[derive(Clone)]
pub struct ClaimCheck {
    store: Arc<dyn BlobStore>,
    threshold: usize,
}

/// Why a claim-checked body could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum ClaimCheckError {
    /// The body of a `ref` record is not a valid BodyRef.
    #[error("the body has content type `ref` but is not a valid BodyRef: {0}")]
    BadBodyRef(#[from] WireError),
    /// The blob could not be fetched or stored.
    #[error(transparent)]
    Blob(#[from] BlobError),
    /// The fetched bytes have another size than the BodyRef pins.
    #[error(
        "claim-checked body {reference} has {actual} bytes but its BodyRef says {expected}; the blob was changed or truncated after it was sent"
    )]
    SizeMismatch {
        /// The blob reference the BodyRef carries.
        reference: String,
        /// The size the BodyRef pins, in bytes.
        expected: u64,
        /// The size fetched, in bytes.
        actual: u64,
    },
    /// The fetched bytes have another SHA-256 than the BodyRef pins.
    #[error(
        "claim-checked body {reference} has SHA-256 {actual} but its BodyRef says {expected}; the blob was tampered with or replaced"
    )]
    DigestMismatch {
        /// The blob reference the BodyRef carries.
        reference: String,
        /// The digest the BodyRef pins, lower-case hex.
        expected: String,
        /// The digest of the fetched bytes, lower-case hex.
        actual: String,
    },
    /// The body is a claim check but this reader has no blob store.
    #[error(
        "the body is a claim check (content type `ref`) but no blob store is configured here; give this reader the blob store the sender used"
    )]
    NoStore,
    /// The BodyRef says the blob is encrypted, which this reader cannot undo.
    #[error(
        "claim-checked body {reference} is encrypted (scheme {scheme}); this reader only handles plaintext blobs"
    )]
    Encrypted {
        /// The blob reference the BodyRef carries.
        reference: String,
        /// The encryption scheme the BodyRef names.
        scheme: u8,
    },
}

impl ClaimCheckError {
    /// Whether fetching again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ClaimCheckError::Blob(e) => e.is_retryable(),
            ClaimCheckError::BadBodyRef(_) => false,
            ClaimCheckError::NoStore => false,
            ClaimCheckError::SizeMismatch { .. } => false,
            ClaimCheckError::DigestMismatch { .. } => false,
            ClaimCheckError::Encrypted { .. } => false,
        }
    }
}

/// A body as a reader hands it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Resolved {
    /// The bytes: fetched and verified when the body was a claim check.
    pub body: Bytes,
    /// The body's codec: for a claim check, the one
    /// [`META_REF_CONTENT_TYPE`] names (`raw` when none).
    pub content_type: ContentType,
    /// Whether the body came through the blob store.
    pub claim_checked: bool,
}

/// The body of `envelope` as a reader hands it on: a `ref` body is fetched
/// and verified through `check`, anything else is as it came.
pub(crate) async fn resolve_body(
    check: Option<&ClaimCheck>,
    content_type: ContentType,
    envelope: &AgentEnvelope,
) -> Result<Resolved, ClaimCheckError> {
    match (content_type, check) {
        (ContentType::Ref, Some(check)) => Ok(Resolved {
            body: check.resolve(&envelope.body).await?.into(),
            content_type: referenced_content_type(envelope.metadata.as_ref()),
            claim_checked: true,
        }),
        (ContentType::Ref, None) => Err(ClaimCheckError::NoStore),
        _ => Ok(Resolved {
            body: envelope.body.clone(),
            content_type,
            claim_checked: false,
        }),
    }
}

/// The content type [`META_REF_CONTENT_TYPE`] names; `raw` when it is
/// absent or unusable (not a code, or `ref` itself).
fn referenced_content_type(metadata: Option<&Metadata>) -> ContentType {
    let code = metadata
        .and_then(|m| m.get(META_REF_CONTENT_TYPE))
        .and_then(|v| v.as_u64())
        .and_then(|code| u8::try_from(code).ok());
    match code.map(ContentType::from_code) {
        Some(ContentType::Ref) | None => ContentType::Raw,
        Some(content_type) => content_type,
    }
}

impl ClaimCheck {
    /// Claim-checks bodies larger than `threshold` bytes into `store`.
    pub fn new(store: Arc<dyn BlobStore>, threshold: usize) -> Self {
        Self { store, threshold }
    }

    /// The size above which bodies are claim-checked.
    pub fn threshold(&self) -> usize {
        self.threshold
    }

    /// Whether a body of `len` bytes goes to the blob store.
    pub fn applies_to(&self, len: usize) -> bool {
        len > self.threshold
    }

    /// Names the body's content type in `envelope`'s metadata
    /// ([`META_REF_CONTENT_TYPE`]) when [`ClaimCheck::outgoing`] will
    /// claim-check it; `raw`, the default, is not written. Called before the
    /// envelope is validated, so the entry counts toward the metadata caps.
    pub(crate) fn keep_content_type(
        &self,
        envelope: &mut AgentEnvelope,
        content_type: ContentType,
    ) {
        if !self.applies_to(envelope.body.len())
            || matches!(content_type, ContentType::Raw | ContentType::Ref)
        {
            return;
        }
        envelope
            .metadata
            .get_or_insert_with(Metadata::new)
            .insert(META_REF_CONTENT_TYPE, u64::from(content_type.code()));
    }

    /// Stores `body` when it is over the threshold and returns what to send:
    /// the BodyRef and content type `ref`, or the body unchanged.
    pub async fn outgoing(
        &self,
        body: Vec<u8>,
        content_type: ContentType,
    ) -> Result<(Vec<u8>, ContentType), ClaimCheckError> {
        if !self.applies_to(body.len()) {
            return Ok((body, content_type));
        }
        Ok((self.store(body).await?.encode(), ContentType::Ref))
    }

    /// Puts `body` into the blob store whatever its size and returns the
    /// BodyRef pinning it.
    pub async fn store(&self, body: Vec<u8>) -> Result<BodyRef, ClaimCheckError> {
        let sha256: [u8; 32] = Sha256::digest(&body).into();
        let size_bytes = body.len() as u64;
        let reference = self.store.put(body, sha256).await?;
        Ok(BodyRef::new(reference, size_bytes, sha256))
    }

    /// Fetches and verifies the bytes a BodyRef body points at.
    pub async fn resolve(&self, body_ref_bytes: &[u8]) -> Result<Vec<u8>, ClaimCheckError> {
        let body_ref = BodyRef::decode_valid(body_ref_bytes)?;
        if let Some(scheme) = body_ref.encryption {
            return Err(ClaimCheckError::Encrypted {
                reference: body_ref.reference,
                scheme,
            });
        }
        let bytes = self.store.get(&body_ref.reference).await?;
        if bytes.len() as u64 != body_ref.size_bytes {
            return Err(ClaimCheckError::SizeMismatch {
                reference: body_ref.reference,
                expected: body_ref.size_bytes,
                actual: bytes.len() as u64,
            });
        }
        let actual: [u8; 32] = Sha256::digest(&bytes).into();
        if actual != body_ref.sha256 {
            return Err(ClaimCheckError::DigestMismatch {
                reference: body_ref.reference,
                expected: hex::encode(body_ref.sha256),
                actual: hex::encode(actual),
            });
        }
        Ok(bytes)
    }
}
