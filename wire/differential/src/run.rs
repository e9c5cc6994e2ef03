//! Decode, validate and re-encode one input in each implementation.

use std::panic::{AssertUnwindSafe, catch_unwind};

use agdx_wire as ours;
use laser_wire::agent as theirs;
use laser_wire::framing::{decode_named, encode_named};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What one implementation made of an input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Decoded and validated: the re-encoding.
    Accepted(Vec<u8>),
    /// Decoded, then refused by validation.
    Invalid(String),
    /// Did not decode.
    Undecodable(String),
    /// Panicked (a failure for agdx whatever the reference does).
    Panicked,
}

impl Outcome {
    pub fn is_rejection(&self) -> bool {
        matches!(self, Outcome::Invalid(_) | Outcome::Undecodable(_))
    }

    /// Whether the two agree: the same bytes, or both refuse.
    pub fn agrees_with(&self, other: &Outcome) -> bool {
        match (self, other) {
            (Outcome::Accepted(a), Outcome::Accepted(b)) => a == b,
            (a, b) => a.is_rejection() && b.is_rejection(),
        }
    }

    pub fn short(&self) -> String {
        match self {
            Outcome::Accepted(bytes) => {
                format!("accepted, re-encoded to {}", crate::shortened(&hex(bytes)))
            }
            Outcome::Invalid(why) => format!("invalid: {why}"),
            Outcome::Undecodable(why) => format!("does not decode: {why}"),
            Outcome::Panicked => "panicked".to_owned(),
        }
    }
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The payload types both implementations have.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Payload {
    Envelope,
    ErrorBody,
    BodyRef,
    DeadLetter,
    Signature,
    SignatureContext,
    Card,
    Presence,
    Usage,
    FoldSnapshot,
}

impl Payload {
    const ALL: [Payload; 10] = [
        Payload::Envelope,
        Payload::ErrorBody,
        Payload::BodyRef,
        Payload::DeadLetter,
        Payload::Signature,
        Payload::SignatureContext,
        Payload::Card,
        Payload::Presence,
        Payload::Usage,
        Payload::FoldSnapshot,
    ];

    /// The payload an `agdx wire --type` name (our fixtures' manifest) names.
    pub fn from_type_name(name: &str) -> Option<Payload> {
        Self::ALL.into_iter().find(|p| p.type_name() == name)
    }

    /// Its name in agdx's tools.
    fn type_name(self) -> &'static str {
        use ours::WirePayload;
        match self {
            Payload::Envelope => ours::AgentEnvelope::TYPE_NAME,
            Payload::ErrorBody => ours::ErrorBody::TYPE_NAME,
            Payload::BodyRef => ours::BodyRef::TYPE_NAME,
            Payload::DeadLetter => ours::DeadLetter::TYPE_NAME,
            Payload::Signature => ours::Signature::TYPE_NAME,
            Payload::SignatureContext => ours::SignatureContext::TYPE_NAME,
            Payload::Card => ours::AgentCard::TYPE_NAME,
            Payload::Presence => ours::AgentPresence::TYPE_NAME,
            Payload::Usage => ours::TokenUsage::TYPE_NAME,
            Payload::FoldSnapshot => ours::FoldSnapshot::TYPE_NAME,
        }
    }
}

/// agdx's outcome.
pub fn agdx(payload: Payload, bytes: &[u8]) -> Outcome {
    guarded(|| match payload {
        Payload::Envelope => ours_run::<ours::AgentEnvelope>(bytes),
        Payload::ErrorBody => ours_run::<ours::ErrorBody>(bytes),
        Payload::BodyRef => ours_run::<ours::BodyRef>(bytes),
        Payload::DeadLetter => ours_run::<ours::DeadLetter>(bytes),
        Payload::Signature => ours_run::<ours::Signature>(bytes),
        Payload::SignatureContext => ours_run::<ours::SignatureContext>(bytes),
        Payload::Card => ours_run::<ours::AgentCard>(bytes),
        Payload::Presence => ours_run::<ours::AgentPresence>(bytes),
        Payload::Usage => ours_run::<ours::TokenUsage>(bytes),
        Payload::FoldSnapshot => ours_run::<ours::FoldSnapshot>(bytes),
    })
}

/// The reference's outcome.
pub fn reference(payload: Payload, bytes: &[u8]) -> Outcome {
    guarded(|| match payload {
        Payload::Envelope => theirs_run::<theirs::AgentEnvelope, _>(bytes, theirs::validate),
        Payload::ErrorBody => theirs_run::<theirs::AgentErrorBody, _>(bytes, no_rules),
        Payload::BodyRef => theirs_run::<theirs::BodyRef, _>(bytes, theirs::BodyRef::validate),
        Payload::DeadLetter => theirs_run::<theirs::AgentDeadLetter, _>(bytes, no_rules),
        Payload::Signature => {
            theirs_run::<theirs::Signature, _>(bytes, theirs::Signature::validate)
        }
        Payload::SignatureContext => theirs_run::<theirs::SignatureContext, _>(bytes, no_rules),
        Payload::Card => theirs_run::<theirs::AgentCard, _>(bytes, theirs::AgentCard::validate),
        Payload::Presence => {
            theirs_run::<theirs::AgentPresence, _>(bytes, theirs::AgentPresence::validate)
        }
        Payload::Usage => theirs_run::<theirs::TokenUsage, _>(bytes, no_rules),
        Payload::FoldSnapshot => {
            theirs_run::<laser_wire::snapshot::FoldSnapshot, _>(bytes, no_rules)
        }
    })
}

/// The reference has no rules for this payload beyond decoding.
fn no_rules<T>(_: &T) -> Result<(), std::convert::Infallible> {
    Ok(())
}

fn guarded(run: impl FnOnce() -> Outcome) -> Outcome {
    catch_unwind(AssertUnwindSafe(run)).unwrap_or(Outcome::Panicked)
}

fn ours_run<T: ours::WirePayload>(bytes: &[u8]) -> Outcome {
    match T::decode(bytes) {
        Err(e) => Outcome::Undecodable(e.to_string()),
        Ok(value) => match value.validate() {
            Err(e) => Outcome::Invalid(e.to_string()),
            Ok(()) => Outcome::Accepted(value.encode()),
        },
    }
}

fn theirs_run<T, E: std::fmt::Display>(
    bytes: &[u8],
    validate: impl FnOnce(&T) -> Result<(), E>,
) -> Outcome
where
    T: Serialize + DeserializeOwned,
{
    match decode_named::<T>(bytes) {
        Err(e) => Outcome::Undecodable(e.to_string()),
        Ok(value) => match validate(&value) {
            Err(e) => Outcome::Invalid(e.to_string()),
            Ok(()) => match encode_named(&value) {
                Ok(again) => Outcome::Accepted(again),
                Err(e) => Outcome::Invalid(format!("does not encode: {e}")),
            },
        },
    }
}

/// The reference's signing input for a decoded envelope: the domain, the
/// context's CBOR when the signature carries one, then the envelope encoded
/// without its signature (what its SDK signs and verifies).
pub fn reference_signing_input(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut envelope: theirs::AgentEnvelope = decode_named(bytes).map_err(|e| e.to_string())?;
    let signature = envelope.signature.take().ok_or("no signature")?;
    let mut input = theirs::SIGNATURE_DOMAIN.to_vec();
    if let Some(context) = &signature.context {
        input.extend(encode_named(context).map_err(|e| e.to_string())?);
    }
    input.extend(encode_named(&envelope).map_err(|e| e.to_string())?);
    Ok(input)
}
