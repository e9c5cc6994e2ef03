//! The ax-ipc bench: what the bridge adds to a round trip.
//!
//! Two runs against the same in-process echo worker, in a stream of their
//! own: first `requests` direct asks (a `memory_list` command with a JSON
//! body, each in a new conversation), then as many AX calls through an
//! in-process bridge on a Unix socket in a temporary directory (framed,
//! `_msgId`, the strict schema check, the command, the reply mapped back),
//! `concurrency` connections at a time, each call in a new conversation
//! too. The report gives both latency distributions and their difference
//! per percentile: the bridge's added latency.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agdx::wire::{AgentId, ContentType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;

use super::{BenchError, ms, percentile};
use agdx::Requester;
use agdx::TopologyConfig;
use agdx::bridge::ax_ipc::{
    ActionSchemas, AxIpcBridge, FrameDecoder, Gate, HEARTBEAT_EVERY, Routes, bind, encode_frame,
    serve_socket,
};
use agdx::log::SharedLog;
use agdx::worker::{EchoHandler, Worker, WorkerConfig};
use agdx::{CommandRequest, Producer};

/// The request every call makes (valid for the shipped `memory_list` schema).
const REQUEST: &str = r#"{"action":"memory_list","scope":"bench","limit":10}"#;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxIpcBenchOptions {
    /// Calls (and asks) in flight at once.
    pub concurrency: usize,
    /// Calls in each run.
    pub requests: u64,
    /// Partitions of the bench topics.
    pub partitions: u32,
}

impl Default for AxIpcBenchOptions {
    fn default() -> Self {
        Self {
            concurrency: 8,
            requests: 2_000,
            partitions: 8,
        }
    }
}

/// The two runs' figures.
#[derive(Debug, Clone)]
pub struct AxIpcBenchReport {
    /// The log, as [`agdx::log::Log::describe`] puts it.
    pub log: String,
    /// The options it ran with.
    pub options: AxIpcBenchOptions,
    /// Wall-clock time of the direct run.
    pub direct_elapsed: Duration,
    /// Wall-clock time of the bridged run.
    pub bridged_elapsed: Duration,
    direct: Vec<Duration>,
    bridged: Vec<Duration>,
}

impl AxIpcBenchReport {
    /// The direct asks' latency at `fraction`.
    pub fn direct(&self, fraction: f64) -> Duration {
        percentile(&self.direct, fraction)
    }

    /// The bridged calls' latency at `fraction`.
    pub fn bridged(&self, fraction: f64) -> Duration {
        percentile(&self.bridged, fraction)
    }
}

impl fmt::Display for AxIpcBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "ax-ipc bench on {}: {} calls each way, {} in flight, {} partitions, echo worker in-process",
            self.log, o.requests, o.concurrency, o.partitions
        )?;
        let line = |f: &mut fmt::Formatter<'_>,
                    name: &str,
                    at: &dyn Fn(f64) -> f64,
                    n: usize,
                    elapsed: Duration| {
            writeln!(
                f,
                "  {name:<13} p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  ({:.0} calls/s)",
                at(0.50),
                at(0.90),
                at(0.99),
                n as f64 / elapsed.as_secs_f64().max(f64::EPSILON)
            )
        };
        line(
            f,
            "direct ask",
            &|p| ms(self.direct(p)),
            self.direct.len(),
            self.direct_elapsed,
        )?;
        line(
            f,
            "via ax-ipc",
            &|p| ms(self.bridged(p)),
            self.bridged.len(),
            self.bridged_elapsed,
        )?;
        let added = |p| ms(self.bridged(p)) - ms(self.direct(p));
        write!(
            f,
            "  added        p50 {:+.2} ms  p90 {:+.2} ms  p99 {:+.2} ms",
            added(0.50),
            added(0.90),
            added(0.99)
        )
    }
}

