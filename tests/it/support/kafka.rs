//! Finds a Kafka-protocol broker for the integration tests.
//!
//! In this order:
//! 1. `AGDX_TEST_KAFKA_BROKERS=HOST:PORT[,HOST:PORT...]`: a running cluster.
//! 2. `AGDX_TEST_TANSU_BIN=/path/to/tansu`: a Tansu broker started with its
//!    SQLite store in a temporary directory, on a free loopback port, and
//!    killed when the last test using it is done.
//! 3. `tansu` on `PATH`, started the same way.
//!
//! The tests of one test binary share one broker while any of them runs, so
//! every test works in streams of its own.

// Each test binary uses its own part of this support module.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use agdx::log::SharedLog;
use agdx::log::kafka::KafkaLog;
use tokio::sync::Mutex;

/// How long a broker may take to answer.
const STARTUP: Duration = Duration::from_secs(60);

/// Options of every test connection: a dead member is evicted quickly, and
/// reads hold a fetch only briefly (Tansu holds every fetch for the whole
/// wait, even when records are there).
pub const TEST_OPTIONS: &str = "session_timeout=6s&fetch_wait=10ms";

/// The broker currently shared by the tests of this binary.
/// The broker each test module shares while any of its tests runs. One
/// per module, as when each module was a test binary of its own: a Tansu
/// that has served the whole suite's groups is slower to hand a new group
/// its records than the tests wait for.
static SHARED: Mutex<Vec<(String, Weak<Broker>)>> = Mutex::const_new(Vec::new());

/// A connected Kafka log for one test, with whatever keeps its broker alive.
pub struct KafkaTestLog {
    pub log: SharedLog,
    /// The connection string, e.g. `kafka://127.0.0.1:41234?session_timeout=6s&...`.
    pub url: String,
    _broker: Arc<Broker>,
}

impl KafkaTestLog {
    /// A second, independent client of the same cluster (as another process would have).
    pub async fn connect_again(&self) -> SharedLog {
        match KafkaLog::connect(&self.url).await {
            Ok(log) => Arc::new(log),
            Err(e) => panic!("cannot open another client of {}: {e}", self.url),
        }
    }
}

/// Says, once per test binary, that the Kafka half was skipped and why.
pub fn say_skipped(reason: &str) {
    super::say_skipped_once("kafka", reason);
}

/// The connection string for `brokers` with the test options.
pub fn test_url(brokers: &str) -> String {
    format!("kafka://{brokers}?{TEST_OPTIONS}")
}

/// Connects to a test broker, or says why none is available.
pub async fn kafka_log() -> Result<KafkaTestLog, String> {
    let broker = shared_broker().await?;
    let url = test_url(&broker.brokers());
    let log: SharedLog = Arc::new(KafkaLog::connect(&url).await.map_err(|e| format!("{e}"))?);
    Ok(KafkaTestLog {
        log,
        url,
        _broker: broker,
    })
}

async fn shared_broker() -> Result<Arc<Broker>, String> {
    // The test harness names a test's thread after the test.
    let module = std::thread::current()
        .name()
        .and_then(|name| name.split_once("::"))
        .map(|(module, _)| module.to_owned())
        .unwrap_or_default();
    let mut shared = SHARED.lock().await;
    shared.retain(|(_, broker)| broker.strong_count() > 0);
    if let Some(broker) = shared
        .iter()
        .find(|(owner, _)| *owner == module)
        .and_then(|(_, broker)| broker.upgrade())
    {
        return Ok(broker);
    }
    let broker = Arc::new(Broker::find().await?);
    shared.push((module, Arc::downgrade(&broker)));
    Ok(broker)
}

/// A broker the tests talk to, and what keeps it running.
enum Broker {
    Running(String),
    Tansu(TansuBroker),
}

impl Broker {
    async fn find() -> Result<Self, String> {
        if let Ok(brokers) = std::env::var("AGDX_TEST_KAFKA_BROKERS") {
            return Ok(Broker::Running(brokers));
        }
        let binary = tansu_binary()?;
        let dir =
            tempfile::tempdir().map_err(|e| format!("cannot create a directory for Tansu: {e}"))?;
        let storage = "sqlite://tansu.db".to_owned();
        TansuBroker::start(&binary, dir, &storage)
            .await
            .map(Broker::Tansu)
    }

    fn brokers(&self) -> String {
        match self {
            Broker::Running(brokers) => brokers.clone(),
            Broker::Tansu(tansu) => tansu.address.clone(),
        }
    }
}

/// Tansu's cluster id unless it is started with another.
const TANSU_CLUSTER_ID: &str = "tansu_cluster";

