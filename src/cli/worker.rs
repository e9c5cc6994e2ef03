//! `agdx worker`: run a worker pool member.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::Duration;

use clap::Args;
use tokio_util::sync::CancellationToken;

use agdx::trust::{Grant, Grants, Signer};
use agdx::wire::AgentId;
use agdx::worker::{EchoHandler, ExecHandler, ExecOutput, Handler, Worker, WorkerConfig};
use agdx::{KeyRetention, Producer, RetryPolicy};

use super::context::{Failure, Global, parse_agent, parse_duration, terminated};
use super::signing::{SigningArgs, speaker};

/// Runs a worker for an agent: takes its commands from the log, answers
/// them, and commits each only after the reply is on the log.
///
/// Several workers with the same --agent (and --group) share the work; if
/// one dies, the others take over its partitions.
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("handler").required(true).args(["exec", "echo"]))]
pub struct WorkerArgs {
    /// The agent this worker answers as; commands --to it come here.
    #[arg(long, value_name = "NAME", value_parser = parse_agent)]
    pub agent: AgentId,

    /// Consumer group; workers in one group share the work (default: the agent name).
    #[arg(long, value_name = "GROUP")]
    pub group: Option<String>,

    /// Partitions handled at the same time.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub concurrency: usize,

    /// Run CMD with `sh -c` per command: body on stdin; AGDX_OPERATION, AGDX_CONVERSATION,
    /// AGDX_CORRELATION, AGDX_RECORD, AGDX_SOURCE, AGDX_ATTEMPT, AGDX_DEADLINE, AGDX_IDEMPOTENCY_KEY,
    /// AGDX_BRIDGE_HOPS, AGDX_REPORT (a file for JSON-line reports: progress, finish_reason,
    /// usage, tool, task_state, metadata, input_required) and AGDX_INPUT (a named pipe to read
    /// the caller's answer from, after an input_required report) in the environment.
    /// Exit 0 answers with stdout; exit 75 is retried; any other exit is an error reply with stderr.
    #[arg(long, value_name = "CMD")]
    pub exec: Option<String>,

    /// Answer --exec commands with a chunk stream as stdout is written: each
    /// line (`lines`) or each read (`bytes`) a chunk; the stream ends when
    /// the command exits (with an error on a non-zero exit). (`--stream`
    /// names the log's stream.)
    #[arg(long, value_enum, value_name = "HOW", requires = "exec")]
    pub stream_output: Option<StreamOutput>,

    /// Answer every command with its own body.
    #[arg(long)]
    pub echo: bool,

    /// An operation this worker handles (repeat for several); others get an
    /// `unsupported` error listing these. Default: every operation.
    #[arg(long = "operation", value_name = "OPERATION")]
    pub operations: Vec<String>,

    /// Attempts for retryable failures (exit 75), the first included.
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub max_attempts: u32,

    /// Wait before the first retry; it doubles per attempt, with jitter.
    #[arg(long, value_name = "DURATION", default_value = "200ms", value_parser = parse_duration)]
    pub retry_delay: Duration,

    /// Where the processed idempotency keys are kept
    /// (default: PATH/state for embedded:PATH, ./.agdx-state otherwise).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    /// How long a processed idempotency key is remembered (after the log
    /// took its command); a key sent again later runs again.
    #[arg(long, value_name = "DURATION", default_value = "7days", value_parser = parse_duration)]
    pub key_retention: Duration,

    /// Most processed idempotency keys remembered for this agent; the oldest go first.
    #[arg(long, value_name = "N", default_value_t = 100_000)]
    pub max_keys: u64,

    /// Keep claim-checked bodies in this local directory (the same as
    /// `--blobs dir:DIR`; default: the store --blobs names).
    #[arg(long, value_name = "DIR")]
    pub blob_dir: Option<PathBuf>,

    /// Replies larger than this many bytes go to the blob store as a claim check.
    #[arg(long, value_name = "BYTES")]
    pub claim_check_threshold: Option<usize>,

    /// While a command runs longer than this, tell its requester every
    /// interval that it is still being worked on (a `progress` status).
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub progress_interval: Duration,

