//! The pipeline bench: commands produced up front, then drained by a worker
//! pool that commits each only after its reply is on the log.
//!
//! Producing runs two passes side by side, batch by batch, each pass
//! `commands` commands long in the same batches (the command requests
//! themselves are made beforehand, untimed):
//!
//! - in turn: each batch prepared ([`Producer::prepare_commands`]: build,
//!   validate, encode, headers, partition), then appended
//!   ([`Producer::publish_prepared`]), the two phases timed apart;
//! - overlapped: the next batch is prepared while the current one is
//!   appended (the two joined on one task, the append polled first), timed
//!   as a whole (a batch's turn ends when its append and the next batch's
//!   preparing are both done, so no preparing hides in other turns), and
//!   its appends apart: against the in-turn appends, what preparing beside
//!   them costs.
//!
//! With a [`PlainIggyTarget`], the plain `iggy` client publishes the same
//! number of commands alongside each pass, on a connection of its own, into
//! a topic of its own of the bench stream: records the producer prepared
//! beforehand (the same envelope bytes and typed headers), in the same
//! batches, each batch split by partition into one request per partition,
//! sent concurrently. The plain client only sends finished records, so its
//! like-for-like counterpart is our append; against the overlapped pass it
//! shows what preparing still costs end to end. Each round has four turns,
//! ours and the plain client's in each pass, their order reversed every
//! round, so all meet the same server state and the same load from
//! elsewhere. In the log's durability mode `fsync` the plain client flushes
//! each partition it sent to with fsync, as our appends do; with `server`
//! neither flushes.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agdx::wire::AgentId;
use iggy::prelude::IggyMessage;
use tokio_util::sync::CancellationToken;

use super::BenchError;
use super::log::durability_note;
use super::plain::{PlainClient, PlainIggyTarget, deleting_stream, typed_headers};
use agdx::TopologyConfig;
use agdx::log::iggy::Durability;
use agdx::log::{SharedLog, TopicInfo};
use agdx::worker::{EchoHandler, Worker, WorkerConfig};
use agdx::{CommandRequest, PreparedBatch, Producer, Topology};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineBenchOptions {
    /// Commands produced in each of the two publish passes; the worker pool
    /// then handles both passes' commands.
    pub commands: u64,
    /// Body bytes per command.
    pub size: usize,
    /// Commands per batch while producing.
    pub batch: usize,
    /// Partitions of the bench topics (and partitions handled at once).
    pub partitions: u32,
}

impl Default for PipelineBenchOptions {
    fn default() -> Self {
        Self {
            commands: 20_000,
            size: 64,
            batch: 500,
            partitions: 8,
        }
    }
}

/// Publish figures per phase, and the drain.
#[derive(Debug, Clone)]
pub struct PipelineBenchReport {
    /// The log, as [`agdx::log::Log::describe`] puts it.
    pub log: String,
    /// The options it ran with.
    pub options: PipelineBenchOptions,
    /// Time spent preparing the batches of the in-turn pass.
    pub prepare: Duration,
    /// Time spent appending the prepared batches of the in-turn pass.
    pub append: Duration,
    /// Time the plain `iggy` client took to send the same number of records
    /// alongside the in-turn pass, when it ran.
    pub plain_append: Option<Duration>,
    /// Time to publish every command of the overlapped pass, preparing the
    /// next batch while the current one is appended.
    pub publish: Duration,
    /// The part of `publish` spent in appends, with the next batch being
    /// prepared beside them: against `append`, what preparing at the same
    /// time costs the appends.
    pub overlapped_append: Duration,
    /// Time the plain `iggy` client took to send the same number of records
    /// alongside the overlapped pass, when it ran.
    pub plain_publish: Option<Duration>,
    /// Time from starting the worker pool until the commands of both passes
    /// were committed.
    pub drain: Duration,
    /// The durability both clients appended with, on Iggy.
    pub durability: Option<Durability>,
    /// The process's CPU time over each phase's turns.
    pub cpu: PhaseCpu,
}

/// The CPU time (user and system, every thread) the process used over the
/// turns of each phase, summed; `None` where the system does not report it
/// or the phase did not run. The two sides take turns, so each turn's CPU
/// is that side's, with the client's own tasks (and, overlapped, the next
/// batch's preparing) in it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseCpu {
    /// Preparing, in turn.
    pub prepare: Option<Duration>,
    /// Our appends, in turn.
    pub append: Option<Duration>,
    /// The plain client's sends beside the in-turn pass.
    pub plain_append: Option<Duration>,
    /// Publishing, overlapped, end to end.
    pub publish: Option<Duration>,
    /// The plain client's sends beside the overlapped pass.
    pub plain_publish: Option<Duration>,
}

