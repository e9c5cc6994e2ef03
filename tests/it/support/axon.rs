//! An AXON peer of the tests' own, written from AXON's WIRE_FORMAT.md with
//! quinn, rustls and rcgen directly (none of the bridge's code): it dials
//! the bridge as a client, or is dialled by it as a server, and speaks raw
//! bytes so tests can send what a well-behaved peer never would.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ParsedCertificate, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

/// The DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410); the key's
/// 32 bytes follow.
const ED25519_SPKI_PREFIX: [u8; 12] = [
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// How long a test waits for an AXON exchange.
pub const WAIT: Duration = Duration::from_secs(20);

/// `ed25519.` + hex of the first 16 bytes of SHA-256(public key).
pub fn agent_id(public_key: &[u8]) -> String {
    format!("ed25519.{}", hex::encode(&Sha256::digest(public_key)[..16]))
}

/// `axon://<key base64url, no padding>@<addr>`.
pub fn token(public_key: &[u8], addr: &str) -> String {
    format!(
        "axon://{}@{addr}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(public_key)
    )
}

/// The 32-byte public key a token names.
pub fn token_key(token: &str) -> Vec<u8> {
    let key = token
        .strip_prefix("axon://")
        .and_then(|rest| rest.split_once('@'))
        .expect("an axon:// token")
        .0;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(key)
        .expect("a base64url key")
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A test AXON peer: a fresh Ed25519 key and its self-signed certificate.
pub struct TestPeer {
    pub public_key: Vec<u8>,
    pub id: String,
    cert: CertificateDer<'static>,
    key: PrivatePkcs8KeyDer<'static>,
}

impl Default for TestPeer {
    fn default() -> Self {
        Self::new()
    }
}

impl TestPeer {
    pub fn new() -> Self {
        let key_pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("an Ed25519 key");
        let public_key = key_pair.public_key_raw().to_vec();
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
            .expect("certificate params")
            .self_signed(&key_pair)
            .expect("a self-signed certificate");
        TestPeer {
            id: agent_id(&public_key),
            public_key,
            cert: cert.der().clone(),
            key: PrivatePkcs8KeyDer::from(key_pair.serialize_der()),
        }
    }

    /// This peer's token, listening at `addr`.
    pub fn token(&self, addr: &str) -> String {
        token(&self.public_key, addr)
    }

    /// Dials `addr` asking for `sni`, offering `alpn`; the server must
    /// present `server_key`. The error is the connection's, as text.
    pub async fn dial(
        &self,
        addr: SocketAddr,
        sni: &str,
        server_key: &[u8],
        alpn: &[u8],
    ) -> Result<quinn::Connection, String> {
        let provider = provider();
        let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Pin {
                key: server_key.to_vec(),
                provider,
            }))
            .with_client_auth_cert(
                vec![self.cert.clone()],
                PrivateKeyDer::Pkcs8(self.key.clone_key()),
            )
            .expect("the client certificate");
        tls.alpn_protocols = vec![alpn.to_vec()];
        let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC TLS");
        let mut endpoint =
            quinn::Endpoint::client("127.0.0.1:0".parse().unwrap()).expect("a client endpoint");
        endpoint.set_default_client_config(quinn::ClientConfig::new(Arc::new(quic)));
        let connecting = endpoint.connect(addr, sni).map_err(|e| e.to_string())?;
        let connection = tokio::time::timeout(WAIT, connecting)
            .await
            .map_err(|_| "the handshake did not finish".to_owned())?
            .map_err(|e| e.to_string())?;
        Ok(connection)
    }

    /// Dials the bridge the way an AXON daemon does.
    pub async fn dial_bridge(&self, addr: SocketAddr, bridge_key: &[u8]) -> quinn::Connection {
        self.dial(addr, &agent_id(bridge_key), bridge_key, b"axon/1")
            .await
            .expect("the bridge accepts a pinned peer")
    }

    /// Listens on a free port as an AXON peer that admits only
    /// `client_key`; `answer` makes the reply payload (and its kind) for
    /// each request.
    pub fn serve(
        &self,
        client_key: &[u8],
        answer: impl Fn(&Value) -> (&'static str, Value) + Send + Sync + 'static,
    ) -> Served {
        let provider = provider();
        let signing_key = provider
            .key_provider
            .load_private_key(PrivateKeyDer::Pkcs8(self.key.clone_key()))
            .expect("the server key");
        let names = Arc::new(Mutex::new(Vec::new()));
        let mut tls = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("TLS 1.3")
            .with_client_cert_verifier(Arc::new(Pin {
                key: client_key.to_vec(),
                provider,
            }))
            .with_cert_resolver(Arc::new(Recording {
                key: Arc::new(CertifiedKey::new(vec![self.cert.clone()], signing_key)),
                names: names.clone(),
            }));
        tls.alpn_protocols = vec![b"axon/1".to_vec()];
        let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls).expect("QUIC TLS");
        let endpoint = quinn::Endpoint::server(
            quinn::ServerConfig::with_crypto(Arc::new(quic)),
            "127.0.0.1:0".parse().unwrap(),
        )
        .expect("a server endpoint");
        let addr = endpoint.local_addr().expect("the bound address");
        let (tx, received) = mpsc::unbounded_channel();
        let answer = Arc::new(answer);
        let accepting = endpoint.clone();
        tokio::spawn(async move {
            while let Some(incoming) = accepting.accept().await {
                let (tx, answer) = (tx.clone(), answer.clone());
                tokio::spawn(async move {
                    let Ok(connection) = incoming.await else {
                        return;
                    };
                    serve_connection(connection, tx, answer).await;
                });
            }
        });
        Served {
            _endpoint: endpoint,
            addr,
            received,
            names,
        }
    }
}

