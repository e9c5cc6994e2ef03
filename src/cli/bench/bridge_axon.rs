//! The AXON bridge bench: what the bridge adds to a round trip.
//!
//! One echo worker on a fresh stream answers two kinds of round trip,
//! taking turns in rounds so both see the same log and machine state:
//!
//! - **direct**: an `ask` through the log (command → worker → reply);
//! - **bridged**: an AXON client (QUIC, mutual TLS, in this process) sends
//!   a `request` to an AXON bridge in this process, which asks the same
//!   worker through the log and answers with the reply.
//!
//! The difference of the two latency distributions is the bridge's cost:
//! the QUIC stream each way, JSON envelope parsing and the mapping.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agdx::wire::AgentId;
use tokio_util::sync::CancellationToken;

use super::BenchError;
use agdx::Requester;
use agdx::TopologyConfig;
use agdx::bridge::axon::{self, AxonBridge, AxonBridgeConfig, Identity, Routes};
use agdx::log::SharedLog;
use agdx::worker::{EchoHandler, Worker, WorkerConfig};
use agdx::{CommandRequest, Producer};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeAxonBenchOptions {
    /// Round trips in flight at once, in each phase.
    pub concurrency: usize,
    /// Round trips of each kind.
    pub requests: u64,
    /// Bytes of the message text in each payload.
    pub size: usize,
    /// Partitions of the bench topics.
    pub partitions: u32,
    /// Turns each kind takes (requests are split evenly over them).
    pub rounds: u64,
}

impl Default for BridgeAxonBenchOptions {
    fn default() -> Self {
        Self {
            concurrency: 8,
            requests: 2_000,
            size: 64,
            partitions: 8,
            rounds: 4,
        }
    }
}

/// Latencies of one kind of round trip.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    sorted: Vec<Duration>,
    elapsed: Duration,
}

impl Latencies {
    /// The latency below which `fraction` of the round trips fell.
    pub fn percentile(&self, fraction: f64) -> Duration {
        let last = self.sorted.len().saturating_sub(1);
        let index = ((last as f64) * fraction.clamp(0.0, 1.0)).round() as usize;
        self.sorted.get(index).copied().unwrap_or_default()
    }

    /// Round trips per second while this kind had its turns.
    pub fn per_sec(&self) -> f64 {
        self.sorted.len() as f64 / self.elapsed.as_secs_f64().max(f64::EPSILON)
    }

    fn absorb(&mut self, mut more: Vec<Duration>, elapsed: Duration) {
        self.sorted.append(&mut more);
        self.sorted.sort_unstable();
        self.elapsed += elapsed;
    }
}

/// The figures of both kinds.
#[derive(Debug, Clone)]
pub struct BridgeAxonBenchReport {
    /// The log, as [`agdx::log::Log::describe`] puts it.
    pub log: String,
    /// The options it ran with.
    pub options: BridgeAxonBenchOptions,
    /// `ask` through the log.
    pub direct: Latencies,
    /// AXON request through the bridge and the log.
    pub bridged: Latencies,
}

impl fmt::Display for BridgeAxonBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "bridge-axon bench on {}: {} round trips of each kind in {} turns, {} in flight, {}-byte messages, {} partitions, echo worker, bridge and AXON client in-process",
            self.log, o.requests, o.rounds, o.concurrency, o.size, o.partitions
        )?;
        for (name, l) in [
            ("direct ask ", &self.direct),
            ("via bridge ", &self.bridged),
        ] {
            writeln!(
                f,
                "  {name} p50 {:.2} ms  p90 {:.2} ms  p99 {:.2} ms  max {:.2} ms  {:.0} round trips/s",
                ms(l.percentile(0.50)),
                ms(l.percentile(0.90)),
                ms(l.percentile(0.99)),
                ms(l.percentile(1.0)),
                l.per_sec()
            )?;
        }
        write!(
            f,
            "  added by the bridge: p50 {:+.2} ms  p90 {:+.2} ms  p99 {:+.2} ms",
            ms(self.bridged.percentile(0.50)) - ms(self.direct.percentile(0.50)),
            ms(self.bridged.percentile(0.90)) - ms(self.direct.percentile(0.90)),
            ms(self.bridged.percentile(0.99)) - ms(self.direct.percentile(0.99)),
        )
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

const TIMEOUT: Duration = Duration::from_secs(30);

