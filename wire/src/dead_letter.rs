//! The dead-letter capsule: a record the runtime gave up on, kept verbatim.

use crate::dictionary::DeadLetterReason;
use crate::envelope::AgentEnvelope;
use crate::payload::wire_payload;
use crate::position::LogPosition;
use crate::table::{Dict, Nested, Shown, Text, Uint, wire_struct};
use crate::validation::ValidationError;

wire_struct! {
    /// A poison record set aside: where it sat, why, after how many attempts,
    /// and its original encoded envelope, byte for byte.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct DeadLetter {
        cbor: "dead letter",
        json: "dead letter",
        keys: field,
        size_hint: |d| 96 + d.payload.len();
        /// Where the record sat in the log.
        pub source: LogPosition [SOURCE = "source", Shown, required],
        /// Why it was set aside.
        pub reason: DeadLetterReason [REASON = "reason", Dict, required],
        /// How many times it was tried.
        pub attempts: u32 [ATTEMPTS = "attempts", Uint, required],
        /// A note for people.
        pub detail: Option<String> [DETAIL = "detail", Text, optional],
        /// The original payload, verbatim (it may not even decode).
        pub payload: Vec<u8> [PAYLOAD = "payload", Nested<AgentEnvelope>, required],
    }
}

impl DeadLetter {
    /// A dead letter has no rules beyond its shape (the payload is kept
    /// as it was, valid or not); always `Ok`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

wire_payload!(DeadLetter, "dead-letter");
#[cfg(feature = "json")]
crate::table::json_payload!(DeadLetter);
