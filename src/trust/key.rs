//! Ed25519 keys as AGDX names them: a public key, its key id, and the
//! secret key file that holds a seed.
//!
//! The key id is the first 8 bytes of SHA-256 over the 32-byte verifying key
//! (docs/wire.md, "Signing"); it is what a signature carries to say which key
//! made it. Public keys are refused when they are not points of the curve or
//! have small order ("weak" keys, for which a signature can verify for many
//! messages), so every key the runtime holds can be checked strictly.
//!
//! A secret key file holds the 32-byte seed as 64 hex characters
//! (whitespace is ignored). It is written with mode `0600`, and reading one
//! that the group or others can access is refused with the `chmod` that
//! fixes it.
//!
//! ```
//! use agdx::trust::{PublicKey, Signer};
//! let signer = Signer::from_seed(&[7; 32]);
//! let public: PublicKey = signer.public_key().to_string().parse()?;
//! assert_eq!(public.key_id(), signer.key_id());
//! assert_eq!(signer.key_id().to_string().len(), 16);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::fmt;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use agdx_wire::ED25519_KEY_ID_LEN;
use ed25519_dalek::{SigningKey, VerifyingKey};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::file_mode::{Refused, read_text, shared};

/// Length of an Ed25519 seed (the secret a key file holds).
pub const SEED_LEN: usize = 32;
/// Length of an Ed25519 public (verifying) key.
pub const PUBLIC_KEY_LEN: usize = 32;

/// Which key made a signature: the first 8 bytes of SHA-256 over the
/// verifying key. Shown as 16 lowercase hex characters.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u8; ED25519_KEY_ID_LEN]);

impl KeyId {
    /// The key id of `public`.
    pub fn of(public: &PublicKey) -> Self {
        let digest = Sha256::digest(public.to_bytes());
        let mut id = [0; ED25519_KEY_ID_LEN];
        id.copy_from_slice(&digest[..ED25519_KEY_ID_LEN]);
        Self(id)
    }

    /// A key id from its bytes.
    pub const fn from_bytes(bytes: [u8; ED25519_KEY_ID_LEN]) -> Self {
        Self(bytes)
    }

    /// A key id from a slice, when it has the right length.
    pub fn from_slice(bytes: &[u8]) -> Option<Self> {
        bytes.try_into().ok().map(Self)
    }

    /// The id's bytes, as a signature carries them.
    pub const fn to_bytes(self) -> [u8; ED25519_KEY_ID_LEN] {
        self.0
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&hex::encode(self.0))
    }
}

impl fmt::Debug for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "KeyId({self})")
    }
}

/// Text that is not a key id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a key id: a key id is 16 hex characters")]
pub struct KeyIdParseError(pub String);

impl FromStr for KeyId {
    type Err = KeyIdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut id = [0; ED25519_KEY_ID_LEN];
        hex::decode_to_slice(s.trim(), &mut id).map_err(|_| KeyIdParseError(s.to_owned()))?;
        Ok(Self(id))
    }
}

impl serde::Serialize for KeyId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for KeyId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Why bytes or text are not a usable public key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PublicKeyError {
    /// Not hex.
    #[error("a public key is 64 hex characters (32 bytes); this is not hex")]
    NotHex,
    /// The wrong number of bytes.
    #[error("a public key is 32 bytes (64 hex characters), got {0} bytes")]
    WrongLength(usize),
    /// Not the encoding of a curve point.
    #[error("the bytes are not an Ed25519 public key (not a point of the curve)")]
    NotAPoint,
    /// A point of small order: signatures with it prove nothing.
    #[error(
        "the key is a weak (small-order) Ed25519 point; signatures with it prove nothing, so it is refused"
    )]
    Weak,
}

/// An Ed25519 public key that is a valid point of large order.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct PublicKey(VerifyingKey);

impl PublicKey {
    /// Parses the 32-byte encoding, refusing non-points and weak keys.
    pub fn from_bytes(bytes: &[u8; PUBLIC_KEY_LEN]) -> Result<Self, PublicKeyError> {
        let key = VerifyingKey::from_bytes(bytes).map_err(|_| PublicKeyError::NotAPoint)?;
        if key.is_weak() {
            return Err(PublicKeyError::Weak);
        }
        Ok(Self(key))
    }

