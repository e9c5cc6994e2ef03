//! Signatures over an envelope, and the context a signature binds.

use crate::cbor::{Reader, Seen, required, write_bytes, write_map, write_text, write_uint};
use crate::dictionary::{ContentType, SignatureScheme};
use crate::error::DecodeError;
use crate::payload::{Codec, wire_payload};
use crate::validation::{Problem, Subject, ValidationError};

/// Length of an Ed25519 key id: the first 8 bytes of SHA-256 over the key.
pub const ED25519_KEY_ID_LEN: usize = 8;
/// Length of an Ed25519 signature.
pub const ED25519_SIGNATURE_LEN: usize = 64;

/// What a signature binds besides the envelope: when set, the record's
/// `agdx.ct` / `agdx.av` headers must equal these values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SignatureContext {
    /// The body's content type.
    pub content_type: Option<ContentType>,
    /// The envelope wire version.
    pub agent_version: Option<u32>,
}

/// A signature over an envelope (see [`signing_input`](crate::signing_input)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Signature {
    /// How it was made.
    pub scheme: SignatureScheme,
    /// Which key made it (Ed25519: 8 bytes).
    pub key_id: Vec<u8>,
    /// The signature (Ed25519: 64 bytes).
    pub bytes: Vec<u8>,
    /// The bound context, if any.
    pub context: Option<SignatureContext>,
}

const CONTENT_TYPE: &str = "content_type";
const AGENT_VERSION: &str = "agent_version";
const SCHEME: &str = "scheme";
const KEY_ID: &str = "key_id";
const BYTES: &str = "bytes";
const CONTEXT: &str = "context";

impl SignatureContext {
    /// A signature context has no rules beyond its shape; always `Ok`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

impl Codec for SignatureContext {
    const NAME: &'static str = "signature context";

    fn write(&self, out: &mut Vec<u8>) {
        write_map(
            out,
            usize::from(self.content_type.is_some()) + usize::from(self.agent_version.is_some()),
        );
        if let Some(ct) = self.content_type {
            write_text(out, CONTENT_TYPE);
            ct.write(out);
        }
        if let Some(v) = self.agent_version {
            write_text(out, AGENT_VERSION);
            write_uint(out, u64::from(v));
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let mut ctx = SignatureContext::default();
        for _ in 0..entries {
            match r.key()? {
                CONTENT_TYPE => {
                    seen.mark(0, CONTENT_TYPE)?;
                    ctx.content_type = Some(ContentType::read(r, CONTENT_TYPE)?);
                }
                AGENT_VERSION => {
                    seen.mark(1, AGENT_VERSION)?;
                    ctx.agent_version = Some(r.uint_as(AGENT_VERSION, "u32")?);
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(ctx)
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
                .at(subject, KEY_ID));
            }
            if self.bytes.len() != ED25519_SIGNATURE_LEN {
                return Err(Problem::invalid(
                    format!(
                        "an ed25519 signature is {ED25519_SIGNATURE_LEN} bytes, got {}",
                        self.bytes.len()
                    ),
                    "put the raw 64-byte Ed25519 signature here",
                )
                .at(subject, BYTES));
            }
        }
        Ok(())
    }
}

impl Codec for Signature {
    const NAME: &'static str = "signature";

    fn write(&self, out: &mut Vec<u8>) {
        write_map(out, 3 + usize::from(self.context.is_some()));
        write_text(out, SCHEME);
        self.scheme.write(out);
        write_text(out, KEY_ID);
        write_bytes(out, &self.key_id);
        write_text(out, BYTES);
        write_bytes(out, &self.bytes);
        if let Some(ctx) = &self.context {
            write_text(out, CONTEXT);
            ctx.write(out);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let (mut scheme, mut key_id, mut bytes, mut context) = (None, None, None, None);
        for _ in 0..entries {
            match r.key()? {
                SCHEME => {
                    seen.mark(0, SCHEME)?;
                    scheme = Some(SignatureScheme::read(r, SCHEME)?);
                }
                KEY_ID => {
                    seen.mark(1, KEY_ID)?;
                    key_id = Some(r.bytes(KEY_ID)?.to_vec());
                }
                BYTES => {
                    seen.mark(2, BYTES)?;
                    bytes = Some(r.bytes(BYTES)?.to_vec());
                }
                CONTEXT => {
                    seen.mark(3, CONTEXT)?;
                    context = Some(SignatureContext::read(r).map_err(|e| e.within(CONTEXT))?);
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(Signature {
            scheme: required(scheme, SCHEME)?,
            key_id: required(key_id, KEY_ID)?,
            bytes: required(bytes, BYTES)?,
            context,
        })
    }
}

wire_payload!(SignatureContext, "signature-context");
wire_payload!(Signature, "signature");
