//! The AXON transport: one QUIC endpoint that both accepts connections and
//! dials pinned peers, one message per stream (WIRE_FORMAT §3–5).
//!
//! Each message travels on a fresh stream and ends with the stream's FIN;
//! there is no length prefix. A `request` goes on a bidirectional stream
//! and its `response` or `error` comes back on the same stream; anything
//! else goes on a unidirectional stream.
//!
//! What arrives is judged as the reference daemon judges it, in its order:
//!
//! | arrives | answer |
//! | --- | --- |
//! | over 64 KiB, not an envelope, reset before FIN, not read within 10 s | dropped: no reply, nothing else happens, the connection stays up |
//! | a request whose reply stream the requester stops (or whose connection ends) before the reply | its command is cancelled |
//! | unknown kind on a bidirectional stream | `error` `unhandled` naming the kind |
//! | `request` failing validation (nil or non-v4 id, payload not an object) | `error` `invalid_envelope` |
//! | `request` | handed to [`Inbound::request`], whose reply is sent |
//! | `request` on a unidirectional stream | dropped |
//! | any other kind, valid | handed to [`Inbound::message`]; no reply |
//!
//! Connections are kept per peer agent id and reused in both directions;
//! the first use of a peer dials it (SNI = its agent id).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::value::RawValue;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::envelope::{Envelope, EnvelopeError, Kind, MAX_MESSAGE_SIZE};
use super::identity::{AxonId, Identity};
use super::tls::{PinnedPeers, TlsSetupError, configs, peer_of};
use crate::log::lock;

/// How long a peer may take to send one message.
const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// QUIC keep-alive interval (AXON's recommendation).
const KEEPALIVE: Duration = Duration::from_secs(15);
/// Idle time after which QUIC closes a connection (AXON's recommendation).
const IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Most connections open at once, as in the reference daemon.
const MAX_CONNECTIONS: usize = 128;
/// Streams a peer may have open on one connection at once, per direction.
const MAX_STREAMS: u32 = 64;

/// What the bridge does with what arrives.
#[async_trait]
pub(crate) trait Inbound: Send + Sync + 'static {
    /// Answers a valid `request` from `from` with a `response` or `error`.
    async fn request(&self, from: &AxonId, request: Envelope) -> Envelope;
    /// Takes a valid message of any kind but `request`; nothing is answered.
    async fn message(&self, from: &AxonId, message: Envelope);
}

/// A message could not be sent, or its reply was not acceptable.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    /// The peer is not pinned, so the bridge will not dial it.
    #[error("AXON peer {0} is not pinned; pin its token, axon://KEY@HOST:PORT, to reach it")]
    UnknownPeer(AxonId),
    /// The peer's address did not resolve.
    #[error("the address {addr} of AXON peer {peer} did not resolve: {source}")]
    Resolve {
        /// The peer.
        peer: AxonId,
        /// Its address.
        addr: String,
        /// What the resolver said.
        source: std::io::Error,
    },
    /// Dialling could not start.
    #[error("could not dial AXON peer {peer}: {source}")]
    Connect {
        /// The peer.
        peer: AxonId,
        /// What quinn said.
        source: quinn::ConnectError,
    },
    /// The connection failed or was lost (handshake refused, peer gone).
    #[error("the connection to AXON peer {peer} failed: {source}")]
    Connection {
        /// The peer.
        peer: AxonId,
        /// What quinn said.
        source: quinn::ConnectionError,
    },
    /// Too many connections are open.
    #[error("the bridge has {MAX_CONNECTIONS} AXON connections open already; try again later")]
    ConnectionLimit,
    /// Writing the message failed.
    #[error("sending to AXON peer {peer} failed: {source}")]
    Write {
        /// The peer.
        peer: AxonId,
        /// What quinn said.
        source: quinn::WriteError,
    },
    /// Reading the reply failed.
    #[error("reading the reply of AXON peer {peer} failed: {source}")]
    Read {
        /// The peer.
        peer: AxonId,
        /// What quinn said.
        source: quinn::ReadToEndError,
    },
    /// No reply in time.
    #[error("AXON peer {peer} did not answer within {waited:?}")]
    Timeout {
        /// The peer.
        peer: AxonId,
        /// How long the bridge waited.
        waited: Duration,
    },
    /// The message to send is not a valid envelope (too large).
    #[error("not sent: {0}")]
    Outgoing(EnvelopeError),
    /// The peer's reply is not a valid envelope.
    #[error("AXON peer {peer} answered with an invalid reply: {source}")]
    BadReply {
        /// The peer.
        peer: AxonId,
        /// What is wrong with it.
        source: EnvelopeError,
    },
    /// The peer answered with an `error`.
    #[error("AXON peer {peer} answered with an error: {payload}")]
    ErrorReply {
        /// The peer.
        peer: AxonId,
        /// The error's payload.
        payload: String,
    },
    /// The reply is not a `response` or `error` to the request sent.
    #[error(
        "AXON peer {peer} answered with a {kind} referring to {reference:?}, not a response or error to request {request}"
    )]
    NotTheReply {
        /// The peer.
        peer: AxonId,
        /// The request sent.
        request: uuid::Uuid,
        /// The reply's kind.
        kind: &'static str,
        /// The reply's `ref`.
        reference: Option<uuid::Uuid>,
    },
}