/// Runs the bench in a new stream of `log`.
pub async fn run_bridge_axon_bench(
    log: SharedLog,
    options: BridgeAxonBenchOptions,
) -> Result<BridgeAxonBenchReport, BenchError> {
    if options.concurrency == 0 || options.requests == 0 || options.rounds == 0 {
        return Err(BenchError::Options(
            "--concurrency, --requests and --rounds must be at least 1".into(),
        ));
    }
    let stream = super::fresh_stream("bridge-axon");
    let topology = TopologyConfig::new(stream)
        .with_partitions(options.partitions)
        .ensure(log.as_ref())
        .await?;
    let echo = agent("bench-echo");
    let worker = Worker::new(
        Producer::new(log.clone(), topology.clone(), echo.clone()),
        WorkerConfig {
            concurrency: options.partitions as usize,
            ..WorkerConfig::default()
        },
    )
    .fallback(EchoHandler);
    let shutdown = CancellationToken::new();
    let worker_task = tokio::spawn(worker.run(shutdown.clone()));

    let client_identity = Identity::from_seed(&rand::random());
    let bridge_identity = Identity::from_seed(&rand::random());
    let loopback = "127.0.0.1:0"
        .parse()
        .map_err(|_| BenchError::Options("loopback".into()))?;
    let mut config = AxonBridgeConfig::new(loopback);
    config.peers = vec![axon::PeerToken::new(
        client_identity.public_key(),
        "127.0.0.1:9",
    )?];
    config.routes = Routes::new(Vec::new(), Some(echo.clone()));
    config.timeout = TIMEOUT;
    let bridge = AxonBridge::bind(log.clone(), topology.clone(), bridge_identity, config).await?;
    let bridge_token = bridge.token(None)?;
    let bridge_id = bridge.id().clone();
    let bridge_task = tokio::spawn(bridge.run(shutdown.clone()));
    let client = Arc::new(axon::AxonClient::bind(
        loopback,
        &client_identity,
        vec![bridge_token],
    )?);

    let requester = Arc::new(Requester::new(Producer::new(
        log.clone(),
        topology,
        agent("bench-asker"),
    )));
    let payload = serde_json::json!({ "message": "x".repeat(options.size) }).to_string();
    let body = payload.clone().into_bytes();
    // Warm-up: the worker has joined, the reply readers and the QUIC
    // connection are up.
    direct_once(&requester, &echo, &body).await?;
    client.request(&bridge_id, &payload, TIMEOUT).await?;

    let mut direct = Latencies::default();
    let mut bridged = Latencies::default();
    for round in 0..options.rounds {
        let share = options.requests / options.rounds
            + u64::from(round < options.requests % options.rounds);
        let (latencies, elapsed) = concurrently(options.concurrency, share, || {
            let (requester, echo, body) = (requester.clone(), echo.clone(), body.clone());
            async move { direct_once(&requester, &echo, &body).await }
        })
        .await?;
        direct.absorb(latencies, elapsed);
        let (latencies, elapsed) = concurrently(options.concurrency, share, || {
            let (client, bridge_id, payload) = (client.clone(), bridge_id.clone(), payload.clone());
            async move {
                let started = Instant::now();
                client.request(&bridge_id, &payload, TIMEOUT).await?;
                Ok(started.elapsed())
            }
        })
        .await?;
        bridged.absorb(latencies, elapsed);
    }
    shutdown.cancel();
    bridge_task
        .await
        .map_err(|e| BenchError::Options(e.to_string()))??;
    worker_task
        .await
        .map_err(|e| BenchError::Options(e.to_string()))??;
    Ok(BridgeAxonBenchReport {
        log: log.describe(),
        options,
        direct,
        bridged,
    })
}

/// Runs `count` round trips made by `once`, `concurrency` at a time.
async fn concurrently<F, Fut>(
    concurrency: usize,
    count: u64,
    once: F,
) -> Result<(Vec<Duration>, Duration), BenchError>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Duration, BenchError>> + Send + 'static,
{
    let started = Instant::now();
    let mut lanes = Vec::with_capacity(concurrency);
    for lane in 0..concurrency as u64 {
        let share = count / concurrency as u64 + u64::from(lane < count % concurrency as u64);
        let trips: Vec<Fut> = (0..share).map(|_| once()).collect();
        lanes.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(trips.len());
            for trip in trips {
                latencies.push(trip.await?);
            }
            Ok::<_, BenchError>(latencies)
        }));
    }
    let mut latencies = Vec::with_capacity(count as usize);
    for lane in lanes {
        latencies.extend(
            lane.await
                .map_err(|e| BenchError::Options(e.to_string()))??,
        );
    }
    Ok((latencies, started.elapsed()))
}

async fn direct_once(
    requester: &Requester,
    echo: &AgentId,
    body: &[u8],
) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let request = CommandRequest::new("axon.request", body.to_vec())
        .to(echo.clone())
        .content_type(agdx::wire::ContentType::Json);
    requester.ask(request, TIMEOUT).await?;
    Ok(started.elapsed())
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("bench agent names are valid")
}
