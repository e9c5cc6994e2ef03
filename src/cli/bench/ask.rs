//! The ask bench: round trips through the log to an in-process echo worker,
//! and on Iggy the plain `iggy` client's ping-pong beside them.
//!
//! `concurrency` askers share `requests` asks per round; each ask starts a
//! new conversation (so the work spreads over the partitions), publishes a
//! command, and waits for the echo worker's response, which the worker
//! publishes and commits in one call (one write on the embedded log).
//!
//! With a [`PlainIggyTarget`], each round also runs the plain client's
//! ping-pong: `concurrency` pairs, each a pinger that sends one message and
//! busy-polls for the answer, and a ponger that busy-polls for the message
//! and sends the answer back. The pairs spread over as many partitions as
//! the asks do, each pair going round its own share of them, one message
//! after another, so both meet the same partitions (which a server with
//! several shards spreads over them). The pinger sends the very bytes
//! (payload and headers) of the command record an ask wrote, the ponger
//! those of its reply record; with `durability=fsync` each send is flushed
//! with fsync, as each of our appends is. The two take turns round by round
//! (who goes first alternating); the report gives the median over the
//! rounds of each round's percentiles, and the ratios ours/plain.
//!
//! With `breakdown`, asks one at a time while noting each append and poll
//! on the log (see [`super::timing`]) and prints the median time of
//! each leg of an ask. Then it measures the CPU the process uses while the
//! worker and the requester sit idle, and while the requester waits for a
//! reply that does not come (the worker stopped).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agdx::wire::AgentId;
use iggy::prelude::IggyMessage;
use tokio_util::sync::CancellationToken;

use super::log::durability_note;
use super::plain::{PlainClient, PlainIggyTarget, typed_headers};
use super::timing::{Note, TimedLog};
use super::{BenchError, ms};
use agdx::Requester;
use agdx::TopologyConfig;
use agdx::log::iggy::Durability;
use agdx::log::{LogError, OutgoingRecord, SharedLog, TopicInfo};
use agdx::worker::{EchoHandler, Worker, WorkerConfig};
use agdx::{CommandRequest, Producer};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskBenchOptions {
    /// Asks in flight at once.
    pub concurrency: usize,
    /// Asks per round (and ping-pongs per round on Iggy).
    pub requests: u64,
    /// Body bytes per command.
    pub size: usize,
    /// Partitions of the bench topics.
    pub partitions: u32,
    /// Rounds; the report gives the median of the rounds' figures.
    pub rounds: usize,
    /// Whether to time each leg of an ask, one at a time.
    pub breakdown: bool,
    /// How long each idle CPU measurement lasts; zero skips them.
    pub idle: Duration,
}

impl Default for AskBenchOptions {
    fn default() -> Self {
        Self {
            concurrency: 1,
            requests: 300,
            size: 64,
            partitions: 8,
            rounds: 5,
            breakdown: false,
            idle: Duration::from_secs(2),
        }
    }
}

/// The round trips of one side in one round.
#[derive(Debug, Clone, Default)]
pub struct Round {
    /// Wall-clock time from the first round trip to the last answer.
    pub elapsed: Duration,
    /// Round-trip latencies, sorted.
    latencies: Vec<Duration>,
}

impl Round {
    fn new(elapsed: Duration, mut latencies: Vec<Duration>) -> Self {
        latencies.sort_unstable();
        Self { elapsed, latencies }
    }

    /// The latency below which `fraction` of the round trips fell.
    pub fn percentile(&self, fraction: f64) -> Duration {
        super::percentile(&self.latencies, fraction)
    }