impl SendError {
    /// Whether sending again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            SendError::UnknownPeer(_) => false,
            SendError::Resolve { .. } => true,
            SendError::Connect { .. } => false,
            SendError::Connection { .. } => true,
            SendError::ConnectionLimit => true,
            SendError::Write { .. } => true,
            SendError::Read { .. } => true,
            SendError::Timeout { .. } => true,
            SendError::Outgoing(_) => false,
            SendError::BadReply { .. } => false,
            SendError::ErrorReply { .. } => false,
            SendError::NotTheReply { .. } => false,
        }
    }
}

/// The endpoint could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TransportError {
    /// TLS could not be configured.
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
    /// The UDP socket could not be bound.
    #[error(
        "cannot listen for AXON on UDP {addr}: {source}; is another daemon using the port? listen on another one"
    )]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the system said.
        source: std::io::Error,
    },
}

impl TransportError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            TransportError::Tls(e) => e.is_retryable(),
            TransportError::Bind { source, .. } => source.kind() == std::io::ErrorKind::AddrInUse,
        }
    }
}

/// One QUIC endpoint speaking AXON.
pub(crate) struct Transport {
    endpoint: quinn::Endpoint,
    client: quinn::ClientConfig,
    peers: Arc<PinnedPeers>,
    inbound: Arc<dyn Inbound>,
    connections: Mutex<HashMap<AxonId, quinn::Connection>>,
    dialing: tokio::sync::Mutex<HashMap<AxonId, Arc<tokio::sync::Mutex<()>>>>,
    permits: Arc<Semaphore>,
    tasks: TaskTracker,
    shutdown: CancellationToken,
}

impl Transport {
    /// Binds `listen` as `identity`, admitting `peers`, handing what
    /// arrives to `inbound`. Nothing is accepted before [`Transport::serve`].
    pub(crate) fn bind(
        listen: SocketAddr,
        identity: &Identity,
        peers: Arc<PinnedPeers>,
        inbound: Arc<dyn Inbound>,
    ) -> Result<Arc<Self>, TransportError> {
        let (mut server, mut client) = configs(identity, peers.clone())?;
        let transport = Arc::new(transport_config());
        server.transport_config(transport.clone());
        client.transport_config(transport);
        let endpoint =
            quinn::Endpoint::server(server, listen).map_err(|source| TransportError::Bind {
                addr: listen,
                source,
            })?;
        Ok(Arc::new(Self {
            endpoint,
            client,
            peers,
            inbound,
            connections: Mutex::new(HashMap::new()),
            dialing: tokio::sync::Mutex::new(HashMap::new()),
            permits: Arc::new(Semaphore::new(MAX_CONNECTIONS)),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
        }))
    }

