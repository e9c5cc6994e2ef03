//! `agdx send`: publish commands without waiting for replies.

use std::io::{BufRead, Read};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;

use agdx::trust::{QuarantineWatch, Verifier};
use agdx::wire::{AgentId, ContentType, ConversationId, IdempotencyKey};
use agdx::{Clock, CommandRequest, ProduceError, Producer, SystemClock};

use super::context::{EXIT_REMOTE_ERROR, Failure, Global, parse_agent, parse_duration};
use super::signing::{SigningArgs, speaker};

/// Options shared by `send` and `ask` for the command they publish.
#[derive(Debug, Args)]
pub struct CommandArgs {
    /// The agent to send to (its worker runs `agdx worker --agent NAME`).
    #[arg(long, value_name = "AGENT", value_parser = parse_agent)]
    pub to: Option<AgentId>,

    /// The operation to ask for; the worker dispatches on it.
    #[arg(long, value_name = "OPERATION", requires = "to")]
    pub operation: Option<String>,

    /// Continue an existing conversation (26-character id) instead of starting one.
    #[arg(long, value_name = "ID")]
    pub conversation: Option<ConversationId>,

    /// Make the effect happen once: a repeated command with the same key gets the stored reply.
    #[arg(long, value_name = "KEY")]
    pub idempotency_key: Option<IdempotencyKey>,

    /// Give up if no worker takes the command up within this time (e.g. 30s).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub deadline: Option<Duration>,

    /// The body's codec: raw, json, cbor, msgpack, ...
    #[arg(long, value_name = "TYPE", default_value = "raw")]
    pub content_type: ContentType,

    /// Who is asking (the envelope's source; replies are addressed to it).
    /// Default: the principal of --key in the key registry, else `cli`.
    #[arg(long = "as", value_name = "AGENT", value_parser = parse_agent)]
    pub source: Option<AgentId>,

    #[command(flatten)]
    pub signing: SigningArgs,

    /// The body; read from stdin when absent.
    #[arg(value_name = "BODY")]
    pub body: Option<String>,
}

impl CommandArgs {
    /// The producer these options describe: signing with --key, refusing
    /// quarantined agents when a key registry is configured (the registry
    /// says whose control facts count).
    pub async fn producer(&self, global: &Global) -> Result<Producer, Failure> {
        let signer = self.signing.signer()?;
        let source = speaker(global, self.source.as_ref(), signer.as_ref(), "cli")?;
        let (log, topology) = global.topology().await?;
        let check = global.claim_check(&log, None, None)?;
        let mut producer =
            Producer::new(log.clone(), topology.clone(), source).with_claim_check(check);
        if let Some(signer) = signer {
            producer = producer.with_signer(signer);
        }
        if let Some(registry) = global.registry()? {
            let watch = QuarantineWatch::start(log, topology, Verifier::new(registry)).await?;
            producer = producer.with_quarantine(Arc::new(watch));
        }
        Ok(producer)
    }

    /// The command request, the body from the argument or stdin.
    pub fn request(&self) -> Result<CommandRequest, Failure> {
        let (Some(to), Some(operation)) = (&self.to, &self.operation) else {
            return Err(Failure::new(
                "say who to send to and what to ask: --to AGENT --operation OPERATION",
            ));
        };
        let body = match &self.body {
            Some(body) => body.clone().into_bytes(),
            None => {
                let mut body = Vec::new();
                std::io::stdin().read_to_end(&mut body)?;
                body
            }
        };
        if body.is_empty() {
            return Err(Failure::new(
                "the command body is empty; a command needs a body: pass it as the last argument or on stdin",
            ));
        }
        let mut request = CommandRequest::new(operation, body)
            .to(to.clone())
            .content_type(self.content_type);
        if let Some(conversation) = self.conversation {
            request = request.conversation(conversation);
        }
        if let Some(key) = &self.idempotency_key {
            request = request.idempotency_key(key.clone());
        }
        if let Some(deadline) = self.deadline {
            let deadline = SystemClock
                .now_micros()
                .saturating_add(u64::try_from(deadline.as_micros()).unwrap_or(u64::MAX));
            request = request.deadline_micros(deadline);
        }
        Ok(request)
    }
}

