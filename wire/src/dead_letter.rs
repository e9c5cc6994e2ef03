//! The dead-letter capsule: a record the runtime gave up on, kept verbatim.

use crate::cbor::{Reader, Seen, required, write_bytes, write_map, write_text, write_uint};
use crate::dictionary::DeadLetterReason;
use crate::error::DecodeError;
use crate::payload::{Codec, wire_payload};
use crate::position::LogPosition;
use crate::validation::ValidationError;

/// A poison record set aside: where it sat, why, after how many attempts,
/// and its original encoded envelope, byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeadLetter {
    /// Where the record sat in the log.
    pub source: LogPosition,
    /// Why it was set aside.
    pub reason: DeadLetterReason,
    /// How many times it was tried.
    pub attempts: u32,
    /// A note for people.
    pub detail: Option<String>,
    /// The original payload, verbatim (it may not even decode).
    pub payload: Vec<u8>,
}

const SOURCE: &str = "source";
const REASON: &str = "reason";
const ATTEMPTS: &str = "attempts";
const DETAIL: &str = "detail";
const PAYLOAD: &str = "payload";

impl DeadLetter {
    /// A dead letter has no rules beyond its shape (the payload is kept
    /// as it was, valid or not); always `Ok`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

impl Codec for DeadLetter {
    const NAME: &'static str = "dead letter";

    fn size_hint(&self) -> usize {
        96 + self.payload.len()
    }

    fn write(&self, out: &mut Vec<u8>) {
        write_map(out, 4 + usize::from(self.detail.is_some()));
        write_text(out, SOURCE);
        self.source.write(out);
        write_text(out, REASON);
        self.reason.write(out);
        write_text(out, ATTEMPTS);
        write_uint(out, u64::from(self.attempts));
        if let Some(d) = &self.detail {
            write_text(out, DETAIL);
            write_text(out, d);
        }
        write_text(out, PAYLOAD);
        write_bytes(out, &self.payload);
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let (mut source, mut reason, mut attempts, mut detail, mut payload) =
            (None, None, None, None, None);
        for _ in 0..entries {
            match r.key()? {
                SOURCE => {
                    seen.mark(0, SOURCE)?;
                    source = Some(LogPosition::read(r, SOURCE)?);
                }
                REASON => {
                    seen.mark(1, REASON)?;
                    reason = Some(DeadLetterReason::read(r, REASON)?);
                }
                ATTEMPTS => {
                    seen.mark(2, ATTEMPTS)?;
                    attempts = Some(r.uint_as(ATTEMPTS, "u32")?);
                }
                DETAIL => {
                    seen.mark(3, DETAIL)?;
                    detail = Some(r.text(DETAIL)?.to_owned());
                }
                PAYLOAD => {
                    seen.mark(4, PAYLOAD)?;
                    payload = Some(r.bytes(PAYLOAD)?.to_vec());
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(DeadLetter {
            source: required(source, SOURCE)?,
            reason: required(reason, REASON)?,
            attempts: required(attempts, ATTEMPTS)?,
            detail,
            payload: required(payload, PAYLOAD)?,
        })
    }
}

wire_payload!(DeadLetter, "dead-letter");
