//! A handler that runs a shell command per request (`agdx worker --exec`).

use std::io::SeekFrom;
use std::process::Stdio;
use std::time::Duration;

use agdx_wire::{ContentType, ErrorCode, StreamPurpose};
use async_trait::async_trait;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncSeekExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use super::call_files::CallFiles;
use super::exec_report::{Asked, Report};
use super::handler::{Handler, HandlerError, HandlerReply, Request};
use super::process_group::ProcessGroup;

/// The exit status that marks a failure as retryable (`EX_TEMPFAIL`).
pub const EXIT_RETRYABLE: i32 = 75;

/// How often the report file is read while the command runs.
const REPORT_EVERY: Duration = Duration::from_millis(100);

/// The most a chunk of `--stream bytes` carries (one read).
const READ_CHUNK: usize = 64 * 1024;

/// How long a command that asked for input waits for it when the command
/// has no deadline (the pool's handler limit still applies).
const INPUT_WAIT: Duration = Duration::from_secs(3600);

/// How often the answer to a prompt tries again to reach a command that
/// has not opened `AGDX_INPUT` yet.
const INPUT_OPEN_EVERY: Duration = Duration::from_millis(20);

/// How an [`ExecHandler`] answers: stdout as one response, or as a chunk
/// stream while the command writes it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ExecOutput {
    /// All of stdout, once the command exits, as the response body.
    #[default]
    Response,
    /// Each line of stdout (with its newline) a chunk as it is written; a
    /// line over 64 KiB in pieces of 64 KiB.
    Lines,
    /// Each read of stdout (up to 64 KiB) a chunk as it is written.
    Bytes,
}

/// Runs `sh -c COMMAND` for each request.
///
/// The body goes to the command's stdin; the environment carries
/// `AGDX_OPERATION`, `AGDX_CONVERSATION`, `AGDX_CORRELATION`, `AGDX_RECORD`,
/// `AGDX_SOURCE`, `AGDX_ATTEMPT` (1 for the first try), `AGDX_REPORT` (a
/// file for reports, below) and, when present, `AGDX_DEADLINE` (the
/// command's deadline, epoch microseconds), `AGDX_IDEMPOTENCY_KEY`,
/// `AGDX_FENCE` (the pool's fence token for the command's partition, see
/// [`Request::fence`]) and `AGDX_BRIDGE_HOPS` (the bridges the command came
/// through, a JSON array to pass on to a bridge the command calls back
/// into, as ax-ipc's `_bridgeHops`). Exit 0 answers with stdout as the
/// response body (or, with [`ExecOutput::Lines`] or [`ExecOutput::Bytes`],
/// ends the chunk stream stdout was sent as); exit 75 is a retryable
/// failure (unless chunks went out already); any other exit is a failure
/// that is not retried, with stderr as the message (ending a stream with
/// that error).
///
/// The command reports progress, `finish_reason`, `usage`, `tool`,
/// `task_state` and metadata by appending JSON lines to the file
/// `AGDX_REPORT` names (see docs/cli.md, "worker --exec"): a progress line
/// goes to the requester as it is written, the rest is set on the answer.
/// A line `{"input_required": PROMPT}` asks the caller for input (as
/// [`Request::ask_input`] does); the command then reads `AGDX_INPUT` (a
/// named pipe) to its end for the caller's answer, once per prompt.
///
/// Each call runs in a process group of its own, killed when the call ends
/// (at the handler limit, or when the pool is told to stop now, too) and
/// when the worker process dies: what a command starts in the background
/// does not outlive its call. See `process_group` for how. A cancelled
/// command's group gets SIGTERM, then SIGKILL once the pool's cancel grace
/// ([`WorkerConfig::cancel_grace`](super::WorkerConfig::cancel_grace)) is over.
#[derive(Debug, Clone)]
pub struct ExecHandler {
    command: String,
    output: ExecOutput,
}

impl ExecHandler {
    /// Runs `command` with `sh -c`, answering with its stdout.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
            output: ExecOutput::Response,
        }
    }

    /// Answers as `output` says: one response, or a chunk stream.
    pub fn output(mut self, output: ExecOutput) -> Self {
        self.output = output;
        self
    }

    /// `sh -c COMMAND` with the request's environment.
    fn command(&self, request: &Request, files: &CallFiles) -> Command {
        let e = &request.envelope;
        let mut command = Command::new("sh");
        command
            .arg("-c")
            .arg(&self.command)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env("AGDX_OPERATION", e.operation.as_deref().unwrap_or(""))
            .env("AGDX_CONVERSATION", e.conversation.to_string())
            .env(
                "AGDX_CORRELATION",
                e.correlation.map(|c| c.to_string()).unwrap_or_default(),
            )
            .env(
                "AGDX_RECORD",
                e.record.map(|r| r.to_string()).unwrap_or_default(),
            )
            .env("AGDX_SOURCE", e.source.as_str())
            .env("AGDX_ATTEMPT", request.attempt.to_string())
            .env("AGDX_REPORT", files.report.path())
            .env("AGDX_INPUT", &files.input)
            .env_remove("AGDX_DEADLINE")
            .env_remove("AGDX_IDEMPOTENCY_KEY")
            .env_remove("AGDX_FENCE")
            .env_remove("AGDX_BRIDGE_HOPS");
        if let Some(deadline) = e.deadline_micros {
            command.env("AGDX_DEADLINE", deadline.to_string());
        }
        if let Some(key) = &e.idempotency_key {
            command.env("AGDX_IDEMPOTENCY_KEY", key.as_str());
        }
        if let Some(fence) = request.fence() {
            command.env("AGDX_FENCE", fence.to_string());
        }
        let hops: Vec<&str> = e
            .metadata
            .as_ref()
            .map(|m| m.bridge_hops().collect())
            .unwrap_or_default();
        if !hops.is_empty() {
            command.env(
                "AGDX_BRIDGE_HOPS",
                serde_json::Value::from(hops).to_string(),
            );
        }
        command
    }

    fn io_failure(&self, what: &str, err: std::io::Error) -> HandlerError {
        HandlerError::retryable(format!("{what} for `{}` failed: {err}", self.command))
    }
}

