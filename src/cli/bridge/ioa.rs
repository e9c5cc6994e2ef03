//! `agdx bridge ioa`: an IOA server whose only store is the log.

use std::time::Duration;

use clap::Args;

use agdx::bridge::ioa::{IoaBridge, IoaConfig};

use crate::cli::advice;
use crate::cli::context::{Failure, Global, parse_duration, terminated};

/// `agdx bridge ioa`.
#[derive(Debug, Args)]
pub struct IoaArgs {
    /// Address to listen on (host:port; port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8765")]
    pub listen: String,

    /// The key that registers nodes (POST /auth/register, POST /nodes) and
    /// creates spaces (X-Access-Key); never empty. A random one is made and
    /// printed when not given.
    #[arg(
        long,
        value_name = "KEY",
        env = "IOA_ACCESS_KEY",
        hide_env_values = true
    )]
    pub access_key: Option<String>,

    /// How often an idle event stream gets a `: keepalive` comment.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub keepalive: Duration,

    /// The largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_body: usize,

    /// This bridge's id: its source on the log and its entry in bridge_hops.
    #[arg(long, value_name = "ID", default_value = "ioa")]
    pub bridge_id: String,
}

/// Serves IOA clients until SIGINT or SIGTERM.
pub async fn run(global: &Global, args: IoaArgs) -> Result<(), Failure> {
    if args
        .access_key
        .as_deref()
        .is_some_and(|k| k.trim().is_empty())
    {
        return Err(Failure::new(
            "the access key is empty (--access-key or IOA_ACCESS_KEY): anyone could register nodes and create spaces with it; pass a key of your own, or give neither and a random one is made and printed",
        ));
    }
    let (log, topology) = global.topology().await?;
    let describe = log.describe();
    let generated = args.access_key.is_none();
    let access_key = args.access_key.unwrap_or_else(|| {
        let mut key = [0u8; 16];
        rand::fill(&mut key);
        hex::encode(key)
    });
    let body_limit = advice::ioa_body_limit(args.max_body);
    let config = IoaConfig::new(access_key.clone())
        .keepalive(args.keepalive)
        .max_body_bytes(args.max_body)
        .bridge_id(args.bridge_id);
    let bridge = IoaBridge::open(log, topology, config).await?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| Failure::new(format!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener.local_addr()?;
    println!(
        "agdx bridge ioa: serving http://{address} (REST, SSE, MCP at /mcp) from {describe}, stream '{}'",
        global.stream
    );
    eprintln!("agdx bridge ioa: {body_limit}");
    if generated {
        println!(
            "access key: {access_key} (generated; pass --access-key or IOA_ACCESS_KEY to choose one)"
        );
    }
    bridge
        .serve(listener, async {
            terminated().await;
            eprintln!("agdx bridge ioa: stopping");
        })
        .await?;
    Ok(())
}
