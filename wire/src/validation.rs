//! The vocabulary of broken rules: what is invalid, which field, why, and
//! how to comply. Every payload's `validate` speaks it; it sits below the
//! payloads and imports none of them.

use std::fmt;

use crate::kind::Kind;

/// Longest `operation`, `tool` and `finish_reason`, in bytes.
pub const TEXT_FIELD_MAX_LEN: usize = 256;

/// What a validation error is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subject {
    /// An envelope of this kind.
    Envelope(Kind),
    /// A capsule, by its readable name (`"error body"`, `"agent card"`, ...).
    Capsule(&'static str),
}

impl fmt::Display for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::Envelope(kind) => write!(f, "{kind} envelope"),
            Subject::Capsule(name) => f.write_str(name),
        }
    }
}

/// Why a field broke a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    /// Required here but absent.
    Missing,
    /// Present but not allowed here.
    Forbidden,
    /// Over its cap.
    TooLarge {
        /// The measured size.
        actual: usize,
        /// The cap.
        limit: usize,
        /// What is counted (`"bytes"`, `"entries"`, ...).
        unit: &'static str,
    },
    /// Present, but the value is not allowed.
    InvalidValue(String),
}

/// A payload that decoded but breaks a rule of the contract. Names the
/// subject (envelope kind or capsule), the field and the reason, and says
/// what to do about it.
///
/// ```
/// use agdx_wire::{AgentEnvelope, AgentId, ConversationId, Kind, Reason, RecordId};
/// let mut cmd = AgentEnvelope::event(
///     RecordId::from_u128(1),
///     ConversationId::from_u128(2),
///     AgentId::new("planner").unwrap(),
///     b"x".to_vec(),
/// );
/// cmd.kind = Kind::Command;
/// let err = cmd.validate().unwrap_err();
/// assert_eq!((err.field, &err.reason), ("correlation", &Reason::Missing));
/// assert!(err.to_string().starts_with("command envelope is missing `correlation`: "));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidationError {
    /// What is invalid.
    pub subject: Subject,
    /// The offending field.
    pub field: &'static str,
    /// Why.
    pub reason: Reason,
    /// What the rule is for and how to comply; may be empty.
    pub hint: &'static str,
}

impl fmt::Display for ValidationError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (subject, field) = (self.subject, self.field);
        match &self.reason {
            Reason::Missing => write!(f, "{subject} is missing `{field}`")?,
            Reason::Forbidden => write!(f, "{subject} must not carry `{field}`")?,
            Reason::TooLarge {
                actual,
                limit,
                unit,
            } => write!(
                f,
                "{subject} has a `{field}` that is too large: {actual} {unit}, the cap is {limit}"
            )?,
            Reason::InvalidValue(detail) => {
                write!(f, "{subject} has an invalid `{field}`: {detail}")?
            }
        }
        if !self.hint.is_empty() {
            let sep = if matches!(self.reason, Reason::Missing | Reason::Forbidden) {
                ": "
            } else {
                "; "
            };
            write!(f, "{sep}{}", self.hint)?;
        }
        Ok(())
    }
}

impl std::error::Error for ValidationError {}

/// A broken rule before it is placed on a subject and field.
#[derive(Debug, Clone)]
pub(crate) struct Problem {
    reason: Reason,
    hint: &'static str,
}

impl Problem {
    pub(crate) fn invalid(detail: impl Into<String>, hint: &'static str) -> Self {
        Self {
            reason: Reason::InvalidValue(detail.into()),
            hint,
        }
    }

    pub(crate) fn too_large(
        actual: usize,
        limit: usize,
        unit: &'static str,
        hint: &'static str,
    ) -> Self {
        Self {
            reason: Reason::TooLarge {
                actual,
                limit,
                unit,
            },
            hint,
        }
    }

    pub(crate) fn at(self, subject: Subject, field: &'static str) -> ValidationError {
        ValidationError {
            subject,
            field,
            reason: self.reason,
            hint: self.hint,
        }
    }
}

/// Checks a text field against the 256-byte cap.
pub(crate) fn check_text_cap(value: Option<&str>, hint: &'static str) -> Result<(), Problem> {
    match value {
        Some(v) if v.len() > TEXT_FIELD_MAX_LEN => Err(Problem::too_large(
            v.len(),
            TEXT_FIELD_MAX_LEN,
            "bytes",
            hint,
        )),
        _ => Ok(()),
    }
}
