//! An A2A server in front of the agents on the log (`agdx bridge a2a`).
//!
//! [A2A](https://a2a-protocol.org) clients speak JSON-RPC over HTTP (the
//! protocol's v1, as the official SDK 1.x speaks it: `SendMessage`,
//! `SendStreamingMessage`, `GetTask`, `CancelTask`, protobuf-shaped JSON;
//! the 0.3 method names `message/send`, `message/stream`, `tasks/get` and
//! `tasks/cancel` are accepted too). Every live agent (its card fresh on
//! `agent.registry`) is an A2A agent at `/agents/{agent}/`, its card at
//! `/agents/{agent}/.well-known/agent-card.json`, built from the AGDX card:
//! each operation a skill; `GET /agents` lists the cards.
//!
//! - A message becomes a command to the agent, asking for task states: the
//!   operation is `metadata.skill`, or the agent's only operation; text
//!   parts become a text body, a data part a JSON body, a raw part bytes.
//!   The A2A context id maps to the conversation (a foreign id to one
//!   derived from it, the id itself kept in metadata) and the task id is
//!   the conversation and the command's correlation (`{conversation}.{correlation}`),
//!   so any bridge on the log finds the task.
//! - The reply is the task's artifact `reply`; a chunk stream is streamed
//!   as artifact updates over SSE (`append`, `lastChunk`); task states map
//!   both ways (submitted, working, input-required, completed, failed,
//!   canceled). A task that needs input stops at `input-required` with the
//!   prompt as its status message; a message naming the task answers it.
//! - `GetTask` reads the task from the log, `CancelTask` cancels its
//!   command (the handler sees the cancel; the task ends `canceled`).
//! - Refusals carry the spec's JSON-RPC error codes ([`A2aError::code`]);
//!   a message whose `metadata.bridge_hops` names this bridge is refused
//!   ([`BridgeLoop`](crate::bridge::BridgeLoop)), and every record the
//!   bridge writes carries its hop.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog, topology: agdx::Topology) -> Result<(), Box<dyn std::error::Error>> {
//! use agdx::bridge::a2a::{A2aBridge, A2aConfig};
//! let bridge = A2aBridge::open(log, topology, A2aConfig::default()).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8766").await?;
//! bridge.serve(listener, std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod card;
mod error;
mod http;
mod live;
mod logged;
mod model;
mod service;
mod v03;

use std::sync::Arc;
use std::time::Duration;

use agdx_wire::AgentId;
use tokio_util::sync::CancellationToken;

use crate::ask::Requester;
use crate::cards::{LiveAgent, LiveAgents};
use crate::clock::{SharedClock, system_clock};
use crate::log::SharedLog;
use crate::producer::Producer;
use crate::topology::Topology;

pub use card::{PROTOCOL_VERSION, a2a_card};
pub use error::A2aError;
pub use model::{META_CONTEXT_ID, REPLY_ARTIFACT, TaskId, context_conversation};

/// How the bridge runs.
#[derive(Debug, Clone)]
pub struct A2aConfig {
    /// The id this bridge writes into `bridge_hops` and as its own source.
    pub bridge_id: String,
    /// The URL clients reach the bridge at (no trailing slash), for the
    /// cards' interfaces; `None` takes the request's `Host`.
    pub public_url: Option<String>,
    /// How long `message/send` waits for the task to end or ask for input
    /// before answering with the task as it stands.
    pub send_wait: Duration,
    /// How long a task may go without a reply before the bridge stops
    /// following it (and reports it failed).
    pub reply_timeout: Duration,
    /// How long `tasks/cancel` waits for the task to end canceled.
    pub cancel_wait: Duration,
    /// How often an idle event stream gets a keep-alive comment.
    pub keepalive: Duration,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
}

impl Default for A2aConfig {
    /// Bridge id `a2a`, the Host's URL, 60 s send wait, 15 min reply
    /// timeout, 10 s cancel wait, keep-alive every 15 s, bodies up to 1 MiB.
    fn default() -> Self {
        Self {
            bridge_id: "a2a".into(),
            public_url: None,
            send_wait: Duration::from_secs(60),
            reply_timeout: Duration::from_secs(15 * 60),
            cancel_wait: Duration::from_secs(10),
            keepalive: Duration::from_secs(15),
            max_body_bytes: 1 << 20,
        }
    }
}

/// An A2A server over the agents on the log. Cheap to clone.
#[derive(Clone)]
pub struct A2aBridge {
    inner: Arc<Inner>,
}

struct Inner {
    log: SharedLog,
    topology: Topology,
    requester: Requester,
    agents: tokio::sync::Mutex<LiveAgents>,
    tasks: Arc<live::LiveTasks>,
    clock: SharedClock,
    config: A2aConfig,
    /// Cancelled when the server shuts down: ends the event streams.
    closing: CancellationToken,
}

impl A2aBridge {
    /// A bridge over `log`; the live agents are read from the view's newest
    /// snapshot on, then caught up on each request.
    pub async fn open(
        log: SharedLog,
        topology: Topology,
        config: A2aConfig,
    ) -> Result<Self, A2aError> {
        let source = AgentId::new(config.bridge_id.as_str())
            .map_err(|e| A2aError::Config(format!("bridge id '{}': {e}", config.bridge_id)))?;
        let producer = Producer::new(log.clone(), topology.clone(), source)
            .with_bridge_hop(config.bridge_id.as_str());
        let agents = LiveAgents::resume(&log, &topology).await;
        Ok(Self {
            inner: Arc::new(Inner {
                log,
                topology,
                requester: Requester::new(producer),
                agents: tokio::sync::Mutex::new(agents),
                tasks: Arc::default(),
                clock: system_clock(),
                config,
                closing: CancellationToken::new(),
            }),
        })
    }

    /// The bridge's configuration.
    pub fn config(&self) -> &A2aConfig {
        &self.inner.config
    }

    /// The HTTP router: `/agents`, the cards and the JSON-RPC endpoints.
    pub fn router(&self) -> axum::Router {
        http::router(self.clone())
    }

    /// Serves the router on `listener` until `shutdown` completes.
    pub async fn serve(
        self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let closing = self.inner.closing.clone();
        let router = self.router();
        drop(self);
        crate::bridge::serve_http(listener, router, shutdown, closing).await
    }

    /// The agents live now, by name.
    pub async fn live_agents(&self) -> Result<Vec<LiveAgent>, A2aError> {
        let mut agents = self.inner.agents.lock().await;
        agents
            .catch_up(&self.inner.log, &self.inner.topology.registry)
            .await?;
        Ok(agents.live(self.inner.clock.now_micros()))
    }

    /// The live agent `name`.
    async fn agent(&self, name: &str) -> Result<LiveAgent, A2aError> {
        self.live_agents()
            .await?
            .into_iter()
            .find(|a| a.agent.as_str() == name)
            .ok_or_else(|| A2aError::NoAgent(name.to_owned()))
    }
}
