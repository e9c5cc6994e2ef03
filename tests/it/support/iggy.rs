//! Finds an Apache Iggy server (0.8.x) for the integration tests.
//!
//! In this order:
//! 1. `AGDX_TEST_IGGY_ADDRESS=HOST:PORT`: a running server whose root user
//!    is `iggy`/`iggy`.
//! 2. `AGDX_TEST_IGGY_SERVER=/path/to/iggy-server`: the binary is started
//!    with a temporary data directory on a free loopback port (HTTP, QUIC
//!    and WebSocket off, heartbeats verified) and killed when the last test
//!    using it is done.
//! 3. A Docker engine: the `apache/iggy:0.8.0` image through testcontainers.
//!
//! The tests of one test binary share one server while any of them runs, so
//! every test works in streams of its own (see [`unique_name`]). A test that
//! crashes the server starts one of its own instead ([`own_server`]).

// Each test binary uses its own part of this support module.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use agdx::log::SharedLog;
use agdx::log::iggy::IggyLog;
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::sync::Mutex;

/// The Iggy server image the tests use when a Docker engine is there.
const IMAGE: (&str, &str) = ("apache/iggy", "0.8.0");

/// How long a server may take to accept connections.
const STARTUP: Duration = Duration::from_secs(120);

/// The server currently shared by the tests of this binary.
static SHARED: Mutex<Weak<Server>> = Mutex::const_new(Weak::new());

/// A connected Iggy log for one test, with whatever keeps its server alive.
pub struct IggyTestLog {
    pub log: SharedLog,
    /// The connection string, e.g. `iggy://iggy:iggy@127.0.0.1:41234`.
    pub url: String,
    _server: Arc<Server>,
}

impl IggyTestLog {
    /// A second, independent connection to the same server (another client,
    /// as another process would have).
    pub async fn connect_again(&self) -> SharedLog {
        match IggyLog::connect(&self.url).await {
            Ok(log) => Arc::new(log),
            Err(e) => panic!("cannot open another connection to {}: {e}", self.url),
        }
    }
}