/// Adds the CPU time used since `since` (a [`super::cpu_time`] reading)
/// to `total`, and returns the reading taken now, from which a phase that
/// starts here is measured.
fn add_cpu(total: &mut Option<Duration>, since: Option<Duration>) -> Option<Duration> {
    let now = super::cpu_time();
    if let Some(used) = now.zip(since).map(|(now, then)| now.saturating_sub(then)) {
        *total = Some(total.unwrap_or_default() + used);
    }
    now
}

/// One phase's line of the report, with its CPU a command when known.
fn line(
    f: &mut fmt::Formatter<'_>,
    name: &str,
    (rate, time, cpu): (f64, Duration, Option<f64>),
    what: &str,
) -> fmt::Result {
    write!(
        f,
        "  {name:<8} {rate:>10.0} commands/s ({:.2} s",
        time.as_secs_f64()
    )?;
    if let Some(cpu) = cpu {
        write!(f, ", {cpu:.2} µs CPU a command")?;
    }
    writeln!(f, "; {what})")
}

/// `commands` over `elapsed`, per second.
fn per_sec(commands: u64, elapsed: Duration) -> f64 {
    commands as f64 / elapsed.as_secs_f64().max(f64::EPSILON)
}

impl PipelineBenchReport {
    fn rate(&self, elapsed: Duration) -> f64 {
        per_sec(self.options.commands, elapsed)
    }
    /// A phase's rate, time and CPU a command in microseconds.
    fn phase(&self, time: Duration, cpu: Option<Duration>) -> (f64, Duration, Option<f64>) {
        let per_command = cpu.map(|cpu| cpu.as_secs_f64() * 1e6 / self.options.commands as f64);
        (self.rate(time), time, per_command)
    }
    /// Prepared commands appended per second.
    pub fn append_per_sec(&self) -> f64 {
        self.rate(self.append)
    }
    /// Commands prepared and then appended per second, one phase after the
    /// other.
    pub fn in_turn_per_sec(&self) -> f64 {
        self.rate(self.prepare + self.append)
    }
    /// Commands published per second with preparing overlapped.
    pub fn publish_per_sec(&self) -> f64 {
        self.rate(self.publish)
    }
    /// Commands handled, answered and committed per second (both passes').
    pub fn drain_per_sec(&self) -> f64 {
        per_sec(self.drained(), self.drain)
    }
    /// Commands the worker pool drained: both passes'.
    pub fn drained(&self) -> u64 {
        self.options.commands * 2
    }
    /// The plain client's records sent per second alongside the in-turn
    /// pass, when it ran.
    pub fn plain_append_per_sec(&self) -> Option<f64> {
        self.plain_append.map(|plain| self.rate(plain))
    }
    /// The plain client's records sent per second alongside the overlapped
    /// pass, when it ran.
    pub fn plain_publish_per_sec(&self) -> Option<f64> {
        self.plain_publish.map(|plain| self.rate(plain))
    }
    /// Our append rate over the plain client's: like for like, both send
    /// finished records.
    pub fn append_ratio(&self) -> Option<f64> {
        self.plain_append_per_sec()
            .map(|plain| self.append_per_sec() / plain)
    }
    /// Our prepare-then-append rate over the plain client's (the same run):
    /// what publishing costs when nothing overlaps.
    pub fn in_turn_ratio(&self) -> Option<f64> {
        self.plain_append_per_sec()
            .map(|plain| self.in_turn_per_sec() / plain)
    }
    /// Our overlapped publish rate over the plain client's: end to end.
    pub fn publish_ratio(&self) -> Option<f64> {
        self.plain_publish_per_sec()
            .map(|plain| self.publish_per_sec() / plain)
    }
}

