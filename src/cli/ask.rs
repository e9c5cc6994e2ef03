//! `agdx ask`: send a command and print the reply.

use std::io::Write;
use std::time::Duration;

use clap::Args;

use agdx::cards::{WorkerSeen, worker_seen};
use agdx::wire::{StatusOperation, TaskState, TokenUsage};
use agdx::{AskError, Reply, ReplyEvent, ReplyWatch, Requester, StreamEnd, system_clock};

use super::context::{
    EXIT_INTERRUPTED, EXIT_REMOTE_ERROR, EXIT_TIMEOUT, Failure, Global, parse_duration, terminated,
};
use super::send::{CommandArgs, produce_failure};

/// Sends a command and waits for the reply.
///
/// Prints the response body on stdout and exits 0. A streamed reply is
/// printed chunk by chunk as it arrives. An error reply prints
/// `error <code>: <message>` on stderr and exits 3, as does an agent that is
/// quarantined (`error quarantined: ...`, nothing sent; needs --keys); no
/// reply in time exits 4. An ask that gives up (no reply in time, Ctrl-C)
/// cancels its command, so its handler stops; --no-cancel leaves it
/// running.
#[derive(Debug, Args)]
#[command(mut_arg("to", |a| a.required(true)), mut_arg("operation", |a| a.required(true)))]
pub struct AskArgs {
    #[command(flatten)]
    pub command: CommandArgs,

    /// How long to wait for the reply, connecting to the log included (e.g.
    /// 30s, 2m); each sign of life from the worker (a progress heartbeat on
    /// long work) starts the wait over.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,

    /// Accept only replies signed by the agent asked with a key valid in the
    /// registry (--keys); others are ignored, and their count is printed on stderr.
    #[arg(long)]
    pub verify: bool,

    /// Ask the worker for the task's states as it goes (submitted, working,
    /// then completed, failed or canceled) and print them, and its progress
    /// reports, on stderr as they come.
    #[arg(long)]
    pub follow: bool,

    /// Leave the command running when the ask gives up (timeout, Ctrl-C);
    /// by default it is cancelled, so its handler stops.
    #[arg(long)]
    pub no_cancel: bool,
}

pub async fn run(global: &Global, args: AskArgs) -> Result<(), Failure> {
    let mut request = args.command.request()?;
    if args.follow {
        request = request.task_states();
    }
    // --timeout bounds the whole ask: connecting, sending and the wait.
    let deadline = tokio::time::Instant::now() + args.timeout;
    let global = &Global {
        connect_limit: global.connect_limit.min(args.timeout),
        ..global.clone()
    };
    let sending = async {
        let producer = args.command.producer(global).await?;
        if let Some(agent) = &request.target {
            let seen =
                worker_seen(producer.log(), producer.topology(), agent, &system_clock()).await;
            if seen.is_ok_and(|seen| !seen.is_live()) {
                eprintln!(
                    "agdx: no live worker for agent '{agent}' seen on {} — the command waits on the log; {}",
                    producer.log().describe(),
                    global.worker_advice(agent.as_str())
                );
            }
        }
        let mut requester = Requester::new(producer);
        if args.verify {
            requester = requester.with_verifier(global.verifier("--verify")?);
        }
        let sent = requester.send(request).await;
        Ok::<_, Failure>((requester, sent))
    };
    let Ok(sending) = tokio::time::timeout_at(deadline, sending).await else {
        return Err(Failure::with_code(
            format!(
                "no answer from the log at {} within {} (--timeout), so the command may not have been sent; check that the log is running there",
                global.spec()?.describe(),
                humantime::format_duration(args.timeout)
            ),
            EXIT_TIMEOUT,
        ));
    };
    let (requester, sent) = sending.map_err(|failure| {
        // Connecting ran out of the time --timeout left it: a timeout too.
        if tokio::time::Instant::now() >= deadline {
            Failure::with_code(failure.message, EXIT_TIMEOUT)
        } else {
            failure
        }
    })?;
    let printed = match sent {
        Ok(mut watch) => {
            let printed = tokio::select! {
                printed = print_replies(global, &requester, &mut watch, (deadline, args.timeout), args.follow) => printed,
                () = terminated() => Err(Failure::with_code("interrupted before the answer came", EXIT_INTERRUPTED)),
            };
            let gave_up =
                matches!(&printed, Err(f) if f.code == EXIT_TIMEOUT || f.code == EXIT_INTERRUPTED);
            if gave_up && !args.no_cancel {
                match watch.cancel().await {
                    Ok(_) => eprintln!(
                        "agdx: cancelled the command, so its handler stops (--no-cancel leaves it running)"
                    ),
                    Err(error) => eprintln!(
                        "agdx: could not cancel the command ({error}); it runs to its end"
                    ),
                }
            }
            if watch.unverified() > 0 {
                eprintln!(
                    "agdx: ignored {} repl{} that did not verify (unsigned, forged, or not signed by the agent asked)",
                    watch.unverified(),
                    if watch.unverified() == 1 { "y" } else { "ies" }
                );
            }
            printed
        }
        Err(error) => Err(ask_failure(global, error)),
    };
    requester.close().await;
    printed
}

