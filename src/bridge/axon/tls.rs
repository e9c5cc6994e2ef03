//! Mutual TLS 1.3 the AXON way (WIRE_FORMAT §2.3–3.2): both sides present
//! a self-signed Ed25519 certificate, neither trusts a CA, and each admits
//! only peers whose public key it has pinned.
//!
//! - As a client, the server name (SNI) asked for is the peer's agent id;
//!   the server's certificate key must derive to that id **and** be the
//!   pinned key.
//! - As a server, the client's certificate key must be pinned, and the SNI
//!   must name this bridge (a client asking for some other agent id is
//!   refused before any certificate is sent).
//! - ALPN is `axon/1` on both sides; a peer that does not offer it is
//!   refused.
//!
//! The certificate's TLS 1.3 handshake signature is checked with the
//! certificate's key, so a peer must hold the pinned key's secret.

use std::collections::HashMap;
use std::sync::Arc;

use ed25519_dalek::VerifyingKey;
use ed25519_dalek::pkcs8::DecodePublicKey;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ParsedCertificate, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::identity::{AxonId, CertificateError, Identity};
use super::token::PeerToken;

/// The ALPN protocol token of AXON v1.
pub const ALPN: &[u8] = b"axon/1";

/// The peers this bridge admits, by agent id.
#[derive(Debug, Default)]
pub(crate) struct PinnedPeers {
    by_id: HashMap<AxonId, PeerToken>,
}

/// Why a peer's certificate was refused.
#[derive(Debug, thiserror::Error)]
pub enum PeerRefused {
    /// The certificate is not X.509 or its key is not Ed25519.
    #[error("the peer's certificate is not an X.509 certificate with an Ed25519 key ({0})")]
    NotEd25519(String),
    /// The client asked for an SNI that is not an agent id.
    #[error("the server name {0:?} is not an AXON agent id")]
    BadServerName(String),
    /// The key does not derive to the agent id that was asked for.
    #[error("the peer presented the key of {presented}, not of {expected}, the agent id asked for")]
    WrongKey {
        /// The agent id dialled (the SNI).
        expected: AxonId,
        /// The agent id the presented key derives to.
        presented: AxonId,
    },
    /// The key is not pinned.
    #[error(
        "AXON peer {id} is not pinned, so it is refused; if you trust it, pin its token {token_hint}"
    )]
    Unknown {
        /// The unknown peer's agent id.
        id: AxonId,
        /// A token for its key, with a placeholder address.
        token_hint: String,
    },
    /// An agent id is pinned, but with another key.
    #[error("AXON peer {0} presented a key other than the one pinned for it")]
    KeyMismatch(AxonId),
}

impl PinnedPeers {
    pub(crate) fn new(tokens: impl IntoIterator<Item = PeerToken>) -> Self {
        Self {
            by_id: tokens.into_iter().map(|t| (t.id().clone(), t)).collect(),
        }
    }

    /// The pinned peer `id`.
    pub(crate) fn get(&self, id: &AxonId) -> Option<&PeerToken> {
        self.by_id.get(id)
    }

    /// The pinned agent ids, sorted.
    pub(crate) fn ids(&self) -> Vec<&AxonId> {
        let mut ids: Vec<_> = self.by_id.keys().collect();
        ids.sort();
        ids
    }

    /// The agent id of a certificate's key, when that key is pinned (and,
    /// with `expected`, derives to that id).
    fn admit(
        &self,
        certificate: &CertificateDer<'_>,
        expected: Option<&AxonId>,
    ) -> Result<AxonId, PeerRefused> {
        let public_key = certificate_key(certificate)?;
        let id = AxonId::of(&public_key);
        if let Some(expected) = expected.filter(|e| **e != id) {
            return Err(PeerRefused::WrongKey {
                expected: expected.clone(),
                presented: id,
            });
        }
        match self.by_id.get(&id) {
            Some(pinned) if *pinned.public_key() == public_key => Ok(id),
            Some(_) => Err(PeerRefused::KeyMismatch(id)),
            None => Err(PeerRefused::Unknown {
                token_hint: PeerToken::new(public_key, "HOST:0")
                    .map(|t| t.to_string().replace(":0", ":PORT"))
                    .unwrap_or_default(),
                id,
            }),
        }
    }
}

/// The Ed25519 public key in a certificate.
pub(crate) fn certificate_key(certificate: &CertificateDer<'_>) -> Result<[u8; 32], PeerRefused> {
    let parsed = ParsedCertificate::try_from(certificate)
        .map_err(|e| PeerRefused::NotEd25519(e.to_string()))?;
    let spki = parsed.subject_public_key_info();
    let key = VerifyingKey::from_public_key_der(spki.as_ref())
        .map_err(|e| PeerRefused::NotEd25519(e.to_string()))?;
    Ok(key.to_bytes())
}

