//! The pipeline bench: commands produced up front, then drained by a worker
//! pool that commits each only after its reply is on the log.
//!
//! With a [`PlainIggyTarget`], the plain `iggy` client also publishes the
//! same number of commands, on a connection of its own, into a topic of its own
//! of the bench stream: the same envelope bytes and typed headers (built
//! beforehand, untimed, the way the producer builds them), in the same
//! batches, each batch split by partition into one request per partition,
//! sent concurrently. What is timed is AGDX building, checking and appending
//! its commands against the plain client only sending finished records. The
//! two take turns batch by batch, who goes first alternating, so both meet
//! the same server state and the same load from elsewhere. In the log's
//! durability mode `fsync` the plain client flushes each partition it sent
//! to with fsync, as our appends do; with `server` neither flushes.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agdx_wire::{AgentId, record_headers};
use bytes::Bytes;
use iggy::prelude::IggyMessage;
use tokio_util::sync::CancellationToken;

use super::BenchError;
use super::log::durability_note;
use super::plain::{PlainClient, PlainIggyTarget, typed_headers};
use crate::log::iggy::Durability;
use crate::log::{SharedLog, TopicInfo};
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
    /// The log, as [`crate::log::Log::describe`] puts it.
    pub log: String,
    /// The options it ran with.
    pub options: PipelineBenchOptions,
    /// Time to publish every command.
    pub publish: Duration,
    /// Time the plain `iggy` client took to send the same records, when it ran.
    pub plain_publish: Option<Duration>,
    /// Time from starting the worker pool until every command was committed.
    pub drain: Duration,
    /// The durability both clients appended with, on Iggy.
    pub durability: Option<Durability>,
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
    /// The plain `iggy` client's records sent per second, when it ran.
    pub fn plain_publish_per_sec(&self) -> Option<f64> {
        self.plain_publish
            .map(|plain| self.options.commands as f64 / plain.as_secs_f64().max(f64::EPSILON))
    }
    /// Our publish rate over the plain client's, when it ran.
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
            "pipeline bench on {}{}: {} commands of {} bytes, published in batches of {}, {} partitions, echo worker in-process",
            self.log,
            durability_note(self.durability),
            o.commands,
            o.size,
            o.batch,
            o.partitions
        )?;
        writeln!(
            f,
            "  publish  {:>10.0} commands/s ({:.2} s)",
            self.publish_per_sec(),
            self.publish.as_secs_f64()
        )?;
        if let (Some(plain), Some(rate), Some(ratio)) = (
            self.plain_publish,
            self.plain_publish_per_sec(),
            self.publish_ratio(),
        ) {
            writeln!(
                f,
                "  plain    {rate:>10.0} commands/s ({:.2} s; the plain iggy client sending the same records)",
                plain.as_secs_f64()
            )?;
            writeln!(f, "  publish ratio ours/plain {ratio:.2}")?;
        }
        write!(
            f,
            "  drain    {:>10.0} commands/s ({:.2} s; handle, reply, then commit)",
            self.drain_per_sec(),
            self.drain.as_secs_f64()
        )
    }
}

