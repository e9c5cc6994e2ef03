//! `agdx bridge ax-ipc`: the bridge playing the AX host, and its tools.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Subcommand};
use tokio_util::sync::CancellationToken;

use agdx::bridge::ax_ipc::{
    ActionSchemas, AxIpcBridge, BindError, CredentialHeader, DEFAULT_LLM_UPSTREAM, Gate, IPC_PATH,
    LLM_PROXY_PATH, LlmProxy, Route, Routes, SchemaError, TaintBudget, TaintProfile, Tokens, bind,
    router, serve_http, serve_socket, write_defaults,
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
/// With --taint-profile, a session whose replies are mostly external
/// content (web results) is refused sensitive actions; with --http and
/// --llm-credential-env, POST /internal/llm-proxy/* forwards the agent's
/// LLM requests to the provider with the bridge's credential.
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

    /// Count each session's replies, external content (--taint-source)
    /// apart, and refuse its sensitive actions (--taint-sensitive) while
    /// the external share is over the profile's threshold: paranoid (10%),
    /// balanced (30%), yolo (60%). As the AX host's taint budget.
    #[arg(long, value_name = "PROFILE", group = "taint")]
    pub taint_profile: Option<TaintProfile>,

    /// As --taint-profile, with a threshold of your own: a share from 0 to
    /// 1 (0.3 is 30%).
    #[arg(long, value_name = "RATIO", group = "taint")]
    pub taint_threshold: Option<f64>,

    /// An action refused over the taint threshold; repeatable, replaces
    /// the default (oauth_call, scheduler_add_cron). identity_write,
    /// user_write and identity_propose are never refused.
    #[arg(long = "taint-sensitive", value_name = "ACTION", requires = "taint")]
    pub taint_sensitive: Vec<String>,

    /// An action whose replies are external content; repeatable, replaces
    /// the default (web_fetch, web_search, browser_navigate,
    /// browser_snapshot). Entries tagged "taint":{"trust":"external"} in
    /// any reply count too.
    #[arg(long = "taint-source", value_name = "ACTION", requires = "taint")]
    pub taint_sources: Vec<String>,

    /// HTTP: serve POST /internal/llm-proxy/*, forwarding the agent's LLM
    /// requests (its per-turn token as its API key) to --llm-upstream with
    /// the credential in the environment variable VAR; the agent's own
    /// key headers never pass.
    #[arg(long, value_name = "VAR", requires = "http")]
    pub llm_credential_env: Option<String>,

    /// The LLM provider's API the proxy forwards to.
    #[arg(long, value_name = "URL", default_value = DEFAULT_LLM_UPSTREAM, requires = "llm_credential_env")]
    pub llm_upstream: String,

    /// The header the provider takes the credential in: x-api-key
    /// (Anthropic API keys) or bearer (Authorization: Bearer, for OAuth
    /// tokens and OpenAI-style APIs).
    #[arg(
        long,
        value_name = "HEADER",
        default_value = "x-api-key",
        requires = "llm_credential_env"
    )]
    pub llm_auth: CredentialHeader,
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
    let mut gate = Gate::new(id.clone(), schemas, routes);
    let taint = taint_budget(&args)?;
    let described_taint = match &taint {
        Some(budget) => format!(
            "taint budget {:.0}%: refusing {} over it, counting replies of {} as external",
            budget.threshold() * 100.0,
            budget.sensitive().collect::<Vec<_>>().join(", "),
            budget.sources().collect::<Vec<_>>().join(", "),
        ),
        None => "no taint budget (--taint-profile sets one)".to_owned(),
    };
    if let Some(budget) = taint {
        gate = gate.with_taint(budget);
    }
    let llm_proxy = llm_proxy(&args)?;
    let (log, topology) = global.topology().await?;
    let check = global.claim_check(&log, None, None)?;
    let producer = Producer::new(log, topology, args.source.clone()).with_claim_check(check);
    let mut bridge = AxIpcBridge::new(Requester::new(producer), gate).with_timeout(args.timeout);
    if let Some(proxy) = llm_proxy {
        bridge = bridge.with_llm_proxy(proxy);
    }
    let bridge = Arc::new(bridge);

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
        if let Some(proxy) = bridge.llm_proxy() {
            println!("llm-proxy http://{bound}{LLM_PROXY_PATH}");
            eprintln!(
                "agdx bridge ax-ipc: LLM proxy forwarding to {} with the credential in {}",
                proxy.upstream(),
                proxy.credential_header()
            );
        }
        let tokens = tokens.unwrap_or_default();
        tasks.spawn(serve_http(
            listener,
            router(bridge.clone(), tokens),
            shutdown.clone(),
        ));
    }
    eprintln!(
        "agdx bridge ax-ipc: bridge '{id}' asking as '{}' on stream '{}'; routes: {described_routes}; actions: {}; {described_taint}; {}; Ctrl-C stops it",
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

/// The taint budget the flags ask for, if any.
fn taint_budget(args: &ServeArgs) -> Result<Option<TaintBudget>, Failure> {
    let mut budget = match (args.taint_profile, args.taint_threshold) {
        (Some(profile), _) => TaintBudget::for_profile(profile),
        (None, Some(threshold)) => TaintBudget::new(threshold)
            .map_err(|e| Failure::new(format!("--taint-threshold: {e}")))?,
        (None, None) => return Ok(None),
    };
    if !args.taint_sensitive.is_empty() {
        budget = budget.with_sensitive(args.taint_sensitive.iter().cloned());
    }
    if !args.taint_sources.is_empty() {
        budget = budget.with_sources(args.taint_sources.iter().cloned());
    }
    Ok(Some(budget))
}

/// The LLM proxy the flags ask for, its credential read from the
/// environment (never from the agent).
fn llm_proxy(args: &ServeArgs) -> Result<Option<LlmProxy>, Failure> {
    let Some(var) = &args.llm_credential_env else {
        return Ok(None);
    };
    let credential = zeroize::Zeroizing::new(std::env::var(var).map_err(|_| {
        Failure::new(format!(
            "--llm-credential-env {var}: the environment variable {var} is not set (or not UTF-8); export the provider's key in it"
        ))
    })?);
    LlmProxy::new(&args.llm_upstream, &credential, args.llm_auth)
        .map(Some)
        .map_err(|e| Failure::new(format!("--llm-credential-env/--llm-upstream: {e}")))
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
