//! The topology bench: how many command records the pools read per command
//! they handle, with every command on the shared `agent.commands` and with
//! one inbox per agent ([`CommandRouting`]).
//!
//! Each routing runs in a fresh stream of the same log: `agents` echo pools
//! in this process, then one requester (of the same routing) sends each
//! agent `commands` commands, all in flight at once, and waits for every
//! reply. The count is taken once every pool has committed every partition
//! it reads up to its last record, so the commands a pool reads only to
//! skip them (addressed to another agent) are all in it. Records read are
//! counted under the port: the records that polls of the commands topics
//! (`agent.commands` and the inboxes) return; handled is the sum of the
//! pools' `handled` counters. The polls themselves are counted too: with
//! inboxes every pool also polls `agent.commands`, which stays empty.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use agdx::log::{Log, LogDecorator, LogError, LogRecord, SharedLog, TopicInfo};
use agdx::wire::AgentId;
use agdx::worker::{EchoHandler, Worker, WorkerConfig, WorkerStats};
use agdx::{
    CommandRequest, CommandRouting, Producer, ReplyEvent, Requester, TopicNames, Topology,
    TopologyConfig,
};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use super::BenchError;

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyBenchOptions {
    /// Agents, each with a pool of its own.
    pub agents: usize,
    /// Commands sent to each agent.
    pub commands: u64,
    /// Body bytes per command.
    pub size: usize,
    /// Partitions of every topic, inboxes included.
    pub partitions: u32,
}

impl Default for TopologyBenchOptions {
    fn default() -> Self {
        Self {
            agents: 20,
            commands: 25,
            size: 64,
            partitions: 2,
        }
    }
}

/// How long the bench waits for one reply, or for the pools to read to the
/// end of their topics, before it gives up.
const PATIENCE: Duration = Duration::from_secs(120);

/// The figures of one routing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoutingFigures {
    /// The routing measured.
    pub routing: CommandRouting,
    /// Command records the pools' polls returned.
    pub read: u64,
    /// Polls of commands topics, records returned or not.
    pub polls: u64,
    /// Commands the pools handled.
    pub handled: u64,
    /// Records the pools read and skipped (addressed to another agent).
    pub skipped: u64,
    /// From the first command sent to the last reply received.
    pub answered_in: Duration,
}

impl RoutingFigures {
    /// Records read per record handled.
    pub fn read_per_handled(&self) -> f64 {
        self.read as f64 / self.handled.max(1) as f64
    }
}

/// Both routings' figures on one log.
#[derive(Debug, Clone, PartialEq)]
pub struct TopologyBenchReport {
    /// The log, as it describes itself.
    pub log: String,
    /// What ran.
    pub options: TopologyBenchOptions,
    /// Every command on `agent.commands`.
    pub shared: RoutingFigures,
    /// Commands in the inboxes.
    pub inbox: RoutingFigures,
}

impl fmt::Display for TopologyBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "topology bench on {}: {} agents, {} commands each ({} in all) of {} bytes, {} partitions per topic, echo pools in-process",
            self.log,
            o.agents,
            o.commands,
            o.agents as u64 * o.commands,
            o.size,
            o.partitions
        )?;
        for r in [&self.shared, &self.inbox] {
            writeln!(
                f,
                "  {:<6} read {:>7} records for {:>6} handled: {:>6.2} read per handled ({} skipped); {} polls; answered in {:.2} s",
                r.routing.as_str(),
                r.read,
                r.handled,
                r.read_per_handled(),
                r.skipped,
                r.polls,
                r.answered_in.as_secs_f64()
            )?;
        }
        write!(
            f,
            "  read per handled, shared/inbox: {:.2}",
            self.shared.read_per_handled() / self.inbox.read_per_handled().max(f64::MIN_POSITIVE)
        )
    }
}

/// Runs the shared routing, then the inbox routing, on `log`.
pub async fn run_topology_bench(
    log: SharedLog,
    options: TopologyBenchOptions,
) -> Result<TopologyBenchReport, BenchError> {
    if options.agents == 0 || options.commands == 0 || options.size == 0 {
        return Err(BenchError::Options(
            "--agents, --commands and --size must be at least 1".into(),
        ));
    }
    let shared = run_routing(&log, CommandRouting::Shared, &options).await?;
    let inbox = run_routing(&log, CommandRouting::Inbox, &options).await?;
    Ok(TopologyBenchReport {
        log: log.describe(),
        options,
        shared,
        inbox,
    })
}

/// One routing in a fresh stream: pools, commands, replies, then the count.
async fn run_routing(
    base: &SharedLog,
    routing: CommandRouting,
    options: &TopologyBenchOptions,
) -> Result<RoutingFigures, BenchError> {
    let stream = super::fresh_stream(&format!("topology-{routing}"));
    let counting = Arc::new(CountingLog::new(base.clone(), &stream));
    let log: SharedLog = counting.clone();
    let topology = TopologyConfig::new(&stream)
        .with_partitions(options.partitions)
        .with_routing(routing)
        .ensure(log.as_ref())
        .await?;
    let agents: Vec<AgentId> = (0..options.agents)
        .map(|i| agent(&format!("bench-agent-{i:02}")))
        .collect();
    let shutdown = CancellationToken::new();
    let mut pools = Vec::with_capacity(agents.len());
    for agent in &agents {
        let producer = Producer::new(log.clone(), topology.clone(), agent.clone());
        let config = WorkerConfig {
            concurrency: 2 * options.partitions as usize,
            ..WorkerConfig::default()
        };
        let worker = Worker::new(producer, config).fallback(EchoHandler);
        pools.push((worker.stats(), tokio::spawn(worker.run(shutdown.clone()))));
    }
    let figures = measure(&log, &topology, &agents, options).await;
    shutdown.cancel();
    let mut stats = Vec::with_capacity(pools.len());
    for (pool_stats, task) in pools {
        match task.await {
            Ok(result) => result?,
            Err(error) => return Err(BenchError::Stalled(format!("a pool failed: {error}"))),
        }
        stats.push(pool_stats);
    }
    let answered_in = figures?;
    let sum = |counter: fn(&WorkerStats) -> &AtomicU64| {
        stats
            .iter()
            .map(|s| counter(s).load(Ordering::Relaxed))
            .sum()
    };
    Ok(RoutingFigures {
        routing,
        read: counting.read.load(Ordering::Relaxed),
        polls: counting.polls.load(Ordering::Relaxed),
        handled: sum(|s| &s.handled),
        skipped: sum(|s| &s.skipped),
        answered_in,
    })
}

