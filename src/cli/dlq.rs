//! `agdx dlq`: list, show and redrive dead letters.

use std::borrow::Cow;

use clap::{Args, Subcommand};

use agdx::Producer;
use agdx::replay::{DeadLetterEntry, RedriveOutcome, dead_letters, redrive};
use agdx::wire::json::JsonCodec;
use agdx::wire::{AgentId, DeadLetterReason, LogPosition};

use super::context::{Failure, Global, parse_agent, parse_since};
use super::tail::timestamp;
use super::view::printable;

/// Dead letters: the records workers set aside on agent.dlq, kept verbatim.
#[derive(Debug, Subcommand)]
pub enum DlqCommand {
    /// One line per dead letter: id, time, reason, attempts, agent, operation, redriven (or --json).
    List(ListArgs),
    /// A dead letter's fields and its original record, decoded.
    Show(ShowArgs),
    /// Append the original bytes again, unchanged, where they came from, so
    /// a worker takes them up again. Remembered on the log: a second
    /// redrive of one dead letter does nothing unless --force.
    Redrive(RedriveArgs),
}

/// Which dead letters.
#[derive(Debug, Args)]
pub struct Filter {
    /// Only those whose original was sent to AGENT.
    #[arg(long, value_name = "AGENT", value_parser = parse_agent)]
    pub agent: Option<AgentId>,

    /// Only this reason: retry_exhausted, rejected, decode_failed, deadline_exceeded.
    #[arg(long, value_name = "REASON", value_parser = parse_reason)]
    pub reason: Option<DeadLetterReason>,
}

impl Filter {
    fn keeps(&self, entry: &DeadLetterEntry) -> bool {
        self.agent.as_ref().is_none_or(|a| entry.agent() == Some(a))
            && self.reason.is_none_or(|r| entry.capsule.reason == r)
    }
}

#[derive(Debug, Args)]
pub struct ListArgs {
    #[command(flatten)]
    pub filter: Filter,

    /// Only those set aside at or after TIME (RFC 3339, or a duration ago: 10m, 2h).
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
    pub since: Option<u64>,

    /// One JSON object per line instead of the table: id, position,
    /// set_aside, reason, attempts, agent, operation, redrives.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The dead letter's id as `list` prints it (PARTITION/OFFSET of agent.dlq).
    #[arg(value_name = "ID")]
    pub id: String,
}

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["ids", "all"]))]
pub struct RedriveArgs {
    /// Dead letter ids as `list` prints them.
    #[arg(value_name = "ID")]
    pub ids: Vec<String>,

    /// Every dead letter (narrowed by --agent and --reason).
    #[arg(long)]
    pub all: bool,

    #[command(flatten)]
    pub filter: Filter,

    /// Redrive again what was redriven before.
    #[arg(long)]
    pub force: bool,

    /// Who redrives (the source of the record that remembers it).
    #[arg(long = "as", value_name = "AGENT", default_value = "cli", value_parser = parse_agent)]
    pub by: AgentId,
}

fn parse_reason(text: &str) -> Result<DeadLetterReason, String> {
    text.parse::<DeadLetterReason>().map_err(|e| e.to_string())
}

pub async fn run(global: &Global, command: DlqCommand) -> Result<(), Failure> {
    let (log, topology) = global.read_topology("agdx dlq").await?;
    let entries = dead_letters(&log, &topology).await?;
    let resolve = |id: &str| -> Result<&DeadLetterEntry, Failure> {
        let position = parse_id(id, &topology.dlq)?;
        entries
            .iter()
            .find(|e| e.position == position)
            .ok_or_else(|| {
                Failure::new(format!(
                    "no dead letter {id} on {} (stream '{}'); `agdx dlq list` shows the ids",
                    log.describe(),
                    global.stream
                ))
            })
    };
    match command {
        DlqCommand::List(args) => {
            let shown: Vec<&DeadLetterEntry> = entries
                .iter()
                .filter(|e| args.filter.keeps(e))
                .filter(|e| args.since.is_none_or(|s| e.timestamp_micros >= s))
                .collect();
            if shown.is_empty() {
                eprintln!(
                    "agdx: no dead letters{}",
                    if entries.is_empty() { "" } else { " match" }
                );
                return Ok(());
            }
            if args.json {
                for entry in shown {
                    println!("{}", list_json(entry));
                }
                return Ok(());
            }
            println!(
                "{:<8} {:<27} {:<18} {:>3}  {:<12} {:<12} REDRIVEN",
                "ID", "SET ASIDE (UTC)", "REASON", "TRY", "AGENT", "OPERATION"
            );
            for entry in shown {
                println!("{}", list_line(entry));
            }
        }
        DlqCommand::Show(args) => show(resolve(&args.id)?),
        DlqCommand::Redrive(args) => {
            let chosen: Vec<&DeadLetterEntry> = if args.all {
                entries.iter().filter(|e| args.filter.keeps(e)).collect()
            } else {
                args.ids
                    .iter()
                    .map(|id| resolve(id))
                    .collect::<Result<_, _>>()?
            };
            if chosen.is_empty() {
                eprintln!("agdx: no dead letters to redrive");
                return Ok(());
            }
            let producer = Producer::new(log.clone(), topology.clone(), args.by.clone());
            for entry in chosen {
                let id = short_id(entry.position);
                match redrive(&producer, entry, args.force).await? {
                    RedriveOutcome::Redriven { topic, partition } => {
                        println!("redriven {id} → {topic} partition {partition}");
                    }
                    RedriveOutcome::AlreadyRedriven(before) => println!(
                        "skipped {id}: already redriven {} by {} (--force redrives it again)",
                        timestamp(before.timestamp_micros),
                        before.by
                    ),
                }
            }
        }
    }
    Ok(())
}

