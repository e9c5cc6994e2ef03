//! Verifying signed records against the key registry (docs/runtime.md §6).
//!
//! [`Verifier::verify`] decodes the record, takes the signature out,
//! re-encodes the rest (byte-identical to what arrived, or it is refused),
//! rebuilds the signing input, and then checks, in this order:
//!
//! 1. the record is signed, with a scheme this runtime knows (Ed25519);
//! 2. the key id is enrolled;
//! 3. the Ed25519 signature verifies, strictly;
//! 4. the key's principal is the envelope's `source`;
//! 5. the key was valid at the record's log timestamp (not before
//!    `valid_from`, not from `valid_to` on, not from `revoked_at` on);
//! 6. a bound [`SignatureContext`](agdx_wire::SignatureContext) equals the
//!    record's `agdx.ct` / `agdx.av` headers.
//!
//! Each failure is a [`VerifyError`] naming the check, the key id and the
//! principal, never key material, so its message can go back to the sender.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant, SystemTime};

use agdx_wire::{
    AgentEnvelope, AgentId, ContentType, ED25519_SIGNATURE_LEN, HEADER_CONTENT_TYPE,
    HEADER_WIRE_VERSION, SignatureScheme, WireError, signing_input,
};

use super::key::KeyId;
use super::registry::{KeyKind, KeyRegistry, RegistryError, Validity};
use super::time::format_time;
use crate::log::LogRecord;

/// Who signed a record that verified.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The key that signed it.
    pub key_id: KeyId,
    /// The key's principal (equal to the envelope's `source`).
    pub principal: AgentId,
    /// Agent or operator key.
    pub kind: KeyKind,
}

/// What the log says about a record besides its bytes: when it landed and,
/// when known, its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Observed {
    /// The record's log timestamp (epoch µs); keys are judged as of it.
    pub timestamp_micros: u64,
    /// The record's headers, `None` for bytes read from a file (a bound
    /// context is then not compared with anything).
    pub headers: Option<ObservedHeaders>,
}

/// The header values a bound signature context is compared with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ObservedHeaders {
    /// `agdx.ct`, when present as a `u8`.
    pub content_type: Option<ContentType>,
    /// `agdx.av`, when present as a `u32`.
    pub wire_version: Option<u32>,
}

impl Observed {
    /// What the log says about `record`.
    pub fn of(record: &LogRecord) -> Self {
        let header = |key: &str| {
            record
                .headers
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v)
        };
        Self {
            timestamp_micros: record.timestamp_micros,
            headers: Some(ObservedHeaders {
                content_type: header(HEADER_CONTENT_TYPE)
                    .and_then(|v| v.as_u8())
                    .map(ContentType::from_code),
                wire_version: header(HEADER_WIRE_VERSION).and_then(|v| v.as_u32()),
            }),
        }
    }

    /// Bytes from a file, judged as of `at_micros`, without headers.
    pub fn file(at_micros: u64) -> Self {
        Self {
            timestamp_micros: at_micros,
            headers: None,
        }
    }
}

