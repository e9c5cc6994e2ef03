//! The pipeline bench: commands produced up front, then drained by a worker
//! pool that commits each only after its reply is on the log.

use std::fmt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agdx_wire::AgentId;
use tokio_util::sync::CancellationToken;

use super::BenchError;
use crate::log::SharedLog;
use crate::producer::{CommandRequest, Producer};
use crate::topology::TopologyConfig;
use crate::worker::{EchoHandler, Worker, WorkerConfig};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineBenchOptions {
    /// Commands produced and then handled.
    pub commands: u64,
    /// Body bytes per command.
    pub size: usize,
    /// Commands per publish call while producing.
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

/// Publish and drain figures.
#[derive(Debug, Clone)]
pub struct PipelineBenchReport {
    pub log: String,
    pub options: PipelineBenchOptions,
    /// Time to publish every command.
    pub publish: Duration,
    /// Time from starting the worker pool until every command was committed.
    pub drain: Duration,
}

impl PipelineBenchReport {
    /// Commands published per second.
    pub fn publish_per_sec(&self) -> f64 {
        self.options.commands as f64 / self.publish.as_secs_f64().max(f64::EPSILON)
    }
    /// Commands handled, answered and committed per second.
    pub fn drain_per_sec(&self) -> f64 {
        self.options.commands as f64 / self.drain.as_secs_f64().max(f64::EPSILON)
    }
}

impl fmt::Display for PipelineBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "pipeline bench on {}: {} commands of {} bytes, published in batches of {}, {} partitions, echo worker in-process",
            self.log, o.commands, o.size, o.batch, o.partitions
        )?;
        writeln!(
            f,
            "  publish  {:>10.0} commands/s ({:.2} s)",
            self.publish_per_sec(),
            self.publish.as_secs_f64()
        )?;
        write!(
            f,
            "  drain    {:>10.0} commands/s ({:.2} s; handle, reply, then commit)",
            self.drain_per_sec(),
            self.drain.as_secs_f64()
        )
    }
}

/// Runs the pipeline bench in a new stream of `log`.
pub async fn run_pipeline_bench(
    log: SharedLog,
    options: PipelineBenchOptions,
) -> Result<PipelineBenchReport, BenchError> {
    if options.commands == 0 || options.size == 0 || options.batch == 0 {
        return Err(BenchError::Options(
            "--commands, --size and --batch must be at least 1".into(),
        ));
    }
    let stream = format!(
        "bench-pipeline-{}",
        ulid::Ulid::new().to_string().to_lowercase()
    );
    let topology = TopologyConfig::new(stream)
        .with_partitions(options.partitions)
        .ensure(log.as_ref())
        .await?;
    let producer = Producer::new(log.clone(), topology.clone(), agent("bench-producer"));
    let body = vec![b'x'; options.size];

    let started = Instant::now();
    let mut left = options.commands;
    while left > 0 {
        let n = left.min(options.batch as u64);
        let batch = (0..n)
            .map(|_| CommandRequest::new("echo", body.clone()).to(agent("bench-echo")))
            .collect();
        producer.commands(batch).await?;
        left -= n;
    }
    let publish = started.elapsed();

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
    while stats.committed_records.load(Ordering::Relaxed) < options.commands {
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
        publish,
        drain,
    })
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("bench agent names are valid")
}