    /// Parses a public key from a slice of any length.
    pub fn from_slice(bytes: &[u8]) -> Result<Self, PublicKeyError> {
        let bytes: &[u8; PUBLIC_KEY_LEN] = bytes
            .try_into()
            .map_err(|_| PublicKeyError::WrongLength(bytes.len()))?;
        Self::from_bytes(bytes)
    }

    /// The 32-byte encoding.
    pub fn to_bytes(&self) -> [u8; PUBLIC_KEY_LEN] {
        self.0.to_bytes()
    }

    /// This key's id.
    pub fn key_id(&self) -> KeyId {
        KeyId::of(self)
    }

    /// Whether `signature` is this key's signature of `message`, checked
    /// strictly: non-canonical signatures and small-order components are
    /// refused, so one message has one valid signature per key.
    pub fn verify(&self, message: &[u8], signature: &[u8; 64]) -> bool {
        let signature = ed25519_dalek::Signature::from_bytes(signature);
        self.0.verify_strict(message, &signature).is_ok()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.to_bytes()))
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl FromStr for PublicKey {
    type Err = PublicKeyError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bytes = hex::decode(s.trim()).map_err(|_| PublicKeyError::NotHex)?;
        Self::from_slice(&bytes)
    }
}

impl serde::Serialize for PublicKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for PublicKey {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Why a secret key file could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// The file could not be opened, read or written.
    #[error("secret key file {}: {source}", path.display())]
    Io {
        /// The key file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// The group or others may access the file.
    #[error(
        "secret key file {} is accessible to others (mode {mode:04o}); a secret key must be readable by its owner only: run `chmod 600 {}`",
        path.display(), path.display()
    )]
    Exposed {
        /// The key file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The content is not 64 hex characters.
    #[error(
        "secret key file {} does not hold a key: it must be the 32-byte Ed25519 seed as 64 hex characters",
        path.display()
    )]
    Malformed {
        /// The key file.
        path: PathBuf,
    },
    /// Writing would replace an existing file.
    #[error("{} exists; a key file is never overwritten: choose another path or remove it first", path.display())]
    Exists {
        /// The key file.
        path: PathBuf,
    },
    /// The system gave no randomness for a new key.
    #[error("no randomness for a new key: {0}")]
    Randomness(getrandom::Error),
}

impl KeyFileError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            KeyFileError::Io { source, .. } => matches!(
                source.kind(),
                std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock
            ),
            KeyFileError::Exposed { .. } => false,
            KeyFileError::Malformed { .. } => false,
            KeyFileError::Exists { .. } => false,
            KeyFileError::Randomness(_) => true,
        }
    }
}

/// A fresh random seed from the operating system.
pub(crate) fn random_seed() -> Result<Zeroizing<[u8; SEED_LEN]>, KeyFileError> {
    let mut seed = Zeroizing::new([0; SEED_LEN]);
    getrandom::fill(seed.as_mut()).map_err(KeyFileError::Randomness)?;
    Ok(seed)
}

/// Reads the seed of a secret key file, refusing one others can access.
pub(crate) fn read_seed(path: &Path) -> Result<SigningKey, KeyFileError> {
    let text = read_text(path, shared).map_err(|refused| match refused {
        Refused::Io(source) => KeyFileError::Io {
            path: path.to_owned(),
            source,
        },
        Refused::Mode(mode) => KeyFileError::Exposed {
            path: path.to_owned(),
            mode,
        },
    })?;
    let digits: Zeroizing<String> =
        Zeroizing::new(text.chars().filter(|c| !c.is_whitespace()).collect());
    let mut seed = Zeroizing::new([0; SEED_LEN]);
    hex::decode_to_slice(digits.as_bytes(), seed.as_mut()).map_err(|_| {
        KeyFileError::Malformed {
            path: path.to_owned(),
        }
    })?;
    Ok(SigningKey::from_bytes(&seed))
}

/// Writes `key`'s seed to a new file with mode `0600`.
pub(crate) fn write_seed(path: &Path, key: &SigningKey) -> Result<(), KeyFileError> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .map_err(|source| match source.kind() {
            std::io::ErrorKind::AlreadyExists => KeyFileError::Exists {
                path: path.to_owned(),
            },
            _ => KeyFileError::Io {
                path: path.to_owned(),
                source,
            },
        })?;
    let mut text = Zeroizing::new(hex::encode(key.to_bytes()));
    text.push('\n');
    file.write_all(text.as_bytes())
        .and_then(|()| file.sync_all())
        .map_err(|source| KeyFileError::Io {
            path: path.to_owned(),
            source,
        })
}
