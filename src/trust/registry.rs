//! The key registry: which key belongs to whom, and when it may sign.
//!
//! The registry is trusted configuration, never something read off the
//! log: a JSON file (`--keys FILE` / `AGDX_KEYS`) that maps each key id to
//! a principal (the agent id its signatures may claim as `source`), a kind
//! (`agent` or `operator`: only operator keys sign control facts), the
//! public key, and a validity window. A key verifies a record only when the
//! record's log timestamp lies inside `[valid_from, valid_to)` and before
//! `revoked_at`, so replaying history judges each record by the keys that
//! were valid when it landed.
//!
//! ```json
//! {
//!   "keys": [
//!     {
//!       "key_id": "5c1e0c0e8ad9bd3a",
//!       "principal": "ops",
//!       "kind": "operator",
//!       "public_key": "1f4c…(64 hex characters)",
//!       "valid_from": "2025-06-01T00:00:00Z",
//!       "valid_to": "2025-08-30T00:00:00Z"
//!     }
//!   ]
//! }
//! ```
//!
//! `agdx keys generate|list|revoke` edit and show it. A registry file that
//! anyone may write is refused: whoever can change it decides which keys
//! are trusted.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use agdx_wire::AgentId;
use serde::{Deserialize, Serialize};

use super::key::{KeyId, PublicKey};
use super::time::{format_time, rfc3339_opt};
use crate::file_mode::{Refused, read_text, world_writable};

/// What a key may sign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyKind {
    /// An agent's key: signs its commands and replies.
    Agent,
    /// An operator's key: may also sign control facts (quarantine).
    Operator,
}

impl KeyKind {
    /// `agent` or `operator`.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Agent => "agent",
            KeyKind::Operator => "operator",
        }
    }
}

impl std::fmt::Display for KeyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.as_str())
    }
}

/// One enrolled key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyEntry {
    /// The key's id; must match the public key.
    pub key_id: KeyId,
    /// Who signs with it: the `source` its signatures may claim.
    pub principal: AgentId,
    /// Agent or operator key.
    pub kind: KeyKind,
    /// The Ed25519 public key.
    pub public_key: PublicKey,
    /// Valid from this time on (epoch µs); always when absent.
    #[serde(default, with = "rfc3339_opt", skip_serializing_if = "Option::is_none")]
    pub valid_from: Option<u64>,
    /// Valid until just before this time (epoch µs); forever when absent.
    #[serde(default, with = "rfc3339_opt", skip_serializing_if = "Option::is_none")]
    pub valid_to: Option<u64>,
    /// Revoked from this time on (epoch µs): records that landed before it
    /// still verify, later ones do not.
    #[serde(default, with = "rfc3339_opt", skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<u64>,
}

/// Where a time falls relative to a key's validity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Validity {
    /// The key may sign at that time.
    Valid,
    /// Before `valid_from`.
    NotYetValid(u64),
    /// At or after `valid_to`.
    Expired(u64),
    /// At or after `revoked_at`.
    Revoked(u64),
}

impl KeyEntry {
    /// An entry for `public_key`, valid from `valid_from` for as long as
    /// `valid_to` says.
    pub fn new(
        principal: AgentId,
        kind: KeyKind,
        public_key: PublicKey,
        valid_from: Option<u64>,
        valid_to: Option<u64>,
    ) -> Self {
        Self {
            key_id: public_key.key_id(),
            principal,
            kind,
            public_key,
            valid_from,
            valid_to,
            revoked_at: None,
        }
    }

    /// Whether the key may sign a record that landed at `at_micros`.
    /// Revocation is reported before expiry: it is the stronger statement.
    pub fn validity_at(&self, at_micros: u64) -> Validity {
        if let Some(revoked) = self.revoked_at.filter(|r| at_micros >= *r) {
            return Validity::Revoked(revoked);
        }
        if let Some(from) = self.valid_from.filter(|f| at_micros < *f) {
            return Validity::NotYetValid(from);
        }
        if let Some(to) = self.valid_to.filter(|t| at_micros >= *t) {
            return Validity::Expired(to);
        }
        Validity::Valid
    }