/// Runs the pipeline bench in a new stream of `log`; with `plain`, the plain
/// `iggy` client publishes the same commands on that server too.
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
    let request = || CommandRequest::new("echo", body.clone()).to(agent("bench-echo"));
    let batch = options.batch as u64;
    let sizes: Vec<u64> = (0..options.commands.div_ceil(batch))
        .map(|i| batch.min(options.commands - i * batch))
        .collect();

    let durability = plain.as_ref().map(PlainIggyTarget::durability);
    let mut plain = match plain {
        Some(target) => {
            let plain_topic = log
                .ensure_topic(&topology.commands.stream, PLAIN_TOPIC, options.partitions)
                .await?;
            let batches = sizes
                .iter()
                .map(|&n| plain_batch(&producer, &plain_topic, (0..n).map(|_| request())))
                .collect::<Result<Vec<_>, _>>()?;
            let client = PlainClient::connect(&target).await?;
            Some(PlainSide {
                client,
                topic: plain_topic,
                batches,
                elapsed: Duration::ZERO,
            })
        }
        None => None,
    };

    let mut publish = Duration::ZERO;
    for (round, &n) in sizes.iter().enumerate() {
        let plain_first = round % 2 == 1;
        if let Some(plain) = plain.as_mut().filter(|_| plain_first) {
            plain.send(round).await?;
        }
        let started = Instant::now();
        producer
            .commands((0..n).map(|_| request()).collect())
            .await?;
        publish += started.elapsed();
        if let Some(plain) = plain.as_mut().filter(|_| !plain_first) {
            plain.send(round).await?;
        }
    }
    let plain_publish = match plain {
        Some(plain) => {
            plain.client.close().await;
            Some(plain.elapsed)
        }
        None => None,
    };

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
        plain_publish,
        drain,
        durability,
    })
}

/// The topic of the bench stream the plain client publishes into.
const PLAIN_TOPIC: &str = "bench.plain";

/// One batch of commands as the plain client sends it: the envelopes and
/// headers the producer would build, as `iggy` messages with typed headers,
/// grouped by partition as [`Producer::publish`] groups them.
fn plain_batch(
    producer: &Producer,
    topic: &TopicInfo,
    requests: impl Iterator<Item = CommandRequest>,
) -> Result<BTreeMap<u32, Vec<IggyMessage>>, BenchError> {
    let invalid = |e: iggy::prelude::IggyError| {
        BenchError::Options(format!("the plain iggy client rejects a bench record: {e}"))
    };
    let mut by_partition: BTreeMap<u32, Vec<IggyMessage>> = BTreeMap::new();
    for request in requests {
        let (outgoing, _) = producer.build_command(request);
        let envelope = &outgoing.envelope;
        let headers = record_headers(envelope, outgoing.content_type);
        let message = IggyMessage::builder()
            .payload(Bytes::from(envelope.encode()))
            .user_headers(typed_headers(&headers).map_err(invalid)?)
            .build()
            .map_err(invalid)?;
        by_partition
            .entry(Producer::partition_of(topic, envelope.conversation))
            .or_default()
            .push(message);
    }
    Ok(by_partition)
}

/// The plain client with its records, batch by batch, and the time spent sending.
struct PlainSide {
    client: PlainClient,
    topic: TopicInfo,
    batches: Vec<BTreeMap<u32, Vec<IggyMessage>>>,
    elapsed: Duration,
}

impl PlainSide {
    /// Sends batch `round`, one request per partition, all in flight at
    /// once as the producer sends them.
    async fn send(&mut self, round: usize) -> Result<(), BenchError> {
        let (client, topic) = (&self.client, &self.topic);
        let started = Instant::now();
        let sends = self.batches[round]
            .iter_mut()
            .map(|(&partition, messages)| client.send(topic, partition, messages));
        futures_util::future::try_join_all(sends).await?;
        self.elapsed += started.elapsed();
        Ok(())
    }
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("bench agent names are valid")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_gives_the_publish_ratio_when_the_plain_client_ran() {
        let mut report = PipelineBenchReport {
            log: "iggy://127.0.0.1:8090".into(),
            options: PipelineBenchOptions {
                commands: 1000,
                ..PipelineBenchOptions::default()
            },
            publish: Duration::from_secs(2),
            plain_publish: Some(Duration::from_secs(1)),
            drain: Duration::from_secs(4),
            durability: Some(Durability::Server),
        };
        assert_eq!(report.publish_ratio(), Some(0.5));
        let text = report.to_string();
        assert!(text.contains("publish ratio ours/plain 0.50"), "{text}");
        assert!(text.contains("durability=server"), "{text}");
        report.plain_publish = None;
        assert_eq!(report.publish_ratio(), None);
        assert!(!report.to_string().contains("plain"));
    }
}