/// `PARTITION/OFFSET` of a capsule in agent.dlq.
fn short_id(position: LogPosition) -> String {
    format!("{}/{}", position.partition, position.offset)
}

/// A capsule id: `PARTITION/OFFSET` of agent.dlq, or a full position.
fn parse_id(id: &str, dlq: &agdx::log::TopicInfo) -> Result<LogPosition, Failure> {
    if let Ok(position) = id.parse::<LogPosition>() {
        return Ok(position);
    }
    let parsed = id
        .split_once('/')
        .and_then(|(p, o)| Some((p.parse::<u32>().ok()?, o.parse::<u64>().ok()?)));
    match parsed {
        Some((partition, offset)) => Ok(dlq.position(partition, offset)),
        None => Err(Failure::new(format!(
            "{id:?} is not a dead-letter id; use PARTITION/OFFSET as `agdx dlq list` prints it (e.g. 2/0)"
        ))),
    }
}

fn list_line(entry: &DeadLetterEntry) -> String {
    let redriven = match entry.redrives.last() {
        Some(last) => format!(
            "{} by {}{}",
            timestamp(last.timestamp_micros),
            last.by,
            if entry.redrives.len() > 1 {
                format!(" ({}×)", entry.redrives.len())
            } else {
                String::new()
            }
        ),
        None => "no".to_owned(),
    };
    let original = entry.original.as_ref();
    format!(
        "{:<8} {:<27} {:<18} {:>3}  {:<12} {:<12} {redriven}",
        short_id(entry.position),
        timestamp(entry.timestamp_micros),
        entry.capsule.reason.name(),
        entry.capsule.attempts,
        entry
            .agent()
            .map(|a| a.to_string())
            .unwrap_or_else(|| "-".into()),
        original
            .and_then(|e| e.operation.as_deref())
            .map_or(Cow::Borrowed("-"), printable),
    )
}

/// A dead letter as `list --json` prints it: what the table shows, with
/// every redrive and nothing shortened.
fn list_json(entry: &DeadLetterEntry) -> serde_json::Value {
    let redrives: Vec<serde_json::Value> = entry
        .redrives
        .iter()
        .map(|redrive| {
            serde_json::json!({
                "at": timestamp(redrive.timestamp_micros),
                "by": redrive.by.as_str(),
                "forced": redrive.forced,
            })
        })
        .collect();
    serde_json::json!({
        "id": short_id(entry.position),
        "position": entry.position.to_string(),
        "set_aside": timestamp(entry.timestamp_micros),
        "reason": entry.capsule.reason.name(),
        "attempts": entry.capsule.attempts,
        "agent": entry.agent().map(AgentId::as_str),
        "operation": entry.original.as_ref().and_then(|e| e.operation.as_deref()),
        "redrives": redrives,
    })
}

fn show(entry: &DeadLetterEntry) {
    let capsule = &entry.capsule;
    println!(
        "dead letter {} (at {})",
        short_id(entry.position),
        entry.position
    );
    println!("set aside:  {}", timestamp(entry.timestamp_micros));
    println!("source:     {}", capsule.source);
    println!("reason:     {}", capsule.reason.name());
    println!("attempts:   {}", capsule.attempts);
    println!(
        "detail:     {}",
        printable(capsule.detail.as_deref().unwrap_or("-"))
    );
    if entry.redrives.is_empty() {
        println!("redriven:   never");
    }
    for redrive in &entry.redrives {
        println!(
            "redriven:   {} by {}{}",
            timestamp(redrive.timestamp_micros),
            redrive.by,
            if redrive.forced { " (forced)" } else { "" }
        );
    }
    match &entry.original {
        Some(original) => {
            println!("original ({} bytes, verbatim):", capsule.payload.len());
            println!(
                "{}",
                serde_json::to_string_pretty(&original.to_json()).unwrap_or_default()
            );
        }
        None => println!(
            "original ({} bytes): does not decode as an envelope",
            capsule.payload.len()
        ),
    }
}