impl fmt::Display for PipelineBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "pipeline bench on {}{}: {} commands of {} bytes per publish pass, in batches of {}, {} partitions, echo worker in-process",
            self.log,
            durability_note(self.durability),
            o.commands,
            o.size,
            o.batch,
            o.partitions
        )?;
        writeln!(f, " in turn: each batch prepared, then appended")?;
        let cpu = self.cpu;
        line(
            f,
            "prepare",
            self.phase(self.prepare, cpu.prepare),
            "build, validate, encode, headers, partition; ours alone",
        )?;
        line(
            f,
            "append",
            self.phase(self.append, cpu.append),
            "the prepared batches",
        )?;
        if let Some(plain) = self.plain_append {
            line(
                f,
                "plain",
                self.phase(plain, cpu.plain_append),
                "the plain iggy client sending the same records",
            )?;
        }
        if let (Some(append), Some(in_turn)) = (self.append_ratio(), self.in_turn_ratio()) {
            writeln!(f, "  append ratio ours/plain {append:.2} (like for like)")?;
            writeln!(
                f,
                "  prepare+append ratio ours/plain {in_turn:.2} (nothing overlapped)"
            )?;
        }
        writeln!(
            f,
            " overlapped: the next batch prepared while one is appended"
        )?;
        line(
            f,
            "publish",
            self.phase(self.publish, cpu.publish),
            "end to end",
        )?;
        line(
            f,
            "append",
            self.phase(self.overlapped_append, None),
            "its appends alone, each beside the next batch's preparing",
        )?;
        if let (Some(plain), Some(ratio)) = (self.plain_publish, self.publish_ratio()) {
            line(
                f,
                "plain",
                self.phase(plain, cpu.plain_publish),
                "the plain iggy client sending the same records",
            )?;
            writeln!(f, "  publish ratio ours/plain {ratio:.2} (end to end)")?;
        }
        write!(
            f,
            "  drain    {:>10.0} commands/s ({:.2} s; {} commands of both passes: handle, reply, then commit)",
            self.drain_per_sec(),
            self.drain.as_secs_f64(),
            self.drained()
        )
    }
}

/// Runs the pipeline bench in a new stream of `log`; with `plain`, the plain
/// `iggy` client publishes the same number of commands on that server too.
pub async fn run_pipeline_bench(
    log: SharedLog,
    plain: Option<PlainIggyTarget>,
    options: PipelineBenchOptions,
) -> Result<PipelineBenchReport, BenchError> {
    if options.commands == 0 || options.size == 0 || options.batch == 0 {
        return Err(BenchError::Options(
            "--commands, --size and --batch must be at least 1".into(),
        ));
    }
    let stream = super::fresh_stream("pipeline");
    let topology = TopologyConfig::new(stream)
        .with_partitions(options.partitions)
        .ensure(log.as_ref())
        .await?;
    let stream_id = topology.commands.stream_id;
    deleting_stream(
        plain.clone().as_ref(),
        stream_id,
        pipeline_in(log, topology, plain, options),
    )
    .await
}

