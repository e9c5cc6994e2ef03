//! A handler that runs a shell command per request (`agdx worker --exec`).

use std::process::Stdio;

use agdx_wire::ContentType;
use async_trait::async_trait;
use tokio::io::AsyncWriteExt;
use tokio::process::Command;

use super::handler::{Handler, HandlerError, HandlerReply, Request};
use super::process_group::ProcessGroup;

/// The exit status that marks a failure as retryable (`EX_TEMPFAIL`).
pub const EXIT_RETRYABLE: i32 = 75;

/// Runs `sh -c COMMAND` for each request.
///
/// The body goes to the command's stdin; the environment carries
/// `AGDX_OPERATION`, `AGDX_CONVERSATION`, `AGDX_CORRELATION`, `AGDX_RECORD`,
/// `AGDX_SOURCE`, `AGDX_ATTEMPT` (1 for the first try) and, when present,
/// `AGDX_IDEMPOTENCY_KEY`, `AGDX_FENCE` (the pool's fence token for the
/// command's partition, see [`Request::fence`]) and `AGDX_BRIDGE_HOPS` (the bridges the command
/// came through, a JSON array to pass on to a bridge the command calls back
/// into, as ax-ipc's `_bridgeHops`). Exit 0 answers
/// with stdout as the response body; exit 75 is a retryable failure; any
/// other exit is a failure that is not retried, with stderr as the message.
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
}

impl ExecHandler {
    /// Runs `command` with `sh -c`.
    pub fn new(command: impl Into<String>) -> Self {
        Self {
            command: command.into(),
        }
    }
}

#[async_trait]
impl Handler for ExecHandler {
    async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError> {
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
            .env_remove("AGDX_IDEMPOTENCY_KEY")
            .env_remove("AGDX_FENCE")
            .env_remove("AGDX_BRIDGE_HOPS");
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
        // Killed when this call ends, however it ends.
        let group = ProcessGroup::start().map_err(|err| {
            HandlerError::retryable(format!(
                "could not start the process group for `{}`: {err}",
                self.command
            ))
        })?;
        let mut child = group.adopt(&mut command).spawn().map_err(|err| {
            HandlerError::retryable(format!("could not start `sh -c {}`: {err}", self.command))
        })?;
        // Feed stdin while stdout and stderr are read: a command that
        // answers as it reads (like `cat`) would otherwise block on a full
        // pipe once the body outgrows it.
        let stdin = child.stdin.take();
        let body = &request.body;
        let feed = async move {
            if let Some(mut stdin) = stdin {
                // A command that does not read its input closes the pipe
                // early; that is its choice.
                let _ = stdin.write_all(body).await;
            }
        };
        let run = async { tokio::join!(feed, child.wait_with_output()).1 };
        tokio::pin!(run);
        let output = tokio::select! {
            output = &mut run => output,
            // Cancelled: the command gets SIGTERM and the pool's cancel
            // grace to exit; the group is killed when this call is dropped.
            () = request.cancelled() => {
                group.terminate();
                run.await
            }
        };
        let output = output.map_err(|err| {
            HandlerError::retryable(format!("waiting for `{}` failed: {err}", self.command))
        })?;
        let stderr = String::from_utf8_lossy(&output.stderr).trim().to_owned();
        match output.status.code() {
            // An event expects no answer.
            Some(0) if request.reply_to().is_none() => Ok(HandlerReply::Nothing),
            Some(0) if output.stdout.is_empty() => Err(HandlerError::fatal(format!(
                "`{}` exited 0 but printed nothing; a response needs a body, so print the answer on stdout",
                self.command
            ))),
            Some(0) => Ok(HandlerReply::body(output.stdout, ContentType::Raw)),
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
            .with_code(agdx_wire::ErrorCode::ToolFailure)),
        }
    }
}