/// Prints the replies as they come until the first terminal one or
/// `deadline`; each sign of life from the worker starts a `timeout` wait over.
async fn print_replies(
    global: &Global,
    requester: &Requester,
    watch: &mut ReplyWatch,
    (mut deadline, timeout): (tokio::time::Instant, Duration),
    follow: bool,
) -> Result<(), Failure> {
    let sent_at = tokio::time::Instant::now();
    let mut stdout = std::io::stdout().lock();
    // A terminal task state seen, and until when its answer may follow.
    let mut ended: Option<(Reply, tokio::time::Instant)> = None;
    loop {
        let until = ended.as_ref().map_or(deadline, |(_, by)| *by);
        let event = match watch.next_until(until).await {
            Ok(event) => event,
            Err(AskError::Timeout { .. }) if ended.is_some() => {
                let (status, _) = ended.take().expect("a terminal state");
                let state = status
                    .envelope
                    .task_state
                    .map(|s| s.name())
                    .unwrap_or("unknown");
                if status.envelope.task_state != Some(TaskState::Completed) {
                    return Err(Failure::with_code(
                        format!("the task ended {state} with no other answer"),
                        EXIT_REMOTE_ERROR,
                    ));
                }
                stdout.write_all(&status.body)?;
                if !status.body.is_empty() {
                    finish_line(&mut stdout, &status.body)?;
                }
                return Ok(());
            }
            Err(error) => return Err(ask_failure(global, requester.explain(error).await)),
        };
        match event {
            ReplyEvent::Status(status) => {
                // A sign of life: the wait starts over.
                deadline = tokio::time::Instant::now() + timeout;
                let progress = status.envelope.operation.as_deref()
                    == Some(StatusOperation::Progress.as_str());
                if status.envelope.task_state.is_some_and(|s| s.is_terminal()) && ended.is_none() {
                    ended = Some((
                        status.clone(),
                        tokio::time::Instant::now() + agdx::TERMINAL_STATE_GRACE,
                    ));
                }
                if status.envelope.task_state == Some(TaskState::InputRequired) {
                    answer_prompt(watch, &status).await?;
                    // The wait starts over once the answer is sent.
                    deadline = tokio::time::Instant::now() + timeout;
                    continue;
                }
                match (status.envelope.task_state, follow) {
                    (Some(state), true) => eprintln!(
                        "… task {} ({:.1} s)",
                        state.name(),
                        sent_at.elapsed().as_secs_f64()
                    ),
                    _ if progress && follow && !status.body.is_empty() => eprintln!(
                        "… {} ({} s)",
                        String::from_utf8_lossy(&status.body),
                        sent_at.elapsed().as_secs()
                    ),
                    _ if progress => {
                        eprintln!("… still working ({} s)", sent_at.elapsed().as_secs())
                    }
                    _ => {}
                }
            }
            ReplyEvent::Response(reply) => {
                stdout.write_all(&reply.body)?;
                finish_line(&mut stdout, &reply.body)?;
                print_usage(reply.envelope.usage.as_ref());
                return Ok(());
            }
            ReplyEvent::Error(error) => return Err(ask_failure(global, AskError::Remote(error))),
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
            ReplyEvent::StreamEnd(StreamEnd::Finished { usage, .. }) => {
                writeln!(stdout)?;
                stdout.flush()?;
                print_usage(usage.as_ref());
                return Ok(());
            }
            ReplyEvent::StreamEnd(StreamEnd::Failed(error)) => {
                writeln!(stdout)?;
                return Err(ask_failure(global, AskError::Remote(error)));
            }
            ReplyEvent::StreamEnd(end) => {
                writeln!(stdout)?;
                return Err(ask_failure(global, AskError::StreamBroken(end)));
            }
        }
    }
}

