//! `agdx agents`: the agents with a live worker, from their cards.

use std::time::Duration;

use clap::Args;

use agdx::cards::{LiveAgent, LiveAgents};
use agdx::{Clock, SystemClock};

use super::context::{Failure, Global};
use super::tail::timestamp;
use super::view::{human_micros, printable};

/// Lists every agent with a fresh card on agent.registry: the operations
/// it handles, its live pool members, when it was last seen and when its
/// card runs out. A card older than its TTL means the worker is gone.
#[derive(Debug, Args)]
pub struct AgentsArgs {
    /// Keep the list up to date (Ctrl-C stops).
    #[arg(long)]
    pub watch: bool,

    /// With --watch: how often to look again.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = super::context::parse_duration)]
    pub every: Duration,

    /// One JSON object per line instead of the table: agent, operations,
    /// members, last_seen, expires.
    #[arg(long, conflicts_with = "watch")]
    pub json: bool,
}

pub async fn run(global: &Global, args: AgentsArgs) -> Result<(), Failure> {
    let (log, topology) = global.read_topology("agdx agents").await?;
    let mut agents = LiveAgents::resume(&log, &topology).await;
    loop {
        agents.catch_up(&log, &topology.registry).await?;
        // Who is live as of what was just read: saving a snapshot can take
        // longer than a short card TTL.
        let now = SystemClock.now_micros();
        agents.save_if_due(&log, &topology).await?;
        let live = agents.live(now);
        if args.watch {
            println!("— {} —", timestamp(now));
        }
        let none = || {
            format!(
                "no live agents on {} (stream '{}'); start a worker with `agdx worker --agent NAME ...`",
                log.describe(),
                global.stream
            )
        };
        if args.json {
            // Standard output holds only the objects.
            if live.is_empty() {
                eprintln!("agdx: {}", none());
            }
            for agent in &live {
                println!("{}", agent_json(agent));
            }
            return Ok(());
        }
        if live.is_empty() {
            println!("{}", none());
        } else {
            print!("{}", table(&live, now));
        }
        if !args.watch {
            return Ok(());
        }
        tokio::time::sleep(args.every).await;
    }
}

/// An agent as `--json` prints it.
fn agent_json(agent: &LiveAgent) -> serde_json::Value {
    serde_json::json!({
        "agent": agent.agent.as_str(),
        "operations": agent.operations,
        "members": agent.members,
        "last_seen": timestamp(agent.last_seen_micros),
        "expires": timestamp(agent.expires_micros),
    })
}

/// The agents as a table for people.
pub fn table(live: &[LiveAgent], now: u64) -> String {
    let mut out = format!(
        "{:<16} {:<28} {:>7}  {:<12} {:<12}\n",
        "AGENT", "OPERATIONS", "MEMBERS", "LAST SEEN", "EXPIRES IN"
    );
    for agent in live {
        out.push_str(&format!(
            "{:<16} {:<28} {:>7}  {:<12} {:<12}\n",
            agent.agent.as_str(),
            printable(&agent.operations.join(", ")),
            agent.members.len(),
            format!(
                "{} ago",
                human_micros(now.saturating_sub(agent.last_seen_micros))
            ),
            human_micros(agent.expires_micros.saturating_sub(now)),
        ));
    }
    out
}
