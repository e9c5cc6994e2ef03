//! An IOA server whose only store is the log (`agdx bridge ioa`).
//!
//! [IOA](https://github.com/chainreactors/ioa) is a protocol of spaces,
//! nodes and an append-only message graph: a message refers to earlier
//! messages (`refs.messages`: threads, trees, DAG merges) and to the nodes
//! it is for (`refs.nodes`). Its clients (the `ioa` CLI, its REST API, MCP
//! tools) can use this bridge as their server. Every IOA fact is an AGDX
//! record written through a [`Producer`] (the table in
//! `records.rs` says which), and everything the bridge answers is read back
//! from the log into a view, so a restarted bridge, or a second one on the
//! same log, serves the same spaces, nodes, tokens and messages:
//!
//! - a **space** is a conversation whose id is derived from the space's
//!   name ([`space_conversation`]): its records share one partition, in order;
//! - a **node** is an agent id (its name); registering appends the node and
//!   the SHA-256 of a freshly minted bearer token to `agent.registry`; a
//!   caller named with the access key is registered by its first join or
//!   message;
//! - an **external identity** `(namespace, subject)` is bound to one node by
//!   a record in a conversation of its own on `agent.registry`, so the
//!   first binding there holds it, the same on every bridge;
//! - **joining** a space is a `status` record of the joining node;
//! - a **message** is an `event` of the sender in the space's conversation:
//!   the body is the IOA request as the client sent it (content, refs, meta,
//!   content_schema byte for byte), `cause` the first parent, the other
//!   parents the `causes` metadata that `agdx graph` follows too, and
//!   `created_at` the log's timestamp.
//!
//! Reads are IOA's: a message's subgraph (upstream, downstream or both,
//! walked by the same [`CausalGraph`](crate::replay::CausalGraph) as
//! `agdx graph`), all messages, those addressed to the caller, roots; with
//! `after` + `limit` windows. `listen` streams Server-Sent Events that resume
//! from `Last-Event-ID` without losing or repeating a message. The REST
//! surface, its errors (`{"detail": ...}` with 401/403/404/422) and the
//! three MCP tools at `/mcp` follow the reference server;
//! docs/bridge-ioa.md lists where this bridge differs and why.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog, topology: agdx::Topology) -> Result<(), Box<dyn std::error::Error>> {
//! use agdx::bridge::ioa::{IoaBridge, IoaConfig};
//! let bridge = IoaBridge::open(log, topology, IoaConfig::new("the-access-key")).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8765").await?;
//! bridge.serve(listener, std::future::pending()).await?;
//! # Ok(()) }
//! ```

mod error;
mod http;
mod mcp;
mod model;
mod records;
mod service;
mod tail;
mod view;

use std::sync::Arc;
use std::time::Duration;

use agdx_wire::{AgentId, RecordId};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::log::SharedLog;
use crate::producer::Producer;
use crate::topology::Topology;

pub use error::IoaError;
pub use model::{MAX_JSON_DEPTH, Refs, space_conversation};
pub use records::{JOIN, MAX_PARENTS, META_IOA, OP_IDENTITY, OP_MESSAGE, OP_NODE};

use tail::Shared;

/// How the bridge runs.
#[derive(Debug, Clone)]
pub struct IoaConfig {
    /// The key that registers nodes (`POST /auth/register`, and
    /// `POST /nodes` with header `X-Access-Key`) and creates spaces
    /// (`POST /spaces`, header `X-Access-Key`); never empty. With it,
    /// `X-Node-ID` names the caller of `POST /spaces`,
    /// `POST /spaces/{id}/messages` and `/mcp`, registered on the fly when
    /// new.
    pub access_key: String,
    /// The id this bridge writes into `bridge_hops` and as its own source.
    pub bridge_id: String,
    /// How often an idle event stream gets a `: keepalive` comment.
    pub keepalive: Duration,
    /// The largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// How long a write waits for its record to come back from the log
    /// before answering that it is not visible yet.
    pub read_back: Duration,
}

