//! The AXON bridge: AXON agents and agents on the log working together,
//! neither side changed.
//!
//! [AXON](https://github.com/hwbehrens/axon) is a point-to-point protocol:
//! QUIC with mutual TLS 1.3 over self-signed Ed25519 certificates, ALPN
//! `axon/1`, peers pinned by public key, one JSON envelope `{id, kind,
//! payload, ref}` per stream. The bridge is an AXON peer with an identity
//! of its own, and on the log it is an ordinary producer, requester and
//! worker:
//!
//! - **inbound** ([`inbound`]): a `request` from a pinned peer becomes a
//!   command to the agent routed for its `payload.domain` (see
//!   [`Routes`]), and the reply goes back as the AXON `response` or
//!   `error`; any other message becomes an event.
//! - **outbound** ([`outbound`]): for each `--expose AGENT=AXON_ID` the
//!   bridge runs a worker for `AGENT` that hands its commands to that
//!   AXON peer as requests (and its events as messages).
//! - **loops**: everything the bridge writes carries its id
//!   ([`AxonBridge::bridge_id`]) in `bridge_hops`, and a record that
//!   already carries it is refused.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog, topology: agdx::Topology) -> Result<(), Box<dyn std::error::Error>> {
//! use agdx::bridge::axon::{AxonBridge, AxonBridgeConfig, Identity, Routes};
//! use agdx::wire::AgentId;
//!
//! let mut config = AxonBridgeConfig::new("127.0.0.1:7100".parse()?);
//! config.peers.push("axon://-57VnlpKZNwM2sgR2I9Yu8i6eK1FB-Zx8jD1RLovom8@127.0.0.1:7101".parse()?);
//! config.routes = Routes::new(vec!["family=home".parse()?], Some(AgentId::new("echo")?));
//! let bridge = AxonBridge::bind(log, topology, Identity::from_seed(&[7; 32]), config).await?;
//! println!("{}", bridge.token(None)?); // axon://...@127.0.0.1:7100, for `axon connect`
//! bridge.run(tokio_util::sync::CancellationToken::new()).await?;
//! # Ok(()) }
//! ```

mod envelope;
mod identity;
pub mod inbound;
pub mod outbound;
mod routes;
mod tls;
mod token;
mod transport;

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use agdx_wire::AgentId;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::ask::Requester;
use crate::clock::{SharedClock, system_clock};
use crate::log::SharedLog;
use crate::producer::Producer;
use crate::topology::Topology;
use crate::worker::{Worker, WorkerConfig, WorkerError};

pub use envelope::MAX_MESSAGE_SIZE;
pub use identity::{AxonId, AxonIdError, CertificateError, Identity};
pub use routes::{Route, RouteError, Routes};
pub use tls::{ALPN, PeerRefused, TlsSetupError};
pub use token::{PeerToken, PeersFileError, TokenError, read_peers_file};
pub use transport::{SendError, TransportError};

/// Metadata key: the AXON agent id a record came from.
pub const META_AXON_FROM: &str = "axon.from";
/// Metadata key: the AXON message id a record came from.
pub const META_AXON_ID: &str = "axon.id";
/// Metadata key: the AXON kind of a message that became an event.
pub const META_AXON_KIND: &str = "axon.kind";

/// How the bridge waits for a reply by default: less than AXON's own
/// 30-second request timeout, so the peer hears `timeout` from the bridge
/// rather than giving up itself.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(25);

/// The AGDX agent the bridge writes as by default.
pub const DEFAULT_AGENT: &str = "axon-bridge";

/// One `--expose AGENT=AXON_ID`: the bridge answers for `agent` on the log
/// by asking the AXON peer `peer`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expose {
    /// The agent on the log.
    pub agent: AgentId,
    /// The AXON peer that answers for it.
    pub peer: AxonId,
}

/// Why an `--expose` does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExposeError {
    /// No `=`.
    #[error(
        "an exposed agent is AGENT=AXON_AGENT_ID, e.g. calendar=ed25519.5d230feca323ec30ad9c917919cef11d"
    )]
    Shape,
    /// The agent name is not an agent id.
    #[error("the agent to expose: {0}")]
    Agent(String),
    /// The AXON side is not an agent id.
    #[error(transparent)]
    Peer(#[from] AxonIdError),
}

impl ExposeError {
    /// Whether trying again may succeed (never: the text is wrong).
    pub fn is_retryable(&self) -> bool {
        match self {
            ExposeError::Shape => false,
            ExposeError::Agent(_) => false,
            ExposeError::Peer(_) => false,
        }
    }
}

impl FromStr for Expose {
    type Err = ExposeError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (agent, peer) = text.split_once('=').ok_or(ExposeError::Shape)?;
        Ok(Self {
            agent: AgentId::new(agent.trim()).map_err(|e| ExposeError::Agent(e.to_string()))?,
            peer: peer.trim().parse()?,
        })
    }
}

