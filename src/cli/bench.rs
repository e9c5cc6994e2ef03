//! `agdx bench`: throughput and latency figures on the chosen log. Each
//! bench works in a stream of its own, named `bench-...`, so it never
//! touches the agent topics in use.

use clap::{Args, Subcommand};

use agdx::log::LogSpec;
use agdx::log::iggy::Durability;

use super::context::{Failure, Global};

mod ask;
mod ax_ipc;
mod bridge_axon;
mod cancel;
mod error;
mod log;
mod pipeline;
mod plain;
mod plain_kafka;
mod plain_local;
mod startup;
mod timing;
mod topology;
mod worker;

use ask::{AskBenchOptions, run_ask_bench};
use ax_ipc::{AxIpcBenchOptions, run_ax_ipc_bench};
use bridge_axon::{BridgeAxonBenchOptions, run_bridge_axon_bench};
use cancel::{CancelBenchOptions, run_cancel_bench};
use error::BenchError;
use log::{LogBaseline, LogBenchOptions, run_log_bench};
use pipeline::{PipelineBenchOptions, run_pipeline_bench};
use plain::PlainIggyTarget;
use startup::{StartupBenchOptions, run_startup_bench};
use topology::{TopologyBenchOptions, run_topology_bench};
use worker::{PlainWorker, WorkerBenchOptions, run_worker_bench};

/// A stream no earlier run used, so a bench never reads another's records.
fn fresh_stream(bench: &str) -> String {
    format!(
        "bench-{bench}-{}",
        ulid::Ulid::new().to_string().to_lowercase()
    )
}

/// Benchmarks. Each runs in a new stream named `bench-...` (or
/// `agdx-bench-...`) of the chosen log and leaves the agent topics alone;
/// on Iggy, the log, ask, pipeline and worker benches delete their stream
/// when they end.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Append then poll records through the log port; on Iggy, also through
    /// the plain iggy client on the same server, with the ratio ours/plain,
    /// once per durability mode (fsync, then server).
    Log(LogArgs),
    /// Round trips (ask → in-process echo worker → reply): latency
    /// percentiles and requests/s, the median of several rounds. On Iggy,
    /// the plain iggy client's ping-pong takes turns with it, with the
    /// ratio ours/plain, once per durability mode (fsync, then server).
    /// Then the CPU an idle worker and a waiting requester use.
    Ask(AskArgs),
    /// The ax-ipc bridge's added latency: direct asks, then the same calls
    /// framed through an in-process bridge on a Unix socket, to the same
    /// in-process echo worker; percentiles of both and their difference.
    #[command(name = "ax-ipc")]
    AxIpc(AxIpcArgs),
    /// Commands produced up front, then drained by a worker pool that
    /// commits after each reply. Producing runs twice, batch by batch side
    /// by side: each batch prepared then appended (commands/s of each
    /// phase), and the next batch prepared while one is appended (end to
    /// end). On Iggy, the plain iggy client sends the same records alongside
    /// each, with the ratios ours/plain (append: like for like; publish:
    /// end to end), once per durability mode (fsync, then server).
    Pipeline(PipelineArgs),
    /// What the AXON bridge adds to a round trip: AXON requests through an
    /// in-process bridge to an echo worker, taking turns with direct asks
    /// of the same worker; latency percentiles of both and the difference.
    BridgeAxon(BridgeAxonArgs),
    /// Command records each pool reads per command it handles: echo pools
    /// of many agents, once with every command on the shared
    /// agent.commands, once with an inbox per agent (--topology inbox),
    /// each in a stream of its own; the ratio shared/inbox.
    Topology(TopologyArgs),
    /// A worker's start-up: from its start to its first answer, and what
    /// the start adds to resident memory, with an empty registry and with
    /// a long one (card copies and signed control facts), where the second
    /// start resumes from the view snapshots the first saved; a first start
    /// each, then next starts taking turns, and the ratio of their medians,
    /// long/empty.
    Startup(StartupArgs),
    /// How long after an ask gives up its handler is told to stop (an ask
    /// times out, then cancels as a giving-up ask does), against an echo
    /// round trip measured in the same run; then asks with task states
    /// taking turns with asks without, and the ratio of their percentiles.
    Cancel(CancelArgs),
    /// A worker pool's main job: commands already on the log, answered by
    /// an echo pool of 1, 2 and 4 members (commands/s from its start to its
    /// last commit), against a plain loop doing the same I/O with nothing
    /// of the runtime (plain SQLite on the embedded log, the plain iggy
    /// client on Iggy), with the ratio ours/plain; and the resident memory
    /// after 10,000 commands and at the end.
    Worker(WorkerArgs),
}

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Commands on the log before each pool starts.
    #[arg(long, default_value_t = 100_000)]
    pub commands: u64,
    /// Body bytes per command.
    #[arg(long, value_name = "BYTES", default_value_t = 1024)]
    pub size: usize,
    /// Partitions of the bench topics.
    #[arg(long, default_value_t = 8)]
    pub partitions: u32,
    /// Pool sizes, each a run of its own.
    #[arg(long, value_delimiter = ',', default_value = "1,2,4")]
    pub members: Vec<usize>,
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Asks that time out and cancel their command.
    #[arg(long, default_value_t = 100)]
    pub cancels: u64,
    /// How long each of them waits before it gives up.
    #[arg(long, value_name = "DURATION", default_value = "400ms", value_parser = humantime::parse_duration)]
    pub timeout: std::time::Duration,
    /// Asks of each kind, with task states and without.
    #[arg(long, default_value_t = 300)]
    pub asks: u64,
}

