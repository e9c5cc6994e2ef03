//! `agdx check`: verify a log end to end and name what is damaged; and how
//! every reading command reports the damaged records it stepped over.

use clap::Args;

use agdx::Topology;
use agdx::TopologyConfig;
use agdx::log::check::{CheckReport, check_topics};
use agdx::log::embedded::EmbeddedLog;
use agdx::log::{Damage, LogSpec, TopicInfo};

use super::context::{EXIT_DAMAGED, Failure, Global};

/// Reads back every record of every partition and names each damaged range
/// (topic, partition, offsets) and what is wrong with it, one `damaged:`
/// line each, then a summary.
///
/// On the embedded log it checks every stream in the directory, runs
/// SQLite's integrity check on its files, and compares the records with
/// the log's high-water marks (records it acknowledged that its database
/// no longer holds); on Iggy and Kafka it reads the agent topics of
/// --stream and every agent's inbox there. Exit 0 when nothing is damaged, 5 when something is.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Embedded log only: give up the records the log acknowledged that
    /// its database lost, so that it opens again and appends go on after
    /// what is left, as after restoring an older backup. Run it while no
    /// other agdx process uses the log.
    #[arg(long)]
    pub accept_loss: bool,
}

pub async fn run(global: &Global, args: CheckArgs) -> Result<(), Failure> {
    let spec = global.spec()?;
    let report = match &spec {
        LogSpec::Embedded(path) if args.accept_loss => return accept_loss(&spec, path),
        LogSpec::Embedded(path) => EmbeddedLog::verify(path).await?,
        _ if args.accept_loss => {
            return Err(Failure::new(
                "--accept-loss is for the embedded log, whose own files keep its records; restore an Iggy or Kafka server's data from its backups",
            ));
        }
        _ => {
            let log = spec.open().await?;
            let config = TopologyConfig::new(&global.stream);
            let mut topics = Vec::new();
            for name in config.topic_names() {
                topics.extend(log.topic(&global.stream, name).await?);
            }
            // Every inbox, made by pools of any agent (docs/runtime.md §2).
            let inboxes = log.topics(&global.stream).await?;
            topics.extend(
                inboxes
                    .into_iter()
                    .filter(|t| t.topic.starts_with(&config.topics.inbox_prefix)),
            );
            let mut report = CheckReport::default();
            check_topics(log.as_ref(), &topics, &mut report).await?;
            report
        }
    };
    for finding in &report.findings {
        println!("damaged: {finding}");
    }
    let verdict = if report.is_clean() {
        "nothing is damaged".to_owned()
    } else {
        format!(
            "found {} problem(s), {} records unreadable",
            report.findings.len(),
            report.damaged_records()
        )
    };
    println!(
        "checked {spec}: {} topics, {} partitions, {} records read back intact; {verdict}",
        report.topics, report.partitions, report.records
    );
    if report.is_clean() {
        return Ok(());
    }
    let lost = report.lost_records();
    Err(Failure::with_code(
        format!(
            "the log is damaged (see above); restore it from a backup to get those records back. Until then readers step over damaged records and workers dead-letter them{}",
            if lost {
                ", and a log that lost records it acknowledged refuses to open: `agdx check --accept-loss` gives them up"
            } else {
                ""
            }
        ),
        EXIT_DAMAGED,
    ))
}

/// `--accept-loss` on the embedded log in `path`.
fn accept_loss(spec: &LogSpec, path: &std::path::Path) -> Result<(), Failure> {
    let lost = EmbeddedLog::accept_loss(path)?;
    if lost.is_empty() {
        println!("{spec} lost no records it acknowledged; nothing to give up");
        return Ok(());
    }
    for partition in &lost {
        println!("given up: {partition}");
    }
    println!("{spec} opens again; appends to those partitions go on from where their records end");
    Ok(())
}

/// Says on stderr that a reader stepped over `damage` in one of the
/// topics of `topology`, and what to do.
pub fn warn_skipped_in(topology: &Topology, damage: &Damage) {
    let position = damage.position;
    let topic = topology
        .all()
        .into_iter()
        .find(|t| t.stream_id == position.stream && t.topic_id == position.topic);
    match topic {
        Some(topic) => warn_skipped(topic, damage),
        None => warn(
            &format!("topic {}/{}", position.stream, position.topic),
            damage,
        ),
    }
}

/// Says on stderr that a reader stepped over `damage` in `topic`, and
/// what to do.
pub fn warn_skipped(topic: &TopicInfo, damage: &Damage) {
    warn(&format!("'{}/{}'", topic.stream, topic.topic), damage);
}

fn warn(topic: &str, damage: &Damage) {
    eprintln!(
        "agdx: skipped damaged records: {topic} partition {} offset {}: {}; `agdx check` names everything damaged in the log, and restoring it from a backup brings them back",
        damage.position.partition,
        damage.offsets(),
        damage.reason
    );
}

/// The failure a reader ends with after stepping over `ranges` damaged
/// ranges (each already reported by [`warn_skipped`] or [`warn_skipped_in`]).
pub fn skipped_failure(ranges: usize) -> Failure {
    Failure::with_code(
        format!(
            "{ranges} damaged range(s) of records could not be read and were skipped (see above); everything else was printed"
        ),
        EXIT_DAMAGED,
    )
}
