//! `agdx bridge mcp`: the live agents' operations as MCP tools.

use std::net::SocketAddr;
use std::time::Duration;

use clap::{Args, Subcommand};

use agdx::Producer;
use agdx::bridge::mcp::{MCP_PATH, McpBridge, McpConfig, TOKEN_SCHEME};
use agdx::wire::AgentId;

use crate::cli::context::{Failure, Global, parse_agent, parse_duration, terminated};

use super::token::{Minter, TokenArgs, TokenFlags};

/// The MCP bridge's tokens.
const MINTER: Minter = Minter {
    bridge: "mcp",
    scheme: TOKEN_SCHEME,
};

/// Serves MCP clients: every operation of a live agent (from its card) is
/// a tool named AGENT.OPERATION, and the list follows agents as they come
/// and go (notifications/tools/list_changed). A call is a command to the
/// agent; its reply is the result (a JSON object as structured content),
/// an error reply a tool error with the AGDX code; chunks and task states
/// arrive as progress notifications, and notifications/cancelled cancels
/// the command. Ctrl-C stops it.
///
/// Example: agdx bridge mcp --listen 127.0.0.1:8767 --token-secret mcp.secret
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct McpArgs {
    #[command(subcommand)]
    pub tool: Option<Tool>,

    #[command(flatten)]
    pub serve: ServeArgs,
}

#[derive(Debug, Subcommand)]
pub enum Tool {
    Token(TokenArgs),
}

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Serve streamable HTTP at /mcp on this address (port 0 picks a free
    /// one); needs --tokens or --token-secret.
    #[arg(long, value_name = "ADDR", required_unless_present = "stdio")]
    pub listen: Option<SocketAddr>,

    /// Serve one client on stdin and stdout instead (a local client that
    /// starts the bridge itself; nothing else is written to stdout).
    #[arg(long, conflicts_with = "listen")]
    pub stdio: bool,

    #[command(flatten)]
    pub tokens: TokenFlags,

    /// The agent the commands come from (replies are addressed to it); an
    /// agent of this name is not offered as tools.
    #[arg(long = "as", value_name = "AGENT", default_value = "mcp", value_parser = parse_agent)]
    pub source: AgentId,

    /// This bridge's id in bridge_hops (default: the --as agent); give each
    /// bridge of a chain its own.
    #[arg(long, value_name = "ID")]
    pub id: Option<String>,

    /// How long a call waits without a sign of life from its agent (a
    /// status or a chunk); also each command's deadline.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_duration)]
    pub timeout: Duration,

    /// How often the registry is read for agents that came or left.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub refresh: Duration,
}

pub async fn run(global: &Global, args: McpArgs) -> Result<(), Failure> {
    match args.tool {
        Some(Tool::Token(token)) => MINTER.mint(token),
        None => serve(global, args.serve).await,
    }
}

async fn serve(global: &Global, args: ServeArgs) -> Result<(), Failure> {
    let named = args.tokens.tokens.is_some() || args.tokens.token_secret.is_some();
    if args.stdio && named {
        return Err(Failure::new(
            "--tokens and --token-secret are for --listen (HTTP); a --stdio client is the local process that started the bridge: drop them",
        ));
    }
    let tokens = MINTER.tokens(&args.tokens)?;
    if args.listen.is_some() && tokens.is_empty() {
        return Err(Failure::new(
            "--listen needs --tokens FILE or --token-secret FILE: every HTTP request must carry Authorization: Bearer TOKEN (mint one with `agdx bridge mcp token --secret FILE`)",
        ));
    }
    let id = args.id.clone().unwrap_or_else(|| args.source.to_string());
    let mut config = McpConfig::new(id.clone());
    config.timeout = args.timeout;
    config.refresh = args.refresh;
    let (log, topology) = global.topology().await?;
    let describe = log.describe();
    let check = global.claim_check(&log, None, None)?;
    let producer = Producer::new(log, topology, args.source.clone()).with_claim_check(check);
    let bridge = McpBridge::open(producer, config).await?;
    let tools = bridge.tools();
    let summary = format!(
        "bridge '{id}' asking as '{}' on {describe}, stream '{}'; {} tool(s) now: {}",
        args.source,
        global.stream,
        tools.len(),
        if tools.is_empty() {
            "none (no agent is live; tools appear as workers start)".to_owned()
        } else {
            tools.names().collect::<Vec<_>>().join(", ")
        }
    );
    let Some(addr) = args.listen else {
        // stdout is the client's: everything else goes to stderr.
        eprintln!("agdx bridge mcp: serving MCP on stdio; {summary}");
        bridge
            .serve_stdio(async {
                terminated().await;
            })
            .await?;
        return Ok(());
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| Failure::new(format!("cannot listen on {addr}: {e}")))?;
    let bound = listener.local_addr()?;
    println!("agdx bridge mcp: serving http://{bound}{MCP_PATH}");
    eprintln!("agdx bridge mcp: {summary}; Ctrl-C stops it");
    bridge
        .serve_http(listener, tokens, async {
            terminated().await;
            eprintln!("agdx bridge mcp: stopping");
        })
        .await?;
    Ok(())
}