/// Publishes one command (or many from JSON lines) without waiting.
#[derive(Debug, Args)]
#[command(
    mut_arg("to", |a| a.required_unless_present("jsonl")),
    mut_arg("operation", |a| a.required_unless_present("jsonl")),
)]
pub struct SendArgs {
    /// Publish one command per JSON line of FILE (`-` for stdin):
    /// {"to": AGENT, "operation": OP, "body": ..., "idempotency_key"?: KEY, "conversation"?: ID}.
    /// A string body is sent as raw bytes, any other JSON value as json.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["to", "operation", "body"])]
    pub jsonl: Option<PathBuf>,

    /// Commands per append for --jsonl.
    #[arg(long, default_value_t = 500, requires = "jsonl")]
    pub batch: usize,

    #[command(flatten)]
    pub command: CommandArgs,
}

pub async fn run(global: &Global, args: SendArgs) -> Result<(), Failure> {
    let producer = args.command.producer(global).await?;
    if let Some(path) = &args.jsonl {
        return send_jsonl(&producer, path, args.batch).await;
    }
    let sent = producer
        .command(args.command.request()?)
        .await
        .map_err(produce_failure)?;
    println!(
        "record={} correlation={} conversation={} partition={}",
        sent.record.map(|r| r.to_string()).unwrap_or_default(),
        sent.correlation.map(|c| c.to_string()).unwrap_or_default(),
        sent.conversation,
        sent.partition
    );
    Ok(())
}

/// A refused send; a quarantined target exits 3 like an error reply.
pub fn produce_failure(error: ProduceError) -> Failure {
    match error {
        ProduceError::Quarantined(quarantined) => Failure::with_code(
            format!("error quarantined: {quarantined}"),
            EXIT_REMOTE_ERROR,
        ),
        other => Failure::new(other),
    }
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonCommand {
    to: String,
    operation: String,
    body: serde_json::Value,
    idempotency_key: Option<String>,
    conversation: Option<String>,
}

fn parse_line(line: &str, number: usize) -> Result<CommandRequest, Failure> {
    let bad = |what: String| Failure::new(format!("line {number}: {what}"));
    let command: JsonCommand = serde_json::from_str(line).map_err(|e| {
        bad(format!("{e}; each line is one JSON object {{\"to\", \"operation\", \"body\", \"idempotency_key\"?, \"conversation\"?}}"))
    })?;
    let (body, content_type) = match command.body {
        serde_json::Value::String(text) => (text.into_bytes(), ContentType::Raw),
        other => (other.to_string().into_bytes(), ContentType::Json),
    };
    if body.is_empty() {
        return Err(bad("the body is empty; a command needs a body".into()));
    }
    let to = AgentId::new(command.to).map_err(|e| bad(format!("\"to\": {e}")))?;
    let mut request = CommandRequest::new(command.operation, body)
        .to(to)
        .content_type(content_type);
    if let Some(key) = command.idempotency_key {
        request = request.idempotency_key(
            IdempotencyKey::new(key).map_err(|e| bad(format!("\"idempotency_key\": {e}")))?,
        );
    }
    if let Some(conversation) = command.conversation {
        request = request.conversation(
            conversation
                .parse()
                .map_err(|e| bad(format!("\"conversation\": {e}")))?,
        );
    }
    Ok(request)
}

async fn send_jsonl(producer: &Producer, path: &PathBuf, batch: usize) -> Result<(), Failure> {
    let reader: Box<dyn BufRead> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        let file = std::fs::File::open(path)
            .map_err(|e| Failure::new(format!("cannot read {}: {e}", path.display())))?;
        Box::new(std::io::BufReader::new(file))
    };
    let mut pending = Vec::with_capacity(batch);
    let mut sent = 0usize;
    // Say how far it got: commands before a bad line are already on the log.
    let stopped = |sent: usize, failure: Failure| {
        Failure::with_code(
            format!(
                "{}; {sent} commands before it were sent (resume after them, or use idempotency keys so a rerun is harmless)",
                failure.message
            ),
            failure.code,
        )
    };
    for (index, line) in reader.lines().enumerate() {
        let line = line.map_err(|e| stopped(sent, e.into()))?;
        if line.trim().is_empty() {
            continue;
        }
        pending.push(parse_line(&line, index + 1).map_err(|e| stopped(sent, e))?);
        if pending.len() >= batch.max(1) {
            let batch = std::mem::take(&mut pending);
            sent += producer
                .commands(batch)
                .await
                .map_err(|e| stopped(sent, produce_failure(e)))?
                .len();
        }
    }
    if !pending.is_empty() {
        sent += producer
            .commands(pending)
            .await
            .map_err(|e| stopped(sent, produce_failure(e)))?
            .len();
    }
    println!("sent {sent} commands");
    Ok(())
}
