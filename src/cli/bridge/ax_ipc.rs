//! `agdx bridge ax-ipc`: the bridge playing the AX host, and its tools.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;

use agdx::bridge::ax_ipc::{
    ActionSchemas, AxIpcBridge, BindError, Gate, IPC_PATH, Route, Routes, SchemaError, Tokens,
    bind, router, serve_http, serve_socket, write_defaults,
};
use agdx::bridge::token::DEFAULT_SCHEME;
use agdx::wire::AgentId;
use agdx::{Producer, Requester};

use crate::cli::advice;
use crate::cli::context::{Failure, Global, parse_agent, parse_duration, stop_on_signal};

use super::token::{Minter, TokenArgs, TokenFlags};

/// The ax-ipc bridge's tokens.
const MINTER: Minter = Minter {
    bridge: "ax-ipc",
    scheme: DEFAULT_SCHEME,
};

/// Serves AX agents: their IPC calls (a Unix socket with 4-byte
/// big-endian length frames, and/or `POST /internal/ipc` over HTTP) are
/// checked against strict per-action JSON Schemas, sent as commands to the
/// agent routed for the action, and answered `{"ok":true, ...reply}` or
/// `{"ok":false,"error":...}` with the request's `_msgId`. Ctrl-C stops it.
///
/// Example: agdx bridge ax-ipc --socket /tmp/ax.sock --route 'memory_*=memory'
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct AxIpcArgs {
    #[command(subcommand)]
    pub tool: Option<Tool>,

    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Tool {
    Token(TokenArgs),
    /// Write the shipped action schemas into DIR (files already there are
    /// kept) to edit or add to, then start the bridge with --schemas DIR.
    Schemas(SchemasArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Listen on this Unix socket path (created mode 0600; a stale socket
    /// there is replaced).
    #[arg(long, value_name = "PATH", required_unless_present = "http")]
    pub socket: Option<PathBuf>,

    /// Serve POST /internal/ipc on this address (e.g. 127.0.0.1:8787);
    /// needs --tokens or --token-secret.
    #[arg(long, value_name = "ADDR")]
    pub http: Option<SocketAddr>,

    #[command(flatten)]
    pub tokens: TokenFlags,

    /// Send ACTION to AGENT; ACTION may be a glob ('memory_*=memory').
    /// Repeatable; an exact name beats a glob, a longer glob a shorter one.
    #[arg(long = "route", value_name = "ACTION=AGENT", required = true)]
    pub routes: Vec<Route>,

    /// Load the action schemas from DIR (one ACTION.json each) instead of
    /// the shipped set.
    #[arg(long, value_name = "DIR")]
    pub schemas: Option<PathBuf>,

    /// The agent the commands come from (replies are addressed to it).
    #[arg(long = "as", value_name = "AGENT", default_value = "ax-ipc", value_parser = parse_agent)]
    pub source: AgentId,

    /// This bridge's id in bridge_hops (default: the --as agent); give each
    /// bridge of a chain its own.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,

    /// How long a call waits for its reply (also the command's deadline).
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_duration)]
    pub timeout: Duration,

    /// How often a waiting call gets a heartbeat on the socket.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub heartbeat: Duration,
}

#[derive(Debug, Args)]
pub struct SchemasArgs {
    /// The directory to write into (created when missing).
    #[arg(value_name = "DIR")]
    pub dir: PathBuf,
}

pub async fn run(global: &Global, args: AxIpcArgs) -> Result<(), Failure> {
    match args.tool {
        Some(Tool::Token(token)) => MINTER.mint(token),
        Some(Tool::Schemas(schemas)) => {
            let written = write_defaults(&schemas.dir)
                .map_err(|e| Failure::new(format!("{}: {e}", schemas.dir.display())))?;
            for path in &written {
                println!("{}", path.display());
            }
            eprintln!(
                "agdx: wrote {} schema(s); start the bridge with --schemas {}",
                written.len(),
                schemas.dir.display()
            );
            Ok(())
        }
        None => serve(global, args.serve).await,
    }
}

async fn serve(global: &Global, args: ServeArgs) -> Result<(), Failure> {
    let schemas = match &args.schemas {
        Some(dir) => ActionSchemas::load_dir(dir).map_err(|error| match error {
            SchemaError::Empty { .. } => Failure::new(format!(
                "{error}; `agdx bridge ax-ipc schemas {}` writes them",
                dir.display()
            )),
            error => error.into(),
        })?,
        None => ActionSchemas::defaults()?,
    };
    let tokens = tokens(&args)?;
    let id = args.id.clone().unwrap_or_else(|| args.source.to_string());
    let routes = Routes::new(args.routes.clone());
    let described_routes = routes.to_string();
    let gate = Gate::new(id.clone(), schemas, routes);
    let (log, topology) = global.topology().await?;
    let check = global.claim_check(&log, None, None)?;
    let producer = Producer::new(log, topology, args.source.clone()).with_claim_check(check);
    let bridge =
        Arc::new(AxIpcBridge::new(Requester::new(producer), gate).with_timeout(args.timeout));

    let shutdown = CancellationToken::new();
    let mut tasks = tokio::task::JoinSet::new();
    if let Some(path) = &args.socket {
        let listener = bind(path).map_err(|error| match error {
            BindError::InUse { .. } | BindError::NotASocket { .. } => {
                Failure::new(format!("{error}; that is --socket PATH"))
            }
            error => error.into(),
        })?;
        println!("socket {}", path.display());
        tasks.spawn(serve_socket(
            bridge.clone(),
            listener,
            path.clone(),
            args.heartbeat,
            shutdown.clone(),
        ));
    }
    if let Some(addr) = args.http {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| Failure::new(format!("cannot listen on {addr}: {e}")))?;
        let bound = listener.local_addr()?;
        println!("http http://{bound}{IPC_PATH}");
        let tokens = tokens.unwrap_or_default();
        tasks.spawn(serve_http(
            listener,
            router(bridge.clone(), tokens),
            shutdown.clone(),
        ));
    }
    eprintln!(
        "agdx bridge ax-ipc: bridge '{id}' asking as '{}' on stream '{}'; routes: {described_routes}; actions: {}; {}; Ctrl-C stops it",
        args.source,
        global.stream,
        bridge
            .gate()
            .schemas()
            .actions()
            .collect::<Vec<_>>()
            .join(", "),
        advice::AX_IPC_UNROUTED,
    );
    tokio::spawn(stop_on_signal(
        shutdown.clone(),
        "agdx bridge ax-ipc: stopping: closing the socket and connections",
    ));
    while let Some(ended) = tasks.join_next().await {
        let result = ended.map_err(|e| Failure::new(format!("a listener stopped: {e}")))?;
        if let Err(error) = result {
            shutdown.cancel();
            return Err(Failure::new(format!("a listener failed: {error}")));
        }
    }
    Ok(())
}

/// The HTTP tokens, refused when --http has none to check.
fn tokens(args: &ServeArgs) -> Result<Option<Tokens>, Failure> {
    let tokens = MINTER.tokens(&args.tokens)?;
    match (args.http.is_some(), tokens.is_empty()) {
        (true, true) => Err(Failure::new(
            "--http needs --tokens FILE or --token-secret FILE: every HTTP call must carry Authorization: Bearer TOKEN (mint one with `agdx bridge ax-ipc token --secret FILE`)",
        )),
        (false, false) => Err(Failure::new(
            "--tokens and --token-secret are for --http; add --http ADDR or drop them",
        )),
        (true, false) => Ok(Some(tokens)),
        (false, true) => Ok(None),
    }
}