/// A test peer listening for the bridge.
pub struct Served {
    /// Kept so the peer's endpoint stays open while the test runs.
    _endpoint: quinn::Endpoint,
    pub addr: SocketAddr,
    /// Every message received: (`"bidi"` or `"uni"`, the envelope).
    pub received: mpsc::UnboundedReceiver<(&'static str, Value)>,
    /// The server names (SNI) the bridge asked for.
    pub names: Arc<Mutex<Vec<String>>>,
}

impl Served {
    /// The next message received, failing after [`WAIT`].
    pub async fn next(&mut self) -> (&'static str, Value) {
        tokio::time::timeout(WAIT, self.received.recv())
            .await
            .expect("a message reaches the test peer")
            .expect("the test peer is running")
    }

    /// Whether nothing arrives within `quiet`.
    pub async fn nothing_within(&mut self, quiet: Duration) -> bool {
        tokio::time::timeout(quiet, self.received.recv())
            .await
            .is_err()
    }
}

/// What a serving test peer answers a request with: the reply's kind and payload.
type Answer = dyn Fn(&Value) -> (&'static str, Value) + Send + Sync;

async fn serve_connection(
    connection: quinn::Connection,
    tx: mpsc::UnboundedSender<(&'static str, Value)>,
    answer: Arc<Answer>,
) {
    loop {
        tokio::select! {
            uni = connection.accept_uni() => {
                let Ok(mut recv) = uni else { return };
                let bytes = recv.read_to_end(1 << 20).await.unwrap_or_default();
                let _ = tx.send(("uni", serde_json::from_slice(&bytes).unwrap_or(Value::Null)));
            }
            bi = connection.accept_bi() => {
                let Ok((mut send, mut recv)) = bi else { return };
                let bytes = recv.read_to_end(1 << 20).await.unwrap_or_default();
                let request: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
                let (kind, payload) = answer(&request);
                let reply = json!({
                    "id": uuid::Uuid::new_v4().to_string(),
                    "kind": kind,
                    "ref": request["id"],
                    "payload": payload,
                });
                let _ = tx.send(("bidi", request));
                let _ = send.write_all(reply.to_string().as_bytes()).await;
                let _ = send.finish();
            }
        }
    }
}

/// Sends `bytes` on a new bidirectional stream and reads the reply to its
/// end (empty when the other side finished without answering).
pub async fn exchange(connection: &quinn::Connection, bytes: &[u8]) -> Result<Vec<u8>, String> {
    let (mut send, mut recv) = connection.open_bi().await.map_err(|e| e.to_string())?;
    send.write_all(bytes).await.map_err(|e| e.to_string())?;
    let _ = send.finish();
    tokio::time::timeout(WAIT, recv.read_to_end(1 << 20))
        .await
        .map_err(|_| "no reply".to_owned())?
        .map_err(|e| e.to_string())
}

/// Sends `bytes` on a new unidirectional stream.
pub async fn one_way(connection: &quinn::Connection, bytes: &[u8]) {
    let mut send = connection.open_uni().await.expect("a uni stream");
    send.write_all(bytes).await.expect("write");
    send.finish().expect("finish");
    // Wait until the bridge has read it all (or stopped reading).
    let _ = tokio::time::timeout(WAIT, send.stopped()).await;
}

/// Whether the bridge refused a connection: the handshake failed, or it
/// was closed before the first exchange got an answer (a client may finish
/// its side of the handshake before the server has judged its certificate).
pub async fn refused(dialled: Result<quinn::Connection, String>) -> bool {
    match dialled {
        Err(_) => true,
        Ok(connection) => {
            let (_, bytes) = envelope("request", json!({"message": "let me in"}));
            exchange(&connection, &bytes).await.is_err()
        }
    }
}

/// A well-formed envelope of `kind` with `payload`: (its id, its bytes).
pub fn envelope(kind: &str, payload: Value) -> (String, Vec<u8>) {
    let id = uuid::Uuid::new_v4().to_string();
    let bytes = json!({"id": id, "kind": kind, "payload": payload})
        .to_string()
        .into_bytes();
    (id, bytes)
}

/// Sends a request and returns the parsed reply, checking it answers the request.
pub async fn request(connection: &quinn::Connection, payload: Value) -> Value {
    let (id, bytes) = envelope("request", payload);
    let reply = exchange(connection, &bytes).await.expect("a reply");
    let reply: Value = serde_json::from_slice(&reply).expect("the reply is JSON");
    assert_eq!(reply["ref"], json!(id), "the reply refers to the request");
    let reply_id = reply["id"].as_str().expect("the reply has an id");
    assert_eq!(
        uuid::Uuid::parse_str(reply_id)
            .expect("a uuid")
            .get_version_num(),
        4,
        "reply ids are UUID v4"
    );
    reply
}

/// Accepts exactly one Ed25519 key, and checks handshake signatures.
#[derive(Debug)]
struct Pin {
    key: Vec<u8>,
    provider: Arc<CryptoProvider>,
}

impl Pin {
    fn check(&self, cert: &CertificateDer<'_>) -> Result<(), rustls::Error> {
        let parsed = ParsedCertificate::try_from(cert)?;
        let spki = parsed.subject_public_key_info();
        let expected: Vec<u8> = ED25519_SPKI_PREFIX
            .iter()
            .chain(&self.key)
            .copied()
            .collect();
        if spki.as_ref() == expected.as_slice() {
            Ok(())
        } else {
            Err(rustls::Error::General("not the pinned key".into()))
        }
    }

    fn tls13(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }
}

impl ServerCertVerifier for Pin {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.3 only".into()))
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

impl ClientCertVerifier for Pin {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }
    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        self.check(end_entity)
            .map(|()| ClientCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("TLS 1.3 only".into()))
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.tls13(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        vec![SignatureScheme::ED25519]
    }
}

/// Presents one certificate and records the server names asked for.
#[derive(Debug)]
struct Recording {
    key: Arc<CertifiedKey>,
    names: Arc<Mutex<Vec<String>>>,
}

impl ResolvesServerCert for Recording {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name().unwrap_or_default().to_owned();
        self.names.lock().unwrap().push(name);
        Some(self.key.clone())
    }
}

/// A bridge running in this process on a fabric.
pub struct RunningBridge {
    pub addr: SocketAddr,
    pub public_key: Vec<u8>,
    pub bridge_id: String,
    shutdown: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<Result<(), agdx::bridge::axon::BridgeError>>,
}

impl RunningBridge {
    /// Stops it and checks that it ended cleanly.
    pub async fn stop(self) {
        self.shutdown.cancel();
        tokio::time::timeout(WAIT, self.task)
            .await
            .expect("the bridge stops")
            .expect("the bridge task")
            .expect("the bridge ended cleanly");
    }
}

/// Bridge settings for tests: loopback, a free port, `peers` pinned, quick
/// workers, a short reply timeout.
pub fn bridge_config(
    fabric: &super::fabric::Fabric,
    peers: &[&TestPeer],
) -> agdx::bridge::axon::AxonBridgeConfig {
    let mut config = agdx::bridge::axon::AxonBridgeConfig::new("127.0.0.1:0".parse().unwrap());
    config.peers = peers
        .iter()
        .map(|p| p.token("127.0.0.1:9").parse().expect("a valid token"))
        .collect();
    config.timeout = Duration::from_secs(5);
    config.worker = super::fabric::quick_config(fabric.dir.path().join("state-bridge"));
    config
}

/// A fresh bridge identity.
pub fn bridge_identity() -> agdx::bridge::axon::Identity {
    agdx::bridge::axon::Identity::from_seed(&rand::random())
}

/// Starts a bridge with a fresh identity on `fabric`.
pub async fn start_bridge(
    fabric: &super::fabric::Fabric,
    config: agdx::bridge::axon::AxonBridgeConfig,
) -> RunningBridge {
    start_bridge_as(fabric, bridge_identity(), config).await
}

/// Starts a bridge as `identity` on `fabric`.
pub async fn start_bridge_as(
    fabric: &super::fabric::Fabric,
    identity: agdx::bridge::axon::Identity,
    config: agdx::bridge::axon::AxonBridgeConfig,
) -> RunningBridge {
    let bridge = agdx::bridge::axon::AxonBridge::bind(
        fabric.log.clone(),
        fabric.topology.clone(),
        identity,
        config,
    )
    .await
    .expect("the bridge binds");
    let token = bridge.token(None).expect("the bridge's token").to_string();
    let shutdown = tokio_util::sync::CancellationToken::new();
    RunningBridge {
        addr: bridge.local_addr().expect("the bound address"),
        public_key: token_key(&token),
        bridge_id: bridge.bridge_id().to_owned(),
        shutdown: shutdown.clone(),
        task: tokio::spawn(bridge.run(shutdown)),
    }
}
