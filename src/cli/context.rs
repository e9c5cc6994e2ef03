//! What most subcommands share: opening the log and the topology, parsing
//! durations and agent names, and the exit codes scripts rely on.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use agdx::log::{LogError, LogSpec, SharedLog};
use agdx::trust::{KeyRegistry, RegistryError, Verifier};
use agdx::{
    BlobSpec, ClaimCheck, CommandRouting, DEFAULT_CLAIM_CHECK_THRESHOLD, Topology, TopologyConfig,
};

/// What to do once a command's future has returned, before its runtime
/// shuts down (see [`on_finish`]).
static FINISHED: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>> = std::sync::OnceLock::new();

/// Sets what [`block_on`] does once the command is done and before the
/// runtime cancels what is left (the first call wins).
pub fn on_finish(hook: impl Fn() + Send + Sync + 'static) {
    let _ = FINISHED.set(Box::new(hook));
}

/// Exit status of a failure that is not one of the specific ones below.
pub const EXIT_FAILURE: u8 = 1;
/// `agdx ask`: the agent answered with an error.
pub const EXIT_REMOTE_ERROR: u8 = 3;
/// `agdx ask`: no answer in time.
pub const EXIT_TIMEOUT: u8 = 4;
/// The log is damaged: `agdx check` found damage, a reader stepped over
/// damaged records (everything else was printed), or the log refused to
/// open because it lost records it acknowledged.
pub const EXIT_DAMAGED: u8 = 5;

/// Stopped by SIGINT (Ctrl-C) or SIGTERM, as a shell reports a process
/// that SIGINT ended.
pub const EXIT_INTERRUPTED: u8 = 130;

/// A failure to report on stderr, with the exit status to end with.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: u8,
}

impl Failure {
    /// A general failure (exit 1).
    pub fn new(message: impl std::fmt::Display) -> Self {
        Self {
            message: message.to_string(),
            code: EXIT_FAILURE,
        }
    }
    /// A failure with a specific exit status.
    pub fn with_code(message: impl std::fmt::Display, code: u8) -> Self {
        Self {
            message: message.to_string(),
            code,
        }
    }
}

/// A library error, with the command line's advice for it
/// ([`super::advice`]).
impl<E: std::error::Error + 'static> From<E> for Failure {
    fn from(error: E) -> Self {
        Failure::new(super::advice::explain(&error))
    }
}

/// Prints the failure (if any) and turns the result into an exit code.
pub fn finish(result: Result<(), Failure>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => {
            // A failure can quote what a peer wrote (an error reply's message).
            eprintln!("agdx: {}", super::view::printable(&failure.message));
            ExitCode::from(failure.code)
        }
    }
}

/// Runs an async subcommand on a fresh multi-threaded runtime.
pub fn block_on<F: std::future::Future<Output = Result<(), Failure>>>(future: F) -> ExitCode {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => {
            let outcome = runtime.block_on(future);
            if let Some(hook) = FINISHED.get() {
                hook();
            }
            finish(outcome)
        }
        Err(error) => finish(Err(Failure::new(format!(
            "cannot start the async runtime: {error}"
        )))),
    }
}

/// The global options: which log, which stream, which key registry; and
/// how long connecting to a log server may take.
#[derive(Debug, Clone)]
pub struct Global {
    pub log: String,
    /// Whether --log was on the command line itself (not `AGDX_LOG`, not
    /// the default).
    pub log_given: bool,
    pub stream: String,
    /// `--topology`: how commands reach their agent.
    pub routing: CommandRouting,
    pub keys: Option<PathBuf>,
    /// `--blobs`: where claim-checked bodies go (default: by the log).
    pub blobs: Option<String>,
    pub connect_limit: Duration,
}

impl Global {
    /// The parsed `--log`.
    pub fn spec(&self) -> Result<LogSpec, Failure> {
        self.log.parse::<LogSpec>().map_err(Failure::new)
    }

    /// Opens the log, connecting within [`Global::connect_limit`].
    pub async fn open(&self) -> Result<SharedLog, Failure> {
        let spec = self.spec()?;
        spec.open_within(self.connect_limit)
            .await
            .map_err(|error| open_failure(&spec, error))
    }

    /// Opens the log and the agent topology, creating what is missing, so a
    /// fresh machine needs no set-up step.
    pub async fn topology(&self) -> Result<(SharedLog, Topology), Failure> {
        let log = self.open().await?;
        let topology = self.topology_config().open(log.as_ref()).await?;
        Ok((log, topology))
    }

    /// [`Global::topology`] for a command that only reads the log (`what`,
    /// e.g. `agdx tail`): an embedded log that does not exist is refused,
    /// naming where it was looked for, instead of being created empty.
    pub async fn read_topology(&self, what: &str) -> Result<(SharedLog, Topology), Failure> {
        let spec = self.spec()?;
        let log = match spec.open_existing(self.connect_limit).await {
            Ok(log) => log,
            Err(ref error @ LogError::NoLog { ref path, .. }) => {
                return Err(Failure::new(format!(
                    "{error}; {what} reads a log and creates none: name the log your workers use with --log (or AGDX_LOG), or create this one with `agdx --log embedded:{} init`",
                    path.display()
                )));
            }
            Err(error) => return Err(open_failure(&spec, error)),
        };
        let topology = self.topology_config().open(log.as_ref()).await?;
        Ok((log, topology))
    }

