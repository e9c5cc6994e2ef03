//! Text identities checked at construction: agent ids and idempotency keys.

use std::fmt;
use std::str::FromStr;

/// Longest agent id, in bytes of UTF-8.
pub const AGENT_ID_MAX_LEN: usize = 256;

/// Longest idempotency key, in bytes of UTF-8.
pub const IDEMPOTENCY_KEY_MAX_LEN: usize = 64;

/// Why text is not an agent id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentIdError {
    /// The empty string.
    #[error("an agent id cannot be empty")]
    Empty,
    /// More than 256 bytes.
    #[error("an agent id is at most {AGENT_ID_MAX_LEN} bytes of UTF-8, got {0} bytes")]
    TooLong(usize),
    /// A control character (newline, tab, NUL, ...).
    #[error("an agent id cannot contain control characters, found {character:?} at byte {index}")]
    ControlCharacter {
        /// The control character.
        character: char,
        /// Its byte offset.
        index: usize,
    },
}

/// Why text is not an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdempotencyKeyError {
    /// The empty string.
    #[error("an idempotency key cannot be empty")]
    Empty,
    /// More than 64 bytes.
    #[error(
        "an idempotency key is at most {IDEMPOTENCY_KEY_MAX_LEN} bytes of UTF-8, got {0} bytes"
    )]
    TooLong(usize),
}

/// The name an agent or service goes by: 1..=256 bytes of UTF-8 without
/// control characters. An envelope's `source` is a claim unless signed.
///
/// ```
/// use agdx_wire::AgentId;
/// let planner = AgentId::new("planner").unwrap();
/// assert_eq!(planner.as_str(), "planner");
/// assert!(AgentId::new("").is_err());
/// assert!("two\nlines".parse::<AgentId>().is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AgentId(String);

impl AgentId {
    /// Checks `id` against the agent-id rules.
    pub fn new(id: impl Into<String>) -> Result<Self, AgentIdError> {
        let id = id.into();
        if id.is_empty() {
            return Err(AgentIdError::Empty);
        }
        if id.len() > AGENT_ID_MAX_LEN {
            return Err(AgentIdError::TooLong(id.len()));
        }
        if may_hold_control(&id)
            && let Some((index, character)) = id.char_indices().find(|(_, c)| c.is_control())
        {
            return Err(AgentIdError::ControlCharacter { character, index });
        }
        Ok(Self(id))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

/// Whether `text` may hold a control character (Unicode `Cc`: U+0000 to
/// U+001F, U+007F to U+009F). A scan of every byte, without stopping early
/// so that the compiler vectorises it, rules out almost every id; only one
/// with a control byte, or with a character whose UTF-8 starts 0xC2
/// (U+0080 to U+00BF, C1 controls among them), is searched character by
/// character.
fn may_hold_control(text: &str) -> bool {
    text.bytes().fold(false, |seen, b| {
        seen | (b < 0x20) | (b == 0x7f) | (b == 0xc2)
    })
}

/// A caller-chosen key that makes a command's effect happen once:
/// 1..=64 bytes of UTF-8.
///
/// ```
/// use agdx_wire::IdempotencyKey;
/// assert!(IdempotencyKey::new("order-123-attempt-2").is_ok());
/// assert!(IdempotencyKey::new("x".repeat(65)).is_err());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IdempotencyKey(String);

impl IdempotencyKey {
    /// Checks `key` against the idempotency-key rules.
    pub fn new(key: impl Into<String>) -> Result<Self, IdempotencyKeyError> {
        let key = key.into();
        if key.is_empty() {
            return Err(IdempotencyKeyError::Empty);
        }
        if key.len() > IDEMPOTENCY_KEY_MAX_LEN {
            return Err(IdempotencyKeyError::TooLong(key.len()));
        }
        Ok(Self(key))
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The key as an owned string.
    pub fn into_string(self) -> String {
        self.0
    }
}

macro_rules! text_identity {
    ($name:ident, $err:ident) => {
        impl FromStr for $name {
            type Err = $err;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::new(s)
            }
        }

        impl TryFrom<String> for $name {
            type Error = $err;
            fn try_from(s: String) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }

        impl TryFrom<&str> for $name {
            type Error = $err;
            fn try_from(s: &str) -> Result<Self, Self::Error> {
                Self::new(s)
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }

        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::new(s).map_err(serde::de::Error::custom)
            }
        }
    };
}

text_identity!(AgentId, AgentIdError);
text_identity!(IdempotencyKey, IdempotencyKeyError);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn agent_id_bounds() {
        assert!(AgentId::new("a".repeat(256)).is_ok());
        assert_eq!(
            AgentId::new("a".repeat(257)),
            Err(AgentIdError::TooLong(257))
        );
        assert_eq!(
            AgentId::new("ab\u{7f}"),
            Err(AgentIdError::ControlCharacter {
                character: '\u{7f}',
                index: 2
            })
        );
        assert_eq!(
            AgentId::new("résumé-writer").map(|a| a.to_string()),
            Ok("résumé-writer".into())
        );
    }

    #[test]
    fn every_control_character_is_refused_and_nothing_else() {
        // Each character of the first 0x800 code points (one and two UTF-8
        // bytes, where all controls lie), behind an ordinary character and
        // before one, so the scan meets it mid-id.
        for code in 0..0x800u32 {
            let Some(c) = char::from_u32(code) else {
                continue;
            };
            let id = AgentId::new(format!("a{c}z"));
            if c.is_control() {
                assert_eq!(
                    id,
                    Err(AgentIdError::ControlCharacter {
                        character: c,
                        index: 1
                    }),
                    "U+{code:04X}"
                );
            } else {
                assert!(id.is_ok(), "U+{code:04X} refused");
            }
        }
    }

    #[test]
    fn idempotency_key_bounds() {
        assert!(IdempotencyKey::new("k".repeat(64)).is_ok());
        assert_eq!(IdempotencyKey::new(""), Err(IdempotencyKeyError::Empty));
        assert_eq!(
            IdempotencyKey::new("k".repeat(65)),
            Err(IdempotencyKeyError::TooLong(65))
        );
    }
}
