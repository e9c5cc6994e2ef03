//! Edge bridges: agents that speak another protocol working with agents on
//! the log, neither side changing.
//!
//! A bridge translates at the boundary and nowhere else (interop is an
//! edge mapping): what comes in from the outside becomes an ordinary
//! AGDX command or event on the log, written through the same
//! [`Producer`](crate::Producer) and answered through the same
//! [`Requester`](crate::Requester) as any other agent's; the answer is
//! mapped back at the edge. Shared semantics (who, which conversation, a
//! deadline) go into envelope fields; the protocol's own data stays in the
//! body.
//!
//! Every record a bridge writes carries the pinned metadata key
//! `bridge_hops` with the bridge's id appended, and a bridge refuses a
//! message whose hops already name it ([`BridgeLoop::check`]): a message
//! that came back to a bridge it passed through is a translation loop, and
//! without the guard it would circle forever. What the hops are, and how
//! one is appended, is defined once, in the wire crate
//! ([`Metadata::bridge_hops`], [`Metadata::has_bridge_hop`],
//! [`Metadata::push_bridge_hop`]); a bridge that writes through one
//! producer has it stamp every record
//! ([`Producer::with_bridge_hop`](crate::Producer::with_bridge_hop)).
//!
//! One module per edge protocol, each built in by its Cargo feature:
//! - `axon` (feature `bridge-axon`): AXON peers over QUIC with mutual TLS
//!   (`agdx bridge axon`).
//! - `ax_ipc` (feature `bridge-ax-ipc`): the AX host's IPC
//!   (length-prefixed JSON over a Unix socket, and `POST /internal/ipc`
//!   over HTTP).
//! - `a2a` (feature `bridge-a2a`): an A2A server (JSON-RPC over HTTP,
//!   SSE) whose agents are the live agents on the log.
//! - `ioa` (feature `bridge-ioa`): an IOA server (spaces, nodes, the
//!   message graph, SSE, MCP tools) whose only store is the log.
//! - `mcp` (feature `bridge-mcp`): an MCP server whose tools are the live
//!   agents' operations (streamable HTTP at `/mcp`, and stdio).
//!
//! The bearer tokens of the HTTP bridges (a list, or minted with a secret)
//! are in [`token`].

#[cfg(feature = "bridge-a2a")]
pub mod a2a;
#[cfg(feature = "bridge-ax-ipc")]
pub mod ax_ipc;
#[cfg(feature = "bridge-axon")]
pub mod axon;
#[cfg(feature = "bridge-ioa")]
pub mod ioa;
#[cfg(feature = "bridge-mcp")]
pub mod mcp;
#[cfg(any(feature = "bridge-ax-ipc", feature = "bridge-mcp"))]
pub mod token;

use agdx_wire::Metadata;

/// Serves `router` on `listener` until `shutdown` completes, then cancels
/// `closing`, which ends the open event streams (they would otherwise keep
/// a graceful shutdown waiting forever).
#[cfg(any(feature = "bridge-ioa", feature = "bridge-a2a"))]
pub(crate) async fn serve_http(
    listener: tokio::net::TcpListener,
    router: axum::Router,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    closing: tokio_util::sync::CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(async move {
            shutdown.await;
            closing.cancel();
        })
        .await
}

/// A message came back to a bridge it already passed through.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "bridge loop: this message already passed through bridge '{bridge}' (bridge_hops: {}); it was refused so it cannot circle forever. Check the routes: an agent behind this bridge calls back into it",
    .hops.join(" -> ")
)]
pub struct BridgeLoop {
    /// The refusing bridge's id.
    pub bridge: String,
    /// The hops the message carried.
    pub hops: Vec<String>,
}

impl BridgeLoop {
    /// [`BridgeLoop`] when `metadata`'s `bridge_hops` already name `bridge`.
    pub fn check(metadata: &Metadata, bridge: &str) -> Result<(), BridgeLoop> {
        if !metadata.has_bridge_hop(bridge) {
            return Ok(());
        }
        Err(BridgeLoop {
            bridge: bridge.to_owned(),
            hops: metadata.bridge_hops().map(str::to_owned).collect(),
        })
    }
}

/// `text` cut to its first `chars` characters, `…` marking the cut: a
/// peer's text quoted in a refusal or a progress message.
#[cfg(any(feature = "bridge-ax-ipc", feature = "bridge-mcp"))]
pub(crate) fn clip(text: &str, chars: usize) -> String {
    match text.char_indices().nth(chars) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use agdx_wire::{META_BRIDGE_HOPS, Scalar};

    use super::*;

    #[test]
    fn a_bridge_refuses_a_message_its_hops_name_and_says_the_path() {
        let mut metadata = Metadata::new();
        metadata.push_bridge_hop("axon-a");
        BridgeLoop::check(&metadata, "ax-ipc").unwrap();
        metadata.push_bridge_hop("ax-ipc");
        let refused = BridgeLoop::check(&metadata, "axon-a").unwrap_err();
        assert_eq!(refused.hops, ["axon-a", "ax-ipc"]);
        assert!(refused.to_string().contains("axon-a -> ax-ipc"));
    }

    #[test]
    fn a_lone_text_is_no_hop() {
        let metadata = Metadata::new().with(META_BRIDGE_HOPS, Scalar::from("ax-ipc"));
        BridgeLoop::check(&metadata, "ax-ipc").unwrap();
    }
}