/// Runs the ax-ipc bench in a new stream of `log`.
pub async fn run_ax_ipc_bench(
    log: SharedLog,
    options: AxIpcBenchOptions,
) -> Result<AxIpcBenchReport, BenchError> {
    if options.concurrency == 0 || options.requests == 0 {
        return Err(BenchError::Options(
            "--concurrency and --requests must be at least 1".into(),
        ));
    }
    let stream = super::fresh_stream("ax-ipc");
    let topology = TopologyConfig::new(stream)
        .with_partitions(options.partitions)
        .ensure(log.as_ref())
        .await?;
    let worker = Worker::new(
        Producer::new(log.clone(), topology.clone(), agent("bench-memory")),
        WorkerConfig {
            concurrency: options.partitions as usize,
            ..WorkerConfig::default()
        },
    )
    .fallback(EchoHandler);
    let shutdown = CancellationToken::new();
    let worker_task = tokio::spawn(worker.run(shutdown.clone()));

    let requester = Arc::new(Requester::new(Producer::new(
        log.clone(),
        topology.clone(),
        agent("bench-asker"),
    )));
    ask_once(&requester).await?;
    let (direct, direct_elapsed) = run_shared(&options, {
        let requester = requester.clone();
        move || {
            let requester = requester.clone();
            async move { ask_once(&requester).await }
        }
    })
    .await?;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("ax.sock");
    let routes = Routes::new(vec![
        "memory_*=bench-memory"
            .parse()
            .map_err(|e| BenchError::Options(format!("{e}")))?,
    ]);
    let gate = Gate::new("bench-ax-ipc", ActionSchemas::defaults()?, routes);
    let bridge = Arc::new(AxIpcBridge::new(
        Requester::new(Producer::new(log.clone(), topology, agent("bench-ax-ipc"))),
        gate,
    ));
    let serving = tokio::spawn(serve_socket(
        bridge,
        bind(&path)?,
        path.clone(),
        HEARTBEAT_EVERY,
        shutdown.clone(),
    ));
    let mut warm = Connection::open(&path).await?;
    warm.call().await?;
    let (bridged, bridged_elapsed) = run_per_connection(&options, &path).await?;

    shutdown.cancel();
    serving
        .await
        .map_err(|e| BenchError::Options(e.to_string()))??;
    worker_task
        .await
        .map_err(|e| BenchError::Options(e.to_string()))??;
    Ok(AxIpcBenchReport {
        log: log.describe(),
        options,
        direct_elapsed,
        bridged_elapsed,
        direct,
        bridged,
    })
}

/// `requests` calls of `once`, `concurrency` at a time: sorted latencies
/// and the wall-clock time.
async fn run_shared<F, Fut>(
    options: &AxIpcBenchOptions,
    once: F,
) -> Result<(Vec<Duration>, Duration), BenchError>
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<Duration, BenchError>> + Send,
{
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(options.concurrency);
    for share in shares(options) {
        let once = once.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(share as usize);
            for _ in 0..share {
                latencies.push(once().await?);
            }
            Ok::<_, BenchError>(latencies)
        }));
    }
    collect(tasks, started).await
}

/// The same through the bridge: one connection per task.
async fn run_per_connection(
    options: &AxIpcBenchOptions,
    path: &std::path::Path,
) -> Result<(Vec<Duration>, Duration), BenchError> {
    let started = Instant::now();
    let mut tasks = Vec::with_capacity(options.concurrency);
    for share in shares(options) {
        let path = path.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut connection = Connection::open(&path).await?;
            let mut latencies = Vec::with_capacity(share as usize);
            for _ in 0..share {
                latencies.push(connection.call().await?);
            }
            Ok::<_, BenchError>(latencies)
        }));
    }
    collect(tasks, started).await
}

fn shares(options: &AxIpcBenchOptions) -> impl Iterator<Item = u64> {
    let n = options.concurrency as u64;
    let requests = options.requests;
    (0..n).map(move |i| requests / n + u64::from(i < requests % n))
}

async fn collect(
    tasks: Vec<tokio::task::JoinHandle<Result<Vec<Duration>, BenchError>>>,
    started: Instant,
) -> Result<(Vec<Duration>, Duration), BenchError> {
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(
            task.await
                .map_err(|e| BenchError::Options(e.to_string()))??,
        );
    }
    let elapsed = started.elapsed();
    latencies.sort_unstable();
    Ok((latencies, elapsed))
}

async fn ask_once(requester: &Requester) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let request = CommandRequest::new("memory_list", REQUEST.as_bytes().to_vec())
        .to(agent("bench-memory"))
        .content_type(ContentType::Json);
    requester.ask(request, Duration::from_secs(30)).await?;
    Ok(started.elapsed())
}

/// One AX-style connection making one call at a time.
struct Connection {
    stream: UnixStream,
    decoder: FrameDecoder,
    buffer: Vec<u8>,
}

impl Connection {
    async fn open(path: &std::path::Path) -> Result<Self, BenchError> {
        Ok(Self {
            stream: UnixStream::connect(path).await?,
            decoder: FrameDecoder::default(),
            buffer: vec![0; 64 * 1024],
        })
    }

    /// Makes one call and checks that it succeeded.
    async fn call(&mut self) -> Result<Duration, BenchError> {
        let started = Instant::now();
        self.stream
            .write_all(&encode_frame(REQUEST.as_bytes()))
            .await?;
        loop {
            if let Some(frame) = self
                .decoder
                .next_frame()
                .map_err(|e| BenchError::Answer(e.to_string()))?
            {
                let answer: serde_json::Value = serde_json::from_slice(&frame)
                    .map_err(|e| BenchError::Answer(format!("not JSON: {e}")))?;
                if answer.get("_heartbeat").is_some() {
                    continue;
                }
                if answer.get("ok") != Some(&serde_json::Value::Bool(true)) {
                    return Err(BenchError::Answer(answer.to_string()));
                }
                return Ok(started.elapsed());
            }
            let n = self.stream.read(&mut self.buffer).await?;
            if n == 0 {
                return Err(BenchError::Answer("the connection closed".into()));
            }
            self.decoder.push(&self.buffer[..n]);
        }
    }
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("bench agent names are valid")
}