/// Why a record did not verify. Messages name the failed check, the key id
/// and principals, never key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum VerifyError {
    /// The bytes are not a valid envelope.
    #[error("not a valid envelope: {0}")]
    Undecodable(String),
    /// The bytes are a valid envelope, but not in canonical form: what was
    /// signed cannot be what arrived.
    #[error(
        "the envelope is not in canonical form (its re-encoding differs from the bytes that arrived), so no signature over it can be checked"
    )]
    NonCanonical,
    /// No signature.
    #[error("the record is unsigned; sign it with an enrolled key")]
    Unsigned,
    /// A signature scheme other than Ed25519.
    #[error(
        "the record is signed with scheme {0}, which this runtime does not verify (ed25519 only)"
    )]
    UnsupportedScheme(u8),
    /// The key id is not enrolled.
    #[error("signed with key {0}, which is not in the key registry")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error(
        "the signature does not verify with key {key_id} of '{principal}' (the record was changed after signing, or signed with another key)"
    )]
    BadSignature {
        /// The key the signature names.
        key_id: KeyId,
        /// Its principal.
        principal: AgentId,
    },
    /// The key belongs to someone other than the claimed source.
    #[error(
        "signed with key {key_id} of '{principal}', but the record claims source '{source_agent}'"
    )]
    WrongPrincipal {
        /// The key that signed.
        key_id: KeyId,
        /// Its principal.
        principal: AgentId,
        /// The source the envelope claims.
        source_agent: AgentId,
    },
    /// The record landed before the key's window opened.
    #[error("key {key_id} of '{principal}' is valid only from {}, and the record landed at {}", format_time(*.valid_from), format_time(*.at))]
    NotYetValid {
        /// The key.
        key_id: KeyId,
        /// Its principal.
        principal: AgentId,
        /// When its window opens.
        valid_from: u64,
        /// When the record landed.
        at: u64,
    },
    /// The record landed after the key's window closed.
    #[error("key {key_id} of '{principal}' expired at {}, and the record landed at {}", format_time(*.valid_to), format_time(*.at))]
    Expired {
        /// The key.
        key_id: KeyId,
        /// Its principal.
        principal: AgentId,
        /// When its window closed.
        valid_to: u64,
        /// When the record landed.
        at: u64,
    },
    /// The record landed after the key was revoked.
    #[error("key {key_id} of '{principal}' was revoked at {}, and the record landed at {}", format_time(*.revoked_at), format_time(*.at))]
    Revoked {
        /// The key.
        key_id: KeyId,
        /// Its principal.
        principal: AgentId,
        /// When it was revoked.
        revoked_at: u64,
        /// When the record landed.
        at: u64,
    },
    /// A bound context differs from the record's headers.
    #[error("the signature binds {field} {bound}, but the record's header says {observed}")]
    ContextMismatch {
        /// `content type` or `wire version`.
        field: &'static str,
        /// What the signature binds.
        bound: String,
        /// What the header says (`nothing` when absent).
        observed: String,
    },
}

impl VerifyError {
    /// A short name of the failed check, for counters and error details:
    /// `undecodable`, `non_canonical`, `unsigned`, `unsupported_scheme`,
    /// `unknown_key`, `bad_signature`, `wrong_principal`, `not_yet_valid`,
    /// `expired`, `revoked`, `context_mismatch`.
    pub fn check(&self) -> &'static str {
        match self {
            VerifyError::Undecodable(_) => "undecodable",
            VerifyError::NonCanonical => "non_canonical",
            VerifyError::Unsigned => "unsigned",
            VerifyError::UnsupportedScheme(_) => "unsupported_scheme",
            VerifyError::UnknownKey(_) => "unknown_key",
            VerifyError::BadSignature { .. } => "bad_signature",
            VerifyError::WrongPrincipal { .. } => "wrong_principal",
            VerifyError::NotYetValid { .. } => "not_yet_valid",
            VerifyError::Expired { .. } => "expired",
            VerifyError::Revoked { .. } => "revoked",
            VerifyError::ContextMismatch { .. } => "context_mismatch",
        }
    }

    /// Whether the same record may verify later: never (keys are judged
    /// as of the record's timestamp, which does not change).
    pub fn is_retryable(&self) -> bool {
        match self {
            VerifyError::Undecodable(_)
            | VerifyError::NonCanonical
            | VerifyError::Unsigned
            | VerifyError::UnsupportedScheme(_)
            | VerifyError::UnknownKey(_)
            | VerifyError::BadSignature { .. }
            | VerifyError::WrongPrincipal { .. }
            | VerifyError::NotYetValid { .. }
            | VerifyError::Expired { .. }
            | VerifyError::Revoked { .. }
            | VerifyError::ContextMismatch { .. } => false,
        }
    }
}

/// Checks signatures against a [`KeyRegistry`]. Cheap to clone; clones
/// share the registry.
///
/// A verifier made with [`from_file`](Self::from_file) reads the file again
/// when it changes (checked at most once per `RELOAD_EVERY`, a second), so a key
/// revoked with `agdx keys revoke` stops verifying in running processes
/// too. A file that cannot be read or parsed keeps the registry in use (and
/// says so once per change).
#[derive(Clone, Default)]
pub struct Verifier {
    inner: Arc<Inner>,
}

/// How often a file-backed verifier looks at its file.
pub const RELOAD_EVERY: Duration = Duration::from_secs(1);

