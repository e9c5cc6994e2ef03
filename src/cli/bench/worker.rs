//! The worker bench: what a pool does all day. `commands` commands of
//! `size` bytes, each in a conversation of its own (so spread over the
//! partitions), are put on the log first; then a pool of 1, 2 and 4
//! members with an echo handler answers them all: commands/s from the
//! pool's start to its last commit. Each pool size works in a stream of
//! its own.
//!
//! The plain baseline does the same I/O with nothing of the runtime in it,
//! per partition: read a batch of records, append one reply per record to
//! a reply topic, store the offset, with the pool's batch size and
//! durability. On the embedded log it is plain SQLite
//! ([`super::plain_local::PlainSqlite`]), the reply rows and the offset in
//! one transaction per batch, one writer; on Iggy the plain `iggy` client on a
//! connection of its own, reading the same commands (as a consumer of its
//! own) and storing its consumer offset; on Kafka plain `rdkafka`
//! ([`super::plain_kafka`]). The ratio is ours/plain.
//!
//! The resident memory of the process is read once 10,000 commands are
//! committed and again at the end of the one-member run: with
//! `--commands 1000000`, whether a worker grows with traffic.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agdx::log::iggy::Durability;
use agdx::log::{SharedLog, TopicInfo};
use agdx::wire::AgentId;
use agdx::worker::{EchoHandler, Worker, WorkerConfig, WorkerStats};
use agdx::{CommandRequest, Producer, Topology, TopologyConfig, new_conversation_id};
use tokio_util::sync::CancellationToken;

use super::plain::{PlainClient, PlainIggyTarget, deleting_stream};
use super::plain_kafka::{brokers_of, plain_kafka};
use super::plain_local::{COMMANDS, PlainSqlite, REPLIES};
use super::{BenchError, Spent, Stopwatch, rss_kib, sqlite_bytes};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerBenchOptions {
    /// Commands on the log before each pool starts.
    pub commands: u64,
    /// Body bytes per command.
    pub size: usize,
    /// Partitions of the bench topics.
    pub partitions: u32,
    /// The pool sizes, each a run of its own.
    pub members: Vec<usize>,
}

impl Default for WorkerBenchOptions {
    fn default() -> Self {
        Self {
            commands: 100_000,
            size: 1024,
            partitions: 8,
            members: vec![1, 2, 4],
        }
    }
}

/// The plain baseline's backend.
#[derive(Debug, Clone)]
pub enum PlainWorker {
    /// Plain SQLite in a temporary directory inside this one (the log's,
    /// so that both meet the same disk).
    Sqlite(PathBuf),
    /// The plain `iggy` client on the bench server.
    Iggy(PlainIggyTarget),
    /// Plain `rdkafka` on the cluster of this `kafka://` string.
    Kafka(String),
}

/// Commands the pool has committed when the first memory figure is read.
const EARLY_RSS_AT: u64 = 10_000;

/// How long a run may take before the bench gives up on it.
const PATIENCE: Duration = Duration::from_secs(1800);

/// One pool size's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerRun {
    /// Pool members.
    pub members: usize,
    /// From the pool's start to its last commit.
    pub ours: Spent,
    /// Offsets the pool committed (one a flushed run of records).
    pub commits: u64,
    /// The plain loop's time for the same commands.
    pub plain: Option<Spent>,
}

/// What the bench found.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerBenchReport {
    /// The log measured.
    pub log: String,
    /// What ran.
    pub options: WorkerBenchOptions,
    /// The plain baseline's name, when there was one.
    pub plain: Option<String>,
    /// Each pool size.
    pub runs: Vec<WorkerRun>,
    /// The memory after [`EARLY_RSS_AT`] commands and at the end of the
    /// first run.
    pub memory: Option<(Memory, Memory)>,
}

/// A reading of the process's memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// Resident memory, KiB.
    pub rss_kib: i64,
    /// What SQLite holds allocated, bytes.
    pub sqlite_bytes: i64,
}

impl Memory {
    fn now() -> Option<Self> {
        Some(Self {
            rss_kib: rss_kib()?,
            sqlite_bytes: sqlite_bytes(),
        })
    }
}

fn per_sec(commands: u64, elapsed: Duration) -> f64 {
    commands as f64 / elapsed.as_secs_f64().max(1e-9)
}

/// Microseconds of CPU per command, for reports.
fn cpu_per_command(commands: u64, spent: &Spent) -> String {
    spent.cpu.map_or("n/a".to_owned(), |cpu| {
        format!("{:.1}", cpu.as_secs_f64() * 1e6 / commands.max(1) as f64)
    })
}

