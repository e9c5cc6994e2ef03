//! `agdx bridge axon`: run the AXON bridge.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use agdx::bridge::axon::{
    AxonBridge, AxonBridgeConfig, BridgeError, DEFAULT_AGENT, Expose, Identity, PeerToken, Route,
    RouteError, Routes, TransportError, read_peers_file,
};
use agdx::wire::AgentId;
use agdx::worker::WorkerConfig;

use crate::cli::advice;
use crate::cli::context::{Failure, Global, parse_agent, parse_duration, stop_on_signal};

/// Runs an AXON peer that bridges to the log.
///
/// AXON daemons (and other AXON peers) reach agents on the log through it:
/// a `request` becomes a command to the agent routed for its
/// `payload.domain` (`--route`, else `--default-agent`), with the payload
/// as the JSON body, unchanged; the reply (or error, or `timeout`) goes
/// back. A one-way `message` becomes an event. With `--expose`, agents on
/// the log reach AXON peers: the bridge answers for AGENT by sending its
/// commands to the AXON peer as requests.
///
/// Only pinned peers get in (`--peer`, `--peers-file`); on start the bridge
/// prints its own `axon://` token, to enroll it with `axon connect TOKEN`.
#[derive(Debug, Args)]
pub struct AxonArgs {
    /// The bridge's secret key file: a 32-byte Ed25519 seed as 64 hex
    /// characters, readable by its owner only (mode 0600). Its public key
    /// is the bridge's AXON identity.
    #[arg(long, value_name = "FILE")]
    pub key: PathBuf,

    /// The UDP address to listen on.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:7100")]
    pub listen: SocketAddr,

    /// The host put in the printed token (default: the listening IP, or
    /// 127.0.0.1 when listening on all interfaces).
    #[arg(long, value_name = "HOST")]
    pub advertise: Option<String>,

    /// An AXON peer to admit and dial, as its token (`axon identity`
    /// prints it). Repeatable; nobody else gets in.
    #[arg(long = "peer", value_name = "axon://KEY@HOST:PORT", value_parser = parse_token)]
    pub peers: Vec<PeerToken>,

    /// A file of peer tokens, one per line (`#` comments).
    #[arg(long, value_name = "FILE")]
    pub peers_file: Option<PathBuf>,

    /// Send requests whose payload.domain is DOMAIN_PREFIX or below it
    /// (`family` covers `family.calendar`) to AGENT; the longest prefix
    /// wins. Repeatable.
    #[arg(long = "route", value_name = "DOMAIN_PREFIX=AGENT", value_parser = parse_route)]
    pub routes: Vec<Route>,

    /// The agent for requests no route matches (and those without a
    /// domain); without it they are answered `unhandled`.
    #[arg(long, value_name = "AGENT", value_parser = parse_agent)]
    pub default_agent: Option<AgentId>,

    /// Answer for AGENT on the log by asking the AXON peer AXON_AGENT_ID
    /// (which must be pinned): its commands become AXON requests (the body
    /// must be a JSON object), its events AXON messages. Repeatable.
    #[arg(long = "expose", value_name = "AGENT=AXON_AGENT_ID", value_parser = parse_expose)]
    pub expose: Vec<Expose>,

    /// How long to wait for a reply, either way.
    #[arg(long, value_name = "DURATION", default_value = "25s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// The agent the bridge writes commands and events as.
    #[arg(long, value_name = "NAME", default_value = DEFAULT_AGENT, value_parser = parse_agent)]
    pub agent: AgentId,
}

fn parse_token(text: &str) -> Result<PeerToken, String> {
    text.parse()
        .map_err(|e: agdx::bridge::axon::TokenError| e.to_string())
}

fn parse_route(text: &str) -> Result<Route, String> {
    text.parse().map_err(|e: RouteError| match e {
        RouteError::EmptyPrefix => format!("{e}; that is --default-agent AGENT"),
        e => e.to_string(),
    })
}

/// The bridge's refusal to start, with the flags that change it.
fn bind_failure(error: BridgeError) -> Failure {
    let flag = match &error {
        BridgeError::ExposedPeerNotPinned { .. } => "that is --peer axon://KEY@HOST:PORT",
        BridgeError::PinnedSelf(_) => "look at the --peer tokens",
        BridgeError::Transport(TransportError::Bind { .. }) => "that is --listen ADDR",
        _ => return error.into(),
    };
    Failure::new(format!("{error}; {flag}"))
}

fn parse_expose(text: &str) -> Result<Expose, String> {
    text.parse()
        .map_err(|e: agdx::bridge::axon::ExposeError| advice::explain(&e))
}

pub async fn run(global: &Global, args: AxonArgs) -> Result<(), Failure> {
    let identity = Identity::from_key_file(&args.key)?;
    let mut peers = args.peers;
    if let Some(file) = &args.peers_file {
        peers.extend(read_peers_file(file)?);
    }
    let (log, topology) = global.topology().await?;
    let describe = log.describe();
    let mut config = AxonBridgeConfig::new(args.listen);
    config.peers = peers;
    config.routes = Routes::new(args.routes, args.default_agent);
    config.expose = args.expose;
    config.timeout = args.timeout;
    config.agent = args.agent;
    config.worker = WorkerConfig {
        state_dir: Some(global.default_state_dir()),
        ..WorkerConfig::default()
    };
    let summary = describe_config(&config);
    let timeouts = advice::axon_timeouts(config.timeout);
    let bridge = AxonBridge::bind(log, topology, identity, config)
        .await
        .map_err(bind_failure)?;
    let token = bridge.token(args.advertise.as_deref())?;
    println!("{token}");
    eprintln!(
        "agdx bridge axon: AXON agent {} listening on UDP {} (bridge id {}), on {describe}, stream '{}'\n  {summary}\n  {timeouts}\n  enroll it in an AXON daemon with: axon connect {token}\n  Ctrl-C stops it",
        bridge.id(),
        bridge.local_addr()?,
        bridge.bridge_id(),
        global.stream,
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(
        shutdown.clone(),
        "agdx bridge axon: stopping: answering the requests in hand, closing connections, leaving the groups",
    ));
    bridge.run(shutdown).await?;
    Ok(())
}

fn describe_config(config: &AxonBridgeConfig) -> String {
    let peers: Vec<String> = config.peers.iter().map(|p| p.id().to_string()).collect();
    let exposed: Vec<String> = config
        .expose
        .iter()
        .map(|e| format!("{} → {}", e.agent, e.peer))
        .collect();
    format!(
        "peers: {}; requests: {}; exposed: {}",
        if peers.is_empty() {
            "none (nobody can connect: add --peer)".to_owned()
        } else {
            peers.join(", ")
        },
        config.routes,
        if exposed.is_empty() {
            "none".to_owned()
        } else {
            exposed.join(", ")
        },
    )
}