    /// The window as text, for listings: `from … until …, revoked at …`.
    pub fn describe_window(&self) -> String {
        let from = self
            .valid_from
            .map_or_else(|| "the start".to_owned(), format_time);
        let to = self
            .valid_to
            .map_or_else(|| "never".to_owned(), format_time);
        let mut text = format!("from {from} until {to}");
        if let Some(revoked) = self.revoked_at {
            text.push_str(&format!(", revoked at {}", format_time(revoked)));
        }
        text
    }
}

/// Why a registry could not be loaded, saved or changed.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The file could not be read or written.
    #[error("key registry {}: {source}", path.display())]
    Io {
        /// The registry file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// Anyone may write the file, so anyone could enroll a key.
    #[error(
        "key registry {} can be changed by anyone (mode {mode:04o}), and it decides which keys are trusted: run `chmod o-w {}`",
        path.display(), path.display()
    )]
    WorldWritable {
        /// The registry file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The file is not a registry.
    #[error(
        "key registry {}: {source}; it is JSON {{\"keys\": [{{\"key_id\", \"principal\", \"kind\", \"public_key\", \"valid_from\"?, \"valid_to\"?, \"revoked_at\"?}}]}}",
        path.display()
    )]
    Format {
        /// The registry file.
        path: PathBuf,
        /// What is wrong with it.
        source: serde_json::Error,
    },
    /// An entry's key id is not its public key's.
    #[error(
        "key registry: the entry for principal '{principal}' lists key id {listed}, but its public key's id is {computed}; fix the key_id (or the public key)"
    )]
    KeyIdMismatch {
        /// The principal of the entry.
        principal: AgentId,
        /// The id the entry lists.
        listed: KeyId,
        /// The id of the entry's public key.
        computed: KeyId,
    },
    /// Two entries for one key.
    #[error(
        "key registry: key {0} is listed twice; a key belongs to one principal, keep one entry"
    )]
    Duplicate(KeyId),
    /// No entry for a key id.
    #[error("key registry: no key {0} is enrolled")]
    UnknownKey(KeyId),
}

impl RegistryError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            RegistryError::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
            ),
            RegistryError::WorldWritable { .. } => false,
            RegistryError::Format { .. } => false,
            RegistryError::KeyIdMismatch { .. } => false,
            RegistryError::Duplicate(_) => false,
            RegistryError::UnknownKey(_) => false,
        }
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistryFile {
    keys: Vec<KeyEntry>,
}

/// Enrolled keys by key id. Cheap to read from many tasks; changed only by
/// key management.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyRegistry {
    entries: Vec<KeyEntry>,
    by_id: HashMap<KeyId, usize>,
}

