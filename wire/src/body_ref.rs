//! The claim check: a body that names external bytes instead of carrying them.

use crate::payload::wire_payload;
use crate::table::{Digest, Text, Uint, wire_struct};
use crate::validation::{Problem, Subject, ValidationError};

/// Longest `reference`, in bytes.
pub const BODY_REF_MAX_LEN: usize = 1024;

wire_struct! {
    /// The body of an envelope whose content type is `ref`: where the real bytes
    /// are, and their size and SHA-256 so a consumer can verify what it fetched.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct BodyRef {
        cbor: "body ref",
        json: "body ref",
        keys: field;
        /// Where the bytes are (1..=1024 bytes of text, e.g. a URL).
        pub reference: String [REFERENCE = "reference", Text, required],
        /// Their size.
        pub size_bytes: u64 [SIZE_BYTES = "size_bytes", Uint, required],
        /// Their SHA-256.
        pub sha256: [u8; 32] [SHA256 = "sha256", Digest, required],
        /// How they are encrypted; absent means plaintext.
        pub encryption: Option<u8> [ENCRYPTION = "encryption", Uint, optional],
    }
}

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
                    .at(subject, field::REFERENCE),
            );
        }
        if len > BODY_REF_MAX_LEN {
            return Err(Problem::too_large(
                len,
                BODY_REF_MAX_LEN,
                "bytes",
                "use a shorter locator for the stored bytes",
            )
            .at(subject, field::REFERENCE));
        }
        Ok(())
    }
}

wire_payload!(BodyRef, "body-ref");
#[cfg(feature = "json")]
crate::table::json_payload!(BodyRef);