#[derive(Debug, Args)]
pub struct StartupArgs {
    /// Card records on the long registry.
    #[arg(long, default_value_t = 199_000)]
    pub cards: u64,
    /// Operator-signed control facts on the long registry.
    #[arg(long, default_value_t = 1_000)]
    pub facts: u64,
    /// Next starts of each case, taking turns (their medians are compared).
    #[arg(long, default_value_t = 7)]
    pub rounds: u32,
}

#[derive(Debug, Args)]
pub struct TopologyArgs {
    /// Agents, each with an echo pool of its own.
    #[arg(long, default_value_t = 20)]
    pub agents: usize,
    /// Commands sent to each agent.
    #[arg(long, default_value_t = 25)]
    pub commands: u64,
    /// Body bytes per command.
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub size: usize,
    /// Partitions of every topic, inboxes included.
    #[arg(long, default_value_t = 2)]
    pub partitions: u32,
}

#[derive(Debug, Args)]
pub struct BridgeAxonArgs {
    /// Round trips in flight at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Round trips of each kind.
    #[arg(long, default_value_t = 2_000)]
    pub requests: u64,
    /// Bytes of message text in each payload.
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub size: usize,
    /// Partitions of the bench topics.
    #[arg(long, default_value_t = 8)]
    pub partitions: u32,
    /// Turns each kind takes.
    #[arg(long, default_value_t = 4)]
    pub rounds: u64,
}

#[derive(Debug, Args)]
pub struct LogArgs {
    /// Records to append and read back.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Payload bytes per record.
    #[arg(long, value_name = "BYTES", default_value_t = 256)]
    pub size: usize,
    /// Records per append and per poll.
    #[arg(long, default_value_t = 100)]
    pub batch: u32,
    /// Partitions of the bench topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: u32,
    /// Producers appending at once, each its next batch as soon as its
    /// previous one returned, to partitions of their own (group commit on
    /// the embedded log); at most --partitions.
    #[arg(long, default_value_t = 1)]
    pub producers: u32,
}

#[derive(Debug, Args)]
pub struct AskArgs {
    /// Asks in flight at once.
    #[arg(long, default_value_t = 1)]
    pub concurrency: usize,
    /// Asks per round (and ping-pongs per round on Iggy).
    #[arg(long, default_value_t = 300)]
    pub requests: u64,
    /// Rounds; the figures are the median over them.
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Also time each leg of an ask (append, wake-up, handling, reply), one ask at a time.
    #[arg(long)]
    pub breakdown: bool,
    /// How long each idle CPU measurement lasts (0s skips them).
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = humantime::parse_duration)]
    pub idle: std::time::Duration,
    /// Body bytes per command.
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub size: usize,
    /// Partitions of the bench topics.
    #[arg(long, default_value_t = 8)]
    pub partitions: u32,
}