/// A name no other test (nor an earlier run against the same server) uses.
pub fn unique_name(prefix: &str) -> String {
    format!("{prefix}-{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// Says, once per run, that the Iggy half was skipped and why.
pub fn say_skipped(reason: &str) {
    super::say_skipped_once("iggy", reason);
}

/// Connects to a test Iggy server, or says why none is available.
pub async fn iggy_log() -> Result<IggyTestLog, String> {
    let server = shared_server().await?;
    let url = server.url();
    let log: SharedLog = Arc::new(IggyLog::connect(&url).await.map_err(|e| format!("{e}"))?);
    Ok(IggyTestLog {
        log,
        url,
        _server: server,
    })
}

async fn shared_server() -> Result<Arc<Server>, String> {
    let mut shared = SHARED.lock().await;
    if let Some(server) = shared.upgrade() {
        return Ok(server);
    }
    let server = Arc::new(Server::find().await?);
    *shared = Arc::downgrade(&server);
    Ok(server)
}

/// A server the tests talk to, and what keeps it running.
enum Server {
    Running(String),
    Process(ServerProcess),
    /// The container, kept so it runs while the tests do, and its address.
    Container {
        _container: Box<ContainerAsync<GenericImage>>,
        address: String,
    },
}

impl Server {
    async fn find() -> Result<Self, String> {
        if let Ok(address) = std::env::var("AGDX_TEST_IGGY_ADDRESS") {
            return Ok(Server::Running(address));
        }
        if let Ok(binary) = std::env::var("AGDX_TEST_IGGY_SERVER") {
            return ServerProcess::start(Path::new(&binary))
                .await
                .map(Server::Process);
        }
        if docker_answers().await {
            return start_container().await;
        }
        Err("no Iggy server: AGDX_TEST_IGGY_ADDRESS and AGDX_TEST_IGGY_SERVER are unset and no Docker engine answers; set AGDX_TEST_IGGY_SERVER=/path/to/iggy-server (0.8.x) or AGDX_TEST_IGGY_ADDRESS=host:port (root user iggy/iggy)".to_owned())
    }

    fn address(&self) -> &str {
        match self {
            Server::Running(address) | Server::Container { address, .. } => address,
            Server::Process(process) => &process.address,
        }
    }

    fn url(&self) -> String {
        format!("iggy://iggy:iggy@{}", self.address())
    }
}

/// An `iggy-server` of a test's own, on a data directory and a port of its
/// own, which the test may kill and start again: the server a crash test
/// needs. It runs with the server's default settings, as the shared one
/// does. Only a binary named by `AGDX_TEST_IGGY_SERVER` can be had this way.
pub struct OwnIggyServer {
    process: ServerProcess,
}

/// Starts an `iggy-server` of the test's own, or says why it cannot.
pub async fn own_server() -> Result<OwnIggyServer, String> {
    let binary = std::env::var("AGDX_TEST_IGGY_SERVER").map_err(|_| {
        "this test kills and restarts a server of its own, which needs AGDX_TEST_IGGY_SERVER=/path/to/iggy-server (0.8.x)".to_owned()
    })?;
    Ok(OwnIggyServer {
        process: ServerProcess::start(Path::new(&binary)).await?,
    })
}

impl OwnIggyServer {
    /// The connection string, e.g. `iggy://iggy:iggy@127.0.0.1:41234`.
    pub fn url(&self) -> String {
        format!("iggy://iggy:iggy@{}", self.process.address)
    }

    /// Kills the server with SIGKILL, as a crash would, and reaps it.
    pub fn kill(&mut self) {
        self.process.stop();
    }

    /// Starts the server again on the same data directory and port, and
    /// waits until it accepts connections.
    pub async fn restart(&mut self) -> Result<(), String> {
        self.process.stop();
        self.process.spawn()?;
        self.process.wait_until_ready().await
    }
}

/// An `iggy-server` child process with its own data directory.
struct ServerProcess {
    binary: PathBuf,
    child: Option<Child>,
    address: String,
    dir: tempfile::TempDir,
}

impl ServerProcess {
    async fn start(binary: &Path) -> Result<Self, String> {
        let dir = tempfile::tempdir()
            .map_err(|e| format!("cannot create a data directory for iggy-server: {e}"))?;
        let port = free_port()?;
        let mut process = ServerProcess {
            binary: binary.to_owned(),
            child: None,
            address: format!("127.0.0.1:{port}"),
            dir,
        };
        process.spawn()?;
        process.wait_until_ready().await?;
        Ok(process)
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("server.log")
    }

    /// Starts the server on this process's directory and address, its
    /// output added to `server.log` there.
    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.log_path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("cannot open {}: {e}", log_path.display()))?;
        let log_err = log
            .try_clone()
            .map_err(|e| format!("cannot share {}: {e}", log_path.display()))?;
        let child = Command::new(&self.binary)
            .arg("--with-default-root-credentials")
            .current_dir(self.dir.path())
            .env("IGGY_TCP_ADDRESS", &self.address)
            .env("IGGY_HTTP_ENABLED", "false")
            .env("IGGY_QUIC_ENABLED", "false")
            .env("IGGY_WEBSOCKET_ENABLED", "false")
            .env("IGGY_SYSTEM_PATH", self.dir.path().join("data"))
            .env("IGGY_HEARTBEAT_ENABLED", "true")
            .env("IGGY_HEARTBEAT_INTERVAL", "5 s")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start {} (AGDX_TEST_IGGY_SERVER): {e}",
                    self.binary.display()
                )
            })?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the server (SIGKILL) and reaps it, when it runs.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    async fn wait_until_ready(&mut self) -> Result<(), String> {
        let url = format!("iggy://iggy:iggy@{}", self.address);
        let log_path = self.log_path();
        let started = Instant::now();
        loop {
            let exited = match self.child.as_mut() {
                Some(child) => child.try_wait().ok().flatten().map(|s| s.to_string()),
                None => Some("not started".to_owned()),
            };
            if let Some(status) = exited {
                return Err(format!(
                    "iggy-server exited ({status}) before accepting connections; its log:\n{}",
                    tail(&log_path)
                ));
            }
            if tokio::net::TcpStream::connect(&self.address).await.is_ok()
                && IggyLog::connect(&url).await.is_ok()
            {
                return Ok(());
            }
            if started.elapsed() > STARTUP {
                return Err(format!(
                    "iggy-server did not accept connections on {} within {STARTUP:?}; its log:\n{}",
                    self.address,
                    tail(&log_path)
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The last lines of a log file, for error messages.
fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}

/// A loopback port nothing listens on right now.
fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(|e| format!("cannot find a free port: {e}"))
}

/// Whether a Docker engine answers on its socket within a second.
async fn docker_answers() -> bool {
    let socket = std::env::var("DOCKER_HOST")
        .ok()
        .and_then(|host| host.strip_prefix("unix://").map(str::to_owned))
        .unwrap_or_else(|| "/var/run/docker.sock".to_owned());
    let ping = async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::UnixStream::connect(&socket).await.ok()?;
        stream
            .write_all(b"GET /_ping HTTP/1.0\r\n\r\n")
            .await
            .ok()?;
        let mut answer = Vec::new();
        stream.read_to_end(&mut answer).await.ok()?;
        Some(answer.starts_with(b"HTTP/1.") && answer.windows(6).any(|w| w == b" 200 O"))
    };
    matches!(
        tokio::time::timeout(Duration::from_secs(1), ping).await,
        Ok(Some(true))
    )
}

async fn start_container() -> Result<Server, String> {
    let container = GenericImage::new(IMAGE.0, IMAGE.1)
        .with_exposed_port(8090.tcp())
        .with_wait_for(WaitFor::message_on_stdout("Iggy TCP server has started"))
        .with_env_var("IGGY_ROOT_USERNAME", "iggy")
        .with_env_var("IGGY_ROOT_PASSWORD", "iggy")
        .with_env_var("IGGY_TCP_ADDRESS", "0.0.0.0:8090")
        .with_env_var("IGGY_HTTP_ENABLED", "false")
        .with_env_var("IGGY_QUIC_ENABLED", "false")
        .with_env_var("IGGY_WEBSOCKET_ENABLED", "false")
        .with_env_var("IGGY_HEARTBEAT_ENABLED", "true")
        .with_env_var("IGGY_HEARTBEAT_INTERVAL", "5 s")
        .with_security_opt("seccomp=unconfined")
        .with_cap_add("SYS_NICE")
        .with_ulimit("memlock", -1, Some(-1))
        .with_startup_timeout(STARTUP)
        .start()
        .await
        .map_err(|e| format!("cannot start the {}:{} container: {e}", IMAGE.0, IMAGE.1))?;
    let host = container
        .get_host()
        .await
        .map_err(|e| format!("cannot find the container's host: {e}"))?;
    let port = container
        .get_host_port_ipv4(8090)
        .await
        .map_err(|e| format!("cannot find the container's port 8090: {e}"))?;
    Ok(Server::Container {
        _container: Box::new(container),
        address: format!("{host}:{port}"),
    })
}