    /// Stop a command still running after this long and dead-letter it
    /// (deadline_exceeded). Default: no limit.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub handler_limit: Option<Duration>,

    /// Once told to stop (Ctrl-C, SIGTERM), how long to wait for the commands
    /// in hand; then their handlers are killed and their records left
    /// uncommitted for the next member. A second Ctrl-C does so at once.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub shutdown_grace: Duration,

    /// Once a running command is cancelled by its sender, how long its
    /// handler has to stop (an --exec command gets SIGTERM); then it is
    /// killed (SIGKILL). Either way the command is answered `cancelled`.
    #[arg(long, value_name = "DURATION", default_value = "5s", value_parser = parse_duration)]
    pub cancel_grace: Duration,

    /// How long this worker's agent card stays true; it is published again
    /// before half of it has passed (`agdx agents` lists live agents).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub card_ttl: Duration,

    /// The version the agent card names.
    #[arg(long, value_name = "VERSION")]
    pub agent_version: Option<String>,

    /// Serve metrics in the Prometheus text format on ADDR (e.g.
    /// 127.0.0.1:9464): records by outcome, retries, handler latency, commit
    /// lag per partition.
    #[arg(long, value_name = "ADDR")]
    pub metrics: Option<std::net::SocketAddr>,

    /// Handle only commands signed by a key of the registry (--keys) that
    /// belongs to their source and was valid when they landed; others are
    /// dead-lettered `rejected` and answered `unauthorized`.
    #[arg(long)]
    pub verify: bool,

    /// Let a verified principal invoke an operation: PRINCIPAL:OPERATION,
    /// `*` or a trailing `*` matching many (repeat; needs --verify). With any
    /// grant, commands without one are answered `unauthorized` (forbidden).
    #[arg(long = "allow", value_name = "GRANT", requires = "verify")]
    pub allow: Vec<Grant>,

    /// Grants from a file, one PRINCIPAL:OPERATION per line (needs --verify).
    #[arg(long, value_name = "FILE", requires = "verify")]
    pub grants: Option<PathBuf>,

    #[command(flatten)]
    pub signing: SigningArgs,
}

/// The values of `--stream-output`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StreamOutput {
    /// Each line of stdout a chunk.
    Lines,
    /// Each read of stdout a chunk.
    Bytes,
}