#[derive(Default)]
struct Inner {
    registry: RwLock<Arc<KeyRegistry>>,
    file: Option<Watched>,
}

/// The registry file and what was last seen of it.
struct Watched {
    path: PathBuf,
    seen: Mutex<Seen>,
}

struct Seen {
    checked: Instant,
    stamp: Option<(SystemTime, u64)>,
}

/// What says a file changed: its modification time and length.
fn stamp_of(path: &Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verifier")
            .field("keys", &self.registry().len())
            .field("file", &self.inner.file.as_ref().map(|w| &w.path))
            .finish()
    }
}

impl Verifier {
    /// A verifier trusting the keys of `registry`.
    pub fn new(registry: KeyRegistry) -> Self {
        Self {
            inner: Arc::new(Inner {
                registry: RwLock::new(Arc::new(registry)),
                file: None,
            }),
        }
    }

    /// A verifier trusting the registry file at `path`, following its
    /// changes.
    pub fn from_file(path: &Path) -> Result<Self, RegistryError> {
        let stamp = stamp_of(path);
        let registry = KeyRegistry::load(path)?;
        Ok(Self {
            inner: Arc::new(Inner {
                registry: RwLock::new(Arc::new(registry)),
                file: Some(Watched {
                    path: path.to_owned(),
                    seen: Mutex::new(Seen {
                        checked: Instant::now(),
                        stamp,
                    }),
                }),
            }),
        })
    }

    /// The registry it trusts now.
    pub fn registry(&self) -> Arc<KeyRegistry> {
        if let Some(file) = &self.inner.file {
            self.reload_if_changed(file);
        }
        read_lock(&self.inner.registry).clone()
    }

    fn reload_if_changed(&self, file: &Watched) {
        let mut seen = crate::log::lock(&file.seen);
        if seen.checked.elapsed() < RELOAD_EVERY {
            return;
        }
        seen.checked = Instant::now();
        let stamp = stamp_of(&file.path);
        if stamp == seen.stamp {
            return;
        }
        seen.stamp = stamp;
        match KeyRegistry::load(&file.path) {
            Ok(registry) => {
                tracing::info!(path = %file.path.display(), keys = registry.len(), "key registry changed; using it");
                *write_lock(&self.inner.registry) = Arc::new(registry);
            }
            Err(error) => {
                tracing::warn!(%error, "the key registry changed but cannot be used; keeping the keys read before");
            }
        }
    }

    /// Verifies the envelope bytes `payload` (see the module docs).
    pub fn verify(&self, payload: &[u8], observed: &Observed) -> Result<Verified, VerifyError> {
        let envelope = AgentEnvelope::decode_valid(payload).map_err(|e| {
            VerifyError::Undecodable(match e {
                WireError::Decode(e) => e.to_string(),
                WireError::Invalid(e) => e.to_string(),
            })
        })?;
        self.verify_decoded(&envelope, payload, observed)
    }

    /// Verifies a log record's envelope (already decoded as `envelope`).
    pub fn verify_record(
        &self,
        envelope: &AgentEnvelope,
        record: &LogRecord,
    ) -> Result<Verified, VerifyError> {
        self.verify_decoded(envelope, &record.payload, &Observed::of(record))
    }

    /// Verifies `envelope`, decoded from `payload`, against the registry
    /// as it is now ([`Verifier::registry`]).
    pub fn verify_decoded(
        &self,
        envelope: &AgentEnvelope,
        payload: &[u8],
        observed: &Observed,
    ) -> Result<Verified, VerifyError> {
        verify_against(&self.registry(), envelope, payload, observed)
    }
}

