//! `agdx quarantine` / `agdx unquarantine`: publish operator-signed control
//! facts, and `agdx quarantine --list`: the folded state and why.

use clap::Args;

use agdx::Producer;
use agdx::trust::{IgnoredFact, KeyKind, QuarantineFold, QuarantineStatus, Signer, format_time};
use agdx::wire::AgentId;

use super::context::{Failure, Global, parse_agent};
use super::signing::speaker;
use super::tail::timestamp;
use super::view::printable;

/// Quarantines an agent: while the fact stands, asks and sends to it fail
/// at once and its worker pool takes no new work. Only facts signed with an
/// operator key of the registry count.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("what").required(true).args(["agent", "list"]))]
pub struct QuarantineArgs {
    /// The agent to quarantine.
    #[arg(value_name = "AGENT", value_parser = parse_agent, requires = "key")]
    pub agent: Option<AgentId>,

    /// Show which agents are quarantined, by whom and since when, and the
    /// control facts that were ignored and why (needs --keys).
    #[arg(long, conflicts_with_all = ["key", "reason"])]
    pub list: bool,

    /// With --list: one JSON object per line, each agent's state (agent,
    /// quarantined, by, since, reason, record, position, key_id), then
    /// each ignored fact as {"ignored": {operation, position, timestamp, why}}.
    #[arg(long, requires = "list")]
    pub json: bool,

    #[command(flatten)]
    pub fact: FactArgs,
}

/// Lifts an agent's quarantine.
#[derive(Debug, Args)]
pub struct UnquarantineArgs {
    /// The agent whose quarantine ends.
    #[arg(value_name = "AGENT", value_parser = parse_agent)]
    pub agent: AgentId,

    #[command(flatten)]
    pub fact: FactArgs,
}

/// How a control fact is signed.
#[derive(Debug, Args)]
pub struct FactArgs {
    /// The operator's secret key file.
    #[arg(long, value_name = "KEYFILE")]
    pub key: Option<std::path::PathBuf>,

    /// Why (shown by `agdx quarantine --list`).
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,

    /// The operator signing (default: the key's principal in --keys).
    #[arg(long = "as", value_name = "OPERATOR", value_parser = parse_agent)]
    pub operator: Option<AgentId>,
}

pub async fn run(global: &Global, args: QuarantineArgs) -> Result<(), Failure> {
    match args.agent {
        Some(agent) if !args.list => publish(global, &agent, true, args.fact).await,
        _ => list(global, args.json).await,
    }
}

pub async fn lift(global: &Global, args: UnquarantineArgs) -> Result<(), Failure> {
    publish(global, &args.agent, false, args.fact).await
}

async fn publish(
    global: &Global,
    agent: &AgentId,
    quarantined: bool,
    fact: FactArgs,
) -> Result<(), Failure> {
    let Some(path) = &fact.key else {
        return Err(Failure::new(
            "a control fact must be signed: pass --key OPERATOR_KEYFILE",
        ));
    };
    let signer = Signer::from_key_file(path)?;
    let registry = global.registry()?;
    if let Some(entry) = registry.as_ref().and_then(|r| r.get(&signer.key_id()))
        && entry.kind != KeyKind::Operator
    {
        return Err(Failure::new(format!(
            "key {} of '{}' is an {} key; control facts count only when an operator key signs them, so nothing was published",
            signer.key_id(),
            entry.principal,
            entry.kind
        )));
    }
    // With a signer, the speaker is named or enrolled, never the fallback.
    let operator = speaker(global, fact.operator.as_ref(), Some(&signer), "")?;
    let key_id = signer.key_id();
    let (log, topology) = global.topology().await?;
    let sent = Producer::new(log, topology, operator.clone())
        .with_signer(signer)
        .status_quarantine(agent, quarantined, fact.reason.as_deref())
        .await?;
    println!(
        "{} '{agent}': record={} on {} partition {}, signed by '{operator}' (key {key_id})",
        if quarantined {
            "quarantined"
        } else {
            "lifted the quarantine of"
        },
        sent.record.map(|r| r.to_string()).unwrap_or_default(),
        sent.topic,
        sent.partition,
    );
    Ok(())
}

async fn list(global: &Global, json: bool) -> Result<(), Failure> {
    let verifier = global.verifier("quarantine --list")?;
    let (log, topology) = global.read_topology("agdx quarantine --list").await?;
    let state = QuarantineFold::read(&log, &topology.registry, verifier).await?;
    if json {
        for status in state.agents() {
            println!("{}", status_json(status));
        }
        for ignored in state.ignored() {
            println!("{}", ignored_json(ignored));
        }
        return Ok(());
    }
    let mut any = false;
    for status in state.agents() {
        any = true;
        let reason = status
            .reason
            .as_ref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default();
        let what = if status.quarantined {
            format!("quarantined by '{}' since", status.by)
        } else {
            format!("active: quarantine lifted by '{}' at", status.by)
        };
        let line = format!(
            "{} {what} {}{reason} [record {} at {}, key {}]",
            status.agent,
            format_time(status.since_micros),
            status.record,
            status.position,
            status.key_id
        );
        println!("{}", printable(&line));
    }
    if !any {
        println!("no agent is quarantined (no control fact on the registry took effect)");
    }
    for ignored in state.ignored() {
        let line = format!(
            "ignored {} fact at {} ({}): {}",
            ignored.operation,
            ignored.position,
            format_time(ignored.timestamp_micros),
            ignored.why
        );
        println!("{}", printable(&line));
    }
    Ok(())
}

/// An agent's state as `--list --json` prints it.
fn status_json(status: &QuarantineStatus) -> serde_json::Value {
    serde_json::json!({
        "agent": status.agent.as_str(),
        "quarantined": status.quarantined,
        "by": status.by.as_str(),
        "since": timestamp(status.since_micros),
        "reason": status.reason,
        "record": status.record.to_string(),
        "position": status.position.to_string(),
        "key_id": status.key_id.to_string(),
    })
}

/// An ignored control fact as `--list --json` prints it.
fn ignored_json(ignored: &IgnoredFact) -> serde_json::Value {
    serde_json::json!({
        "ignored": {
            "operation": ignored.operation,
            "position": ignored.position.to_string(),
            "timestamp": timestamp(ignored.timestamp_micros),
            "why": ignored.why.to_string(),
        }
    })
}
