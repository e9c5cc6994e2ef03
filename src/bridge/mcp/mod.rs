//! An MCP server whose tools are the live agents' operations
//! (`agdx bridge mcp`).
//!
//! An MCP client (an LLM host, an IDE, the official SDKs' clients) sees one
//! tool per operation of every agent that is live on the log, from the
//! agents' cards ([`crate::cards`]): named `agent.operation`, described
//! from the card, with an input schema from the card's declared input (a
//! JSON object for `json`, a schema id or nothing; `{"text": ...}` for
//! `raw`). The list follows the registry: when an agent comes, leaves or
//! its card expires, clients are told (`notifications/tools/list_changed`,
//! on the session of a handshake-era client or on a `subscriptions/listen`
//! stream of a 2026-07-28 one).
//!
//! A call is a command to the tool's agent (operation = the tool's
//! operation, body = the arguments as JSON, or the `text` argument's bytes
//! for a `raw` operation, deadline = now + the bridge's timeout) written
//! through a producer that stamps this bridge into `bridge_hops`; the
//! reply is the result:
//!
//! - a `response` or a finished chunk stream whose body is a JSON object:
//!   structured content (and the same JSON as text); any other body: text;
//! - an `error`: a tool error (`isError`) saying the agent, the AGDX code
//!   and message, with `{code, message, retryable}` as structured content;
//! - while it runs, each chunk and each status (task state or progress) is
//!   a progress notification, when the client asked for progress;
//! - the client's `notifications/cancelled` (or, over stateless HTTP, its
//!   closing the request) cancels the command on the log
//!   ([`crate::Producer::cancel`]): the handler is told and stops.
//!
//! A call whose `_meta` names bridges it already passed
//! ([`BRIDGE_HOPS_META`]) and this bridge among them is refused: a loop.
//!
//! Transports: streamable HTTP at [`MCP_PATH`] (sessions for clients of
//! the handshake era, stateless for 2026-07-28 ones; every request needs a
//! bearer token from [`Tokens`]), and stdio for a local client that starts
//! the bridge itself.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog) -> Result<(), Box<dyn std::error::Error>> {
//! use agdx::bridge::mcp::{McpBridge, McpConfig};
//! use agdx::bridge::token::Tokens;
//! use agdx::wire::AgentId;
//! use agdx::{Producer, TopologyConfig};
//!
//! let topology = TopologyConfig::new("agents").open(log.as_ref()).await?;
//! let producer = Producer::new(log, topology, AgentId::new("mcp")?);
//! let bridge = McpBridge::open(producer, McpConfig::new("mcp")).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8766").await?;
//! let tokens = Tokens::default().with_fixed("s3cret");
//! bridge.serve_http(listener, tokens, std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod call;
mod http;
mod live;
mod server;
mod tools;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rmcp::ServiceExt;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::ask::Requester;
use crate::bridge::token::Tokens;
use crate::clock::{SharedClock, system_clock};
use crate::log::LogError;
use crate::producer::Producer;

pub use http::MCP_PATH;
pub use server::BRIDGE_HOPS_META;
pub use tools::{Input, NoText, TEXT_ARGUMENT, ToolSet, ToolTarget, command_body, tool_name};

/// The scheme of the tokens `agdx bridge mcp token` mints.
pub const TOKEN_SCHEME: &str = "agdxmcp1";

/// How the bridge runs.
#[derive(Debug, Clone)]
pub struct McpConfig {
    /// The id this bridge writes into `bridge_hops`.
    pub bridge_id: String,
    /// How long a call waits without a sign of life (a status, a chunk)
    /// from its agent; also each command's deadline.
    pub timeout: Duration,
    /// How often the registry is read for agents that came or left.
    pub refresh: Duration,
    /// The largest HTTP request body accepted, in bytes.
    pub max_body_bytes: usize,
}

impl McpConfig {
    /// The defaults (15 min timeout, the registry read every second, bodies
    /// up to 1 MiB) for the bridge `bridge_id`.
    pub fn new(bridge_id: impl Into<String>) -> Self {
        Self {
            bridge_id: bridge_id.into(),
            timeout: Duration::from_secs(15 * 60),
            refresh: Duration::from_secs(1),
            max_body_bytes: 1 << 20,
        }
    }
}