    /// The bound UDP address.
    pub(crate) fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.endpoint.local_addr()
    }

    /// Accepts connections until `shutdown`; then takes no new connections
    /// or streams, answers the requests in hand, and closes every connection.
    pub(crate) async fn serve(self: Arc<Self>, shutdown: CancellationToken) {
        loop {
            let incoming = tokio::select! {
                _ = shutdown.cancelled() => break,
                incoming = self.endpoint.accept() => incoming,
            };
            let Some(incoming) = incoming else { break };
            let this = self.clone();
            self.tasks.spawn(async move {
                let remote = incoming.remote_address();
                match incoming.await {
                    Ok(connection) => this.adopt(connection),
                    Err(error) => {
                        tracing::warn!(%remote, %error, "an AXON connection attempt failed")
                    }
                }
            });
        }
        self.endpoint.set_server_config(None);
        self.shutdown.cancel();
        self.tasks.close();
        self.tasks.wait().await;
        self.endpoint.close(0u32.into(), b"shutdown");
        self.endpoint.wait_idle().await;
    }

    /// Closes every connection at once, answering nothing more.
    pub(crate) fn close(&self) {
        self.shutdown.cancel();
        self.endpoint.close(0u32.into(), b"closed");
    }

    /// Starts serving the streams of an established connection.
    fn adopt(self: &Arc<Self>, connection: quinn::Connection) {
        let Some(peer) = peer_of(&connection) else {
            connection.close(1u32.into(), b"no peer identity");
            return;
        };
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            tracing::warn!(%peer, max = MAX_CONNECTIONS, "refusing an AXON connection: connection limit reached");
            connection.close(0u32.into(), b"connection limit reached");
            return;
        };
        tracing::debug!(%peer, remote = %connection.remote_address(), "AXON peer connected");
        self.register(&peer, &connection);
        let this = self.clone();
        self.tasks
            .spawn(async move { this.run_connection(connection, peer, permit).await });
    }

    fn register(&self, peer: &AxonId, connection: &quinn::Connection) {
        lock(&self.connections).insert(peer.clone(), connection.clone());
    }

    fn live(&self, peer: &AxonId) -> Option<quinn::Connection> {
        lock(&self.connections)
            .get(peer)
            .filter(|c| c.close_reason().is_none())
            .cloned()
    }

    fn forget(&self, peer: &AxonId, connection: &quinn::Connection) {
        let mut connections = lock(&self.connections);
        if connections
            .get(peer)
            .is_some_and(|c| c.stable_id() == connection.stable_id())
        {
            connections.remove(peer);
        }
    }

    async fn run_connection(
        self: Arc<Self>,
        connection: quinn::Connection,
        peer: AxonId,
        _permit: OwnedSemaphorePermit,
    ) {
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => break,
                uni = connection.accept_uni() => match uni {
                    Ok(recv) => {
                        let (this, peer) = (self.clone(), peer.clone());
                        self.tasks.spawn(async move { this.one_way(&peer, recv).await });
                    }
                    Err(_) => break,
                },
                bi = connection.accept_bi() => match bi {
                    Ok((send, recv)) => {
                        let (this, peer) = (self.clone(), peer.clone());
                        self.tasks.spawn(async move { this.two_way(&peer, send, recv).await });
                    }
                    Err(_) => break,
                },
            }
        }
        tracing::debug!(%peer, reason = ?connection.close_reason(), "AXON connection ended");
        self.forget(&peer, &connection);
    }

    /// A unidirectional stream: one message, no reply.
    async fn one_way(&self, peer: &AxonId, recv: quinn::RecvStream) {
        let Some(message) = read_message(peer, recv, "unidirectional").await else {
            return;
        };
        if message.kind == Kind::Request {
            tracing::warn!(%peer, id = %message.id, "dropping a request sent on a unidirectional stream; send requests on a bidirectional stream");
        } else if let Err(error) = message.validate() {
            tracing::warn!(%peer, id = %message.id, %error, "dropping an invalid message");
        } else {
            self.inbound.message(peer, message).await;
        }
    }

    /// A bidirectional stream: a request and its reply.
    async fn two_way(&self, peer: &AxonId, mut send: quinn::SendStream, recv: quinn::RecvStream) {
        let Some(message) = read_message(peer, recv, "bidirectional").await else {
            return;
        };
        let reply = match message.kind {
            Kind::Unknown => Some(Envelope::error_reply(
                message.id,
                "unhandled",
                "unknown message kind on a bidirectional stream; this AGDX bridge answers `request` here (and takes `message` on unidirectional streams)",
                false,
            )),
            Kind::Request => match message.validate() {
                Err(error) => Some(Envelope::error_reply(
                    message.id,
                    "invalid_envelope",
                    &format!("envelope validation failed: {error}"),
                    false,
                )),
                Ok(()) => {
                    // A requester that resets the stream (or whose
                    // connection ends) no longer waits: the request is
                    // dropped, which cancels its command.
                    let stopped = send.stopped();
                    tokio::select! {
                        reply = self.inbound.request(peer, message) => Some(reply),
                        why = stopped => {
                            tracing::debug!(%peer, ?why, "the AXON requester stopped waiting; cancelling its request");
                            return;
                        }
                    }
                }
            },
            Kind::Response | Kind::Message | Kind::Error => {
                match message.validate() {
                    Ok(()) => self.inbound.message(peer, message).await,
                    Err(error) => {
                        tracing::warn!(%peer, id = %message.id, %error, "dropping an invalid message")
                    }
                }
                None
            }
        };
        if let Some(reply) = reply {
            let sent = match reply.encode() {
                Ok(bytes) => send.write_all(&bytes).await.map_err(|e| e.to_string()),
                Err(error) => Err(error.to_string()),
            };
            if let Err(error) = sent {
                tracing::warn!(%peer, %error, "could not send a reply");
            }
        }
        let _ = send.finish();
    }

    /// An open connection to `peer`, dialling it when there is none.
    async fn connection(self: &Arc<Self>, peer: &AxonId) -> Result<quinn::Connection, SendError> {
        if let Some(connection) = self.live(peer) {
            return Ok(connection);
        }
        let gate = self
            .dialing
            .lock()
            .await
            .entry(peer.clone())
            .or_default()
            .clone();
        let _dialing = gate.lock().await;
        if let Some(connection) = self.live(peer) {
            return Ok(connection);
        }
        let token = self
            .peers
            .get(peer)
            .ok_or_else(|| SendError::UnknownPeer(peer.clone()))?;
        let addr = self.resolve(peer, token.addr()).await?;
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| SendError::ConnectionLimit)?;
        let connection = self
            .endpoint
            .connect_with(self.client.clone(), addr, peer.as_str())
            .map_err(|source| SendError::Connect {
                peer: peer.clone(),
                source,
            })?
            .await
            .map_err(|source| SendError::Connection {
                peer: peer.clone(),
                source,
            })?;
        tracing::debug!(%peer, %addr, "dialled AXON peer");
        self.register(peer, &connection);
        let (this, peer, dialled) = (self.clone(), peer.clone(), connection.clone());
        self.tasks
            .spawn(async move { this.run_connection(dialled, peer, permit).await });
        Ok(connection)
    }

    /// The first address of `addr` in the endpoint's address family.
    async fn resolve(&self, peer: &AxonId, addr: &str) -> Result<SocketAddr, SendError> {
        let resolve_error = |source| SendError::Resolve {
            peer: peer.clone(),
            addr: addr.to_owned(),
            source,
        };
        let ipv6 = self.local_addr().map(|a| a.is_ipv6()).unwrap_or(false);
        let mut found = tokio::net::lookup_host(addr).await.map_err(resolve_error)?;
        found.find(|a| a.is_ipv6() == ipv6).ok_or_else(|| {
            resolve_error(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!(
                    "no {} address (the bridge listens on {})",
                    if ipv6 { "IPv6" } else { "IPv4" },
                    if ipv6 { "IPv6" } else { "IPv4" }
                ),
            ))
        })
    }

    /// Sends a `request` with `payload` to `peer` and returns its `response`
    /// or `error`, giving up after `timeout`.
    pub(crate) async fn request(
        self: &Arc<Self>,
        peer: &AxonId,
        payload: Box<RawValue>,
        timeout: Duration,
    ) -> Result<Envelope, SendError> {
        let request = Envelope::new(Kind::Request, payload);
        let bytes = request.encode().map_err(SendError::Outgoing)?;
        let exchange = async {
            let (mut send, mut recv) = self
                .open(peer, |c| async move { c.open_bi().await })
                .await?;
            send.write_all(&bytes)
                .await
                .map_err(|source| SendError::Write {
                    peer: peer.clone(),
                    source,
                })?;
            let _ = send.finish();
            recv.read_to_end(MAX_MESSAGE_SIZE)
                .await
                .map_err(|source| SendError::Read {
                    peer: peer.clone(),
                    source,
                })
        };
        let reply = tokio::time::timeout(timeout, exchange)
            .await
            .map_err(|_| SendError::Timeout {
                peer: peer.clone(),
                waited: timeout,
            })??;
        let bad = |source| SendError::BadReply {
            peer: peer.clone(),
            source,
        };
        let reply = Envelope::decode(&reply).map_err(bad)?;
        reply.validate().map_err(bad)?;
        if !matches!(reply.kind, Kind::Response | Kind::Error)
            || reply.reference != Some(request.id)
        {
            return Err(SendError::NotTheReply {
                peer: peer.clone(),
                request: request.id,
                kind: reply.kind.as_str(),
                reference: reply.reference,
            });
        }
        Ok(reply)
    }

    /// Sends a one-way `message` with `payload` to `peer`.
    pub(crate) async fn message(
        self: &Arc<Self>,
        peer: &AxonId,
        payload: Box<RawValue>,
    ) -> Result<(), SendError> {
        let bytes = Envelope::new(Kind::Message, payload)
            .encode()
            .map_err(SendError::Outgoing)?;
        let mut send = self
            .open(peer, |c| async move { c.open_uni().await })
            .await?;
        send.write_all(&bytes)
            .await
            .map_err(|source| SendError::Write {
                peer: peer.clone(),
                source,
            })?;
        let _ = send.finish();
        Ok(())
    }

    /// Opens a stream to `peer`; a connection found dead is dialled anew once.
    async fn open<S, Fut>(
        self: &Arc<Self>,
        peer: &AxonId,
        open: impl Fn(quinn::Connection) -> Fut,
    ) -> Result<S, SendError>
    where
        Fut: std::future::Future<Output = Result<S, quinn::ConnectionError>>,
    {
        let connection = self.connection(peer).await?;
        match open(connection.clone()).await {
            Ok(stream) => Ok(stream),
            Err(_) => {
                self.forget(peer, &connection);
                let connection = self.connection(peer).await?;
                open(connection)
                    .await
                    .map_err(|source| SendError::Connection {
                        peer: peer.clone(),
                        source,
                    })
            }
        }
    }
}

