//! `agdx tail`: print records as JSON lines.

use std::collections::BTreeSet;
use std::time::Duration;

use clap::Args;
use tokio::sync::mpsc;

use agdx::Topology;
use agdx::log::{LogError, LogRecord, SharedLog, TopicInfo};
use agdx::trust::Verifier;
use agdx::wire::json::{JsonCodec, Map, Value, bytes_to_json};
use agdx::wire::{AgentEnvelope, ConversationId, DeadLetter, FoldSnapshot, LogPosition};

use super::check::{skipped_failure, warn_skipped};
use super::context::{Failure, Global};

/// Prints the records of the agent topics and of every agent's inbox as
/// JSON lines: the `agdx wire decode` form of each record plus its topic,
/// partition, offset and log timestamp.
///
/// Without --follow it prints what is there from the start and exits; with
/// --follow it prints new records as they arrive (from the end unless
/// --from or --from-start says otherwise). Records that cannot be read
/// (damaged) are skipped and named on stderr, and the exit status is 5.
#[derive(Debug, Args)]
pub struct TailArgs {
    /// Only this topic (default: every agent topic and every inbox).
    #[arg(long, value_name = "TOPIC")]
    pub topic: Option<String>,

    /// Only this conversation (reads just its partition of each topic).
    #[arg(long, value_name = "ID")]
    pub conversation: Option<ConversationId>,

    /// Start at this offset in each partition.
    #[arg(long, value_name = "OFFSET", conflicts_with = "from_start")]
    pub from: Option<u64>,

    /// Start at the first record of each partition.
    #[arg(long)]
    pub from_start: bool,

    /// Keep waiting for new records (Ctrl-C stops); an inbox made while it
    /// follows is followed too, from its first record, within seconds.
    #[arg(long)]
    pub follow: bool,

    /// Check each envelope's signature against the key registry (--keys) as
    /// of its log timestamp: adds "verified" (true|false), "signer"
    /// ({key_id, principal, kind} or null) and, when false, "unverified" (why).
    #[arg(long)]
    pub verify: bool,
}

pub async fn run(global: &Global, args: TailArgs) -> Result<(), Failure> {
    let verifier = args
        .verify
        .then(|| global.verifier("--verify"))
        .transpose()?;
    let (log, topology) = global.read_topology("agdx tail").await?;
    let topics: Vec<TopicInfo> = match &args.topic {
        Some(name) => vec![named_topic(&log, &topology, name).await?],
        None => topology.all_with_inboxes(log.as_ref()).await?,
    };
    let (sender, mut lines) = mpsc::unbounded_channel::<String>();
    let mut readers = Vec::new();
    let mut damaged = 0;
    let known: BTreeSet<String> = topics.iter().map(|t| t.topic.clone()).collect();
    for topic in topics {
        for partition in partitions_read(&topic, args.conversation) {
            let start = match (args.from, args.from_start, args.follow) {
                (Some(offset), _, _) => offset,
                (None, true, _) | (None, false, false) => 0,
                (None, false, true) => log
                    .last_offset(&topic, partition)
                    .await?
                    .map_or(0, |last| last + 1),
            };
            let reader = Reader {
                log: log.clone(),
                topic: topic.clone(),
                partition,
                conversation: args.conversation,
                verifier: verifier.clone(),
            };
            let task = reader.run(start, args.follow, sender.clone());
            if args.follow {
                readers.push(tokio::spawn(task));
            } else {
                damaged += task.await?;
            }
        }
    }
    if args.follow && args.topic.is_none() {
        let inboxes = NewInboxes {
            log: log.clone(),
            topology,
            known,
            from: args.from.unwrap_or(0),
            conversation: args.conversation,
            verifier,
        };
        readers.push(tokio::spawn(inboxes.follow(sender.clone())));
    }
    drop(sender);
    while let Some(line) = lines.recv().await {
        println!("{line}");
    }
    for reader in readers {
        damaged += reader.await.map_err(Failure::new)??;
    }
    if damaged > 0 {
        return Err(skipped_failure(damaged));
    }
    Ok(())
}

