//! The start-up bench: how long a worker takes from its start to its first
//! answer, and what its start adds to the process's memory, with an empty
//! registry and with a long one.
//!
//! Each case runs in a fresh stream. The long registry holds `cards`
//! copies of one member's card (a member republishes its card every ~20 s,
//! so a registry grows by copies) and `facts` operator-signed control
//! facts about another agent. The worker watches quarantine with the
//! operator's key, as a deployment with a key registry does. On the long
//! registry the worker starts twice: the first start folds the whole
//! registry (and saves a view snapshot), the next ones resume from that
//! snapshot. The empty registry gets a first start too, so that the starts
//! set against each other all join a group that has committed before;
//! then the next starts of the two cases take turns, `rounds` each, and
//! their medians are compared, so that a noisy moment of a shared machine
//! weighs on both cases alike.

use std::fmt;
use std::time::{Duration, Instant};

use agdx::cards::{publish_card, worker_card};
use agdx::log::{OutgoingRecord, SharedLog, TopicInfo};
use agdx::trust::{KeyEntry, KeyKind, KeyRegistry, Signer, Verifier};
use agdx::wire::{AgentEnvelope, AgentId, StatusOperation};
use agdx::worker::{EchoHandler, Worker, WorkerConfig};
use agdx::{
    Answer, Clock, CommandRequest, Producer, Requester, SystemClock, Topology, TopologyConfig,
};
use tokio_util::sync::CancellationToken;

use super::{BenchError, rss_kib};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartupBenchOptions {
    /// Card records on the long registry.
    pub cards: u64,
    /// Control facts on the long registry.
    pub facts: u64,
    /// Next starts of each case, taking turns.
    pub rounds: u32,
}

/// How long the bench waits for the first answer.
const PATIENCE: Duration = Duration::from_secs(600);

/// Card copies appended at once.
const BATCH: u64 = 1000;

/// One start of the worker.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StartFigures {
    /// From the worker's start to its first answer.
    pub first_answer: Duration,
    /// What the process's resident memory grew by over the start, in KiB
    /// (`None` where `/proc/self/status` is not there).
    pub rss_growth_kib: Option<i64>,
}

/// The report.
#[derive(Debug, Clone)]
pub struct StartupBenchReport {
    log: String,
    options: StartupBenchOptions,
    empty: StartFigures,
    empty_again: Vec<StartFigures>,
    folded: StartFigures,
    resumed: Vec<StartFigures>,
    filled_in: Duration,
}

/// The start of `starts` with the median first answer (the upper one of
/// an even count).
fn median(starts: &[StartFigures]) -> Option<StartFigures> {
    let mut sorted = starts.to_vec();
    sorted.sort_by_key(|s| s.first_answer);
    sorted.get(sorted.len() / 2).copied()
}

impl fmt::Display for StartupBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "startup on {}: registry of {} cards and {} facts (filled in {:.1}s)",
            self.log,
            self.options.cards,
            self.options.facts,
            self.filled_in.as_secs_f64()
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, s: &StartFigures| {
            let rss = s.rss_growth_kib.map_or("n/a".to_owned(), |k| {
                format!("{:.1} MiB", k as f64 / 1024.0)
            });
            writeln!(
                f,
                "  {name:<34} first answer {:>9.1} ms  rss +{rss}",
                s.first_answer.as_secs_f64() * 1e3
            )
        };
        let runs = |starts: &[StartFigures]| {
            starts
                .iter()
                .map(|s| format!("{:.1}", s.first_answer.as_secs_f64() * 1e3))
                .collect::<Vec<_>>()
                .join(", ")
        };
        row(f, "empty registry, first start", &self.empty)?;
        let (Some(empty), Some(resumed)) = (median(&self.empty_again), median(&self.resumed))
        else {
            return Ok(());
        };
        row(f, "empty registry, next start (median)", &empty)?;
        row(f, "long registry, first start (folds)", &self.folded)?;
        row(f, "long registry, next start (median)", &resumed)?;
        writeln!(f, "  next starts, empty (ms): {}", runs(&self.empty_again))?;
        writeln!(f, "  next starts, long (ms):  {}", runs(&self.resumed))?;
        write!(
            f,
            "  next start, long / empty (medians): {:.2}x",
            resumed.first_answer.as_secs_f64() / empty.first_answer.as_secs_f64()
        )
    }
}

