//! Edge bridges: agents that speak another protocol working with agents on
//! the log, neither side changing.
//!
//! A bridge translates at the boundary and nowhere else (seed 003, "Interop
//! is an edge mapping"): what comes in from the outside becomes an ordinary
//! AGDX command or event on the log, written through the same
//! [`Producer`](crate::Producer) and answered through the same
//! [`Requester`](crate::Requester) as any other agent's; the answer is
//! mapped back at the edge. Shared semantics (who, which conversation, a
//! deadline) go into envelope fields; the protocol's own data stays in the
//! body.
//!
//! Every record a bridge writes carries the pinned metadata key
//! `bridge_hops` with the bridge's id appended, and a bridge refuses a
//! message whose hops already name it ([`stamp_hops`]): a message that came
//! back to a bridge it passed through is a translation loop, and without
//! the guard it would circle forever. A bridge that writes through one
//! producer can have it stamp every record
//! ([`Producer::with_bridge_hop`](crate::Producer::with_bridge_hop)).
//!
//! One module per edge protocol:
//! - [`axon`]: AXON peers over QUIC with mutual TLS (`agdx bridge axon`).
//! - [`ax_ipc`]: the AX host's IPC (length-prefixed JSON over a Unix
//!   socket, and `POST /internal/ipc` over HTTP).
//! - [`ioa`]: an IOA server (spaces, nodes, the message graph, SSE, MCP
//!   tools) whose only store is the log.

pub mod ax_ipc;
pub mod axon;
pub mod ioa;

use agdx_wire::{META_BRIDGE_HOPS, Metadata, Scalar};

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

/// The bridge ids in `metadata`'s `bridge_hops`, in order (none when the key
/// is absent or not an array of text: a value nobody can use is ignored, as
/// [`Metadata::check_pinned`] advises).
pub fn bridge_hops(metadata: Option<&Metadata>) -> Vec<String> {
    let Some(items) = metadata
        .and_then(|m| m.get(META_BRIDGE_HOPS))
        .and_then(Scalar::as_array)
    else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(|item| item.as_str().map(str::to_owned))
        .collect()
}

/// `hops` with `bridge` appended, as the `bridge_hops` value a record written
/// by `bridge` carries; [`BridgeLoop`] when `bridge` is already among them.
pub fn stamp_hops(hops: &[String], bridge: &str) -> Result<Scalar, BridgeLoop> {
    if hops.iter().any(|hop| hop == bridge) {
        return Err(BridgeLoop {
            bridge: bridge.to_owned(),
            hops: hops.to_vec(),
        });
    }
    Ok(Scalar::Array(
        hops.iter()
            .map(String::as_str)
            .chain([bridge])
            .map(Scalar::from)
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bridge_appends_itself_and_refuses_its_own_id() {
        let stamped = stamp_hops(&["axon-a".into()], "ax-ipc").unwrap();
        let metadata = Metadata::new().with(META_BRIDGE_HOPS, stamped);
        assert_eq!(bridge_hops(Some(&metadata)), ["axon-a", "ax-ipc"]);
        let refused = stamp_hops(&bridge_hops(Some(&metadata)), "axon-a").unwrap_err();
        assert_eq!(refused.hops, ["axon-a", "ax-ipc"]);
        assert!(refused.to_string().contains("axon-a -> ax-ipc"));
    }

    #[test]
    fn unusable_hops_read_as_none() {
        let metadata = Metadata::new().with(META_BRIDGE_HOPS, "not-an-array");
        assert!(bridge_hops(Some(&metadata)).is_empty());
        assert!(bridge_hops(None).is_empty());
    }
}
