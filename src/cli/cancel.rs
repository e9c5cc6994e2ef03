//! `agdx cancel`: cancel a command, or every command of a conversation
//! that has no answer yet.

use std::time::Duration;

use clap::{ArgGroup, Args};

use agdx::log::{LogError, SharedLog};
use agdx::replay::Replay;
use agdx::wire::{AgentId, ConversationId, RecordId};
use agdx::{OpenCommand, Producer, Topology, envelope_of, open_commands};

use super::context::{Failure, Global, parse_agent};
use super::signing::{SigningArgs, speaker};

/// Cancels a command that has no answer yet: its worker does not run it,
/// or stops its handler (an --exec command gets SIGTERM, then SIGKILL after
/// the worker's --cancel-grace), and answers it `error cancelled`.
///
/// Only a command's own sender can cancel it: the cancel goes out as the
/// command's source, or as --as / the principal of --key when given (then
/// only that sender's commands are cancelled). Prints one line per command
/// cancelled; exits 1 when RECORD is no command waiting for its answer.
#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).multiple(true).args(["record", "conversation"])))]
pub struct CancelArgs {
    /// The command's record id (26 characters, as `agdx send` prints it).
    #[arg(value_name = "RECORD")]
    pub record: Option<RecordId>,

    /// The command's conversation. With RECORD it says where to look (else
    /// the commands topics are searched); alone, every command of the
    /// conversation that has no answer yet is cancelled.
    #[arg(long, value_name = "ID")]
    pub conversation: Option<ConversationId>,

    /// Who cancels; only that sender's commands are cancelled.
    #[arg(long = "as", value_name = "AGENT", value_parser = parse_agent)]
    pub source: Option<AgentId>,

    #[command(flatten)]
    pub signing: SigningArgs,
}

pub async fn run(global: &Global, args: CancelArgs) -> Result<(), Failure> {
    let (log, topology) = global.topology().await?;
    let signer = args.signing.signer()?;
    let sender = match (&args.source, &signer) {
        (None, None) => None,
        _ => Some(speaker(
            global,
            args.source.as_ref(),
            signer.as_ref(),
            "cli",
        )?),
    };
    let conversation = match (args.conversation, args.record) {
        (Some(conversation), _) => conversation,
        (None, Some(record)) => conversation_of(&log, &topology, record)
            .await?
            .ok_or_else(|| {
                Failure::new(format!(
                    "no command with record {record} on {} (stream '{}'); check the id (`agdx send` prints it) and --log/--stream",
                    log.describe(),
                    topology.commands.stream
                ))
            })?,
        (None, None) => unreachable!("clap requires RECORD or --conversation"),
    };
    let records = Replay::new(log.clone(), &topology, conversation)
        .read_to_end()
        .await?;
    let mut open = open_commands(&records);
    if let Some(record) = args.record {
        open.retain(|command| command.sent.record == Some(record));
        if open.is_empty() {
            let known = records
                .iter()
                .any(|r| r.envelope().is_some_and(|e| e.record == Some(record)));
            return Err(Failure::new(if known {
                format!(
                    "record {record} is no command waiting for its answer: it was answered or cancelled already (`agdx timeline {conversation}` shows it)"
                )
            } else {
                format!(
                    "conversation {conversation} has no record {record}; check both ids (`agdx send` prints them)"
                )
            }));
        }
    }
    if let Some(sender) = &sender {
        let (theirs, others): (Vec<_>, Vec<_>) =
            open.into_iter().partition(|c| &c.source == sender);
        if theirs.is_empty() && !others.is_empty() {
            return Err(Failure::new(format!(
                "the open command(s) were sent by '{}', not '{sender}'; only a command's own sender can cancel it",
                others[0].source
            )));
        }
        open = theirs;
    }
    if open.is_empty() {
        eprintln!("agdx: conversation {conversation} has no command waiting for its answer");
        return Ok(());
    }
    for command in open {
        let producer = cancelling_producer(&log, &topology, &command, &sender, &signer);
        let cancel = producer
            .cancel(&command.sent, command.target.as_ref())
            .await?;
        println!(
            "cancelled record={} correlation={} operation={} by={} cancel={}",
            command
                .sent
                .record
                .map(|r| r.to_string())
                .unwrap_or_default(),
            command
                .sent
                .correlation
                .map(|c| c.to_string())
                .unwrap_or_default(),
            command.operation.as_deref().unwrap_or(""),
            producer.source(),
            cancel.record.map(|r| r.to_string()).unwrap_or_default(),
        );
    }
    Ok(())
}

/// A producer speaking as whoever cancels `command`: `sender` (signing with
/// `signer`) when given, else the command's own source.
fn cancelling_producer(
    log: &SharedLog,
    topology: &Topology,
    command: &OpenCommand,
    sender: &Option<AgentId>,
    signer: &Option<agdx::trust::Signer>,
) -> Producer {
    let source = sender.clone().unwrap_or_else(|| command.source.clone());
    let producer = Producer::new(log.clone(), topology.clone(), source);
    match signer {
        Some(signer) => producer.with_signer(signer.clone()),
        None => producer,
    }
}

/// The conversation of the command with record id `record`, searched for
/// on `agent.commands` and the inboxes.
async fn conversation_of(
    log: &SharedLog,
    topology: &Topology,
    record: RecordId,
) -> Result<Option<ConversationId>, LogError> {
    let mut topics = vec![topology.commands.clone()];
    topics.extend(topology.inboxes(log.as_ref()).await?);
    for topic in &topics {
        for partition in 0..topic.partitions.get() {
            let Some(last) = log.last_offset(topic, partition).await? else {
                continue;
            };
            let mut next = log.first_offset(topic, partition).await?.unwrap_or(0);
            while next <= last {
                let records = match log.poll(topic, partition, next, 1024, Duration::ZERO).await {
                    Ok(records) => records,
                    Err(LogError::Corrupt(damage)) => {
                        next = damage.next_offset();
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                let Some(tail) = records.last() else {
                    break;
                };
                next = tail.position.offset + 1;
                let found = records.iter().find_map(|r| {
                    envelope_of(r)
                        .ok()
                        .filter(|e| e.record == Some(record))
                        .map(|e| e.conversation)
                });
                if found.is_some() {
                    return Ok(found);
                }
            }
        }
    }
    Ok(None)
}