/// Reads one message, or says why it was dropped.
async fn read_message(
    peer: &AxonId,
    mut recv: quinn::RecvStream,
    stream: &str,
) -> Option<Envelope> {
    let bytes = match tokio::time::timeout(READ_TIMEOUT, recv.read_to_end(MAX_MESSAGE_SIZE)).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(quinn::ReadToEndError::TooLong)) => {
            tracing::warn!(%peer, stream, "dropping a message over {MAX_MESSAGE_SIZE} bytes");
            return None;
        }
        Ok(Err(error)) => {
            tracing::warn!(%peer, stream, %error, "dropping a message that did not arrive whole");
            return None;
        }
        Err(_) => {
            tracing::warn!(%peer, stream, "dropping a message not finished within {READ_TIMEOUT:?}");
            return None;
        }
    };
    match Envelope::decode(&bytes) {
        Ok(envelope) => Some(envelope),
        Err(error) => {
            tracing::warn!(%peer, stream, %error, "dropping a malformed message");
            None
        }
    }
}

fn transport_config() -> quinn::TransportConfig {
    let mut config = quinn::TransportConfig::default();
    config.keep_alive_interval(Some(KEEPALIVE));
    config.max_concurrent_bidi_streams(MAX_STREAMS.into());
    config.max_concurrent_uni_streams(MAX_STREAMS.into());
    if let Ok(idle) = quinn::IdleTimeout::try_from(IDLE_TIMEOUT) {
        config.max_idle_timeout(Some(idle));
    }
    config
}