#[derive(Debug, Args)]
pub struct AxIpcArgs {
    /// Calls in flight at once (connections to the bridge).
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Calls in each run.
    #[arg(long, default_value_t = 2_000)]
    pub requests: u64,
    /// Partitions of the bench topics.
    #[arg(long, default_value_t = 8)]
    pub partitions: u32,
}

#[derive(Debug, Args)]
pub struct PipelineArgs {
    /// Commands produced in each of the two publish passes; then all are
    /// handled.
    #[arg(long, default_value_t = 20_000)]
    pub commands: u64,
    /// Body bytes per command.
    #[arg(long, value_name = "BYTES", default_value_t = 64)]
    pub size: usize,
    /// Commands per batch while producing.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Partitions of the bench topics (also how many are handled at once).
    #[arg(long, default_value_t = 8)]
    pub partitions: u32,
}

pub async fn run(global: &Global, command: BenchCommand) -> Result<(), Failure> {
    match command {
        BenchCommand::Log(args) => {
            let options = LogBenchOptions {
                records: args.records,
                size: args.size,
                batch: args.batch,
                partitions: args.partitions,
                producers: args.producers,
                ..LogBenchOptions::default()
            };
            for spec in in_every_mode(global.spec()?) {
                let log = spec.open().await?;
                let baseline = match &spec {
                    LogSpec::Embedded(dir) => Some(LogBaseline::Local(dir.clone())),
                    other => PlainIggyTarget::for_spec(other).map(LogBaseline::Iggy),
                };
                println!("{}", run_log_bench(log, baseline, options.clone()).await?);
            }
        }
        BenchCommand::Ask(args) => {
            let options = AskBenchOptions {
                concurrency: args.concurrency,
                requests: args.requests,
                size: args.size,
                partitions: args.partitions,
                rounds: args.rounds,
                breakdown: args.breakdown,
                idle: args.idle,
            };
            for spec in in_every_mode(global.spec()?) {
                let log = spec.open().await?;
                let plain = PlainIggyTarget::for_spec(&spec);
                // On Iggy the worker has a connection of its own, as the
                // plain ponger has; the embedded log is shared in-process.
                let worker_log = match plain {
                    Some(_) => spec.open().await?,
                    None => log.clone(),
                };
                println!(
                    "{}",
                    run_ask_bench(log, worker_log, plain, options.clone()).await?
                );
            }
        }
        BenchCommand::AxIpc(args) => {
            let options = AxIpcBenchOptions {
                concurrency: args.concurrency,
                requests: args.requests,
                partitions: args.partitions,
            };
            println!("{}", run_ax_ipc_bench(global.open().await?, options).await?);
        }
        BenchCommand::BridgeAxon(args) => {
            let options = BridgeAxonBenchOptions {
                concurrency: args.concurrency,
                requests: args.requests,
                size: args.size,
                partitions: args.partitions,
                rounds: args.rounds,
            };
            println!(
                "{}",
                run_bridge_axon_bench(global.open().await?, options).await?
            );
        }
        BenchCommand::Topology(args) => {
            let options = TopologyBenchOptions {
                agents: args.agents,
                commands: args.commands,
                size: args.size,
                partitions: args.partitions,
            };
            println!(
                "{}",
                run_topology_bench(global.open().await?, options).await?
            );
        }
        BenchCommand::Startup(args) => {
            let options = StartupBenchOptions {
                cards: args.cards,
                facts: args.facts,
                rounds: args.rounds.max(1),
            };
            println!(
                "{}",
                run_startup_bench(global.open().await?, options).await?
            );
        }
        BenchCommand::Cancel(args) => {
            let options = CancelBenchOptions {
                cancels: args.cancels,
                timeout: args.timeout,
                asks: args.asks,
            };
            println!("{}", run_cancel_bench(global.open().await?, options).await?);
        }
        BenchCommand::Worker(args) => {
            let options = WorkerBenchOptions {
                commands: args.commands,
                size: args.size,
                partitions: args.partitions,
                members: args.members,
            };
            for spec in in_every_mode(global.spec()?) {
                let plain = match &spec {
                    LogSpec::Embedded(dir) => Some(PlainWorker::Sqlite(dir.clone())),
                    LogSpec::Kafka(url) => Some(PlainWorker::Kafka(url.clone())),
                    other => PlainIggyTarget::for_spec(other).map(PlainWorker::Iggy),
                };
                let log = spec.open().await?;
                println!("{}", run_worker_bench(log, plain, options.clone()).await?);
            }
        }
        BenchCommand::Pipeline(args) => {
            let options = PipelineBenchOptions {
                commands: args.commands,
                size: args.size,
                batch: args.batch,
                partitions: args.partitions,
            };
            for spec in in_every_mode(global.spec()?) {
                let log = spec.open().await?;
                let plain = PlainIggyTarget::for_spec(&spec);
                println!("{}", run_pipeline_bench(log, plain, options.clone()).await?);
            }
        }
    }
    Ok(())
}

