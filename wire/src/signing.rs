//! The bytes a signature covers. The wire crate stays crypto-free: the
//! runtime signs and verifies these bytes.

use crate::envelope::{AgentEnvelope, field};
use crate::payload::Codec;

/// The domain-separation prefix of every signing input.
pub const SIGNING_DOMAIN: &[u8] = b"agdx.signature.v1";

/// The signing input of `envelope`: [`SIGNING_DOMAIN`], then the CBOR of the
/// signature's [`SignatureContext`](crate::SignatureContext) if it carries
/// one, then the canonical envelope encoding with `signature` absent.
///
/// A verifier decodes, rebuilds this from the decoded envelope (re-encoding
/// is byte-identical) and checks the signature against the enrolled key.
///
/// ```
/// use agdx_wire::*;
/// let event = AgentEnvelope::event(
///     RecordId::from_u128(1),
///     ConversationId::from_u128(2),
///     AgentId::new("ledger")?,
///     b"paid".to_vec(),
/// );
/// let input = signing_input(&event);
/// assert!(input.starts_with(SIGNING_DOMAIN));
/// assert_eq!(&input[SIGNING_DOMAIN.len()..], event.encode().as_slice());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn signing_input(envelope: &AgentEnvelope) -> Vec<u8> {
    let mut out = Vec::with_capacity(SIGNING_DOMAIN.len() + 16 + envelope.size_hint());
    out.extend_from_slice(SIGNING_DOMAIN);
    if let Some(context) = envelope.signature.as_ref().and_then(|s| s.context.as_ref()) {
        context.write(&mut out);
    }
    envelope.write_fields(&mut out, |key| key != field::SIGNATURE);
    out
}