    /// Completed round trips per second.
    pub fn per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

/// The median time of each leg of an ask, measured one ask at a time.
#[derive(Debug, Clone, Default)]
pub struct Breakdown {
    /// Asks measured.
    pub asks: usize,
    /// The legs in order, with their median time.
    pub legs: Vec<(&'static str, Duration)>,
}

/// Process CPU time over a quiet interval, as a share of one core.
#[derive(Debug, Clone, Copy, Default)]
pub struct IdleCpu {
    /// The echo worker running and the requester idle, nothing asked.
    pub idle: f64,
    /// The requester waiting for a reply that does not come (no worker).
    pub waiting: f64,
}

/// Round-trip figures.
#[derive(Debug, Clone)]
pub struct AskBenchReport {
    /// The log, as [`agdx::log::Log::describe`] puts it.
    pub log: String,
    /// The options it ran with.
    pub options: AskBenchOptions,
    /// The durability both sides appended with, on Iggy with the plain client.
    pub durability: Option<Durability>,
    /// Our asks, per round.
    pub ours: Vec<Round>,
    /// The plain client's ping-pongs, per round, when it ran.
    pub plain: Vec<Round>,
    /// Where an ask's time goes, when asked for.
    pub breakdown: Option<Breakdown>,
    /// Idle CPU, unless skipped.
    pub idle: Option<IdleCpu>,
}

impl AskBenchReport {
    /// The median over `rounds` of each round's `fraction` percentile.
    fn median(rounds: &[Round], fraction: f64) -> Duration {
        median(rounds.iter().map(|r| r.percentile(fraction)).collect())
    }

    /// Our median p50 and p99 over the rounds.
    pub fn ours_p50_p99(&self) -> (Duration, Duration) {
        (
            Self::median(&self.ours, 0.50),
            Self::median(&self.ours, 0.99),
        )
    }

    /// The plain client's median p50 and p99 over the rounds, when it ran.
    pub fn plain_p50_p99(&self) -> Option<(Duration, Duration)> {
        (!self.plain.is_empty()).then(|| {
            (
                Self::median(&self.plain, 0.50),
                Self::median(&self.plain, 0.99),
            )
        })
    }
}

fn median(mut values: Vec<Duration>) -> Duration {
    values.sort_unstable();
    values.get(values.len() / 2).copied().unwrap_or_default()
}

impl fmt::Display for AskBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "ask bench on {}{}: {} rounds of {} asks, {} in flight, {}-byte bodies, {} partitions, echo worker in-process{}",
            self.log,
            durability_note(self.durability),
            o.rounds,
            o.requests,
            o.concurrency,
            o.size,
            o.partitions,
            if self.plain.is_empty() {
                ""
            } else {
                ", taking turns with the plain iggy client's ping-pong (busy polling, the same record bytes)"
            }
        )?;
        writeln!(
            f,
            "{:<12} {:>9} {:>9} {:>9} {:>9} {:>11}   (median of the rounds)",
            "", "p50 ms", "p90 ms", "p99 ms", "max ms", "requests/s"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, rounds: &[Round]| {
            writeln!(
                f,
                "{name:<12} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>11.0}",
                ms(Self::median(rounds, 0.50)),
                ms(Self::median(rounds, 0.90)),
                ms(Self::median(rounds, 0.99)),
                ms(Self::median(rounds, 1.0)),
                median_rate(rounds)
            )
        };
        row(f, "agdx", &self.ours)?;
        if let Some((plain50, plain99)) = self.plain_p50_p99() {
            row(f, "plain iggy", &self.plain)?;
            let (ours50, ours99) = self.ours_p50_p99();
            writeln!(
                f,
                "{:<12} {:>9.2} {:>9} {:>9.2}   (latency ratio, lower is better)",
                "agdx/plain",
                ours50.as_secs_f64() / plain50.as_secs_f64().max(f64::EPSILON),
                "",
                ours99.as_secs_f64() / plain99.as_secs_f64().max(f64::EPSILON),
            )?;
            let p50s: Vec<String> = self
                .ours
                .iter()
                .zip(&self.plain)
                .map(|(o, p)| format!("{:.2}", ratio(o.percentile(0.5), p.percentile(0.5))))
                .collect();
            writeln!(f, "  p50 ratio per round: {}", p50s.join(" "))?;
        }
        if let Some(b) = &self.breakdown {
            writeln!(
                f,
                "where an ask's time goes (median of {} asks, one at a time):",
                b.asks
            )?;
            for (leg, time) in &b.legs {
                writeln!(f, "  {leg:<52} {:>8.3} ms", ms(*time))?;
            }
        }
        if let Some(idle) = &self.idle {
            writeln!(
                f,
                "idle CPU over {:.1} s: worker and requester idle {:.2}% of a core; requester waiting for a reply (no worker) {:.2}% of a core",
                o.idle.as_secs_f64(),
                idle.idle * 100.0,
                idle.waiting * 100.0
            )?;
        }
        Ok(())
    }
}