/// The partitions of `topic` a tail reads: the conversation's, or all.
fn partitions_read(topic: &TopicInfo, conversation: Option<ConversationId>) -> Vec<u32> {
    match conversation {
        Some(conversation) => vec![agdx::routing::partition_of(topic, conversation)],
        None => (0..topic.partitions.get()).collect(),
    }
}

/// How often `tail --follow` looks for inboxes made since it started.
const INBOX_LOOK_EVERY: Duration = Duration::from_secs(2);

/// Inboxes a following tail has not met yet: a pool with the inbox routing
/// makes its agent's when it starts, maybe after the tail did.
struct NewInboxes {
    log: SharedLog,
    topology: Topology,
    known: BTreeSet<String>,
    /// Where a new inbox is read from: everything in it came after the
    /// tail started, unless --from says otherwise.
    from: u64,
    conversation: Option<ConversationId>,
    verifier: Option<Verifier>,
}

impl NewInboxes {
    /// Follows each inbox as it appears, until nobody reads the lines; the
    /// damaged ranges its readers stepped over.
    async fn follow(mut self, out: mpsc::UnboundedSender<String>) -> Result<usize, Failure> {
        let mut readers = Vec::new();
        while !out.is_closed() {
            tokio::time::sleep(INBOX_LOOK_EVERY).await;
            for topic in self.topology.inboxes(self.log.as_ref()).await? {
                if !self.known.insert(topic.topic.clone()) {
                    continue;
                }
                for partition in partitions_read(&topic, self.conversation) {
                    let reader = Reader {
                        log: self.log.clone(),
                        topic: topic.clone(),
                        partition,
                        conversation: self.conversation,
                        verifier: self.verifier.clone(),
                    };
                    readers.push(tokio::spawn(reader.run(self.from, true, out.clone())));
                }
            }
        }
        let mut damaged = 0;
        for reader in readers {
            damaged += reader.await.map_err(Failure::new)??;
        }
        Ok(damaged)
    }
}

struct Reader {
    log: SharedLog,
    topic: TopicInfo,
    partition: u32,
    conversation: Option<ConversationId>,
    verifier: Option<Verifier>,
}

impl Reader {
    /// Prints the partition's records from `from` on (and, with `follow`,
    /// as they come); how many damaged ranges it stepped over, each said
    /// on stderr.
    async fn run(
        self,
        mut from: u64,
        follow: bool,
        out: mpsc::UnboundedSender<String>,
    ) -> Result<usize, Failure> {
        let wait = if follow {
            Duration::from_millis(500)
        } else {
            Duration::ZERO
        };
        let mut damaged = 0;
        loop {
            let polled = self
                .log
                .poll(&self.topic, self.partition, from, 1000, wait)
                .await;
            let records = match polled {
                Ok(records) => records,
                Err(LogError::Corrupt(damage)) => {
                    warn_skipped(&self.topic, &damage);
                    damaged += 1;
                    from = damage.next_offset();
                    continue;
                }
                Err(error) => return Err(error.into()),
            };
            let Some(last) = records.last() else {
                if follow {
                    continue;
                }
                return Ok(damaged);
            };
            from = last.position.offset + 1;
            for record in &records {
                if let Some(line) = self.line(record)
                    && out.send(line).is_err()
                {
                    return Ok(damaged);
                }
            }
        }
    }

    /// The JSON line of one record, `None` when it belongs to another conversation.
    fn line(&self, record: &LogRecord) -> Option<String> {
        let (conversation, mut json) = record_json(
            &self.topic.topic,
            record.position,
            record.timestamp_micros,
            &record.payload,
        );
        if self.conversation.is_some() && conversation != self.conversation {
            return None;
        }
        if let (Some(verifier), Value::Object(fields)) = (&self.verifier, &mut json)
            && let Ok(envelope) = AgentEnvelope::decode(&record.payload)
        {
            fields.extend(verdict(verifier, &envelope, record));
        }
        serde_json::to_string(&json).ok()
    }
}

