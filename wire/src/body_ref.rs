//! The claim check: a body that names external bytes instead of carrying them.

use crate::cbor::{Reader, Seen, required, write_bytes, write_map, write_text, write_uint};
use crate::error::DecodeError;
use crate::payload::{Codec, wire_payload};
use crate::validation::{Problem, Subject, ValidationError};

/// Longest `reference`, in bytes.
pub const BODY_REF_MAX_LEN: usize = 1024;

/// The body of an envelope whose content type is `ref`: where the real bytes
/// are, and their size and SHA-256 so a consumer can verify what it fetched.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BodyRef {
    /// Where the bytes are (1..=1024 bytes of text, e.g. a URL).
    pub reference: String,
    /// Their size.
    pub size_bytes: u64,
    /// Their SHA-256.
    pub sha256: [u8; 32],
    /// How they are encrypted; absent means plaintext.
    pub encryption: Option<u8>,
}

const REFERENCE: &str = "reference";
const SIZE_BYTES: &str = "size_bytes";
const SHA256: &str = "sha256";
const ENCRYPTION: &str = "encryption";

impl BodyRef {
    /// A plaintext claim check.
    pub fn new(reference: impl Into<String>, size_bytes: u64, sha256: [u8; 32]) -> Self {
        Self {
            reference: reference.into(),
            size_bytes,
            sha256,
            encryption: None,
        }
    }

    /// `reference` is 1..=1024 bytes.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let subject = Subject::Capsule("body ref");
        let len = self.reference.len();
        if len == 0 {
            return Err(
                Problem::invalid("it is empty", "name where the bytes can be fetched")
                    .at(subject, REFERENCE),
            );
        }
        if len > BODY_REF_MAX_LEN {
            return Err(Problem::too_large(
                len,
                BODY_REF_MAX_LEN,
                "bytes",
                "use a shorter locator for the stored bytes",
            )
            .at(subject, REFERENCE));
        }
        Ok(())
    }
}

impl Codec for BodyRef {
    const NAME: &'static str = "body ref";

    fn write(&self, out: &mut Vec<u8>) {
        write_map(out, 3 + usize::from(self.encryption.is_some()));
        write_text(out, REFERENCE);
        write_text(out, &self.reference);
        write_text(out, SIZE_BYTES);
        write_uint(out, self.size_bytes);
        write_text(out, SHA256);
        write_bytes(out, &self.sha256);
        if let Some(e) = self.encryption {
            write_text(out, ENCRYPTION);
            write_uint(out, u64::from(e));
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let (mut reference, mut size_bytes, mut sha256, mut encryption) = (None, None, None, None);
        for _ in 0..entries {
            match r.key()? {
                REFERENCE => {
                    seen.mark(0, REFERENCE)?;
                    reference = Some(r.text(REFERENCE)?.to_owned());
                }
                SIZE_BYTES => {
                    seen.mark(1, SIZE_BYTES)?;
                    size_bytes = Some(r.uint(SIZE_BYTES)?);
                }
                SHA256 => {
                    seen.mark(2, SHA256)?;
                    let b = r.bytes(SHA256)?;
                    let digest: [u8; 32] = b.try_into().map_err(|_| DecodeError::BadLength {
                        field: SHA256,
                        expected: 32,
                        len: b.len(),
                    })?;
                    sha256 = Some(digest);
                }
                ENCRYPTION => {
                    seen.mark(3, ENCRYPTION)?;
                    encryption = Some(r.uint_as(ENCRYPTION, "u8")?);
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(BodyRef {
            reference: required(reference, REFERENCE)?,
            size_bytes: required(size_bytes, SIZE_BYTES)?,
            sha256: required(sha256, SHA256)?,
            encryption,
        })
    }
}

wire_payload!(BodyRef, "body-ref");