impl fmt::Display for WorkerBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "worker on {}: {} commands of {} bytes over {} partitions, echo handler",
            self.log, o.commands, o.size, o.partitions
        )?;
        for run in &self.runs {
            let ours = per_sec(o.commands, run.ours.wall);
            write!(
                f,
                "  {} member{}: {ours:>9.0} commands/s ({:.2} s, {} µs CPU a command, {:.0} a commit)",
                run.members,
                if run.members == 1 { " " } else { "s" },
                run.ours.wall.as_secs_f64(),
                cpu_per_command(o.commands, &run.ours),
                o.commands as f64 / run.commits.max(1) as f64
            )?;
            match (run.plain, &self.plain) {
                (Some(plain_spent), Some(name)) => {
                    let plain = per_sec(o.commands, plain_spent.wall);
                    writeln!(
                        f,
                        "; {name} {plain:.0} commands/s ({} µs CPU a command); ours/plain {:.2}",
                        cpu_per_command(o.commands, &plain_spent),
                        ours / plain
                    )?;
                }
                _ => writeln!(f, "; no plain baseline on this log")?,
            }
        }
        if let Some((early, end)) = self.memory {
            writeln!(
                f,
                "  resident memory: {:.1} MiB after {EARLY_RSS_AT} commands, {:.1} MiB after {} ({:.2}x); SQLite's own allocations {:.1} MiB, then {:.1} MiB",
                early.rss_kib as f64 / 1024.0,
                end.rss_kib as f64 / 1024.0,
                o.commands,
                end.rss_kib as f64 / early.rss_kib.max(1) as f64,
                early.sqlite_bytes as f64 / (1 << 20) as f64,
                end.sqlite_bytes as f64 / (1 << 20) as f64,
            )?;
        }
        Ok(())
    }
}

/// Runs the bench on `log`, with `plain` as the baseline when given.
pub async fn run_worker_bench(
    log: SharedLog,
    plain: Option<PlainWorker>,
    options: WorkerBenchOptions,
) -> Result<WorkerBenchReport, BenchError> {
    if options.commands == 0 || options.size == 0 || options.members.contains(&0) {
        return Err(BenchError::Options(
            "--commands, --size and each of --members must be at least 1".into(),
        ));
    }
    let mut runs = Vec::new();
    let mut memory = None;
    // The Iggy server each pool's stream is deleted from when it is done.
    let iggy = match &plain {
        Some(PlainWorker::Iggy(target)) => Some(target),
        _ => None,
    };
    for (n, &members) in options.members.iter().enumerate() {
        let topology = TopologyConfig::new(super::fresh_stream("worker"))
            .with_partitions(options.partitions)
            .ensure(log.as_ref())
            .await?;
        let (ours, plain_time) = deleting_stream(iggy, topology.commands.stream_id, async {
            preload(&log, &topology, &options).await?;
            let plain_run = async || -> Result<Option<Spent>, BenchError> {
                match &plain {
                    Some(PlainWorker::Sqlite(beside)) => {
                        let payloads = command_payloads(&log, &topology.commands).await?;
                        let dir = tempfile::tempdir_in(beside)
                            .map_err(|e| BenchError::Options(e.to_string()))?;
                        Ok(Some(
                            plain_sqlite(dir.path(), payloads, options.partitions).await?,
                        ))
                    }
                    Some(PlainWorker::Iggy(target)) => Ok(Some(
                        plain_iggy(&log, target, &topology, options.commands).await?,
                    )),
                    Some(PlainWorker::Kafka(url)) => {
                        let commands = &topology.commands;
                        let replies = plain_replies(&log, &topology).await?;
                        Ok(Some(
                            plain_kafka(
                                brokers_of(url),
                                &format!("{}.{}", commands.stream, commands.topic),
                                &format!("{}.{}", replies.stream, replies.topic),
                                commands.partitions.get(),
                                options.commands,
                                batch(),
                            )
                            .await?,
                        ))
                    }
                    None => Ok(None),
                }
            };
            // Who goes first takes turns, so neither always meets a colder log.
            Ok(if n % 2 == 0 {
                let ours = pool(&log, &topology, members, options.commands, n == 0).await?;
                (ours, plain_run().await?)
            } else {
                let plain_time = plain_run().await?;
                (
                    pool(&log, &topology, members, options.commands, false).await?,
                    plain_time,
                )
            })
        })
        .await?;
        if let Some(readings) = ours.memory {
            memory = Some(readings);
        }
        runs.push(WorkerRun {
            members,
            ours: ours.spent,
            commits: ours.commits,
            plain: plain_time,
        });
    }
    Ok(WorkerBenchReport {
        log: log.describe(),
        plain: plain.map(|p| match p {
            PlainWorker::Sqlite(_) => "plain SQLite".to_owned(),
            PlainWorker::Kafka(_) => "plain rdkafka".to_owned(),
            PlainWorker::Iggy(target) => match target.durability() {
                Durability::Fsync => "plain iggy client (flush + fsync)".to_owned(),
                Durability::Server => "plain iggy client".to_owned(),
            },
        }),
        options,
        runs,
        memory,
    })
}

