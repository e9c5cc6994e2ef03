//! The agent fabric over every backend: a fresh topology per test, and
//! functions to run workers and read what landed on the log.

use std::any::Any;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use agdx::log::{LogRecord, SharedLog, TopicInfo};
use agdx::wire::{AgentEnvelope, AgentId, DeadLetter};
use agdx::worker::{Worker, WorkerConfig};
use agdx::{Producer, Requester, RetryPolicy, Topology, TopologyConfig};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::{iggy, kafka, unique_stream};

/// Partitions of every topic in the fabric tests (few, so Iggy set-up is quick).
pub const PARTITIONS: u32 = 4;

/// One backend with a fresh agent topology.
pub struct Fabric {
    /// `embedded`, `iggy` or `kafka`.
    pub backend: &'static str,
    pub log: SharedLog,
    /// What `--log` names this log as, for child `agdx` processes.
    pub spec: String,
    pub stream: String,
    pub topology: Topology,
    /// A temporary directory for state, blobs and files of this test.
    pub dir: tempfile::TempDir,
    _keep: Box<dyn Any + Send + Sync>,
}

/// The fabric on every backend available (embedded always; Iggy and Kafka
/// when the harness finds a server or broker, else one line saying why not).
pub async fn fabrics(test: &str) -> Vec<Fabric> {
    let mut all = vec![embedded_fabric(test).await];
    match iggy::iggy_log().await {
        Ok(found) => {
            let log = found.log.clone();
            let spec = found.url.clone();
            let dir = tempfile::tempdir().expect("create a temporary directory");
            all.push(Fabric::new("iggy", log, spec, test, dir, found).await);
        }
        Err(reason) => iggy::say_skipped(&reason),
    }
    match kafka_fabric(test).await {
        Ok(fabric) => all.push(fabric),
        Err(reason) => kafka::say_skipped(&reason),
    }
    all
}

/// The fabric on the Kafka test broker, or why there is none.
pub async fn kafka_fabric(test: &str) -> Result<Fabric, String> {
    let found = kafka::kafka_log().await?;
    let log = found.log.clone();
    let spec = found.url.clone();
    let dir = tempfile::tempdir().expect("create a temporary directory");
    Ok(Fabric::new("kafka", log, spec, test, dir, found).await)
}

/// The fabric on the embedded log alone, which lives in the `log` folder of
/// [`Fabric::dir`].
pub async fn embedded_fabric(test: &str) -> Fabric {
    let (dir, path, log) = super::embedded::fresh_embedded_log();
    let spec = format!("embedded:{}", path.display());
    Fabric::new("embedded", log, spec, test, dir, ()).await
}

/// The fabric on the Iggy server at `url` (a connection string), keeping
/// `keep` alive with it.
pub async fn iggy_fabric(url: &str, test: &str, keep: impl Any + Send + Sync) -> Fabric {
    let log: SharedLog = match agdx::log::iggy::IggyLog::connect(url).await {
        Ok(log) => Arc::new(log),
        Err(e) => panic!("cannot connect to {url}: {e}"),
    };
    let dir = tempfile::tempdir().expect("create a temporary directory");
    Fabric::new("iggy", log, url.to_owned(), test, dir, keep).await
}

/// Runs `check` on every fabric, naming the backend when it fails.
pub async fn on_every_fabric<F, Fut>(test: &str, check: F)
where
    F: Fn(Arc<Fabric>) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    for fabric in fabrics(test).await {
        let backend = fabric.backend;
        super::naming_backend(test, backend, check(Arc::new(fabric))).await;
    }
}

impl Fabric {
    async fn new(
        backend: &'static str,
        log: SharedLog,
        spec: String,
        test: &str,
        dir: tempfile::TempDir,
        keep: impl Any + Send + Sync,
    ) -> Fabric {
        let stream = unique_stream(test);
        let topology = TopologyConfig::new(&stream)
            .with_partitions(PARTITIONS)
            .ensure(log.as_ref())
            .await
            .expect("create the agent topology");
        Fabric {
            backend,
            log,
            spec,
            stream,
            topology,
            dir,
            _keep: Box::new(keep),
        }
    }

    /// A producer writing as `agent`.
    pub fn producer(&self, agent: &str) -> Producer {
        Producer::new(self.log.clone(), self.topology.clone(), agent_id(agent))
    }

    /// A requester asking as `agent`.
    pub fn requester(&self, agent: &str) -> Requester {
        Requester::new(self.producer(agent))
    }

    /// A worker for `agent` with quick retries and a processed-key store in
    /// this test's directory.
    pub fn worker(&self, agent: &str) -> Worker {
        Worker::new(
            self.producer(agent),
            quick_config(self.dir.path().join(format!("state-{agent}"))),
        )
    }

    /// Every record of `topic`, all partitions, in (partition, offset) order.
    pub async fn records(&self, topic: &TopicInfo) -> Vec<LogRecord> {
        let mut all = Vec::new();
        for partition in 0..topic.partitions.get() {
            all.extend(super::drain(self.log.as_ref(), topic, partition, 0, 1000).await);
        }
        all
    }

    /// Every envelope on `agent.responses`.
    pub async fn responses(&self) -> Vec<AgentEnvelope> {
        self.records(&self.topology.responses)
            .await
            .iter()
            .map(|r| AgentEnvelope::decode_valid(&r.payload).expect("a valid reply envelope"))
            .collect()
    }