#[async_trait]
impl Handler for ExecHandler {
    async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError> {
        let files = CallFiles::new().map_err(|err| self.io_failure("creating AGDX_REPORT", err))?;
        let mut command = self.command(&request, &files);
        // Killed when this call ends, however it ends.
        let group = ProcessGroup::start()
            .map_err(|err| self.io_failure("starting the process group", err))?;
        let mut child = group
            .adopt(&mut command)
            .spawn()
            .map_err(|err| self.io_failure("starting `sh -c`", err))?;
        let (stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        // Feed stdin while stdout and stderr are read: a command that
        // answers as it reads (like `cat`) would otherwise block on a full
        // pipe once the body outgrows it.
        let body = &request.body;
        let feed = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its input closes the pipe
                // early; that is its choice.
                let _ = stdin.write_all(body).await;
            }
        };
        let mut writer = match self.output {
            ExecOutput::Response => None,
            ExecOutput::Lines | ExecOutput::Bytes => {
                request.stream(StreamPurpose::Chat, request.envelope.deadline_micros)
            }
        };
        let mut report = Report::default();
        let mut reader = tokio::fs::File::open(files.report.path())
            .await
            .map_err(|err| self.io_failure("opening the AGDX_REPORT file", err))?;
        let (status, out) = {
            let out = async {
                let (Some(stdout), Some(stderr)) = (stdout, stderr) else {
                    return Err(std::io::Error::other("the command has no stdout or stderr"));
                };
                let (collected, errors) = tokio::join!(
                    read_output(stdout, self.output, writer.as_mut()),
                    read_all(stderr)
                );
                Ok((collected?, errors?))
            };
            let work = async {
                let ((), status, out) = tokio::join!(feed, child.wait(), out);
                (status, out)
            };
            let reporting = async {
                loop {
                    tokio::time::sleep(REPORT_EVERY).await;
                    if let Err(failure) = self
                        .read_report(&request, (&mut reader, &files.input), &mut report, false)
                        .await
                    {
                        return failure;
                    }
                }
            };
            tokio::pin!(work);
            tokio::select! {
                ran = &mut work => ran,
                // A report that is not one fails the command; its processes
                // are killed as this call returns.
                failure = reporting => return Err(failure),
                // Cancelled: the command gets SIGTERM and the pool's cancel
                // grace to exit; the group is killed when this call is dropped.
                () = request.cancelled() => {
                    group.terminate();
                    work.await
                }
            }
        };
        let status = status.map_err(|err| self.io_failure("waiting for the command", err))?;
        let (stdout, stderr) =
            out.map_err(|err| self.io_failure("reading the command's output", err))?;
        self.read_report(&request, (&mut reader, &files.input), &mut report, true)
            .await?;
        let stderr = String::from_utf8_lossy(&stderr).trim().to_owned();
        match status.code() {
            // An event expects no answer.
            Some(0) if request.reply_to().is_none() => Ok(HandlerReply::Nothing),
            Some(0) => match writer {
                Some(writer) => {
                    let mut fields = report.fields;
                    fields
                        .finish_reason
                        .get_or_insert_with(|| "stop".to_owned());
                    // A stream's chunks carry no task state.
                    fields.task_state = None;
                    writer
                        .finish_with(Vec::new(), fields)
                        .await
                        .map_err(|e| HandlerError::retryable(e.to_string()))?;
                    Ok(HandlerReply::Streamed)
                }
                None if stdout.is_empty() => Err(HandlerError::fatal(format!(
                    "`{}` exited 0 but printed nothing; a response needs a body, so print the answer on stdout",
                    self.command
                ))),
                None => Ok(HandlerReply::body(stdout, ContentType::Raw).with(report.fields)),
            },
            Some(EXIT_RETRYABLE) => Err(HandlerError::retryable(if stderr.is_empty() {
                format!(
                    "`{}` exited {EXIT_RETRYABLE} (try again later)",
                    self.command
                )
            } else {
                stderr
            })),
            status => Err(HandlerError::fatal(if stderr.is_empty() {
                match status {
                    Some(code) => format!("`{}` exited with status {code}", self.command),
                    None => format!("`{}` was killed by a signal", self.command),
                }
            } else {
                stderr
            })
            .with_code(ErrorCode::ToolFailure)),
        }
    }
}