/// What the bridge does.
#[derive(Debug, Clone)]
pub struct AxonBridgeConfig {
    /// The UDP address to listen on.
    pub listen: SocketAddr,
    /// The AXON peers admitted (and dialled): nobody else gets in.
    pub peers: Vec<PeerToken>,
    /// Which agent answers which requests.
    pub routes: Routes,
    /// Agents on the log answered by AXON peers.
    pub expose: Vec<Expose>,
    /// How long to wait for a reply, either way.
    pub timeout: Duration,
    /// The AGDX agent the bridge writes inbound commands and events as.
    pub agent: AgentId,
    /// The settings of the workers of exposed agents.
    pub worker: WorkerConfig,
}

impl AxonBridgeConfig {
    /// Listening on `listen`, no peers, no routes, nothing exposed.
    pub fn new(listen: SocketAddr) -> Self {
        Self {
            listen,
            peers: Vec::new(),
            routes: Routes::default(),
            expose: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            agent: AgentId::new(DEFAULT_AGENT)
                .unwrap_or_else(|_| unreachable!("the default agent name is valid")),
            worker: WorkerConfig::default(),
        }
    }
}

/// The bridge could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum BridgeError {
    /// The QUIC endpoint could not be set up.
    #[error(transparent)]
    Transport(#[from] TransportError),
    /// An exposed agent names an AXON peer that is not pinned.
    #[error(
        "exposing '{agent}' to {peer}: AXON peer {peer} is not pinned; pin its token, axon://KEY@HOST:PORT (pinned: {pinned})"
    )]
    ExposedPeerNotPinned {
        /// The exposed agent.
        agent: AgentId,
        /// The AXON peer named for it.
        peer: AxonId,
        /// The pinned peers, for the message.
        pinned: String,
    },
    /// The bridge's own agent id is pinned as a peer.
    #[error(
        "a pinned peer is this bridge itself ({0}); pin the other side's token, not the bridge's"
    )]
    PinnedSelf(AxonId),
    /// The worker of an exposed agent failed.
    #[error("the worker for exposed agent '{agent}' failed: {source}")]
    Worker {
        /// The exposed agent.
        agent: AgentId,
        /// What went wrong.
        source: WorkerError,
    },
    /// A task of the bridge panicked.
    #[error("a bridge task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

impl BridgeError {
    /// Whether starting again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            BridgeError::Transport(e) => e.is_retryable(),
            BridgeError::ExposedPeerNotPinned { .. } => false,
            BridgeError::PinnedSelf(_) => false,
            BridgeError::Worker { source, .. } => source.is_retryable(),
            BridgeError::Task(_) => false,
        }
    }
}

/// An AXON peer that only asks, for a program that calls AXON peers
/// without running a bridge: it dials pinned peers (and admits only
/// them), and answers any request sent to it `unhandled`. Dropping it
/// closes its connections.
pub struct AxonClient(Arc<transport::Transport>);

impl AxonClient {
    /// An asking peer as `identity`, on `listen` (port 0 for any), that
    /// dials and admits `peers` only.
    pub fn bind(
        listen: SocketAddr,
        identity: &Identity,
        peers: Vec<PeerToken>,
    ) -> Result<Self, TransportError> {
        let peers = Arc::new(tls::PinnedPeers::new(peers));
        transport::Transport::bind(listen, identity, peers, Arc::new(AsksOnly)).map(Self)
    }

    /// Sends a `request` with `payload` (a JSON object) to `peer` and
    /// returns the payload of its `response`; an `error` reply is
    /// [`SendError::ErrorReply`].
    pub async fn request(
        &self,
        peer: &AxonId,
        payload: &str,
        timeout: Duration,
    ) -> Result<String, SendError> {
        let payload = serde_json::from_str(payload)
            .map_err(|e| SendError::Outgoing(envelope::EnvelopeError::Json(e)))?;
        let reply = self.0.request(peer, payload, timeout).await?;
        match reply.kind {
            envelope::Kind::Response => Ok(reply.payload.get().to_owned()),
            _ => Err(SendError::ErrorReply {
                peer: peer.clone(),
                payload: reply.payload.get().to_owned(),
            }),
        }
    }
}

impl Drop for AxonClient {
    fn drop(&mut self) {
        self.0.close();
    }
}

struct AsksOnly;

#[async_trait::async_trait]
impl transport::Inbound for AsksOnly {
    async fn request(&self, _from: &AxonId, request: envelope::Envelope) -> envelope::Envelope {
        envelope::Envelope::error_reply(
            request.id,
            "unhandled",
            &format!(
                "no application handler registered for request '{}': this peer only asks",
                request.id
            ),
            false,
        )
    }

    async fn message(&self, _from: &AxonId, _message: envelope::Envelope) {}
}

/// A bound AXON bridge, ready to [`run`](AxonBridge::run).
pub struct AxonBridge {
    identity: Identity,
    bridge_id: String,
    transport: Arc<transport::Transport>,
    workers: Vec<(AgentId, Worker)>,
}

