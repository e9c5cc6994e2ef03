//! `agdx timeline`: one conversation's records, for people or as JSON lines.

use std::time::Duration;

use clap::Args;

use agdx::replay::Replay;
use agdx::wire::ConversationId;
use agdx::{Clock, SystemClock};

use super::check::{skipped_failure, warn_skipped_in};
use super::context::{Failure, Global, parse_since};
use super::tail::record_json;
use super::view::Timeline;

/// Prints every record of one conversation across the agent topics, in log
/// order (timestamp, then position), raw: only the conversation's
/// partition of each topic is read.
///
/// A line shows the time (UTC), topic, partition/offset, kind and
/// operation, source → target, a preview of the body, and for replies the
/// latency since their command. A chunk stream is one line with its
/// counters; `gap` and `abandoned` are this reader's conclusions and are
/// marked so (they are never on the log). Records that cannot be read
/// (damaged) are skipped and named on stderr, and the exit status is 5.
#[derive(Debug, Args)]
pub struct TimelineArgs {
    /// The conversation (26-character id, as `agdx send` prints it).
    #[arg(value_name = "CONVERSATION")]
    pub conversation: ConversationId,

    /// Start at this offset of the conversation's partition in every topic.
    #[arg(long, value_name = "OFFSET", conflicts_with = "since")]
    pub from: Option<u64>,

    /// Only records the log accepted at or after TIME: RFC 3339
    /// (2024-05-01T12:00:00Z) or a duration ago (10m, 2h).
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
    pub since: Option<u64>,

    /// Keep printing records as they arrive (Ctrl-C stops).
    #[arg(long)]
    pub follow: bool,

    /// One JSON line per record (the `agdx tail` form) instead of the view for people.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(global: &Global, args: TimelineArgs) -> Result<(), Failure> {
    let (log, topology) = global.read_topology("agdx timeline").await?;
    let mut replay =
        Replay::new(log.clone(), &topology, args.conversation).from_offset(args.from.unwrap_or(0));
    let mut view = Timeline::default();
    let mut printed = 0u64;
    let mut warned = 0;
    loop {
        let batch = if args.follow {
            replay.next_batch(Duration::from_millis(500)).await?
        } else {
            replay.read_to_end().await?
        };
        for damage in &replay.damaged()[warned..] {
            warn_skipped_in(&topology, damage);
        }
        warned = replay.damaged().len();
        for record in batch
            .iter()
            .filter(|r| args.since.is_none_or(|since| r.timestamp_micros >= since))
        {
            printed += 1;
            if args.json {
                let (_, json) = record_json(
                    &record.topic,
                    record.position,
                    record.timestamp_micros,
                    &record.payload,
                );
                println!("{}", serde_json::to_string(&json)?);
            } else {
                for line in view.push(record) {
                    println!("{line}");
                }
            }
        }
        if !args.follow {
            break;
        }
    }
    for line in view.finish(SystemClock.now_micros()) {
        println!("{line}");
    }
    if warned > 0 {
        return Err(skipped_failure(warned));
    }
    if printed == 0 {
        return Err(Failure::new(format!(
            "conversation {} has no records on {} (stream '{}'){}; check the id (`agdx tail` prints each record's conversation) and --log/--stream",
            args.conversation,
            log.describe(),
            global.stream,
            if args.from.is_some() || args.since.is_some() {
                " from that point on"
            } else {
                ""
            }
        )));
    }
    Ok(())
}