impl ExecHandler {
    /// Reads what the command appended to its report file since the last
    /// read, sends its progress lines on and asks for the input it wants
    /// (not `at_end`: the command has exited), giving the answer on `input`.
    async fn read_report(
        &self,
        request: &Request,
        (reader, input): (&mut tokio::fs::File, &std::path::Path),
        report: &mut Report,
        at_end: bool,
    ) -> Result<(), HandlerError> {
        let mut appended = Vec::new();
        // A command that truncated the file writes it afresh: read from
        // its start again.
        let position = reader.stream_position().await.unwrap_or(0);
        let length = reader.metadata().await.map(|m| m.len()).unwrap_or(0);
        if length < position {
            let _ = reader.seek(SeekFrom::Start(0)).await;
        }
        reader
            .read_to_end(&mut appended)
            .await
            .map_err(|err| self.io_failure("reading the AGDX_REPORT file", err))?;
        let progress = report.take(&appended, at_end).map_err(|error| {
            HandlerError::fatal(format!("`{}`: {error}", self.command))
                .with_code(ErrorCode::ToolFailure)
        })?;
        for asked in progress {
            match asked {
                Asked::Progress(body) => {
                    if let Err(error) = request.progress(body).await {
                        tracing::warn!(%error, "could not publish a progress report; the command goes on");
                    }
                }
                Asked::Input(_) if at_end => {
                    tracing::warn!(command = %self.command, "the command asked for input as it exited; nobody reads the answer, so it is not asked");
                }
                Asked::Input(prompt) => {
                    let answer = request
                        .ask_input(prompt, input_wait(request))
                        .await
                        .map_err(|error| self.input_failure(error))?;
                    give_input(input, &answer)
                        .await
                        .map_err(|err| self.io_failure("writing the input to AGDX_INPUT", err))?;
                }
            }
        }
        Ok(())
    }

    fn input_failure(&self, error: crate::task_states::InputError) -> HandlerError {
        use crate::task_states::InputError;
        let message = format!("`{}` asked for input: {error}", self.command);
        match error {
            InputError::Produce(_) => HandlerError::retryable(message),
            _ => HandlerError::fatal(message),
        }
    }
}

/// How long a command waits for input: until its deadline, else
/// [`INPUT_WAIT`].
fn input_wait(request: &Request) -> Duration {
    match request.envelope.deadline_micros {
        Some(deadline) => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_micros() as u64);
            Duration::from_micros(deadline.saturating_sub(now))
        }
        None => INPUT_WAIT,
    }
}

/// Writes `answer` into the named pipe `input` once the command opens it
/// for reading, and closes it: the command reads it to its end. Tries
/// until the command opens it; bounded by the call, which drops this when
/// the command exits.
async fn give_input(input: &std::path::Path, answer: &[u8]) -> std::io::Result<()> {
    let mut sender = loop {
        match tokio::net::unix::pipe::OpenOptions::new().open_sender(input) {
            Ok(sender) => break sender,
            // No reader yet.
            Err(error) if error.raw_os_error() == Some(libc::ENXIO) => {
                tokio::time::sleep(INPUT_OPEN_EVERY).await;
            }
            Err(error) => return Err(error),
        }
    };
    sender.write_all(answer).await?;
    sender.shutdown().await
}

/// Reads `stdout` to its end: collected (for a response), or sent as chunks
/// through `writer` as `output` says (collecting nothing).
async fn read_output(
    stdout: impl AsyncRead + Unpin,
    output: ExecOutput,
    writer: Option<&mut crate::producer::ChunkWriter>,
) -> std::io::Result<Vec<u8>> {
    let Some(writer) = writer else {
        return read_all(stdout).await;
    };
    let send_failed =
        |e: crate::ProduceError| std::io::Error::other(format!("sending a chunk: {e}"));
    let mut reader = BufReader::new(stdout);
    let mut piece = Vec::new();
    loop {
        piece.clear();
        let read = match output {
            // A line longer than a chunk may carry goes out in pieces.
            ExecOutput::Lines => {
                let mut line = (&mut reader).take(READ_CHUNK as u64);
                tokio::io::AsyncBufReadExt::read_until(&mut line, b'\n', &mut piece).await?
            }
            _ => {
                piece.resize(READ_CHUNK, 0);
                let read = reader.read(&mut piece).await?;
                piece.truncate(read);
                read
            }
        };
        if read == 0 {
            return Ok(Vec::new());
        }
        writer.send(piece.clone()).await.map_err(send_failed)?;
    }
}

/// Everything `stream` gives until its end.
async fn read_all(mut stream: impl AsyncRead + Unpin) -> std::io::Result<Vec<u8>> {
    let mut all = Vec::new();
    stream.read_to_end(&mut all).await?;
    Ok(all)
}