impl AxonBridge {
    /// Binds the UDP port and prepares both directions; nothing is
    /// accepted or consumed before [`run`](AxonBridge::run).
    pub async fn bind(
        log: SharedLog,
        topology: Topology,
        identity: Identity,
        config: AxonBridgeConfig,
    ) -> Result<Self, BridgeError> {
        Self::bind_with_clock(log, topology, identity, config, system_clock()).await
    }

    /// [`bind`](AxonBridge::bind), reading deadlines from `clock`.
    pub async fn bind_with_clock(
        log: SharedLog,
        topology: Topology,
        identity: Identity,
        config: AxonBridgeConfig,
        clock: SharedClock,
    ) -> Result<Self, BridgeError> {
        let bridge_id = format!("axon:{}", identity.id());
        if config.peers.iter().any(|p| p.id() == identity.id()) {
            return Err(BridgeError::PinnedSelf(identity.id().clone()));
        }
        let peers = Arc::new(tls::PinnedPeers::new(config.peers.iter().cloned()));
        if let Some(unpinned) = config.expose.iter().find(|e| peers.get(&e.peer).is_none()) {
            let pinned: Vec<String> = peers.ids().iter().map(|id| id.to_string()).collect();
            return Err(BridgeError::ExposedPeerNotPinned {
                agent: unpinned.agent.clone(),
                peer: unpinned.peer.clone(),
                pinned: if pinned.is_empty() {
                    "none".into()
                } else {
                    pinned.join(", ")
                },
            });
        }
        let producer =
            Producer::new(log.clone(), topology.clone(), config.agent).with_bridge_hop(&bridge_id);
        let to_log = inbound::ToLog {
            requester: Arc::new(Requester::new(producer).with_clock(clock.clone())),
            routes: config.routes,
            timeout: config.timeout,
            bridge_id: bridge_id.clone(),
            clock: clock.clone(),
        };
        let transport =
            transport::Transport::bind(config.listen, &identity, peers, Arc::new(to_log))?;
        let workers = config
            .expose
            .into_iter()
            .map(|expose| {
                let producer = Producer::new(log.clone(), topology.clone(), expose.agent.clone())
                    .with_bridge_hop(&bridge_id);
                let handler = outbound::ToAxon {
                    transport: transport.clone(),
                    peer: expose.peer,
                    bridge_id: bridge_id.clone(),
                    timeout: config.timeout,
                    clock: clock.clone(),
                };
                let worker = Worker::new(producer, config.worker.clone())
                    .with_clock(clock.clone())
                    .fallback(handler);
                (expose.agent, worker)
            })
            .collect();
        Ok(Self {
            identity,
            bridge_id,
            transport,
            workers,
        })
    }

    /// The bridge's AXON agent id.
    pub fn id(&self) -> &AxonId {
        self.identity.id()
    }

    /// The id the bridge stamps into `bridge_hops`: `axon:` + its agent id.
    pub fn bridge_id(&self) -> &str {
        &self.bridge_id
    }

    /// The bound UDP address.
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.transport.local_addr()
    }

    /// The token AXON daemons enroll the bridge with (`axon connect
    /// TOKEN`): its key and `host` (default: the listening IP, or
    /// 127.0.0.1 when listening on every interface) with the bound port.
    pub fn token(&self, host: Option<&str>) -> Result<PeerToken, TokenError> {
        let bound = self
            .local_addr()
            .map_err(|e| TokenError::Addr(e.to_string()))?;
        let host = match host {
            Some(host) => host.to_owned(),
            None if bound.ip().is_unspecified() => "127.0.0.1".to_owned(),
            None => match bound.ip() {
                std::net::IpAddr::V6(ip) => format!("[{ip}]"),
                std::net::IpAddr::V4(ip) => ip.to_string(),
            },
        };
        PeerToken::new(
            self.identity.public_key(),
            &format!("{host}:{}", bound.port()),
        )
    }

    /// Serves AXON peers and runs the exposed agents' workers until
    /// `shutdown`. Then the workers finish the records in hand and leave
    /// their groups, and only after them the AXON side answers the requests
    /// in hand and closes its connections (a worker's last request still
    /// has its connection). A worker that fails stops the whole bridge.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), BridgeError> {
        let stop = shutdown.child_token();
        let stop_serving = CancellationToken::new();
        let mut tasks = JoinSet::new();
        for (agent, worker) in self.workers {
            let stop = stop.clone();
            tasks.spawn(async move {
                worker
                    .run(stop)
                    .await
                    .map_err(|source| BridgeError::Worker { agent, source })
            });
        }
        let serving = tokio::spawn(self.transport.serve(stop_serving.clone()));
        let mut outcome = Ok(());
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                Some(done) = tasks.join_next() => {
                    if let Err(error) = done.map_err(BridgeError::from).and_then(|r| r) {
                        tracing::error!(%error, "stopping the AXON bridge");
                        outcome = Err(error);
                        stop.cancel();
                    }
                }
            }
        }
        while let Some(done) = tasks.join_next().await {
            if let Err(error) = done.map_err(BridgeError::from).and_then(|r| r) {
                outcome = outcome.and(Err(error));
            }
        }
        stop_serving.cancel();
        serving.await?;
        outcome
    }
}