impl KeyRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Reads a registry file, refusing one anyone may write.
    pub fn load(path: &Path) -> Result<Self, RegistryError> {
        let text = read_text(path, world_writable).map_err(|refused| match refused {
            Refused::Io(source) => RegistryError::Io {
                path: path.to_owned(),
                source,
            },
            Refused::Mode(mode) => RegistryError::WorldWritable {
                path: path.to_owned(),
                mode,
            },
        })?;
        Self::from_json(&text).map_err(|error| match error {
            RegistryError::Format { source, .. } => RegistryError::Format {
                path: path.to_owned(),
                source,
            },
            other => other,
        })
    }

    /// Reads a registry file, or an empty registry when there is none yet.
    pub fn load_or_new(path: &Path) -> Result<Self, RegistryError> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Self::new()),
            _ => Self::load(path),
        }
    }

    /// Parses the JSON form.
    pub fn from_json(text: &str) -> Result<Self, RegistryError> {
        let file: RegistryFile =
            serde_json::from_str(text).map_err(|source| RegistryError::Format {
                path: PathBuf::new(),
                source,
            })?;
        let mut registry = Self::new();
        for entry in file.keys {
            registry.insert(entry)?;
        }
        Ok(registry)
    }

    /// The JSON form, pretty-printed.
    pub fn to_json(&self) -> String {
        let file = RegistryFile {
            keys: self.entries.clone(),
        };
        let mut text = serde_json::to_string_pretty(&file).unwrap_or_default();
        text.push('\n');
        text
    }

    /// Writes the registry to `path`, replacing the file at once (a reader
    /// sees the old or the new registry, never half of one).
    pub fn save(&self, path: &Path) -> Result<(), RegistryError> {
        let io = |source| RegistryError::Io {
            path: path.to_owned(),
            source,
        };
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
        std::io::Write::write_all(&mut temp, self.to_json().as_bytes()).map_err(io)?;
        temp.as_file().sync_all().map_err(io)?;
        temp.persist(path).map_err(|e| io(e.error))?;
        Ok(())
    }

    /// Enrolls a key; refuses a key id that does not match its public key
    /// or is already enrolled.
    pub fn insert(&mut self, entry: KeyEntry) -> Result<(), RegistryError> {
        let computed = entry.public_key.key_id();
        if entry.key_id != computed {
            return Err(RegistryError::KeyIdMismatch {
                principal: entry.principal,
                listed: entry.key_id,
                computed,
            });
        }
        if self.by_id.contains_key(&entry.key_id) {
            return Err(RegistryError::Duplicate(entry.key_id));
        }
        self.by_id.insert(entry.key_id, self.entries.len());
        self.entries.push(entry);
        Ok(())
    }

    /// Revokes a key from `at_micros` on; returns its entry.
    pub fn revoke(&mut self, key_id: KeyId, at_micros: u64) -> Result<&KeyEntry, RegistryError> {
        let index = *self
            .by_id
            .get(&key_id)
            .ok_or(RegistryError::UnknownKey(key_id))?;
        let entry = &mut self.entries[index];
        entry.revoked_at = Some(at_micros);
        Ok(entry)
    }

    /// The entry of a key id.
    pub fn get(&self, key_id: &KeyId) -> Option<&KeyEntry> {
        self.by_id.get(key_id).map(|&i| &self.entries[i])
    }

    /// Every entry, in enrollment order.
    pub fn entries(&self) -> &[KeyEntry] {
        &self.entries
    }

    /// How many keys are enrolled.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no key is enrolled.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::Signer;

    fn entry(seed: u8, kind: KeyKind) -> KeyEntry {
        KeyEntry::new(
            AgentId::new("ops").unwrap(),
            kind,
            Signer::from_seed(&[seed; 32]).public_key(),
            Some(1_000),
            Some(2_000),
        )
    }

    #[test]
    fn the_window_is_half_open_and_revocation_applies_from_its_time_on() {
        let mut e = entry(1, KeyKind::Operator);
        assert_eq!(e.validity_at(999), Validity::NotYetValid(1_000));
        assert_eq!(e.validity_at(1_000), Validity::Valid);
        assert_eq!(e.validity_at(1_999), Validity::Valid);
        assert_eq!(e.validity_at(2_000), Validity::Expired(2_000));
        e.revoked_at = Some(1_500);
        assert_eq!(e.validity_at(1_499), Validity::Valid);
        assert_eq!(e.validity_at(1_500), Validity::Revoked(1_500));
    }

    #[test]
    fn the_json_form_round_trips_and_is_checked() {
        let mut registry = KeyRegistry::new();
        registry.insert(entry(1, KeyKind::Operator)).unwrap();
        registry.insert(entry(2, KeyKind::Agent)).unwrap();
        let text = registry.to_json();
        assert!(text.contains("\"kind\": \"operator\""), "{text}");
        assert!(
            text.contains("\"valid_from\": \"1970-01-01T00:00:00.001000Z\""),
            "{text}"
        );
        assert_eq!(KeyRegistry::from_json(&text).unwrap(), registry);

        let duplicate = registry.insert(entry(1, KeyKind::Agent)).unwrap_err();
        assert!(matches!(duplicate, RegistryError::Duplicate(_)));

        let mut wrong = entry(3, KeyKind::Agent);
        wrong.key_id = KeyId::from_bytes([0; 8]);
        assert!(matches!(
            KeyRegistry::new().insert(wrong),
            Err(RegistryError::KeyIdMismatch { .. })
        ));

        let typo = text.replace("valid_to", "valid_until");
        let error = KeyRegistry::from_json(&typo).unwrap_err().to_string();
        assert!(error.contains("valid_until"), "{error}");
    }

    #[test]
    fn a_weak_public_key_is_refused_when_the_registry_is_read() {
        // The identity point encodes as 1 followed by zeros: small order.
        let weak = format!("01{}", "00".repeat(31));
        let text = format!(
            r#"{{"keys":[{{"key_id":"0000000000000000","principal":"x","kind":"agent","public_key":"{weak}"}}]}}"#
        );
        let error = KeyRegistry::from_json(&text).unwrap_err().to_string();
        assert!(error.contains("weak (small-order)"), "{error}");
    }
}
