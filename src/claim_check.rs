//! The claim check: large bodies travel as a BodyRef to a blob store.
//!
//! A producer puts a body larger than the threshold into the blob store and
//! sends a BodyRef (reference, size, SHA-256) with content type `ref`. A reader
//! fetches the bytes and checks size and digest before anyone sees them; a
//! mismatch is a typed error naming what differs, and the worker dead-letters
//! the record `rejected`.

use std::sync::Arc;

use agdx_wire::{BodyRef, ContentType, WireError};
use sha2::{Digest, Sha256};

use crate::blob::{BlobError, BlobStore};

/// Default threshold: bodies above 256 KiB go to the blob store.
pub const DEFAULT_CLAIM_CHECK_THRESHOLD: usize = 256 * 1024;

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

/// The body a reader hands on, and whether it was claim-checked: a `ref`
/// body is fetched and verified through `check`, anything else is as it came.
pub async fn resolve_body(
    check: Option<&ClaimCheck>,
    content_type: ContentType,
    body: &[u8],
) -> Result<(Vec<u8>, bool), ClaimCheckError> {
    match (content_type, check) {
        (ContentType::Ref, Some(check)) => Ok((check.resolve(body).await?, true)),
        (ContentType::Ref, None) => Err(ClaimCheckError::NoStore),
        _ => Ok((body.to_vec(), false)),
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

    /// Stores `body` when it is over the threshold and returns what to send:
    /// the BodyRef and content type `ref`, or the body unchanged.
    pub async fn outgoing(
        &self,
        body: Vec<u8>,
        content_type: ContentType,
    ) -> Result<(Vec<u8>, ContentType), ClaimCheckError> {
        if body.len() <= self.threshold {
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
