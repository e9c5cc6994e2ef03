//! `agdx bridge a2a`: the live agents on the log as A2A agents.

use std::time::Duration;

use clap::Args;

use agdx::bridge::a2a::{A2aBridge, A2aConfig};

use crate::cli::context::{Failure, Global, parse_duration, terminated};

/// `agdx bridge a2a`.
#[derive(Debug, Args)]
pub struct A2aArgs {
    /// Address to listen on (host:port; port 0 picks a free one).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8766")]
    pub listen: String,

    /// The URL clients reach the bridge at, for the agent cards (e.g.
    /// https://a2a.example.com); by default the request's Host.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,

    /// How long message/send waits for the task to end or ask for input
    /// before answering with the task as it stands.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub send_wait: Duration,

    /// How long a task may go without a reply before the bridge stops
    /// following it and reports it failed.
    #[arg(long, value_name = "DURATION", default_value = "15m", value_parser = parse_duration)]
    pub reply_timeout: Duration,

    /// How often an idle event stream gets a keep-alive comment.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub keepalive: Duration,

    /// The largest request body accepted, in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = 1 << 20)]
    pub max_body: usize,

    /// This bridge's id: its source on the log and its entry in bridge_hops.
    #[arg(long, value_name = "ID", default_value = "a2a")]
    pub bridge_id: String,
}

/// Serves A2A clients until SIGINT or SIGTERM.
pub async fn run(global: &Global, args: A2aArgs) -> Result<(), Failure> {
    let (log, topology) = global.topology().await?;
    let describe = log.describe();
    let config = A2aConfig {
        bridge_id: args.bridge_id,
        public_url: args.public_url,
        send_wait: args.send_wait,
        reply_timeout: args.reply_timeout,
        keepalive: args.keepalive,
        max_body_bytes: args.max_body,
        ..A2aConfig::default()
    };
    let bridge = A2aBridge::open(log, topology, config).await?;
    let listener = tokio::net::TcpListener::bind(&args.listen)
        .await
        .map_err(|e| Failure::new(format!("cannot listen on {}: {e}", args.listen)))?;
    let address = listener.local_addr()?;
    println!(
        "agdx bridge a2a: serving http://{address}/agents (A2A JSON-RPC, SSE) from {describe}, stream '{}'",
        global.stream
    );
    bridge
        .serve(listener, async {
            terminated().await;
            eprintln!("agdx bridge a2a: stopping");
        })
        .await?;
    Ok(())
}