    /// The topology `--stream` and `--topology` name.
    pub fn topology_config(&self) -> TopologyConfig {
        TopologyConfig::new(&self.stream).with_routing(self.routing)
    }

    /// How to start a worker for `agent` on this log, for advice: a worker
    /// started in another directory without --log uses another log, so an
    /// embedded log is named by its absolute path.
    pub fn worker_advice(&self, agent: &str) -> String {
        let stream = if self.stream == agdx::DEFAULT_STREAM {
            String::new()
        } else {
            format!(" --stream {}", self.stream)
        };
        match self.spec() {
            Ok(LogSpec::Embedded(path)) => format!(
                "start one on this log with `agdx --log embedded:{}{stream} worker --agent {agent} ...` (a worker started without --log uses ./.agdx of its own directory)",
                std::path::absolute(&path).unwrap_or(path).display()
            ),
            _ => format!(
                "start one with the same --log (or AGDX_LOG) as this command: `agdx --log ...{stream} worker --agent {agent} ...`"
            ),
        }
    }

    /// The key registry `--keys` names, if any.
    pub fn registry(&self) -> Result<Option<KeyRegistry>, Failure> {
        self.keys
            .as_deref()
            .map(|path| KeyRegistry::load(path).map_err(registry_failure))
            .transpose()
    }

    /// A verifier over the `--keys` registry, following the file's changes;
    /// `what` (e.g. `--verify`) says what needs it when none is named.
    pub fn verifier(&self, what: &str) -> Result<Verifier, Failure> {
        match &self.keys {
            Some(path) => Verifier::from_file(path).map_err(registry_failure),
            None => Err(Failure::new(format!(
                "{what} needs the key registry: pass --keys FILE or set AGDX_KEYS (`agdx keys generate` creates one)"
            ))),
        }
    }

    /// The local state directory: inside the embedded log's directory, or
    /// `./.agdx-state` for a remote log.
    pub fn default_state_dir(&self) -> PathBuf {
        match self.spec() {
            Ok(LogSpec::Embedded(path)) => path.join("state"),
            _ => PathBuf::from(".agdx-state"),
        }
    }

    /// The blob store `--blobs` names; by default the embedded log's
    /// `blobs/` directory, and the log itself for Iggy and Kafka.
    pub fn blob_spec(&self) -> Result<BlobSpec, Failure> {
        match &self.blobs {
            Some(text) => text.parse().map_err(Failure::new),
            None => Ok(BlobSpec::default_for(&self.spec()?)),
        }
    }

    /// The claim check over `log`: blobs in `blob_dir` when given (the
    /// worker's `--blob-dir`), else in the store of [`Global::blob_spec`].
    pub fn claim_check(
        &self,
        log: &SharedLog,
        blob_dir: Option<PathBuf>,
        threshold: Option<usize>,
    ) -> Result<ClaimCheck, Failure> {
        let spec = match blob_dir {
            Some(dir) => BlobSpec::Dir(dir),
            None => self.blob_spec()?,
        };
        let store = spec
            .open(log, &TopologyConfig::new(&self.stream))
            .map_err(Failure::new)?;
        Ok(ClaimCheck::new(
            store,
            threshold.unwrap_or(DEFAULT_CLAIM_CHECK_THRESHOLD),
        ))
    }
}

/// Parses a duration such as `30s`, `1500ms` or `2m`.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text)
        .map_err(|e| format!("{e}; write a number with a unit, e.g. 500ms, 30s or 2m"))
}

/// Parses an agent name.
pub fn parse_agent(text: &str) -> Result<agdx::wire::AgentId, String> {
    agdx::wire::AgentId::new(text).map_err(|e| e.to_string())
}

/// Parses a point in time: RFC 3339 (`2024-05-01T12:00:00Z`) or a duration
/// ago (`10m`, `2h`); epoch microseconds.
pub fn parse_since(text: &str) -> Result<u64, String> {
    use agdx::Clock as _;
    if let Ok(micros) = agdx::trust::parse_time(text) {
        return Ok(micros);
    }
    let ago = humantime::parse_duration(text).map_err(|_| {
        format!("{text:?} is neither a time (2024-05-01T12:00:00Z) nor a duration ago (10m, 2h)")
    })?;
    let ago = u64::try_from(ago.as_micros()).unwrap_or(u64::MAX);
    Ok(agdx::SystemClock.now_micros().saturating_sub(ago))
}

/// Returns on SIGINT (Ctrl-C) or SIGTERM.
pub async fn terminated() {
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate => {}
    }
}

/// Cancels `shutdown` on SIGINT or SIGTERM, saying `what` happens next.
pub async fn stop_on_signal(shutdown: tokio_util::sync::CancellationToken, what: &'static str) {
    terminated().await;
    eprintln!("{what}");
    shutdown.cancel();
}

/// A registry that cannot be read, with the way to make one.
fn registry_failure(error: RegistryError) -> Failure {
    match &error {
        RegistryError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            Failure::new(format!(
                "{error}; create it with `agdx keys generate --registry FILE ...`"
            ))
        }
        _ => error.into(),
    }
}

/// A log that would not open, with what to do about it: a damaged one exits
/// [`EXIT_DAMAGED`] and points at `agdx check`.
fn open_failure(spec: &LogSpec, error: LogError) -> Failure {
    match error {
        LogError::Damaged { .. } => Failure::with_code(
            format!("{error}; `agdx check --log {spec}` names everything damaged"),
            EXIT_DAMAGED,
        ),
        other => other.into(),
    }
}
