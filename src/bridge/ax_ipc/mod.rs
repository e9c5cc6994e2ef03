//! The ax-ipc bridge: the bridge plays the AX *host*, so an AX agent's IPC
//! client, unchanged, calls agents on the log.
//!
//! An AX agent talks to its host over a Unix socket (4-byte big-endian
//! length, then UTF-8 JSON: `{"action":"memory_write", ...fields,
//! "_msgId":"1"}`) or, in Kubernetes, with `POST /internal/ipc` and a
//! bearer token. The bridge serves both ([`serve_socket`], [`router`]),
//! admits each call the way the AX host does ([`Gate`]: JSON, a known
//! action, the action's strict JSON Schema from [`ActionSchemas`]), sends
//! it as an AGDX command to the agent its [`Routes`] name, and answers
//! `{"ok":true, ...reply fields}` or `{"ok":false,"error":"..."}` with the
//! request's `_msgId`. The mapping in full is below.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog) -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::Arc;
//! use agdx::bridge::ax_ipc::{ActionSchemas, AxIpcBridge, Gate, Routes, HEARTBEAT_EVERY, bind, serve_socket};
//! use agdx::wire::AgentId;
//! use agdx::{Producer, Requester, TopologyConfig};
//! use tokio_util::sync::CancellationToken;
//!
//! let topology = TopologyConfig::new("agents").open(log.as_ref()).await?;
//! let requester = Requester::new(Producer::new(log, topology, AgentId::new("ax-ipc")?));
//! let routes = Routes::new(vec!["memory_*=memory".parse()?]);
//! let gate = Gate::new("ax-ipc", ActionSchemas::defaults()?, routes);
//! let bridge = Arc::new(AxIpcBridge::new(requester, gate));
//! let path = std::path::PathBuf::from("/tmp/ax.sock");
//! let listener = bind(&path)?;
//! serve_socket(bridge, listener, path, HEARTBEAT_EVERY, CancellationToken::new()).await?;
//! # Ok(()) }
//! ```
//!
//! # The call
//!
//! The checks run in the AX host's order, and the first that fails answers
//! `{"ok":false,"error":...}` with nothing written to the log:
//!
//! 1. JSON parse (`Invalid JSON: ...`);
//! 2. the envelope: an object whose `action` is a known action (other
//!    fields pass for now) (`Unknown or missing action: ...`);
//! 3. the context fields are taken out: `_msgId` (echoed on every answer),
//!    `_sessionId` (the conversation), `_requestId`, `_userId`,
//!    `_sessionScope` (metadata `ax.request_id`, `ax.user_id`,
//!    `ax.session_scope`), and this bridge's `_bridgeHops` (see below);
//! 4. the action's strict schema (`Validation failed for action "x": ...`);
//! 5. the taint budget, when the gate has one ([`Gate::with_taint`]; the AX
//!    host's step 3.5): a sensitive action of a session whose tainted
//!    share is over the threshold answers
//!    `{"ok":false,"taintBlocked":true,"error":"Session taint ratio ..."}`
//!    (see [`TaintBudget`]);
//! 6. the loop guard: hops that already name this bridge are refused;
//! 7. the route (`No handler for action "x": ...`).
//!
//! An admitted call becomes a command to the routed agent: operation = the
//! action, body = the validated request as JSON (content type `json`),
//! conversation derived from `_sessionId` (the same session always maps to
//! the same conversation, so its calls stay in order; a call without one
//! starts a conversation of its own), deadline = now + the bridge's
//! timeout, metadata `bridge_hops` = the call's `_bridgeHops` plus this
//! bridge's id.
//!
//! `_bridgeHops` is this bridge's one addition to the AX envelope: a
//! program behind an agent that calls back into an ax-ipc bridge passes on
//! the `bridge_hops` of the command it is handling (an `agdx worker --exec`
//! program finds them in `AGDX_BRIDGE_HOPS`), so a loop through the AX
//! side is caught like any other. AX clients that know nothing of it send
//! none.
//!
//! The reply maps back: a `response` (or a finished chunk stream) whose
//! body is a JSON object answers `{"ok":true, ...its fields}`, and a field
//! `ok` of the reply's own is kept (a handler that says `"ok":false` is not
//! overruled); an `error` answers `{"ok":false,"error":"..."}` naming the
//! agent, the code and the message.
//!
//! Over HTTP, a bridge with an [`LlmProxy`] ([`AxIpcBridge::with_llm_proxy`])
//! also forwards the agent's LLM requests to the provider with the
//! credential the bridge holds.

mod call;
mod frame;
mod http;
mod llm_proxy;
mod route;
mod schema;
mod socket;
mod taint;

pub use crate::bridge::token::{TokenError, TokenSecret, Tokens};
pub use call::{
    AxIpcBridge, BRIDGE_HOPS_FIELD, Call, CallError, DEFAULT_TIMEOUT, Gate, Refused, heartbeat,
    session_conversation,
};
pub use frame::{FrameDecoder, FrameTooLarge, MAX_FRAME, PREFIX, encode_frame};
pub use http::{HTTP_BODY_LIMIT, IPC_PATH, router, serve_http};
pub use llm_proxy::{
    CredentialHeader, DEFAULT_LLM_UPSTREAM, LLM_BODY_LIMIT, LLM_PROXY_PATH, LlmProxy, LlmProxyError,
};
pub use route::{Route, RouteError, Routes};
pub use schema::{ActionSchemas, DEFAULT_SCHEMAS, SchemaError, write_defaults};
pub use socket::{BindError, HEARTBEAT_EVERY, bind, serve_socket};
pub use taint::{
    DEFAULT_SENSITIVE, DEFAULT_TAINT_SOURCES, MAX_SESSIONS, TAINT_EXEMPT, TaintBlocked,
    TaintBudget, TaintConfigError, TaintProfile,
};
