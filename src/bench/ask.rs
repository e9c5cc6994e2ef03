//! The ask bench: round trips through the log to an in-process echo worker.
//!
//! `concurrency` askers share `requests` asks; each ask starts a new
//! conversation (so the work spreads over the partitions), publishes a
//! command, and waits for the echo worker's response, which the worker
//! publishes before it commits. The report gives the latency percentiles of
//! the round trips and the requests per second.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agdx_wire::AgentId;
use tokio_util::sync::CancellationToken;

use super::{BenchError, ms};
use crate::ask::Requester;
use crate::log::SharedLog;
use crate::producer::{CommandRequest, Producer};
use crate::topology::TopologyConfig;
use crate::worker::{EchoHandler, Worker, WorkerConfig};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AskBenchOptions {
    /// Asks in flight at once.
    pub concurrency: usize,
    /// Asks in all.
    pub requests: u64,
    /// Body bytes per command.
    pub size: usize,
    /// Partitions of the bench topics.
    pub partitions: u32,
}

impl Default for AskBenchOptions {
    fn default() -> Self {
        Self {
            concurrency: 8,
            requests: 2_000,
            size: 64,
            partitions: 8,
        }
    }
}

/// Round-trip figures.
#[derive(Debug, Clone)]
pub struct AskBenchReport {
    /// The log, as [`crate::log::Log::describe`] puts it.
    pub log: String,
    /// The options it ran with.
    pub options: AskBenchOptions,
    /// Wall-clock time from the first measured ask to the last answer (a
    /// warm-up ask before it is not counted).
    pub elapsed: Duration,
    /// Round-trip latencies, sorted.
    latencies: Vec<Duration>,
}

impl AskBenchReport {
    /// The latency below which `fraction` of the round trips fell.
    pub fn percentile(&self, fraction: f64) -> Duration {
        super::percentile(&self.latencies, fraction)
    }

    /// Completed asks per second.
    pub fn requests_per_sec(&self) -> f64 {
        self.latencies.len() as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }
}

impl fmt::Display for AskBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "ask bench on {}: {} asks, {} in flight, {}-byte bodies, {} partitions, echo worker in-process",
            self.log, o.requests, o.concurrency, o.size, o.partitions
        )?;
        writeln!(
            f,
            "  latency p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
            ms(self.percentile(0.50)),
            ms(self.percentile(0.90)),
            ms(self.percentile(0.99)),
            ms(self.percentile(1.0))
        )?;
        write!(
            f,
            "  throughput {:.0} requests/s ({:.2} s in all)",
            self.requests_per_sec(),
            self.elapsed.as_secs_f64()
        )
    }
}

/// Runs the ask bench in a new stream of `log`.
pub async fn run_ask_bench(
    log: SharedLog,
    options: AskBenchOptions,
) -> Result<AskBenchReport, BenchError> {
    if options.concurrency == 0 || options.requests == 0 || options.size == 0 {
        return Err(BenchError::Options(
            "--concurrency, --requests and --size must be at least 1".into(),
        ));
    }
    let stream = format!("bench-ask-{}", ulid::Ulid::new().to_string().to_lowercase());
    let topology = TopologyConfig::new(stream)
        .with_partitions(options.partitions)
        .ensure(log.as_ref())
        .await?;
    let worker_producer = Producer::new(log.clone(), topology.clone(), agent("bench-echo"));
    let config = WorkerConfig {
        concurrency: options.partitions as usize,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(worker_producer, config).fallback(EchoHandler);
    let shutdown = CancellationToken::new();
    let worker_task = tokio::spawn(worker.run(shutdown.clone()));
    let requester = Arc::new(Requester::new(Producer::new(
        log.clone(),
        topology,
        agent("bench-asker"),
    )));
    let body = vec![b'x'; options.size];
    // One warm-up ask: the worker has joined and the reply readers run.
    ask_once(&requester, &body).await?;

    let started = Instant::now();
    let mut askers = Vec::with_capacity(options.concurrency);
    for i in 0..options.concurrency as u64 {
        let share = options.requests / options.concurrency as u64
            + u64::from(i < options.requests % options.concurrency as u64);
        let (requester, body) = (requester.clone(), body.clone());
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
        latencies.extend(
            asker
                .await
                .map_err(|e| BenchError::Options(e.to_string()))??,
        );
    }
    let elapsed = started.elapsed();
    if let Ok(requester) = Arc::try_unwrap(requester) {
        requester.close().await;
    }
    shutdown.cancel();
    worker_task
        .await
        .map_err(|e| BenchError::Options(e.to_string()))??;
    latencies.sort_unstable();
    Ok(AskBenchReport {
        log: log.describe(),
        options,
        elapsed,
        latencies,
    })
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
