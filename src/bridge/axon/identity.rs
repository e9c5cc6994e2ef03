//! Who a bridge is on AXON: its Ed25519 key, the agent id derived from it,
//! and the self-signed certificate it presents in mutual TLS.
//!
//! An AXON agent id is `ed25519.` followed by the lowercase hex of the
//! first 16 bytes of SHA-256 over the 32-byte public key (AXON
//! WIRE_FORMAT §2.2). It doubles as the TLS server name (SNI) a client
//! asks for, which is why the separator is a dot. The certificate is
//! made anew at each start; only the key persists, and the key is what
//! peers pin.

use std::fmt;
use std::str::FromStr;

use ed25519_dalek::SigningKey;
use ed25519_dalek::pkcs8::EncodePrivateKey;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

/// Length of an Ed25519 public key.
pub const PUBLIC_KEY_LEN: usize = 32;

/// The only key type AXON v1 defines.
const ID_PREFIX: &str = "ed25519";
/// Bytes of the SHA-256 digest an agent id keeps.
const ID_DIGEST_BYTES: usize = 16;

/// An AXON agent id, `ed25519.` + 32 lowercase hex characters.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AxonId(String);

impl AxonId {
    /// The id of a public key.
    pub fn of(public_key: &[u8; PUBLIC_KEY_LEN]) -> Self {
        let digest = Sha256::digest(public_key);
        Self(format!(
            "{ID_PREFIX}.{}",
            hex::encode(&digest[..ID_DIGEST_BYTES])
        ))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for AxonId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(&self.0)
    }
}

/// Text that is not an AXON agent id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not an AXON agent id: one is `ed25519.` followed by 32 hex characters")]
pub struct AxonIdError(pub String);

impl FromStr for AxonId {
    type Err = AxonIdError;
    /// Parses an id; the hex is compared case-insensitively and kept in
    /// lowercase, as AXON requires. Any prefix but `ed25519` is refused.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let refuse = || AxonIdError(text.to_owned());
        let (prefix, digits) = text.split_once('.').ok_or_else(refuse)?;
        let hex_ok =
            digits.len() == 2 * ID_DIGEST_BYTES && digits.bytes().all(|b| b.is_ascii_hexdigit());
        if !prefix.eq_ignore_ascii_case(ID_PREFIX) || !hex_ok {
            return Err(refuse());
        }
        Ok(Self(format!("{ID_PREFIX}.{}", digits.to_ascii_lowercase())))
    }
}

/// A certificate could not be made for the key.
#[derive(Debug, thiserror::Error)]
pub enum CertificateError {
    /// The key could not be encoded as PKCS#8.
    #[error("encoding the AXON identity key as PKCS#8 failed: {0}")]
    Pkcs8(#[from] ed25519_dalek::pkcs8::Error),
    /// The certificate could not be built or signed.
    #[error("building the AXON certificate failed: {0}")]
    Build(#[from] rcgen::Error),
}

impl CertificateError {
    /// Whether trying again may succeed (never: the key or the library refused).
    pub fn is_retryable(&self) -> bool {
        match self {
            CertificateError::Pkcs8(_) => false,
            CertificateError::Build(_) => false,
        }
    }
}

/// An AXON identity: the Ed25519 key and the agent id derived from it.
///
/// The secret never appears in `Debug` output.
#[derive(Clone)]
pub struct Identity {
    key: SigningKey,
    id: AxonId,
}

impl fmt::Debug for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Identity")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// The identity of a signing key.
    pub fn new(key: SigningKey) -> Self {
        let id = AxonId::of(&key.verifying_key().to_bytes());
        Self { key, id }
    }

    /// The identity held in a secret key file, the same file a
    /// [`Signer`](crate::trust::Signer) reads (`agdx keys generate` writes
    /// one): the 32-byte seed as 64 hex characters, owner-only.
    pub fn from_key_file(path: &std::path::Path) -> Result<Self, crate::trust::KeyFileError> {
        crate::trust::read_seed(path).map(Self::new)
    }

    /// The identity of a 32-byte Ed25519 seed.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self::new(SigningKey::from_bytes(seed))
    }

    /// The agent id peers know this identity by.
    pub fn id(&self) -> &AxonId {
        &self.id
    }

    /// The public key peers pin.
    pub fn public_key(&self) -> [u8; PUBLIC_KEY_LEN] {
        self.key.verifying_key().to_bytes()
    }

    /// A fresh self-signed certificate over this key (CommonName
    /// `axon-<agent id>`, as the reference daemon names its own) and the
    /// key in the PKCS#8 form TLS wants.
    pub(crate) fn certificate(
        &self,
    ) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), CertificateError> {
        let pkcs8 = PrivatePkcs8KeyDer::from(self.key.to_pkcs8_der()?.as_bytes().to_vec());
        let key_pair = rcgen::KeyPair::from_pkcs8_der_and_sign_algo(&pkcs8, &rcgen::PKCS_ED25519)?;
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()])?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("axon-{}", self.id));
        let certificate = params.self_signed(&key_pair)?;
        Ok((certificate.der().clone(), PrivateKeyDer::Pkcs8(pkcs8)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_id_is_the_hex_of_the_first_16_bytes_of_the_key_digest() {
        let identity = Identity::from_seed(&[7; 32]);
        let digest = Sha256::digest(identity.public_key());
        let expected = format!("ed25519.{}", hex::encode(&digest[..16]));
        assert_eq!(identity.id().as_str(), expected);
        assert_eq!(identity.id().as_str().len(), 40);
    }

    #[test]
    fn ids_parse_case_insensitively_into_lowercase_and_refuse_other_shapes() {
        let id = AxonId::of(&[1; 32]);
        let upper = id.as_str().replace("ed25519", "ED25519").to_uppercase();
        assert_eq!(upper.parse::<AxonId>().unwrap(), id);
        for bad in [
            "",
            "ed25519",
            "ed25519:0011223344556677889900aabbccddeeff",
            "ed25519.0011",
            "x448.00112233445566778899aabbccddeeff",
            "ed25519.00112233445566778899aabbccddeeffgg",
        ] {
            assert!(bad.parse::<AxonId>().is_err(), "{bad:?} was accepted");
        }
    }
}
