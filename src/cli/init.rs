//! `agdx init`: create the agent topology (idempotent) and show it.

use clap::Args;

use agdx::{DEFAULT_PARTITIONS, TopologyConfig};

use super::context::{Failure, Global};

/// Creates the stream and the five agent topics unless they exist.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Partitions every topic must have: a topic that exists with another
    /// count is refused, since a topic's partition count cannot change (use
    /// a new stream). Without it, topics that exist keep their count and
    /// missing ones get the same (8 on a new stream).
    #[arg(long, value_name = "N")]
    pub partitions: Option<u32>,
}

pub async fn run(global: &Global, args: InitArgs) -> Result<(), Failure> {
    let log = global.open().await?;
    let names = TopologyConfig::new(&global.stream);
    let mut existed = Vec::new();
    for name in names.topic_names() {
        existed.push(log.topic(&global.stream, name).await?);
    }
    let found = existed.iter().flatten().map(|t| t.partitions.get()).next();
    let config = names.with_partitions(args.partitions.or(found).unwrap_or(DEFAULT_PARTITIONS));
    let topology = match args.partitions {
        Some(_) => config.ensure(log.as_ref()).await?,
        None => config.open(log.as_ref()).await?,
    };
    let existed = existed.iter().map(Option::is_some);
    println!("log {} stream '{}'", log.describe(), global.stream);
    for (topic, existed) in topology.all().into_iter().zip(existed) {
        println!(
            "  {:<16} stream id {} topic id {} partitions {} ({})",
            topic.topic,
            topic.stream_id,
            topic.topic_id,
            topic.partitions,
            if existed { "exists" } else { "created" }
        );
    }
    Ok(())
}