/// The log once per durability mode on Iggy, to show what durability costs
/// (the default mode first); the embedded log once.
fn in_every_mode(spec: LogSpec) -> Vec<LogSpec> {
    match spec {
        LogSpec::Iggy { .. } => Durability::ALL
            .into_iter()
            .map(|mode| spec.clone().with_durability(mode))
            .collect(),
        embedded => vec![embedded],
    }
}

/// The value below which `fraction` of the sorted `latencies` fall.
fn percentile(latencies: &[std::time::Duration], fraction: f64) -> std::time::Duration {
    let last = latencies.len().saturating_sub(1);
    let index = ((last as f64) * fraction.clamp(0.0, 1.0)).round() as usize;
    latencies.get(index).copied().unwrap_or_default()
}

/// What SQLite itself holds allocated in this process, in bytes: the
/// share of resident memory that is SQLite's (caches, statements) rather
/// than memory an allocator keeps after SQLite frees it.
fn sqlite_bytes() -> i64 {
    // SAFETY: `sqlite3_memory_used` only reads SQLite's counter, under its
    // own mutex, and may be called at any time from any thread.
    #[allow(unsafe_code)]
    unsafe {
        rusqlite::ffi::sqlite3_memory_used()
    }
}

/// The process's resident memory (`VmRSS`), in KiB.
fn rss_kib() -> Option<i64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()
}

/// The CPU time (user and system) this process has used so far, every
/// thread; `None` where the system does not say.
#[allow(unsafe_code, reason = "std does not report a process's CPU time")]
fn cpu_time() -> Option<std::time::Duration> {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        (libc::getrusage(libc::RUSAGE_SELF, &mut usage) == 0).then_some(usage)
    }?;
    let time = |t: libc::timeval| {
        std::time::Duration::from_secs(t.tv_sec.max(0) as u64)
            + std::time::Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    Some(time(usage.ru_utime) + time(usage.ru_stime))
}

/// The wall-clock and CPU time of a stretch of work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spent {
    /// Wall-clock time.
    pub wall: std::time::Duration,
    /// CPU time of the whole process over it (its other threads too).
    pub cpu: Option<std::time::Duration>,
}

/// Times a stretch of work, wall-clock and CPU.
struct Stopwatch {
    started: std::time::Instant,
    cpu: Option<std::time::Duration>,
}

impl Stopwatch {
    fn start() -> Self {
        Self {
            started: std::time::Instant::now(),
            cpu: cpu_time(),
        }
    }

    fn stop(&self) -> Spent {
        Spent {
            wall: self.started.elapsed(),
            cpu: cpu_time()
                .zip(self.cpu)
                .map(|(now, then)| now.saturating_sub(then)),
        }
    }
}

/// A duration in milliseconds, for reports.
fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