/// Verifies `envelope`, decoded from `payload`, against `registry` (see the
/// module docs); reads nothing but its arguments.
pub(crate) fn verify_against(
    registry: &KeyRegistry,
    envelope: &AgentEnvelope,
    payload: &[u8],
    observed: &Observed,
) -> Result<Verified, VerifyError> {
    let signature = envelope.signature.as_ref().ok_or(VerifyError::Unsigned)?;
    if signature.scheme != SignatureScheme::Ed25519 {
        return Err(VerifyError::UnsupportedScheme(signature.scheme.code()));
    }
    if envelope.encode() != payload {
        return Err(VerifyError::NonCanonical);
    }
    let key_id = KeyId::from_slice(&signature.key_id)
        .ok_or_else(|| VerifyError::UnknownKey(hex::encode(&signature.key_id)))?;
    let entry = registry
        .get(&key_id)
        .ok_or_else(|| VerifyError::UnknownKey(key_id.to_string()))?;
    let principal = || entry.principal.clone();
    let bytes: &[u8; ED25519_SIGNATURE_LEN] =
        signature
            .bytes
            .as_slice()
            .try_into()
            .map_err(|_| VerifyError::BadSignature {
                key_id,
                principal: principal(),
            })?;
    if !entry.public_key.verify(&signing_input(envelope), bytes) {
        return Err(VerifyError::BadSignature {
            key_id,
            principal: principal(),
        });
    }
    if entry.principal != envelope.source {
        return Err(VerifyError::WrongPrincipal {
            key_id,
            principal: principal(),
            source_agent: envelope.source.clone(),
        });
    }
    let at = observed.timestamp_micros;
    match entry.validity_at(at) {
        Validity::Valid => {}
        Validity::NotYetValid(valid_from) => {
            return Err(VerifyError::NotYetValid {
                key_id,
                principal: principal(),
                valid_from,
                at,
            });
        }
        Validity::Expired(valid_to) => {
            return Err(VerifyError::Expired {
                key_id,
                principal: principal(),
                valid_to,
                at,
            });
        }
        Validity::Revoked(revoked_at) => {
            return Err(VerifyError::Revoked {
                key_id,
                principal: principal(),
                revoked_at,
                at,
            });
        }
    }
    if let (Some(context), Some(headers)) = (&signature.context, &observed.headers) {
        if let Some(bound) = context.content_type
            && headers.content_type != Some(bound)
        {
            return Err(VerifyError::ContextMismatch {
                field: "content type",
                bound: bound.name().to_owned(),
                observed: headers
                    .content_type
                    .map_or_else(|| "nothing".to_owned(), |c| c.name().to_owned()),
            });
        }
        if let Some(bound) = context.agent_version
            && headers.wire_version != Some(bound)
        {
            return Err(VerifyError::ContextMismatch {
                field: "wire version",
                bound: bound.to_string(),
                observed: headers
                    .wire_version
                    .map_or_else(|| "nothing".to_owned(), |v| v.to_string()),
            });
        }
    }
    Ok(Verified {
        key_id,
        principal: entry.principal.clone(),
        kind: entry.kind,
    })
}

/// The registry is replaced whole, so a panic cannot leave it half-changed.
fn read_lock<T>(lock: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write_lock<T>(lock: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::trust::{KeyEntry, Signer};
    use agdx_wire::{ConversationId, RecordId};

    #[test]
    fn a_file_backed_verifier_follows_revocations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("keys.json");
        let signer = Signer::from_seed(&[3; 32]);
        let mut registry = KeyRegistry::new();
        registry
            .insert(KeyEntry::new(
                AgentId::new("ledger").unwrap(),
                KeyKind::Agent,
                signer.public_key(),
                None,
                None,
            ))
            .unwrap();
        registry.save(&path).unwrap();
        let verifier = Verifier::from_file(&path).unwrap();
        let event = AgentEnvelope::event(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            AgentId::new("ledger").unwrap(),
            b"paid".to_vec(),
        );
        let payload = signer.sign(event, None).encode();
        let at = Observed::file(2_000);
        assert!(verifier.verify(&payload, &at).is_ok());

        registry.revoke(signer.key_id(), 1_000).unwrap();
        registry.save(&path).unwrap();
        std::thread::sleep(RELOAD_EVERY + Duration::from_millis(100));
        assert!(matches!(
            verifier.clone().verify(&payload, &at),
            Err(VerifyError::Revoked { .. })
        ));

        // A broken file keeps the keys read before.
        std::fs::write(&path, "{").unwrap();
        std::thread::sleep(RELOAD_EVERY + Duration::from_millis(100));
        assert!(matches!(
            verifier.verify(&payload, &at),
            Err(VerifyError::Revoked { .. })
        ));
        assert_eq!(verifier.registry().len(), 1);
    }
}