/// Whether the test broker is Tansu, whose defects some tests work
/// around: one this harness starts, or one named by
/// `AGDX_TEST_KAFKA_BROKERS` that reports Tansu's default cluster id.
pub async fn is_tansu() -> bool {
    let Ok(brokers) = std::env::var("AGDX_TEST_KAFKA_BROKERS") else {
        return true;
    };
    tokio::task::spawn_blocking(move || {
        use rdkafka::consumer::Consumer as _;
        let client: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &brokers)
            .create()
            .expect("a client to ask the cluster its id");
        client.client().fetch_cluster_id(Duration::from_secs(10))
    })
    .await
    .expect("asking the cluster its id")
    .is_some_and(|id| id == TANSU_CLUSTER_ID)
}

/// The Tansu binary to start: `AGDX_TEST_TANSU_BIN`, else `tansu` on `PATH`.
pub fn tansu_binary() -> Result<PathBuf, String> {
    if let Ok(binary) = std::env::var("AGDX_TEST_TANSU_BIN") {
        return Ok(PathBuf::from(binary));
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join("tansu"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| "no Kafka broker: AGDX_TEST_KAFKA_BROKERS and AGDX_TEST_TANSU_BIN are unset and no `tansu` is on PATH; install one with `cargo install tansu --locked --features libsql,postgres` or set AGDX_TEST_KAFKA_BROKERS=host:port".to_owned())
}

/// A `tansu broker` child process with its store in a directory of its own.
pub struct TansuBroker {
    child: Child,
    pub address: String,
    /// Where the broker tells clients to reach it.
    advertised: String,
    binary: PathBuf,
    storage: String,
    dir: tempfile::TempDir,
}

impl TansuBroker {
    /// Starts `binary` on a free loopback port with `storage` (a Tansu
    /// storage URL; `sqlite://` paths are relative to `dir`).
    pub async fn start(
        binary: &Path,
        dir: tempfile::TempDir,
        storage: &str,
    ) -> Result<Self, String> {
        let port = super::free_port()?;
        Self::start_on(binary, dir, storage, port, None).await
    }

    /// Starts `binary` on loopback `port`; with `advertised` (`HOST:PORT`),
    /// the broker tells clients to reach it there instead, e.g. at a
    /// [`super::balancer::Balancer`] in front of several brokers.
    pub async fn start_on(
        binary: &Path,
        dir: tempfile::TempDir,
        storage: &str,
        port: u16,
        advertised: Option<&str>,
    ) -> Result<Self, String> {
        let address = format!("127.0.0.1:{port}");
        let advertised = advertised.unwrap_or(&address).to_owned();
        let mut broker = TansuBroker {
            child: spawn(binary, dir.path(), port, &advertised, storage)?,
            address,
            advertised,
            binary: binary.to_owned(),
            storage: storage.to_owned(),
            dir,
        };
        broker.wait_until_ready().await?;
        Ok(broker)
    }

    /// Kills the broker with SIGKILL.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the broker again on the same port and store, after [`Self::kill`].
    pub async fn restart(&mut self) -> Result<(), String> {
        let port = self
            .address
            .rsplit_once(':')
            .and_then(|(_, port)| port.parse().ok())
            .ok_or("the broker's address has no port")?;
        self.child = spawn(
            &self.binary,
            self.dir.path(),
            port,
            &self.advertised,
            &self.storage,
        )?;
        self.wait_until_ready().await
    }

    async fn wait_until_ready(&mut self) -> Result<(), String> {
        let log_path = self.dir.path().join(LOG_FILE);
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!(
                    "tansu exited ({status}) before accepting connections; its log:\n{}",
                    super::tail(&log_path)
                ));
            }
            if tokio::net::TcpStream::connect(&self.address).await.is_ok()
                && KafkaLog::connect(&test_url(&self.advertised)).await.is_ok()
            {
                return Ok(());
            }
            if started.elapsed() > STARTUP {
                return Err(format!(
                    "tansu did not answer on {} within {STARTUP:?}; its log:\n{}",
                    self.address,
                    super::tail(&log_path)
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for TansuBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The broker's output, in its directory.
const LOG_FILE: &str = "tansu.log";

fn spawn(
    binary: &Path,
    dir: &Path,
    port: u16,
    advertised: &str,
    storage: &str,
) -> Result<Child, String> {
    let log_path = dir.join(LOG_FILE);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| format!("cannot create {}: {e}", log_path.display()))?;
    let log_err = log
        .try_clone()
        .map_err(|e| format!("cannot share {}: {e}", log_path.display()))?;
    let url = format!("tcp://127.0.0.1:{port}");
    let advertised = format!("tcp://{advertised}");
    Command::new(binary)
        .arg("broker")
        .args([
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &advertised,
        ])
        .args(["--storage-engine", storage])
        .current_dir(dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err)
        .spawn()
        .map_err(|e| {
            format!(
                "cannot start {} (AGDX_TEST_TANSU_BIN or tansu on PATH): {e}",
                binary.display()
            )
        })
}