impl IoaConfig {
    /// The defaults (bridge id `ioa`, keep-alive every 15 s, bodies up to
    /// 1 MiB, 10 s read-back) with this access key.
    pub fn new(access_key: impl Into<String>) -> Self {
        Self {
            access_key: access_key.into(),
            bridge_id: "ioa".into(),
            keepalive: Duration::from_secs(15),
            max_body_bytes: 1 << 20,
            read_back: Duration::from_secs(10),
        }
    }

    /// Sets the keep-alive interval of event streams.
    pub fn keepalive(mut self, every: Duration) -> Self {
        self.keepalive = every;
        self
    }

    /// Sets the largest request body accepted.
    pub fn max_body_bytes(mut self, bytes: usize) -> Self {
        self.max_body_bytes = bytes;
        self
    }

    /// Sets the bridge id.
    pub fn bridge_id(mut self, id: impl Into<String>) -> Self {
        self.bridge_id = id.into();
        self
    }
}

/// An IOA server over the log. Cheap to clone; the log is followed until
/// the last clone (and every server using it) is dropped.
#[derive(Clone)]
pub struct IoaBridge {
    inner: Arc<Inner>,
}

struct Inner {
    log: SharedLog,
    topology: Topology,
    producer: Producer,
    shared: Arc<Shared>,
    config: IoaConfig,
    followers: Vec<JoinHandle<()>>,
    /// Held while a registration or an identity change decides which node
    /// holds an identity and writes it.
    registering: tokio::sync::Mutex<()>,
    /// Cancelled when the server shuts down: ends the event streams, which
    /// would otherwise keep a graceful shutdown waiting forever.
    closing: CancellationToken,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for follower in &self.followers {
            follower.abort();
        }
    }
}

impl IoaBridge {
    /// Reads every IOA record on the log (nodes and tokens on
    /// `agent.registry`, from the view's newest snapshot on; joins and
    /// messages on `agent.commands`) and keeps following both topics; ready
    /// to serve when this returns. An empty
    /// (or blank) access key is refused: it would let anyone register.
    pub async fn open(
        log: SharedLog,
        topology: Topology,
        config: IoaConfig,
    ) -> Result<Self, IoaError> {
        if config.access_key.trim().is_empty() {
            return Err(IoaError::InvalidInput(
                "the access key is empty: with it anyone could register nodes, mint their tokens and create spaces; give the bridge a key of its own".into(),
            ));
        }
        let source = AgentId::new(config.bridge_id.as_str()).map_err(|e| {
            IoaError::InvalidInput(format!(
                "bridge id '{}': {e}; use a short name such as `ioa`",
                config.bridge_id
            ))
        })?;
        let resumed = tail::resume(&log, &topology).await;
        let shared = Arc::new(Shared::new(resumed));
        let followers = tail::load_and_follow(&log, &topology, &shared).await?;
        let producer = Producer::new(log.clone(), topology.clone(), source)
            .with_bridge_hop(config.bridge_id.as_str());
        Ok(Self {
            inner: Arc::new(Inner {
                log,
                topology,
                producer,
                shared,
                config,
                followers,
                registering: tokio::sync::Mutex::new(()),
                closing: CancellationToken::new(),
            }),
        })
    }

    /// The bridge's configuration.
    pub fn config(&self) -> &IoaConfig {
        &self.inner.config
    }

    /// The HTTP router: the REST API, event streams and `/mcp`.
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

    /// Waits until the view has taken in record `id` (this bridge wrote it).
    async fn read_back(&self, id: RecordId) -> Result<(), IoaError> {
        let shared = &self.inner.shared;
        let mut changed = shared.changed.subscribe();
        let wait = self.inner.config.read_back;
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if shared.read(|view| view.has_applied(&id)) {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, changed.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return Err(IoaError::NotReadBack(id, wait)),
            }
        }
    }
}
