//! `agdx ask`: send a command and print the reply.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use agdx::cards::worker_seen;
use agdx::wire::StatusOperation;
use agdx::{AskError, Producer, ReplyEvent, Requester, StreamEnd, system_clock};

use super::context::{EXIT_REMOTE_ERROR, EXIT_TIMEOUT, Failure, Global, parse_duration};
use super::send::CommandArgs;

/// Sends a command and waits for the reply.
///
/// Prints the response body on stdout and exits 0. A streamed reply is
/// printed chunk by chunk as it arrives. An error reply prints
/// `error <code>: <message>` on stderr and exits 3; no reply in time exits 4.
#[derive(Debug, Args)]
#[command(mut_arg("to", |a| a.required(true)), mut_arg("operation", |a| a.required(true)))]
pub struct AskArgs {
    #[command(flatten)]
    pub command: CommandArgs,

    /// How long to wait for the reply (e.g. 30s, 2m); each sign of life from
    /// the worker (a progress heartbeat on long work) starts the wait over.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
}

pub async fn run(global: &Global, args: AskArgs) -> Result<(), Failure> {
    let (log, topology) = global.topology().await?;
    let producer = Producer::new(log, topology, args.command.source.clone())
        .with_claim_check(global.claim_check(None, None));
    let request = args.command.request()?;
    if let Some(agent) = &request.target {
        let seen = worker_seen(producer.log(), producer.topology(), agent, &system_clock()).await;
        if seen.is_ok_and(|seen| !seen.is_live()) {
            eprintln!(
                "agdx: no live worker for agent '{agent}' seen — the command waits on the log; start one with agdx worker --agent {agent} …"
            );
        }
    }
    let requester = Requester::new(producer);
    let watch = requester.send(request).await.map_err(ask_failure)?;
    let printed = print_replies(&requester, watch, args.timeout).await;
    requester.close().await;
    printed
}

/// Prints the replies as they come until the first terminal one; each sign of
/// life from the worker starts the `timeout` wait over.
async fn print_replies(
    requester: &Requester,
    mut watch: agdx::ReplyWatch,
    timeout: Duration,
) -> Result<(), Failure> {
    let sent_at = tokio::time::Instant::now();
    let mut deadline = sent_at + timeout;
    let mut stdout = std::io::stdout().lock();
    loop {
        let event = match watch.next_until(deadline).await {
            Ok(event) => event,
            Err(error) => return Err(ask_failure(requester.explain(error).await)),
        };
        match event {
            ReplyEvent::Status(status) => {
                // A sign of life: the wait starts over.
                deadline = tokio::time::Instant::now() + timeout;
                if status.envelope.operation.as_deref() == Some(StatusOperation::Progress.as_str())
                {
                    eprintln!("… still working ({} s)", sent_at.elapsed().as_secs());
                }
            }
            ReplyEvent::Response(reply) => {
                stdout.write_all(&reply.body)?;
                finish_line(&mut stdout, &reply.body)?;
                return Ok(());
            }
            ReplyEvent::Error(error) => return Err(ask_failure(AskError::Remote(error))),
            ReplyEvent::StreamRestarted { .. } => {
                writeln!(stdout)?;
                stdout.flush()?;
                eprintln!(
                    "agdx: the agent started its reply over (it was restarted); the full reply follows"
                );
            }
            ReplyEvent::Chunk { body, .. } => {
                stdout.write_all(&body)?;
                stdout.flush()?;
            }
            ReplyEvent::StreamEnd(StreamEnd::Finished { .. }) => {
                writeln!(stdout)?;
                return Ok(());
            }
            ReplyEvent::StreamEnd(StreamEnd::Failed(error)) => {
                writeln!(stdout)?;
                return Err(ask_failure(AskError::Remote(error)));
            }
            ReplyEvent::StreamEnd(end) => {
                writeln!(stdout)?;
                return Err(ask_failure(AskError::StreamBroken(end)));
            }
        }
    }
}

/// Ends the output with a newline unless the body already did.
fn finish_line(out: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    if !body.ends_with(b"\n") {
        writeln!(out)?;
    }
    out.flush()
}

fn ask_failure(error: AskError) -> Failure {
    match error {
        AskError::Remote(body) => Failure::with_code(
            format!(
                "error {}: {}",
                body.code.name(),
                body.message.as_deref().unwrap_or("(no message)")
            ),
            EXIT_REMOTE_ERROR,
        ),
        AskError::Timeout { .. } => Failure::with_code(error, EXIT_TIMEOUT),
        other => Failure::new(other),
    }
}