fn refuse(refused: PeerRefused) -> rustls::Error {
    tracing::warn!(%refused, "AXON handshake refused");
    rustls::Error::InvalidCertificate(rustls::CertificateError::Other(rustls::OtherError(
        Arc::new(refused),
    )))
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsSetupError {
    /// The certificate could not be made.
    #[error(transparent)]
    Certificate(#[from] CertificateError),
    /// rustls refused the configuration.
    #[error("configuring TLS failed: {0}")]
    Rustls(#[from] rustls::Error),
    /// quinn refused the TLS configuration.
    #[error("configuring QUIC's TLS failed: {0}")]
    Quic(#[from] quinn::crypto::rustls::NoInitialCipherSuite),
}

impl TlsSetupError {
    /// Whether trying again may succeed (never: the configuration is wrong).
    pub fn is_retryable(&self) -> bool {
        match self {
            TlsSetupError::Certificate(e) => e.is_retryable(),
            TlsSetupError::Rustls(_) => false,
            TlsSetupError::Quic(_) => false,
        }
    }
}

/// The server and client TLS configurations of one identity.
pub(crate) fn configs(
    identity: &Identity,
    peers: Arc<PinnedPeers>,
) -> Result<(quinn::ServerConfig, quinn::ClientConfig), TlsSetupError> {
    let provider = provider();
    let (certificate, key) = identity.certificate()?;
    let signing_key = provider.key_provider.load_private_key(key.clone_key())?;
    let certified = Arc::new(CertifiedKey::new(vec![certificate.clone()], signing_key));

    let mut server = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .with_client_cert_verifier(Arc::new(PinnedClients {
            peers: peers.clone(),
            provider: provider.clone(),
        }))
        .with_cert_resolver(Arc::new(OwnName {
            id: identity.id().clone(),
            certified,
        }));
    server.alpn_protocols = vec![ALPN.to_vec()];
    let server = quinn::crypto::rustls::QuicServerConfig::try_from(server)?;

    let mut client = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedServers { peers, provider }))
        .with_client_auth_cert(vec![certificate], key)?;
    client.alpn_protocols = vec![ALPN.to_vec()];
    let client = quinn::crypto::rustls::QuicClientConfig::try_from(client)?;

    Ok((
        quinn::ServerConfig::with_crypto(Arc::new(server)),
        quinn::ClientConfig::new(Arc::new(client)),
    ))
}

/// Answers only a client that asks for this bridge's agent id.
#[derive(Debug)]
struct OwnName {
    id: AxonId,
    certified: Arc<CertifiedKey>,
}

impl ResolvesServerCert for OwnName {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        match hello.server_name() {
            Some(name) if name.eq_ignore_ascii_case(self.id.as_str()) => {
                Some(self.certified.clone())
            }
            other => {
                tracing::warn!(
                    asked = other.unwrap_or("(none)"),
                    this = %self.id,
                    "AXON handshake refused: the client asked for another agent id (SNI); an AXON client dials a peer by its agent id"
                );
                None
            }
        }
    }
}

#[derive(Debug)]
struct PinnedServers {
    peers: Arc<PinnedPeers>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedServers {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let name = server_name.to_str();
        let expected: AxonId = name
            .parse()
            .map_err(|_| refuse(PeerRefused::BadServerName(name.to_string())))?;
        self.peers
            .admit(end_entity, Some(&expected))
            .map_err(refuse)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        tls12_refused()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13(&self.provider, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// QUIC runs TLS 1.3 only: a TLS 1.2 handshake signature is never accepted.
fn tls12_refused() -> Result<HandshakeSignatureValid, rustls::Error> {
    Err(rustls::Error::PeerIncompatible(
        rustls::PeerIncompatible::Tls13RequiredForQuic,
    ))
}

/// Checks a TLS 1.3 handshake signature with `provider`'s algorithms.
fn verify_tls13(
    provider: &CryptoProvider,
    message: &[u8],
    cert: &CertificateDer<'_>,
    dss: &DigitallySignedStruct,
) -> Result<HandshakeSignatureValid, rustls::Error> {
    rustls::crypto::verify_tls13_signature(
        message,
        cert,
        dss,
        &provider.signature_verification_algorithms,
    )
}

#[derive(Debug)]
struct PinnedClients {
    peers: Arc<PinnedPeers>,
    provider: Arc<CryptoProvider>,
}

impl ClientCertVerifier for PinnedClients {
    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.peers.admit(end_entity, None).map_err(refuse)?;
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        tls12_refused()
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13(&self.provider, message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// The agent id of the peer at the other end of an established connection
/// (its certificate passed [`PinnedPeers`] during the handshake).
pub(crate) fn peer_of(connection: &quinn::Connection) -> Option<AxonId> {
    let identity = connection.peer_identity()?;
    let chain = identity.downcast::<Vec<CertificateDer<'static>>>().ok()?;
    let key = certificate_key(chain.first()?).ok()?;
    Some(AxonId::of(&key))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pinned_keys_are_admitted_and_others_refused_with_a_hint() {
        let known = Identity::from_seed(&[1; 32]);
        let stranger = Identity::from_seed(&[2; 32]);
        let peers = PinnedPeers::new([PeerToken::new(known.public_key(), "h:1").unwrap()]);
        let (known_cert, _) = known.certificate().unwrap();
        let (stranger_cert, _) = stranger.certificate().unwrap();
        assert_eq!(peers.admit(&known_cert, None).unwrap(), *known.id());
        assert_eq!(
            peers.admit(&known_cert, Some(known.id())).unwrap(),
            *known.id()
        );
        let wrong = peers.admit(&known_cert, Some(stranger.id())).unwrap_err();
        assert!(matches!(wrong, PeerRefused::WrongKey { .. }), "{wrong}");
        let unknown = peers.admit(&stranger_cert, None).unwrap_err().to_string();
        assert!(unknown.contains("pin its token axon://"), "{unknown}");
        assert!(unknown.contains(stranger.id().as_str()), "{unknown}");
    }
}