/// Why the bridge could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum McpError {
    /// The agent registry could not be read.
    #[error("reading the agent registry failed: {0}")]
    Registry(#[from] LogError),
    /// Serving HTTP failed.
    #[error("serving MCP over HTTP failed: {0}")]
    Http(#[source] std::io::Error),
    /// The client on stdio did not start a session.
    #[error("the MCP session on stdio did not start: {0}")]
    Stdio(#[source] Box<rmcp::service::ServerInitializeError>),
}

impl McpError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            McpError::Registry(error) => error.is_retryable(),
            McpError::Http(_) => true,
            McpError::Stdio(_) => false,
        }
    }
}

/// The bridge: live tools, and calls answered by agents on the log. Clones
/// share it; the last one dropped stops following the registry.
#[derive(Clone)]
pub struct McpBridge {
    inner: Arc<Inner>,
}

struct Inner {
    requester: Requester,
    config: McpConfig,
    tools: watch::Receiver<Arc<ToolSet>>,
    closing: CancellationToken,
    clock: SharedClock,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closing.cancel();
    }
}

impl McpBridge {
    /// A bridge asking through `producer` (its source is who the commands
    /// come from): reads the registry up to its end, then follows it.
    pub async fn open(producer: Producer, config: McpConfig) -> Result<Self, McpError> {
        let clock = system_clock();
        let producer = producer.with_bridge_hop(config.bridge_id.clone());
        let follower = live::Follower::start(
            producer.log().clone(),
            producer.topology().clone(),
            producer.source().clone(),
            clock.clone(),
        )
        .await?;
        let (sender, tools) = watch::channel(Arc::new(follower.tools()));
        let closing = CancellationToken::new();
        tokio::spawn(follower.run(sender, config.refresh, closing.clone()));
        Ok(Self {
            inner: Arc::new(Inner {
                requester: Requester::new(producer),
                config,
                tools,
                closing,
                clock,
            }),
        })
    }

    /// The tools of the agents live now.
    pub fn tools(&self) -> Arc<ToolSet> {
        self.inner.tools.borrow().clone()
    }

    /// How the bridge runs.
    pub fn config(&self) -> &McpConfig {
        &self.inner.config
    }

    /// The id stamped into `bridge_hops`.
    pub fn id(&self) -> &str {
        &self.inner.config.bridge_id
    }

    /// The router serving [`MCP_PATH`], accepting `tokens`.
    pub fn router(&self, tokens: Tokens) -> axum::Router {
        http::router(self.clone(), tokens)
    }

    /// Serves [`MCP_PATH`] on `listener`, accepting `tokens`, until
    /// `shutdown` completes.
    pub async fn serve_http(
        &self,
        listener: tokio::net::TcpListener,
        tokens: Tokens,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), McpError> {
        let closing = self.inner.closing.clone();
        axum::serve(listener, self.router(tokens))
            .with_graceful_shutdown(async move {
                shutdown.await;
                // Open streams (sessions, listeners) end, so the server can.
                closing.cancel();
            })
            .await
            .map_err(McpError::Http)
    }

    /// Serves one client on stdin and stdout until it closes them or
    /// `shutdown` completes.
    pub async fn serve_stdio(
        &self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), McpError> {
        let server = server::McpServer {
            bridge: self.clone(),
        };
        let running = server
            .serve(rmcp::transport::stdio())
            .await
            .map_err(|e| McpError::Stdio(Box::new(e)))?;
        let stop = running.cancellation_token();
        tokio::select! {
            _ = running.waiting() => {}
            () = shutdown => stop.cancel(),
        }
        Ok(())
    }

    pub(crate) fn requester(&self) -> &Requester {
        &self.inner.requester
    }

    /// A receiver that wakes at the next change of the tools.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Arc<ToolSet>> {
        let mut changes = self.inner.tools.clone();
        changes.borrow_and_update();
        changes
    }

    pub(crate) fn closing(&self) -> CancellationToken {
        self.inner.closing.clone()
    }

    pub(crate) fn now_micros(&self) -> u64 {
        self.inner.clock.now_micros()
    }

    /// The deadline of a command sent now.
    pub(crate) fn deadline_micros(&self) -> u64 {
        let timeout = u64::try_from(self.inner.config.timeout.as_micros()).unwrap_or(u64::MAX);
        self.now_micros().saturating_add(timeout)
    }
}
