//! `agdx bridge`: edge bridges to agents that speak another protocol.

use clap::Subcommand;

use super::context::{Failure, Global};

mod a2a;
mod ax_ipc;
mod axon;
mod ioa;
mod mcp;
mod token;

/// The bridges.
#[derive(Debug, Subcommand)]
pub enum BridgeCommand {
    /// Be an AXON peer (QUIC, mutual TLS, pinned Ed25519 keys): AXON
    /// requests become commands to agents on the log, their replies go
    /// back; exposed agents' commands go to AXON peers as requests.
    Axon(axon::AxonArgs),
    /// Play the AX host: AX agents' IPC calls (Unix socket or HTTP) become
    /// commands to agents on the log, and their replies the answers.
    #[command(name = "ax-ipc")]
    AxIpc(ax_ipc::AxIpcArgs),
    /// An IOA server (spaces, nodes, the message graph, SSE, MCP tools at
    /// /mcp) whose only store is the log: restart it and every space, node,
    /// token and message is still there.
    Ioa(ioa::IoaArgs),
    /// An MCP server (streamable HTTP at /mcp, or stdio) whose tools are
    /// the live agents' operations, from their cards: a call is a command,
    /// its reply the result, with progress and cancellation carried through.
    Mcp(mcp::McpArgs),
    /// An A2A server (JSON-RPC over HTTP, SSE): every live agent on the log
    /// is an A2A agent at /agents/{agent}/, its card built from its AGDX card.
    A2a(a2a::A2aArgs),
}

pub async fn run(global: &Global, command: BridgeCommand) -> Result<(), Failure> {
    match command {
        BridgeCommand::Axon(args) => axon::run(global, args).await,
        BridgeCommand::AxIpc(args) => ax_ipc::run(global, args).await,
        BridgeCommand::Ioa(args) => ioa::run(global, args).await,
        BridgeCommand::Mcp(args) => mcp::run(global, args).await,
        BridgeCommand::A2a(args) => a2a::run(global, args).await,
    }
}
