//! `agdx init`: create the agent topology (idempotent) and show it.

use clap::Args;

use agdx::{DEFAULT_PARTITIONS, TopologyConfig};

use super::context::{Failure, Global};

/// Creates the stream and the five agent topics unless they exist.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Partitions of each topic when it is created (an existing topic keeps its own).
    #[arg(long, default_value_t = DEFAULT_PARTITIONS)]
    pub partitions: u32,
}

pub async fn run(global: &Global, args: InitArgs) -> Result<(), Failure> {
    let log = global.open().await?;
    let config = TopologyConfig::new(&global.stream).with_partitions(args.partitions);
    let mut existed = Vec::new();
    for name in config.topic_names() {
        existed.push(log.topic(&global.stream, name).await?.is_some());
    }
    let topology = config.ensure(log.as_ref()).await?;
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