/// The agent asks for input: its prompt on stderr, then, on a terminal,
/// the line typed goes back as the input. Elsewhere nothing can answer at
/// this prompt, which is said; the ask goes on waiting.
async fn answer_prompt(watch: &ReplyWatch, status: &Reply) -> Result<(), Failure> {
    let prompt = String::from_utf8_lossy(&status.body);
    use std::io::IsTerminal;
    if !std::io::stdin().is_terminal() {
        eprintln!(
            "agdx: the agent asks for input: {prompt} (stdin is not a terminal, so nothing answers here; a program answers with ReplyWatch::provide_input)"
        );
        return Ok(());
    }
    eprint!("{prompt} ");
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await
    .map_err(|e| Failure::new(format!("reading the answer failed: {e}")))??;
    let line = line.trim_end_matches(['\r', '\n']).to_owned();
    watch
        .provide_input(status, line.into_bytes())
        .await
        .map_err(|e| Failure::new(format!("sending the answer failed: {e}")))?;
    Ok(())
}

/// Says on stderr what the answer cost, when the agent reported it.
fn print_usage(usage: Option<&TokenUsage>) {
    let Some(usage) = usage else {
        return;
    };
    let mut line = format!(
        "usage: {} tokens in, {} out",
        usage.input_tokens, usage.output_tokens
    );
    if let Some(reasoning) = usage.reasoning_output_tokens {
        line.push_str(&format!(" ({reasoning} reasoning)"));
    }
    if let Some(cached) = usage.cache_read_input_tokens {
        line.push_str(&format!(", {cached} read from cache"));
    }
    eprintln!("{line}");
}

/// Ends the output with a newline unless the body already did.
fn finish_line(out: &mut impl Write, body: &[u8]) -> std::io::Result<()> {
    if !body.ends_with(b"\n") {
        writeln!(out)?;
    }
    out.flush()
}

fn ask_failure(global: &Global, error: AskError) -> Failure {
    match error {
        AskError::Remote(body) => {
            let mut message = format!(
                "error {}: {}",
                body.code.name(),
                body.message.as_deref().unwrap_or("(no message)")
            );
            // The worker's gate names the check that failed; a missing
            // signature is this command line's to add.
            let check = body.detail.as_ref().and_then(|d| d.get("check"));
            if check.and_then(|c| c.as_str()) == Some("unsigned") {
                message.push_str("; that is --key KEYFILE");
            }
            Failure::with_code(message, EXIT_REMOTE_ERROR)
        }
        AskError::Timeout { target: None, .. } => {
            Failure::with_code(format!("{error}; --to AGENT names one"), EXIT_TIMEOUT)
        }
        // A worker that is live did not answer in time; any other may be
        // running on another log.
        AskError::Timeout {
            target: Some(ref agent),
            worker: WorkerSeen::Never | WorkerSeen::Gone { .. } | WorkerSeen::Unchecked,
            ..
        } => Failure::with_code(
            format!("{error}; {}", global.worker_advice(agent.as_str())),
            EXIT_TIMEOUT,
        ),
        AskError::Timeout { .. } => Failure::with_code(
            format!("{error}; that is --timeout, or `agdx timeline CONVERSATION`"),
            EXIT_TIMEOUT,
        ),
        AskError::Produce(error) => produce_failure(error),
        other => Failure::new(other),
    }
}
