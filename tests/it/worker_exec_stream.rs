//! An `--exec` command answering as it writes: each line (or read) of its
//! stdout a chunk as soon as it is written, the stream ended when it exits
//! (with an error on a failure); and what it reports through the file
//! `AGDX_REPORT` names (progress now, usage and the rest on the answer),
//! and input asked for there and read from `AGDX_INPUT`.

use std::path::Path;

use agdx::wire::{ErrorCode, TokenUsage};
use agdx::worker::{ExecHandler, ExecOutput};
use agdx::{Answer, AskError, Clock, CommandRequest, ReplyEvent, StreamEnd};

use crate::support;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// A shell loop waiting (at most 20 s) for the file `go` in `dir`.
fn wait_for_go(dir: &Path) -> String {
    format!(
        "for i in $(seq 400); do [ -e '{}/go' ] && break; sleep 0.05; done",
        dir.display()
    )
}

/// A pool for agent `shell` running `command` with `output`.
fn shell(fabric: &Fabric, command: &str, output: ExecOutput) -> Running {
    Running::start(
        fabric
            .worker("shell")
            .fallback(ExecHandler::new(command).output(output)),
    )
}

fn run() -> CommandRequest {
    CommandRequest::new("run", b"input".to_vec()).to(agent_id("shell"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_line_is_a_chunk_as_soon_as_it_is_written() {
    on_every_fabric("exec-stream-lines", |fabric| async move {
        let command = format!(
            "echo first; {}; printf 'second\\nthird'; echo '{{\"usage\": {{\"input_tokens\": 5, \"output_tokens\": 3}}}}' >> \"$AGDX_REPORT\"",
            wait_for_go(fabric.dir.path())
        );
        let running = shell(&fabric, &command, ExecOutput::Lines);
        let requester = fabric.requester("asker");
        let mut watch = requester.ask_stream(run()).await.expect("send");
        let mut chunks = Vec::new();
        loop {
            match watch.next(ANSWER).await.expect("a reply") {
                ReplyEvent::Chunk { body, .. } => {
                    // The command waits for `go` after its first line: that
                    // line came while it ran.
                    if chunks.is_empty() {
                        std::fs::write(fabric.dir.path().join("go"), b"").expect("write go");
                    }
                    chunks.push(String::from_utf8(body.to_vec()).expect("text"));
                }
                ReplyEvent::StreamEnd(StreamEnd::Finished {
                    finish_reason,
                    usage,
                }) => {
                    assert_eq!(finish_reason.as_deref(), Some("stop"));
                    assert_eq!(usage, Some(TokenUsage::new(5, 3)), "from the report");
                    break;
                }
                ReplyEvent::Status(_) => {}
                other => panic!("expected chunks, got {other:?}"),
            }
        }
        assert_eq!(chunks, ["first\n", "second\n", "third"]);
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_command_ends_its_stream_with_its_error() {
    on_every_fabric("exec-stream-fail", |fabric| async move {
        let running = shell(
            &fabric,
            "echo partial; echo 'the model went away' >&2; exit 3",
            ExecOutput::Bytes,
        );
        let requester = fabric.requester("asker");
        match requester.ask(run(), ANSWER).await {
            Err(AskError::Remote(error)) => {
                assert_eq!(error.code, ErrorCode::ToolFailure);
                assert_eq!(error.message.as_deref(), Some("the model went away"));
            }
            other => panic!("expected the command's error, got {other:?}"),
        }
        let last = fabric
            .responses()
            .await
            .into_iter()
            .rev()
            .find(|e| e.kind == agdx::wire::Kind::Error)
            .expect("the error");
        assert!(last.channel.is_some(), "the error ends the stream");
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_reports_progress_while_it_runs_and_fields_on_its_answer() {
    let fabric = support::fabric::embedded_fabric("exec-report").await;
    let command = format!(
        "echo '{{\"progress\": {{\"step\": 1}}}}' >> \"$AGDX_REPORT\"; {}; \
         echo '{{\"finish_reason\": \"stop\", \"tool\": \"grep\", \"metadata\": {{\"model\": \"m1\"}}}}' >> \"$AGDX_REPORT\"; \
         echo \"deadline=$AGDX_DEADLINE\"",
        wait_for_go(fabric.dir.path())
    );
    let running = shell(&fabric, &command, ExecOutput::Response);
    let requester = fabric.requester("asker");
    let deadline = agdx::SystemClock.now_micros() + 60_000_000;
    let mut watch = requester
        .send(run().deadline_micros(deadline))
        .await
        .expect("send");
    let progress = loop {
        match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Status(status) if status.body.starts_with(b"{\"step\"") => break status,
            ReplyEvent::Status(_) => {}
            other => panic!("expected the progress report first, got {other:?}"),
        }
    };
    assert_eq!(progress.body, &b"{\"step\":1}"[..]);
    std::fs::write(fabric.dir.path().join("go"), b"").expect("write go");
    let reply = loop {
        match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Response(reply) => break reply,
            ReplyEvent::Status(_) => {}
            other => panic!("expected the response, got {other:?}"),
        }
    };
    assert_eq!(
        String::from_utf8_lossy(&reply.body).trim(),
        format!("deadline={deadline}")
    );
    let e = &reply.envelope;
    assert_eq!(e.finish_reason.as_deref(), Some("stop"));
    assert_eq!(e.tool.as_deref(), Some("grep"));
    assert_eq!(
        e.metadata
            .as_ref()
            .and_then(|m| m.get("model"))
            .and_then(|v| v.as_str()),
        Some("m1")
    );
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_report_that_is_not_one_fails_the_command_naming_the_line() {
    let fabric = support::fabric::embedded_fabric("exec-report-bad").await;
    let running = shell(
        &fabric,
        "echo '{\"usage\": 12}' >> \"$AGDX_REPORT\"; echo answer",
        ExecOutput::Response,
    );
    let requester = fabric.requester("asker");
    match requester.ask(run(), ANSWER).await {
        Err(AskError::Remote(error)) => {
            assert_eq!(error.code, ErrorCode::ToolFailure);
            let message = error.message.unwrap_or_default();
            assert!(
                message.contains("line 1 of the AGDX_REPORT file"),
                "{message}"
            );
        }
        other => panic!("expected a failure, got {other:?}"),
    }
    running.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_worker_stream_bytes_answers_with_a_chunk_stream() {
    let fabric = support::fabric::embedded_fabric("exec-stream-cli").await;
    let mut worker = fabric.spawn_worker_process(&[
        "--agent",
        "shell",
        "--exec",
        "printf 'hello, '; sleep 0.2; printf world",
        "--stream-output",
        "bytes",
    ]);
    let requester = fabric.requester("asker");
    match requester.ask(run(), ANSWER).await.expect("an answer") {
        Answer::Streamed { body, counters, .. } => {
            assert_eq!(body, b"hello, world");
            assert!(counters.applied >= 2, "{counters:?}");
        }
        other => panic!("expected a stream, got {other:?}"),
    }
    support::fabric::terminate(&mut worker).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_longer_than_a_chunk_goes_out_in_pieces() {
    let fabric = support::fabric::embedded_fabric("exec-stream-long-line").await;
    let running = shell(
        &fabric,
        "head -c 100000 /dev/zero | tr '\\0' a; echo",
        ExecOutput::Lines,
    );
    let requester = fabric.requester("asker");
    let mut watch = requester.ask_stream(run()).await.expect("send");
    let mut sizes = Vec::new();
    loop {
        match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Chunk { body, .. } => sizes.push(body.len()),
            ReplyEvent::StreamEnd(StreamEnd::Finished { .. }) => break,
            ReplyEvent::Status(_) => {}
            other => panic!("expected chunks, got {other:?}"),
        }
    }
    assert_eq!(sizes, [65_536, 100_001 - 65_536]);
    running.stop().await;
}

/// An `--exec` command asks its caller for input through `AGDX_REPORT`,
/// reads the answer from `AGDX_INPUT` and goes on; asked twice, it gets
/// each answer in turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_asks_its_caller_for_input_and_reads_the_answer() {
    on_every_fabric("exec-input", |fabric| async move {
        let command = r#"echo '{"input_required": "which day?"}' >> "$AGDX_REPORT"; day=$(cat "$AGDX_INPUT"); echo '{"input_required": "which room?"}' >> "$AGDX_REPORT"; room=$(cat "$AGDX_INPUT"); printf 'booked %s on %s' "$room" "$day""#;
        let running = shell(&fabric, command, ExecOutput::Response);
        let requester = fabric.requester("asker");
        let mut watch = requester.send(run()).await.expect("send");
        let mut prompts = Vec::new();
        let reply = loop {
            match watch.next(ANSWER).await.expect("a reply") {
                ReplyEvent::Status(status)
                    if status.envelope.task_state
                        == Some(agdx::wire::TaskState::InputRequired) =>
                {
                    let prompt = String::from_utf8(status.body.clone().to_vec()).expect("text");
                    let answer = if prompt == "which day?" { "monday" } else { "room 7" };
                    prompts.push(prompt);
                    watch
                        .provide_input(&status, answer.as_bytes().to_vec())
                        .await
                        .expect("answer the prompt");
                }
                ReplyEvent::Status(_) => {}
                ReplyEvent::Response(reply) => break reply,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(prompts, ["which day?", "which room?"]);
        assert_eq!(String::from_utf8_lossy(&reply.body), "booked room 7 on monday");
        running.stop().await;
    })
    .await;
}