/// Sends every command, waits for every reply and for the pools to read
/// to the end of their topics; how long the replies took.
async fn measure(
    log: &SharedLog,
    topology: &Topology,
    agents: &[AgentId],
    options: &TopologyBenchOptions,
) -> Result<Duration, BenchError> {
    if topology.inboxes.routing == CommandRouting::Inbox {
        // A command sent before its agent's pool made the inbox would go to
        // agent.commands.
        for agent in agents {
            until(PATIENCE, "the pools to create their inboxes", async || {
                Ok(topology.find_inbox(log.as_ref(), agent).await?.is_some())
            })
            .await?;
        }
    }
    let requester = Requester::new(Producer::new(
        log.clone(),
        topology.clone(),
        agent("bench-requester"),
    ));
    let body = vec![b'x'; options.size];
    let started = Instant::now();
    let mut watches = Vec::with_capacity(agents.len() * options.commands as usize);
    for _ in 0..options.commands {
        for agent in agents {
            let request = CommandRequest::new("echo", body.clone()).to(agent.clone());
            watches.push(requester.send(request).await?);
        }
    }
    for watch in &mut watches {
        loop {
            match watch.next(PATIENCE).await? {
                ReplyEvent::Response(_) => break,
                ReplyEvent::Status(_) => {}
                other => return Err(BenchError::Answer(format!("{other:?}"))),
            }
        }
    }
    let answered_in = started.elapsed();
    for agent in agents {
        for topic in topology.command_topics(log.as_ref(), agent).await? {
            for partition in 0..topic.partitions.get() {
                until(
                    PATIENCE,
                    "the pools to read their topics to the end",
                    async || {
                        let last = log.last_offset(&topic, partition).await?;
                        let committed = log
                            .committed_offset(
                                &topic,
                                &topology.consumer_group(&topic, agent.as_str()),
                                partition,
                            )
                            .await?;
                        Ok(last.is_none_or(|last| committed.is_some_and(|c| c >= last)))
                    },
                )
                .await?;
            }
        }
    }
    Ok(answered_in)
}

/// Asks `done` every few milliseconds until it says yes, for at most
/// `limit`.
async fn until(
    limit: Duration,
    what: &str,
    mut done: impl AsyncFnMut() -> Result<bool, LogError>,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + limit;
    while !done().await? {
        if Instant::now() >= deadline {
            return Err(BenchError::Stalled(format!(
                "gave up after {limit:?} waiting for {what}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).unwrap_or_else(|_| unreachable!("bench agent names are valid"))
}

/// Counts the records (and polls) of the commands topics of one stream
/// that polls return; everything else goes straight through.
struct CountingLog {
    inner: SharedLog,
    stream: String,
    names: TopicNames,
    read: AtomicU64,
    polls: AtomicU64,
}

impl CountingLog {
    fn new(inner: SharedLog, stream: &str) -> Self {
        Self {
            inner,
            stream: stream.to_owned(),
            names: TopicNames::default(),
            read: AtomicU64::new(0),
            polls: AtomicU64::new(0),
        }
    }

    fn is_commands(&self, topic: &TopicInfo) -> bool {
        topic.stream == self.stream
            && (topic.topic == self.names.commands
                || topic.topic.starts_with(&self.names.inbox_prefix))
    }
}

#[async_trait]
impl LogDecorator for CountingLog {
    fn inner(&self) -> &dyn Log {
        self.inner.as_ref()
    }

    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        let records = self.inner.poll(topic, partition, from, max, wait).await?;
        if self.is_commands(topic) {
            self.polls.fetch_add(1, Ordering::Relaxed);
            self.read.fetch_add(records.len() as u64, Ordering::Relaxed);
        }
        Ok(records)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both routings on a throwaway embedded log: with the shared topic
    /// every pool reads every command, with inboxes only its own.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn inboxes_cut_what_each_pool_reads_to_its_own_commands() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log: SharedLog = Arc::new(
            agdx::log::embedded::EmbeddedLog::open(dir.path()).expect("open the embedded log"),
        );
        let options = TopologyBenchOptions {
            agents: 3,
            commands: 2,
            size: 8,
            partitions: 1,
        };
        let report = run_topology_bench(log, options).await.expect("the bench");
        assert_eq!((report.shared.read, report.shared.handled), (18, 6));
        assert_eq!(report.shared.skipped, 12);
        assert_eq!((report.inbox.read, report.inbox.handled), (6, 6));
        assert_eq!(report.inbox.skipped, 0);
        assert!(
            report.to_string().contains("shared/inbox: 3.00"),
            "{report}"
        );
    }
}