    /// Every dead-letter capsule on `agent.dlq`.
    pub async fn dead_letters(&self) -> Vec<DeadLetter> {
        self.records(&self.topology.dlq)
            .await
            .iter()
            .map(|r| DeadLetter::decode_valid(&r.payload).expect("a valid dead-letter capsule"))
            .collect()
    }

    /// The record of `agent.commands` at `offset` of `partition`.
    pub async fn command_at(&self, partition: u32, offset: u64) -> LogRecord {
        let mut records = self
            .log
            .poll(
                &self.topology.commands,
                partition,
                offset,
                1,
                Duration::ZERO,
            )
            .await
            .expect("poll");
        assert_eq!(records.len(), 1, "no command at {partition}/{offset}");
        records.remove(0)
    }
}

/// Worker settings for tests: fast retries, a processed-key store in `state`.
pub fn quick_config(state: std::path::PathBuf) -> WorkerConfig {
    WorkerConfig {
        concurrency: 4,
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(50),
        },
        state_dir: Some(state),
        rebalance_every: Duration::from_millis(100),
        ..WorkerConfig::default()
    }
}

/// A valid agent id.
pub fn agent_id(name: &str) -> AgentId {
    AgentId::new(name).expect("a valid agent id")
}

/// A worker running in this process until the handle is stopped.
pub struct Running {
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), agdx::worker::WorkerError>>,
}

impl Running {
    /// Starts `worker`.
    pub fn start(worker: Worker) -> Running {
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(worker.run(shutdown.clone()));
        Running { shutdown, task }
    }

    /// Stops it gracefully and checks that it ended cleanly.
    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task
            .await
            .expect("the worker task")
            .expect("the worker ended cleanly");
    }
}

/// How long a test waits for an answer that should come within moments.
pub const ANSWER: Duration = Duration::from_secs(20);

/// The watched command's terminal reply, which must be a response echoing
/// `body` (statuses before it are passed over).
pub async fn echoed(watch: &mut agdx::ReplyWatch, body: &[u8]) -> agdx::Reply {
    loop {
        match watch.next(ANSWER).await.expect("a reply") {
            agdx::ReplyEvent::Status(_) => {}
            agdx::ReplyEvent::Response(reply) => {
                assert_eq!(reply.body, body, "the echo of its own command");
                return reply;
            }
            other => panic!("expected a response, got {other:?}"),
        }
    }
}

impl Fabric {
    /// Sends a `hello` command with `body` to `echo` in `conversation`,
    /// starts an echo worker and waits for the echo: what comes after a bad
    /// record is still answered. The worker keeps running.
    pub async fn echo_after(
        &self,
        conversation: agdx::wire::ConversationId,
        body: &[u8],
    ) -> Running {
        // The watch reads replies through its requester: keep it alive.
        let requester = self.requester("asker");
        let mut watch = requester
            .send(
                agdx::CommandRequest::new("hello", body.to_vec())
                    .to(agent_id("echo"))
                    .conversation(conversation),
            )
            .await
            .expect("send");
        let running = Running::start(
            self.worker("echo")
                .handle("hello", agdx::worker::EchoHandler),
        );
        echoed(&mut watch, body).await;
        running
    }

    /// The `agdx` binary, pointed at this fabric's log and stream.
    pub fn agdx(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"));
        command
            .arg("--log")
            .arg(&self.spec)
            .arg("--stream")
            .arg(&self.stream)
            .env_remove("AGDX_LOG")
            .env_remove("AGDX_STREAM")
            .env_remove("AGDX_KEYS")
            .current_dir(self.dir.path())
            .kill_on_drop(true);
        command
    }

    /// Runs `agdx ARGS` to completion: (exit code, stdout, stderr).
    pub async fn run_agdx(&self, args: &[&str]) -> (i32, String, String) {
        self.run_agdx_with_input(args, &[]).await
    }

    /// Runs `agdx ARGS` with `input` on its stdin: (exit code, stdout, stderr).
    pub async fn run_agdx_with_input(&self, args: &[&str], input: &[u8]) -> (i32, String, String) {
        use tokio::io::AsyncWriteExt;
        let mut child = self
            .agdx()
            .args(args)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("run agdx");
        let mut stdin = child.stdin.take().expect("agdx's stdin");
        stdin.write_all(input).await.expect("write agdx's stdin");
        drop(stdin);
        let output = child.wait_with_output().await.expect("wait for agdx");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    /// Starts `agdx worker ARGS` in the background.
    pub fn spawn_worker_process(&self, args: &[&str]) -> tokio::process::Child {
        self.agdx()
            .arg("worker")
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .spawn()
            .expect("start an agdx worker process")
    }
}

/// Lines of a text file (none when it does not exist yet).
pub fn lines_of(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .map(|s| s.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// Stops a worker process with SIGTERM and checks it exits 0 (a graceful stop).
pub async fn terminate(child: &mut tokio::process::Child) {
    let pid = child.id().expect("a running worker");
    let status = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .expect("send SIGTERM");
    assert!(status.success());
    let exit = tokio::time::timeout(super::PATIENCE, child.wait())
        .await
        .expect("the worker stops")
        .expect("wait");
    assert!(
        exit.success(),
        "a worker stopped with SIGTERM exits 0, got {exit}"
    );
}