/// The bench in `topology`'s stream.
async fn pipeline_in(
    log: SharedLog,
    topology: Topology,
    plain: Option<PlainIggyTarget>,
    options: PipelineBenchOptions,
) -> Result<PipelineBenchReport, BenchError> {
    let producer = Producer::new(log.clone(), topology.clone(), agent("bench-producer"));
    let body = vec![b'x'; options.size];
    let batch = options.batch as u64;
    let sizes: Vec<u64> = (0..options.commands.div_ceil(batch))
        .map(|i| batch.min(options.commands - i * batch))
        .collect();
    let requests = || -> Vec<Vec<CommandRequest>> {
        sizes
            .iter()
            .map(|&n| {
                (0..n)
                    .map(|_| CommandRequest::new("echo", body.clone()).to(agent("bench-echo")))
                    .collect()
            })
            .collect()
    };

    let durability = plain.as_ref().map(PlainIggyTarget::durability);
    let mut plain = match plain {
        Some(target) => {
            let topic = log
                .ensure_topic(&topology.commands.stream, PLAIN_TOPIC, options.partitions)
                .await?;
            let mut passes = [Vec::new(), Vec::new()];
            for batches in &mut passes {
                for requests in requests() {
                    batches.push(plain_batch(&producer.prepare_commands(requests).await?)?);
                }
            }
            let [in_turn, overlapped] = passes;
            let client = PlainClient::connect(&target).await?;
            Some(PlainSide {
                client,
                topic,
                in_turn,
                overlapped,
            })
        }
        None => None,
    };

    // The passes run side by side, batch by batch, so both meet the same
    // log state (a log that grows pays for it on its first records); the
    // order of the four turns reverses every round.
    let mut ours = Ours {
        producer,
        in_turn: requests().into_iter(),
        overlapped: requests().into_iter(),
        ready: None,
        prepare: Duration::ZERO,
        append: Duration::ZERO,
        publish: Duration::ZERO,
        overlapped_append: Duration::ZERO,
    };
    let (mut plain_append, mut plain_publish) = (Duration::ZERO, Duration::ZERO);
    let mut cpu = PhaseCpu::default();
    for round in 0..sizes.len() {
        let mut turns = [
            Turn::Ours(Pass::InTurn),
            Turn::Plain(Pass::InTurn),
            Turn::Ours(Pass::Overlapped),
            Turn::Plain(Pass::Overlapped),
        ];
        if round % 2 == 1 {
            turns.reverse();
        }
        for turn in turns {
            match turn {
                Turn::Ours(Pass::InTurn) => ours.in_turn(&mut cpu).await?,
                Turn::Ours(Pass::Overlapped) => {
                    let since = super::cpu_time();
                    ours.overlapped().await?;
                    add_cpu(&mut cpu.publish, since);
                }
                Turn::Plain(pass @ Pass::InTurn) => {
                    let since = super::cpu_time();
                    plain_append += plain_turn(&mut plain, pass, round).await?;
                    add_cpu(&mut cpu.plain_append, since);
                }
                Turn::Plain(pass @ Pass::Overlapped) => {
                    let since = super::cpu_time();
                    plain_publish += plain_turn(&mut plain, pass, round).await?;
                    add_cpu(&mut cpu.plain_publish, since);
                }
            }
        }
    }
    let (plain_append, plain_publish) = match plain {
        Some(plain) => {
            plain.client.close().await;
            (Some(plain_append), Some(plain_publish))
        }
        None => {
            (cpu.plain_append, cpu.plain_publish) = (None, None);
            (None, None)
        }
    };
    let Ours {
        prepare,
        append,
        publish,
        overlapped_append,
        ..
    } = ours;

    let drained = options.commands * 2;
    let worker_producer = Producer::new(log.clone(), topology, agent("bench-echo"));
    let config = WorkerConfig {
        concurrency: options.partitions as usize,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(worker_producer, config).fallback(EchoHandler);
    let stats = worker.stats();
    let shutdown = CancellationToken::new();
    let started = Instant::now();
    let worker_task = tokio::spawn(worker.run(shutdown.clone()));
    while stats.committed_records.load(Ordering::Relaxed) < drained {
        if worker_task.is_finished() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let drain = started.elapsed();
    shutdown.cancel();
    worker_task
        .await
        .map_err(|e| BenchError::Options(e.to_string()))??;
    Ok(PipelineBenchReport {
        log: log.describe(),
        options,
        prepare,
        append,
        plain_append,
        publish,
        overlapped_append,
        plain_publish,
        drain,
        durability,
        cpu,
    })
}

/// The topic of the bench stream the plain client publishes into.
const PLAIN_TOPIC: &str = "bench.plain";

/// One batch as the plain client sends it: `iggy` messages with typed
/// headers, grouped by partition as [`Producer::publish_prepared`] groups
/// them.
type PlainBatch = BTreeMap<u32, Vec<IggyMessage>>;

/// The records of `prepared` as the plain client sends them. The plain
/// topic has as many partitions as the commands topic, so each record keeps
/// its partition.
fn plain_batch(prepared: &PreparedBatch) -> Result<PlainBatch, BenchError> {
    let invalid = |e: iggy::prelude::IggyError| {
        BenchError::Options(format!("the plain iggy client rejects a bench record: {e}"))
    };
    prepared
        .records()
        .map(|(_, partition, records)| {
            let messages = records
                .iter()
                .map(|record| {
                    IggyMessage::builder()
                        .payload(record.payload.clone())
                        .user_headers(typed_headers(&record.headers).map_err(invalid)?)
                        .build()
                        .map_err(invalid)
                })
                .collect::<Result<Vec<_>, _>>()?;
            Ok((partition, messages))
        })
        .collect()
}

/// Our side of the two publish passes: the requests of each, batch by
/// batch, and the time spent.
struct Ours {
    producer: Producer,
    in_turn: std::vec::IntoIter<Vec<CommandRequest>>,
    overlapped: std::vec::IntoIter<Vec<CommandRequest>>,
    /// The overlapped pass's next batch, prepared during the last turn.
    ready: Option<PreparedBatch>,
    prepare: Duration,
    append: Duration,
    publish: Duration,
    overlapped_append: Duration,
}

impl Ours {
    /// The in-turn pass's next batch: prepared, then appended, the two
    /// phases timed apart (wall-clock and CPU).
    async fn in_turn(&mut self, cpu: &mut PhaseCpu) -> Result<(), BenchError> {
        let Some(requests) = self.in_turn.next() else {
            return Ok(());
        };
        let (started, since) = (Instant::now(), super::cpu_time());
        let prepared = self.producer.prepare_commands(requests).await?;
        let prepared_at = Instant::now();
        let prepared_cpu = add_cpu(&mut cpu.prepare, since);
        self.producer.publish_prepared(prepared).await?;
        add_cpu(&mut cpu.append, prepared_cpu);
        self.prepare += prepared_at - started;
        self.append += prepared_at.elapsed();
        Ok(())
    }

    /// The overlapped pass's next batch: appended while the batch after it
    /// is prepared, both on this task (the append is polled first, so its
    /// requests are on their way while the next batch is prepared). The
    /// turn lasts until both are done, so no preparing runs during the
    /// plain client's turns.
    async fn overlapped(&mut self) -> Result<(), BenchError> {
        let started = Instant::now();
        let current = match self.ready.take() {
            Some(batch) => batch,
            // The first batch has nothing to overlap with.
            None => match self.overlapped.next() {
                Some(requests) => self.producer.prepare_commands(requests).await?,
                None => return Ok(()),
            },
        };
        let next = self.overlapped.next();
        let producer = &self.producer;
        let append = async {
            let appending = Instant::now();
            producer.publish_prepared(current).await?;
            Ok::<_, BenchError>(appending.elapsed())
        };
        let prepare = async {
            match next {
                Some(requests) => producer.prepare_commands(requests).await.map(Some),
                None => Ok(None),
            }
        };
        let (appended, prepared) = tokio::join!(append, prepare);
        self.overlapped_append += appended?;
        self.ready = prepared?;
        self.publish += started.elapsed();
        Ok(())
    }
}

/// A publish pass: prepare then append, or the two overlapped.
#[derive(Debug, Clone, Copy)]
enum Pass {
    InTurn,
    Overlapped,
}

/// Whose turn it is, in which pass.
#[derive(Debug, Clone, Copy)]
enum Turn {
    Ours(Pass),
    Plain(Pass),
}

/// The plain client with its records, pass by pass and batch by batch.
struct PlainSide {
    client: PlainClient,
    topic: TopicInfo,
    in_turn: Vec<PlainBatch>,
    overlapped: Vec<PlainBatch>,
}

/// The plain client's turn: sends batch `round` of `pass`, one request per
/// partition, all in flight at once as the producer sends them, and returns
/// the time it took (zero without a plain client).
async fn plain_turn(
    plain: &mut Option<PlainSide>,
    pass: Pass,
    round: usize,
) -> Result<Duration, BenchError> {
    let Some(plain) = plain else {
        return Ok(Duration::ZERO);
    };
    let batches = match pass {
        Pass::InTurn => &mut plain.in_turn,
        Pass::Overlapped => &mut plain.overlapped,
    };
    let Some(batch) = batches.get_mut(round) else {
        return Ok(Duration::ZERO);
    };
    let (client, topic) = (&plain.client, &plain.topic);
    let started = Instant::now();
    let sends = batch
        .iter_mut()
        .map(|(&partition, messages)| client.send(topic, partition, messages));
    futures_util::future::try_join_all(sends).await?;
    Ok(started.elapsed())
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("bench agent names are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_a_ratio_per_phase_when_the_plain_client_ran() {
        let mut report = PipelineBenchReport {
            log: "iggy://127.0.0.1:8090".into(),
            options: PipelineBenchOptions {
                commands: 1000,
                ..PipelineBenchOptions::default()
            },
            prepare: Duration::from_millis(500),
            append: Duration::from_millis(1500),
            plain_append: Some(Duration::from_secs(1)),
            publish: Duration::from_millis(1250),
            overlapped_append: Duration::from_millis(1600),
            plain_publish: Some(Duration::from_secs(1)),
            drain: Duration::from_secs(4),
            durability: Some(Durability::Server),
            cpu: PhaseCpu {
                prepare: Some(Duration::from_millis(250)),
                plain_append: Some(Duration::from_millis(500)),
                ..PhaseCpu::default()
            },
        };
        assert_eq!(report.append_ratio(), Some(1000.0 / 1500.0));
        assert_eq!(report.in_turn_ratio(), Some(0.5));
        assert_eq!(report.publish_ratio(), Some(0.8));
        assert_eq!(report.drain_per_sec(), 500.0);
        let text = report.to_string();
        for line in [
            "append ratio ours/plain 0.67",
            "prepare+append ratio ours/plain 0.50",
            "publish ratio ours/plain 0.80",
            "prepare        2000 commands/s (0.50 s, 250.00 µs CPU a command; build",
            "append          667 commands/s (1.50 s; the prepared batches)",
            "plain          1000 commands/s (1.00 s, 500.00 µs CPU a command; the plain",
            "append          625 commands/s (1.60 s; its appends alone",
            "2000 commands of both passes",
            "durability=server",
        ] {
            assert!(text.contains(line), "{line} in {text}");
        }
        report.plain_append = None;
        report.plain_publish = None;
        assert_eq!(report.append_ratio(), None);
        assert_eq!(report.publish_ratio(), None);
        let text = report.to_string();
        assert!(!text.contains("plain") && !text.contains("ratio"), "{text}");
    }
}