/// Puts the bench's commands on the log, each in a conversation of its own.
async fn preload(
    log: &SharedLog,
    topology: &Topology,
    options: &WorkerBenchOptions,
) -> Result<(), BenchError> {
    let producer = Producer::new(log.clone(), topology.clone(), agent("bench-asker"));
    let body = vec![b'x'; options.size];
    let mut left = options.commands;
    while left > 0 {
        let n = left.min(500);
        let requests = (0..n)
            .map(|_| {
                CommandRequest::new("echo", body.clone())
                    .to(agent("bench-echo"))
                    .conversation(new_conversation_id())
            })
            .collect();
        let batch = producer.prepare_commands(requests).await?;
        producer.publish_prepared(batch).await?;
        left -= n;
    }
    Ok(())
}

/// What one pool run took.
struct PoolRun {
    spent: Spent,
    /// Offsets committed.
    commits: u64,
    /// With `measure_rss`, the memory after [`EARLY_RSS_AT`] commands and
    /// at the end.
    memory: Option<(Memory, Memory)>,
}

/// Runs a pool of `members` echo workers until it has committed
/// `commands` records; the time that took and, with `measure_rss`, the
/// resident memory after [`EARLY_RSS_AT`] commands and at the end.
async fn pool(
    log: &SharedLog,
    topology: &Topology,
    members: usize,
    commands: u64,
    measure_rss: bool,
) -> Result<PoolRun, BenchError> {
    let shutdown = CancellationToken::new();
    let mut stats: Vec<Arc<WorkerStats>> = Vec::new();
    let mut tasks = Vec::new();
    let started = Instant::now();
    let stopwatch = Stopwatch::start();
    for _ in 0..members {
        let producer = Producer::new(log.clone(), topology.clone(), agent("bench-echo"));
        let config = WorkerConfig {
            concurrency: topology.commands.partitions.get() as usize,
            ..WorkerConfig::default()
        };
        let worker = Worker::new(producer, config).fallback(EchoHandler);
        stats.push(worker.stats());
        tasks.push(tokio::spawn(worker.run(shutdown.clone())));
    }
    let committed = || -> u64 {
        stats
            .iter()
            .map(|s| s.committed_records.load(Ordering::Relaxed))
            .sum()
    };
    let mut early = None;
    while committed() < commands {
        if tasks.iter().any(|t| t.is_finished()) {
            break;
        }
        if started.elapsed() > PATIENCE {
            shutdown.cancel();
            return Err(BenchError::Options(format!(
                "the pool committed {} of {commands} commands in {PATIENCE:?}",
                committed()
            )));
        }
        if measure_rss && early.is_none() && committed() >= EARLY_RSS_AT.min(commands) {
            early = Memory::now();
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let spent = stopwatch.stop();
    let end = Memory::now();
    shutdown.cancel();
    for task in tasks {
        task.await
            .map_err(|e| BenchError::Options(e.to_string()))??;
    }
    Ok(PoolRun {
        spent,
        commits: stats
            .iter()
            .map(|s| s.commits.load(Ordering::Relaxed))
            .sum(),
        memory: early.zip(end),
    })
}

/// The payloads of every command on `commands`, by partition.
async fn command_payloads(
    log: &SharedLog,
    commands: &TopicInfo,
) -> Result<Vec<Vec<Vec<u8>>>, BenchError> {
    let mut all = Vec::new();
    for partition in 0..commands.partitions.get() {
        let mut payloads = Vec::new();
        let mut next = 0;
        loop {
            let records = log
                .poll(commands, partition, next, 1000, Duration::ZERO)
                .await?;
            let Some(last) = records.last() else {
                break;
            };
            next = last.position.offset + 1;
            payloads.extend(records.iter().map(|r| r.payload.to_vec()));
        }
        all.push(payloads);
    }
    Ok(all)
}

/// Records per read of the plain loops: the pool's `poll_batch`.
fn batch() -> u32 {
    WorkerConfig::default().poll_batch
}

/// The plain SQLite loop over `payloads` (per partition) in a database in
/// `dir`: the time from its first read to its last commit.
async fn plain_sqlite(
    dir: &Path,
    payloads: Vec<Vec<Vec<u8>>>,
    partitions: u32,
) -> Result<Spent, BenchError> {
    let path = dir.join("plain.sqlite3");
    tokio::task::spawn_blocking(move || plain_sqlite_blocking(&path, payloads, partitions))
        .await
        .map_err(|e| BenchError::Options(e.to_string()))?
        .map_err(|e| BenchError::Options(format!("plain SQLite: {e}")))
}

fn plain_sqlite_blocking(
    path: &Path,
    payloads: Vec<Vec<Vec<u8>>>,
    partitions: u32,
) -> rusqlite::Result<Spent> {
    let mut db = PlainSqlite::create(path)?;
    for (part, list) in payloads.iter().enumerate() {
        db.append((COMMANDS, part as i64), 0, list, None)?;
    }
    let stopwatch = Stopwatch::start();
    let mut next = vec![0i64; partitions as usize];
    let mut written = vec![0i64; partitions as usize];
    let mut busy = true;
    while busy {
        busy = false;
        for part in 0..partitions as usize {
            let rows = db.read((COMMANDS, part as i64), next[part], batch())?;
            let Some(&(last, _, _)) = rows.last() else {
                continue;
            };
            busy = true;
            let replies: Vec<&[u8]> = rows.iter().map(|(_, _, payload)| &payload[..]).collect();
            db.append(
                (REPLIES, part as i64),
                written[part],
                &replies,
                Some((COMMANDS, part as i64, last)),
            )?;
            written[part] += replies.len() as i64;
            next[part] = last + 1;
        }
    }
    Ok(stopwatch.stop())
}

/// The topic the plain loops reply to, beside the commands.
async fn plain_replies(log: &SharedLog, topology: &Topology) -> Result<TopicInfo, BenchError> {
    Ok(log
        .ensure_topic(
            &topology.commands.stream,
            "bench.plain.replies",
            topology.commands.partitions.get(),
        )
        .await?)
}

/// The plain `iggy` loop over the commands of `topology`: one task per
/// partition on one connection, replies to a topic of their own.
async fn plain_iggy(
    log: &SharedLog,
    target: &PlainIggyTarget,
    topology: &Topology,
    commands: u64,
) -> Result<Spent, BenchError> {
    let replies = plain_replies(log, topology).await?;
    let client = Arc::new(PlainClient::connect(target).await?);
    let stopwatch = Stopwatch::start();
    let loops = (0..topology.commands.partitions.get()).map(|partition| {
        let (client, commands_topic, replies) =
            (client.clone(), topology.commands.clone(), replies.clone());
        async move {
            let mut next = 0;
            let mut handled = 0u64;
            loop {
                let mut messages = client
                    .poll_messages(&commands_topic, partition, next, batch())
                    .await?;
                let Some(last) = messages.last().map(|m| m.header.offset) else {
                    return Ok::<u64, BenchError>(handled);
                };
                handled += messages.len() as u64;
                client.send(&replies, partition, &mut messages).await?;
                client
                    .store_offset(&commands_topic, partition, last)
                    .await?;
                next = last + 1;
            }
        }
    });
    let handled: u64 = futures_util::future::try_join_all(loops)
        .await?
        .into_iter()
        .sum();
    let spent = stopwatch.stop();
    client.close().await;
    if handled != commands {
        return Err(BenchError::Options(format!(
            "the plain loop read {handled} commands of {commands}"
        )));
    }
    Ok(spent)
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).unwrap_or_else(|_| unreachable!("bench agent names are valid"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_commands_per_second_and_the_ratio() {
        let report = WorkerBenchReport {
            log: "embedded:/tmp/x".into(),
            options: WorkerBenchOptions {
                commands: 1000,
                ..WorkerBenchOptions::default()
            },
            plain: Some("plain SQLite".into()),
            runs: vec![WorkerRun {
                members: 1,
                ours: Spent {
                    wall: Duration::from_secs(2),
                    cpu: Some(Duration::from_secs(3)),
                },
                commits: 4,
                plain: Some(Spent {
                    wall: Duration::from_secs(1),
                    cpu: None,
                }),
            }],
            memory: Some((
                Memory {
                    rss_kib: 10 * 1024,
                    sqlite_bytes: 3 << 20,
                },
                Memory {
                    rss_kib: 11 * 1024,
                    sqlite_bytes: 2 << 20,
                },
            )),
        };
        let text = report.to_string();
        assert!(
            text.contains(
                "1 member :       500 commands/s (2.00 s, 3000.0 µs CPU a command, 250 a commit)"
            ),
            "{text}"
        );
        assert!(
            text.contains("plain SQLite 1000 commands/s (n/a µs CPU a command); ours/plain 0.50"),
            "{text}"
        );
        assert!(
            text.contains("10.0 MiB after 10000 commands, 11.0 MiB after 1000 (1.10x); SQLite's own allocations 3.0 MiB, then 2.0 MiB"),
            "{text}"
        );
    }
}