pub async fn run(global: &Global, args: WorkerArgs) -> Result<(), Failure> {
    let signer = args.signing.signer()?;
    speaker(global, Some(&args.agent), signer.as_ref(), "")?;
    let grants = match (&args.grants, args.allow.is_empty()) {
        (None, true) => None,
        (file, _) => {
            let mut grants = match file {
                Some(path) => Grants::load(path)?,
                None => Grants::default(),
            };
            grants.extend(args.allow.iter().cloned());
            Some(grants)
        }
    };
    let verifier = args
        .verify
        .then(|| global.verifier("--verify"))
        .transpose()?;
    // With a registry the pool honours operator quarantines.
    let quarantine = match &global.keys {
        Some(_) => Some(global.verifier("quarantine")?),
        None => None,
    };
    if let Some(addr) = args.metrics {
        agdx::metrics::serve_prometheus(addr).map_err(|e| {
            Failure::new(format!("{e}; pick a free address with --metrics HOST:PORT"))
        })?;
    }
    let (log, topology) = global.topology().await?;
    let describe = log.describe();
    let check = global.claim_check(&log, args.blob_dir.clone(), args.claim_check_threshold)?;
    let mut producer = Producer::new(log, topology, args.agent.clone()).with_claim_check(check);
    if let Some(signer) = signer {
        producer = producer.with_signer(signer);
    }
    let trust = describe_trust(
        verifier.is_some(),
        grants.as_ref(),
        quarantine.is_some(),
        producer.signer(),
    );
    let config = WorkerConfig {
        group: args.group.clone(),
        concurrency: args.concurrency,
        retry: RetryPolicy {
            max_attempts: args.max_attempts.max(1),
            base_delay: args.retry_delay,
            ..RetryPolicy::default()
        },
        state_dir: Some(
            args.state_dir
                .clone()
                .unwrap_or_else(|| global.default_state_dir()),
        ),
        progress_interval: args.progress_interval,
        handler_limit: args.handler_limit,
        card_ttl: args.card_ttl,
        agent_version: args.agent_version.clone(),
        key_retention: KeyRetention {
            max_age: args.key_retention,
            max_keys: args.max_keys,
        },
        verifier,
        grants,
        quarantine,
        shutdown_grace: Some(args.shutdown_grace),
        cancel_grace: args.cancel_grace,
        ..WorkerConfig::default()
    };
    let mut worker = Worker::new(producer, config);
    let handler: std::sync::Arc<dyn Handler> = match &args.exec {
        Some(command) => {
            std::sync::Arc::new(ExecHandler::new(command).output(match args.stream_output {
                None => ExecOutput::Response,
                Some(StreamOutput::Lines) => ExecOutput::Lines,
                Some(StreamOutput::Bytes) => ExecOutput::Bytes,
            }))
        }
        None => std::sync::Arc::new(EchoHandler),
    };
    if args.operations.is_empty() {
        worker = worker.fallback(handler);
    } else {
        for operation in &args.operations {
            worker = worker.handle(operation, handler.clone());
        }
    }
    let stats = worker.stats();
    let shutdown = CancellationToken::new();
    let stop_now = CancellationToken::new();
    tokio::spawn(stop_on_signals(
        shutdown.clone(),
        stop_now.clone(),
        args.shutdown_grace,
    ));
    eprintln!(
        "agdx worker: agent '{}' (group '{}') handling {} on {describe}, stream '{}'{trust}; Ctrl-C stops it gracefully",
        args.agent,
        args.group.as_deref().unwrap_or(args.agent.as_str()),
        if args.operations.is_empty() {
            "every operation".to_owned()
        } else {
            args.operations.join(", ")
        },
        global.stream,
    );
    worker.run_with_stop_now(shutdown, stop_now).await?;
    eprintln!(
        "agdx worker: stopped; handled {}, deduplicated {}, unsupported {}, dead-lettered {}, cancelled {}, skipped {}",
        stats.handled.load(Ordering::Relaxed),
        stats.deduplicated.load(Ordering::Relaxed),
        stats.unsupported.load(Ordering::Relaxed),
        stats.dead_lettered.load(Ordering::Relaxed),
        stats.cancelled.load(Ordering::Relaxed),
        stats.skipped.load(Ordering::Relaxed),
    );
    match stats.abandoned.load(Ordering::Relaxed) {
        0 => Ok(()),
        partitions => Err(Failure::new(format!(
            "stopped before the commands in hand on {partitions} partition{} were done: their handlers were killed and their records left uncommitted, so the next worker of the group handles them again",
            if partitions == 1 { "" } else { "s" }
        ))),
    }
}

/// The first SIGINT or SIGTERM cancels `shutdown` (finish what is in hand);
/// a second one cancels `stop_now`.
async fn stop_on_signals(
    shutdown: CancellationToken,
    stop_now: CancellationToken,
    grace: Duration,
) {
    terminated().await;
    eprintln!(
        "agdx worker: stopping: finishing the records in hand (for at most {}, --shutdown-grace), committing, leaving the group; Ctrl-C again stops their handlers now and leaves the records to the next worker",
        humantime::format_duration(grace)
    );
    shutdown.cancel();
    terminated().await;
    eprintln!("agdx worker: stopping now: killing the handlers still running");
    stop_now.cancel();
}

/// What the start-up line says about signatures, grants and quarantine.
fn describe_trust(
    verify: bool,
    grants: Option<&Grants>,
    quarantine: bool,
    signer: Option<&Signer>,
) -> String {
    let mut parts = Vec::new();
    if verify {
        parts.push("verifying signatures".to_owned());
    }
    if let Some(grants) = grants {
        let list: Vec<String> = grants.iter().map(ToString::to_string).collect();
        parts.push(format!("granting {}", list.join(" ")));
    }
    if quarantine {
        parts.push("honouring quarantine".to_owned());
    }
    if let Some(signer) = signer {
        parts.push(format!("signing with key {}", signer.key_id()));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!(", {}", parts.join(", "))
    }
}