/// The `--verify` fields of an envelope record.
fn verdict(
    verifier: &Verifier,
    envelope: &AgentEnvelope,
    record: &LogRecord,
) -> Map<String, Value> {
    let mut fields = Map::new();
    match verifier.verify_record(envelope, record) {
        Ok(verified) => {
            fields.insert("verified".to_owned(), Value::Bool(true));
            let signer = serde_json::json!({
                "key_id": verified.key_id.to_string(),
                "principal": verified.principal.to_string(),
                "kind": verified.kind.to_string(),
            });
            fields.insert("signer".to_owned(), signer);
        }
        Err(why) => {
            fields.insert("verified".to_owned(), Value::Bool(false));
            fields.insert("signer".to_owned(), Value::Null);
            fields.insert("unverified".to_owned(), Value::from(why.to_string()));
        }
    }
    fields
}

/// One record as `tail` prints it: topic, partition, offset and timestamp,
/// then the decoded payload's fields; and the conversation it belongs to.
pub fn record_json(
    topic: &str,
    position: LogPosition,
    timestamp_micros: u64,
    payload: &[u8],
) -> (Option<ConversationId>, Value) {
    let (conversation, body) = decode(payload);
    let mut fields = Map::new();
    fields.insert("topic".to_owned(), Value::from(topic));
    fields.insert("partition".to_owned(), Value::from(position.partition));
    fields.insert("offset".to_owned(), Value::from(position.offset));
    fields.insert(
        "timestamp".to_owned(),
        Value::from(timestamp(timestamp_micros)),
    );
    match body {
        Value::Object(entries) => fields.extend(entries),
        other => {
            fields.insert("record".to_owned(), other);
        }
    }
    (conversation, Value::Object(fields))
}

/// The record's JSON view and the conversation it belongs to: an envelope,
/// a dead letter (its payload's conversation), a fold snapshot, or, when
/// nothing decodes, the raw bytes and why.
fn decode(payload: &[u8]) -> (Option<ConversationId>, Value) {
    if let Ok(envelope) = AgentEnvelope::decode(payload) {
        return (Some(envelope.conversation), envelope.to_json());
    }
    if let Ok(capsule) = DeadLetter::decode(payload) {
        let conversation = AgentEnvelope::decode(&capsule.payload)
            .ok()
            .map(|e| e.conversation);
        return (
            conversation,
            serde_json::json!({ "dead_letter": capsule.to_json() }),
        );
    }
    if let Ok(snapshot) = FoldSnapshot::decode(payload) {
        return (
            Some(snapshot.conversation),
            serde_json::json!({ "fold_snapshot": snapshot.to_json() }),
        );
    }
    let reason = AgentEnvelope::decode(payload)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    (
        None,
        serde_json::json!({ "undecodable": reason, "payload": bytes_to_json(payload) }),
    )
}

/// RFC 3339 with microseconds, UTC.
pub fn timestamp(micros: u64) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_micros(micros);
    humantime::format_rfc3339_micros(time).to_string()
}

/// The agent topic or agent inbox (`agent.inbox.NAME`) called `name`.
async fn named_topic(
    log: &SharedLog,
    topology: &Topology,
    name: &str,
) -> Result<TopicInfo, Failure> {
    if let Some(topic) = topology.by_name(name) {
        return Ok(topic.clone());
    }
    let prefix = &topology.inboxes.prefix;
    if name.starts_with(prefix.as_str())
        && let Some(inbox) = log.topic(&topology.commands.stream, name).await?
    {
        return Ok(inbox);
    }
    let names: Vec<&str> = topology.all().iter().map(|t| t.topic.as_str()).collect();
    let inboxes: Vec<String> = topology
        .inboxes(log.as_ref())
        .await?
        .into_iter()
        .map(|t| t.topic)
        .collect();
    let inboxes = match inboxes.is_empty() {
        true => "there is no inbox yet".to_owned(),
        false => format!("the inboxes: {}", inboxes.join(", ")),
    };
    Err(Failure::new(format!(
        "no agent topic or inbox '{name}'; the topics are: {}, and {prefix}AGENT for an agent whose pool reads its inbox ({inboxes})",
        names.join(", ")
    )))
}