/// Runs the empty case, fills a registry, starts on it, then takes turns
/// at next starts of both.
pub async fn run_startup_bench(
    log: SharedLog,
    options: StartupBenchOptions,
) -> Result<StartupBenchReport, BenchError> {
    let operator = Signer::generate().map_err(|e| BenchError::Key(e.to_string()))?;
    let mut registry = KeyRegistry::new();
    let since = SystemClock.now_micros().saturating_sub(3_600_000_000);
    registry
        .insert(KeyEntry::new(
            agent("bench-operator"),
            KeyKind::Operator,
            operator.public_key(),
            Some(since),
            None,
        ))
        .map_err(|e| BenchError::Key(e.to_string()))?;
    let verifier = Verifier::new(registry);

    let empty_topology = fresh_topology(&log, "startup-empty").await?;
    let empty = start_once(&log, &empty_topology, &verifier).await?;

    let topology = fresh_topology(&log, "startup-long").await?;
    let started = Instant::now();
    fill(&log, &topology, operator, &options).await?;
    let filled_in = started.elapsed();
    let folded = start_once(&log, &topology, &verifier).await?;
    let (mut empty_again, mut resumed) = (Vec::new(), Vec::new());
    for _ in 0..options.rounds {
        empty_again.push(start_once(&log, &empty_topology, &verifier).await?);
        resumed.push(start_once(&log, &topology, &verifier).await?);
    }
    Ok(StartupBenchReport {
        log: log.describe(),
        options,
        empty,
        empty_again,
        folded,
        resumed,
        filled_in,
    })
}

async fn fresh_topology(log: &SharedLog, name: &str) -> Result<Topology, BenchError> {
    Ok(TopologyConfig::new(super::fresh_stream(name))
        .ensure(log.as_ref())
        .await?)
}

/// Appends the long registry: one card copied `cards` times, and `facts`
/// signed facts quarantining and lifting another agent by turns.
async fn fill(
    log: &SharedLog,
    topology: &Topology,
    operator: Signer,
    options: &StartupBenchOptions,
) -> Result<(), BenchError> {
    let card = worker_card(
        &agent("bench-other"),
        None,
        &["echo".to_owned()],
        false,
        Duration::from_secs(3600),
    );
    let member = Producer::new(log.clone(), topology.clone(), agent("bench-other"));
    publish_card(&member, &card, "m1").await?;
    let (partition, record) = card_record(log, &topology.registry).await?;
    let mut left = options.cards.saturating_sub(1);
    while left > 0 {
        let n = left.min(BATCH);
        let batch = (0..n)
            .map(|_| OutgoingRecord {
                headers: record.headers.clone(),
                payload: record.payload.clone(),
            })
            .collect();
        log.append(&topology.registry, partition, batch).await?;
        left -= n;
    }
    let ops =
        Producer::new(log.clone(), topology.clone(), agent("bench-operator")).with_signer(operator);
    for i in 0..options.facts {
        ops.status_quarantine(&agent("bench-other"), i % 2 == 0, None)
            .await?;
    }
    Ok(())
}

/// The card just published, and its partition.
async fn card_record(
    log: &SharedLog,
    registry: &TopicInfo,
) -> Result<(u32, agdx::log::LogRecord), BenchError> {
    for partition in 0..registry.partitions.get() {
        let records = log.poll(registry, partition, 0, 10, Duration::ZERO).await?;
        let card = records.into_iter().find(|r| {
            AgentEnvelope::decode(&r.payload)
                .is_ok_and(|e| e.operation.as_deref() == Some(StatusOperation::Card.as_str()))
        });
        if let Some(card) = card {
            return Ok((partition, card));
        }
    }
    Err(BenchError::Stalled(
        "the card published is not on the registry".into(),
    ))
}

/// Starts an echo worker watching quarantine, asks it once, stops it.
async fn start_once(
    log: &SharedLog,
    topology: &Topology,
    verifier: &Verifier,
) -> Result<StartFigures, BenchError> {
    let rss_before = rss_kib();
    let started = Instant::now();
    let producer = Producer::new(log.clone(), topology.clone(), agent("bench-echo"));
    let config = WorkerConfig {
        quarantine: Some(verifier.clone()),
        ..WorkerConfig::default()
    };
    let shutdown = CancellationToken::new();
    let worker = tokio::spawn(
        Worker::new(producer, config)
            .fallback(EchoHandler)
            .run(shutdown.clone()),
    );
    let requester = Requester::new(Producer::new(
        log.clone(),
        topology.clone(),
        agent("bench-requester"),
    ));
    let request = CommandRequest::new("echo", b"up?".to_vec()).to(agent("bench-echo"));
    let answer = requester.ask(request, PATIENCE).await;
    let first_answer = started.elapsed();
    let rss_growth_kib = rss_kib()
        .zip(rss_before)
        .map(|(after, before)| after - before);
    shutdown.cancel();
    match worker.await {
        Ok(result) => result?,
        Err(error) => return Err(BenchError::Stalled(format!("the worker failed: {error}"))),
    }
    match answer? {
        Answer::Response(_) => Ok(StartFigures {
            first_answer,
            rss_growth_kib,
        }),
        other => Err(BenchError::Answer(format!("{other:?}"))),
    }
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).unwrap_or_else(|_| unreachable!("bench agent names are valid"))
}