/// The median over `rounds` of their round trips per second.
fn median_rate(rounds: &[Round]) -> f64 {
    let mut rates: Vec<f64> = rounds.iter().map(Round::per_sec).collect();
    rates.sort_unstable_by(f64::total_cmp);
    rates.get(rates.len() / 2).copied().unwrap_or_default()
}

fn ratio(ours: Duration, plain: Duration) -> f64 {
    ours.as_secs_f64() / plain.as_secs_f64().max(f64::EPSILON)
}

fn join_error(e: tokio::task::JoinError) -> BenchError {
    BenchError::Options(format!("a bench task failed: {e}"))
}

/// Runs the ask bench in a new stream of `log`, the echo worker on
/// `worker_log` (the same log: another handle, with a connection of its own
/// on Iggy, as the ponger has, or `log` itself); with `plain`, the plain
/// client's ping-pong too, on the same server.
pub async fn run_ask_bench(
    log: SharedLog,
    worker_log: SharedLog,
    plain: Option<PlainIggyTarget>,
    options: AskBenchOptions,
) -> Result<AskBenchReport, BenchError> {
    if options.concurrency == 0 || options.requests == 0 || options.size == 0 || options.rounds == 0
    {
        return Err(BenchError::Options(
            "--concurrency, --requests, --size and --rounds must be at least 1".into(),
        ));
    }
    let timed = Arc::new(TimedLog::new(log.clone()));
    let shared: SharedLog = timed.clone();
    let stream = super::fresh_stream("ask");
    let topology = TopologyConfig::new(stream.clone())
        .with_partitions(options.partitions)
        .ensure(shared.as_ref())
        .await?;
    let worker_log: SharedLog = if Arc::ptr_eq(&worker_log, &log) {
        shared.clone()
    } else {
        Arc::new(TimedLog::sharing(worker_log, &timed))
    };
    let worker_producer = Producer::new(worker_log, topology.clone(), agent("bench-echo"));
    let config = WorkerConfig {
        concurrency: options.partitions as usize,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(worker_producer, config).fallback(EchoHandler);
    let shutdown = CancellationToken::new();
    let mut worker_task = Some(tokio::spawn(worker.run(shutdown.clone())));
    let requester = Arc::new(Requester::new(Producer::new(
        shared.clone(),
        topology.clone(),
        agent("bench-asker"),
    )));
    let body = vec![b'x'; options.size];

    // One warm-up ask: the worker has joined and the reply readers run. Its
    // records are the bytes the plain client sends.
    timed.start();
    ask_once(&requester, &body).await?;
    let notes = timed
        .take_round_trip(&topology.commands.topic, &topology.responses.topic)
        .await;
    timed.stop();
    let (command, reply) = records_of(&notes, &topology)?;

    let durability = plain.as_ref().map(PlainIggyTarget::durability);
    let pairs = match &plain {
        Some(target) => {
            Some(PingPong::new(target, &shared, &stream, &options, command, reply).await?)
        }
        None => None,
    };
    let mut ours = Vec::with_capacity(options.rounds);
    let mut theirs = Vec::with_capacity(options.rounds);
    let rounds = async {
        for round in 0..options.rounds {
            match &pairs {
                Some(pairs) if round % 2 == 1 => {
                    theirs.push(pairs.round(&options).await?);
                    ours.push(ask_round(&requester, &body, &options).await?);
                }
                Some(pairs) => {
                    ours.push(ask_round(&requester, &body, &options).await?);
                    theirs.push(pairs.round(&options).await?);
                }
                None => ours.push(ask_round(&requester, &body, &options).await?),
            }
        }
        Ok::<_, BenchError>(())
    }
    .await;
    if let Some(pairs) = pairs {
        pairs.close().await;
    }
    rounds?;

    let breakdown = if options.breakdown {
        Some(breakdown(&timed, &requester, &body, &topology, &options).await?)
    } else {
        None
    };

    let idle = if options.idle.is_zero() {
        None
    } else {
        // Let the readers of the last asks see nobody waits and stop.
        tokio::time::sleep(agdx::READER_LINGER + Duration::from_millis(500)).await;
        let idle = cpu_share(options.idle, tokio::time::sleep(options.idle)).await;
        stop_worker(&shutdown, worker_task.take()).await?;
        let request = CommandRequest::new("echo", body.clone()).to(agent("bench-nobody"));
        let waiting = cpu_share(options.idle, async {
            // No worker answers: the ask times out, as intended.
            let _ = requester.ask(request, options.idle).await;
        })
        .await;
        Some(IdleCpu { idle, waiting })
    };
    if let Ok(requester) = Arc::try_unwrap(requester) {
        requester.close().await;
    }
    stop_worker(&shutdown, worker_task).await?;
    Ok(AskBenchReport {
        log: log.describe(),
        options,
        durability,
        ours,
        plain: theirs,
        breakdown,
        idle,
    })
}

/// Stops the echo worker, unless it was stopped already.
async fn stop_worker(
    shutdown: &CancellationToken,
    task: Option<tokio::task::JoinHandle<Result<(), agdx::worker::WorkerError>>>,
) -> Result<(), BenchError> {
    shutdown.cancel();
    match task {
        Some(task) => Ok(task.await.map_err(join_error)??),
        None => Ok(()),
    }
}

/// One round of `requests` asks, `concurrency` at a time.
async fn ask_round(
    requester: &Arc<Requester>,
    body: &[u8],
    options: &AskBenchOptions,
) -> Result<Round, BenchError> {
    let started = Instant::now();
    let mut askers = Vec::with_capacity(options.concurrency);
    for i in 0..options.concurrency as u64 {
        let share = share(options, i);
        let (requester, body) = (requester.clone(), body.to_vec());
        askers.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(share as usize);
            for _ in 0..share {
                latencies.push(ask_once(&requester, &body).await?);
            }
            Ok::<_, BenchError>(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(options.requests as usize);
    for asker in askers {
        latencies.extend(asker.await.map_err(join_error)??);
    }
    Ok(Round::new(started.elapsed(), latencies))
}

/// The asks (or ping-pongs) of asker `i` of a round.
fn share(options: &AskBenchOptions, i: u64) -> u64 {
    let n = options.concurrency as u64;
    options.requests / n + u64::from(i < options.requests % n)
}

async fn ask_once(requester: &Requester, body: &[u8]) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let request = CommandRequest::new("echo", body.to_vec()).to(agent("bench-echo"));
    requester.ask(request, Duration::from_secs(30)).await?;
    Ok(started.elapsed())
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("bench agent names are valid")
}

/// The command and the reply record an ask appended, from its notes.
fn records_of(
    notes: &[Note],
    topology: &agdx::Topology,
) -> Result<(OutgoingRecord, OutgoingRecord), BenchError> {
    let first = |topic: &str| {
        notes.iter().find_map(|note| match note {
            Note::Append {
                topic: t, records, ..
            } if t == topic => records.first().cloned(),
            _ => None,
        })
    };
    match (
        first(&topology.commands.topic),
        first(&topology.responses.topic),
    ) {
        (Some(command), Some(reply)) => Ok((command, reply)),
        _ => Err(BenchError::Options(
            "the warm-up ask left no command and reply record to measure".into(),
        )),
    }
}

/// Asks one at a time, noting the log calls, and takes the median of each leg.
async fn breakdown(
    timed: &TimedLog,
    requester: &Requester,
    body: &[u8],
    topology: &agdx::Topology,
    options: &AskBenchOptions,
) -> Result<Breakdown, BenchError> {
    let (commands, responses) = (&topology.commands.topic, &topology.responses.topic);
    // The first four legs follow each other and add up to the round trip;
    // the appends overlap them (a reader may read a record while its
    // append still waits for the flush).
    const LEGS: [&str; 6] = [
        "build the command, register the waiter",
        "command sent -> worker has it (append, wake-up, poll)",
        "worker: decode, handle, build the reply",
        "reply sent -> asker has it (append, wake-up, poll, decode)",
        "  of which: the command append (requester)",
        "  of which: the reply append and the commit (worker, one call)",
    ];
    let asks = options.requests.min(200) as usize;
    let mut legs: Vec<Vec<Duration>> = vec![Vec::with_capacity(asks); LEGS.len()];
    timed.start();
    for _ in 0..asks {
        timed.take();
        let started = Instant::now();
        ask_once(requester, body).await?;
        let answered = Instant::now();
        let notes = timed.take_round_trip(commands, responses).await;
        let mut appends = notes.iter().filter_map(|n| match n {
            Note::Append {
                topic,
                started,
                ended,
                ..
            } if topic == commands || topic == responses => {
                Some((topic == commands, *started, *ended))
            }
            _ => None,
        });
        let (Some((true, cmd_start, cmd_end)), Some((false, reply_start, reply_end))) =
            (appends.next(), appends.next())
        else {
            continue;
        };
        let worker_polled = notes.iter().find_map(|n| match n {
            Note::Poll {
                topic,
                ended,
                count,
            } if topic == commands && *count > 0 => Some(*ended),
            _ => None,
        });
        let Some(worker_polled) = worker_polled else {
            continue;
        };
        let spans = [
            (started, cmd_start),
            (cmd_start, worker_polled),
            (worker_polled, reply_start),
            (reply_start, answered),
            (cmd_start, cmd_end),
            (reply_start, reply_end),
        ];
        for (leg, (from, to)) in legs.iter_mut().zip(spans) {
            leg.push(to.saturating_duration_since(from));
        }
    }
    timed.stop();
    let measured = legs[0].len();
    Ok(Breakdown {
        asks: measured,
        legs: LEGS.into_iter().zip(legs.into_iter().map(median)).collect(),
    })
}

/// The CPU time the process used while `work` ran, as a share of one core
/// of `interval` (the time `work` is meant to take).
async fn cpu_share(interval: Duration, work: impl std::future::Future<Output = ()>) -> f64 {
    let (cpu, wall) = (super::cpu_time(), Instant::now());
    work.await;
    let used = super::cpu_time()
        .zip(cpu)
        .map_or(Duration::ZERO, |(now, then)| now.saturating_sub(then));
    used.as_secs_f64() / wall.elapsed().max(interval).as_secs_f64()
}

/// The plain client's ping-pong pairs: a pinger connection and a ponger
/// connection, pair `i` going round its partitions of the `ping` and `pong`
/// topics (see [`pair_partitions`]).
struct PingPong {
    pinger: Arc<PlainClient>,
    ponger: Arc<PlainClient>,
    ping: TopicInfo,
    pong: TopicInfo,
    command: OutgoingRecord,
    reply: OutgoingRecord,
    /// The next offset to read, per partition, of ping and of pong.
    next: std::sync::Mutex<Vec<(u64, u64)>>,
    stream_id: u32,
}

impl PingPong {
    async fn new(
        target: &PlainIggyTarget,
        log: &SharedLog,
        stream: &str,
        options: &AskBenchOptions,
        command: OutgoingRecord,
        reply: OutgoingRecord,
    ) -> Result<Self, BenchError> {
        let pairs = u32::try_from(options.concurrency)
            .map_err(|_| BenchError::Options("--concurrency is too large".into()))?;
        let partitions = pairs.max(options.partitions);
        let stream = format!("{stream}-plain");
        let ping = log.ensure_topic(&stream, "ping", partitions).await?;
        let pong = log.ensure_topic(&stream, "pong", partitions).await?;
        Ok(Self {
            pinger: Arc::new(PlainClient::connect(target).await?),
            ponger: Arc::new(PlainClient::connect(target).await?),
            stream_id: ping.stream_id,
            ping,
            pong,
            command,
            reply,
            next: std::sync::Mutex::new(vec![(0, 0); partitions as usize]),
        })
    }

    /// One round: `requests` ping-pongs, `concurrency` pairs at once.
    async fn round(&self, options: &AskBenchOptions) -> Result<Round, BenchError> {
        let offsets = self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let started = Instant::now();
        let mut tasks = Vec::with_capacity(options.concurrency);
        for i in 0..options.concurrency {
            let count = share(options, i as u64);
            let partitions = pair_partitions(i, options.concurrency, self.ping.partitions.get());
            let from = |side: fn(&(u64, u64)) -> u64| -> Vec<u64> {
                partitions
                    .iter()
                    .map(|&p| side(&offsets[p as usize]))
                    .collect()
            };
            let (ping_from, pong_from) = (from(|o| o.0), from(|o| o.1));
            let pinger = Pinger {
                client: self.pinger.clone(),
                ping: self.ping.clone(),
                pong: self.pong.clone(),
                record: self.command.clone(),
            };
            let ponger = Pinger {
                client: self.ponger.clone(),
                ping: self.pong.clone(),
                pong: self.ping.clone(),
                record: self.reply.clone(),
            };
            tasks.push(tokio::spawn(async move {
                let answering = tokio::spawn({
                    let partitions = partitions.clone();
                    async move { ponger.answer(&partitions, ping_from, count).await }
                });
                let latencies = pinger.ping(&partitions, pong_from, count).await;
                let answered = answering.await.map_err(join_error)?;
                let (latencies, pong_next) = latencies?;
                let ping_next = answered?;
                Ok::<_, BenchError>((latencies, partitions, ping_next, pong_next))
            }));
        }
        let mut latencies = Vec::with_capacity(options.requests as usize);
        let mut next = offsets;
        for task in tasks {
            let (pair, partitions, ping_next, pong_next) = task.await.map_err(join_error)??;
            latencies.extend(pair);
            for (j, p) in partitions.into_iter().enumerate() {
                next[p as usize] = (ping_next[j], pong_next[j]);
            }
        }
        let elapsed = started.elapsed();
        *self
            .next
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = next;
        Ok(Round::new(elapsed, latencies))
    }

    async fn close(self) {
        if let Err(error) = self.pinger.delete_stream(self.stream_id).await {
            tracing::warn!(%error, "the plain client's bench stream stays on the server");
        }
        self.pinger.close().await;
        self.ponger.close().await;
    }
}

/// One side of a ping-pong pair: sends `record` to `ping` and busy-polls
/// `pong` (the ponger has the topics the other way round).
struct Pinger {
    client: Arc<PlainClient>,
    ping: TopicInfo,
    pong: TopicInfo,
    record: OutgoingRecord,
}

impl Pinger {
    fn message(&self) -> Result<IggyMessage, LogError> {
        let headers =
            typed_headers(&self.record.headers).map_err(|e| self.client.error("headers", e))?;
        IggyMessage::builder()
            .payload(self.record.payload.clone())
            .user_headers(headers)
            .build()
            .map_err(|e| self.client.error("building a message", e))
    }

    async fn send(&self, partition: u32) -> Result<(), LogError> {
        let mut messages = [self.message()?];
        self.client.send(&self.ping, partition, &mut messages).await
    }

    /// Polls `pong` from `from` until a record is there; the next offset.
    async fn wait(&self, partition: u32, from: u64) -> Result<u64, LogError> {
        loop {
            let (read, next) = self.client.poll(&self.pong, partition, from, 1).await?;
            if read > 0 {
                return Ok(next);
            }
        }
    }

    /// `count` round trips, going round `partitions` (reading pong from
    /// `from`, one offset per partition); their latencies and the next pong
    /// offsets.
    async fn ping(
        &self,
        partitions: &[u32],
        mut from: Vec<u64>,
        count: u64,
    ) -> Result<(Vec<Duration>, Vec<u64>), BenchError> {
        let mut latencies = Vec::with_capacity(count as usize);
        for j in (0..partitions.len()).cycle().take(count as usize) {
            let started = Instant::now();
            self.send(partitions[j]).await?;
            from[j] = self.wait(partitions[j], from[j]).await?;
            latencies.push(started.elapsed());
        }
        Ok((latencies, from))
    }

    /// Answers `count` pings, going round `partitions` as the pinger does;
    /// the next ping offsets.
    async fn answer(
        &self,
        partitions: &[u32],
        mut from: Vec<u64>,
        count: u64,
    ) -> Result<Vec<u64>, BenchError> {
        for j in (0..partitions.len()).cycle().take(count as usize) {
            from[j] = self.wait(partitions[j], from[j]).await?;
            self.send(partitions[j]).await?;
        }
        Ok(from)
    }
}

/// The partitions ping-pong pair `pair` of `pairs` goes round: every
/// `pairs`-th of `partitions` from `pair` on, so the pairs share the
/// partitions out between them (a topic has at least `pairs`).
fn pair_partitions(pair: usize, pairs: usize, partitions: u32) -> Vec<u32> {
    (0..partitions).skip(pair).step_by(pairs).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_pong_pairs_share_the_partitions_out_between_them() {
        assert_eq!(pair_partitions(0, 1, 8), (0..8).collect::<Vec<_>>());
        assert_eq!(pair_partitions(1, 3, 8), [1, 4, 7]);
        let mut shared: Vec<u32> = (0..3)
            .flat_map(|pair| pair_partitions(pair, 3, 8))
            .collect();
        shared.sort_unstable();
        assert_eq!(shared, (0..8).collect::<Vec<_>>(), "each partition once");
        assert_eq!(pair_partitions(4, 5, 5), [4], "one partition a pair");
    }
}
