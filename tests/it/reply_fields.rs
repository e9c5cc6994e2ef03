//! What a reply carries beside its body: a handler's response and a
//! stream's final chunk carry usage, finish reason, tool, task state and
//! metadata to the asker, on every backend; `agdx ask` prints the usage.

use agdx::wire::{Kind, StreamPurpose, TaskState, TokenUsage};
use agdx::worker::{HandlerError, HandlerReply, handler_fn};
use agdx::{Answer, CommandRequest, ReplyFields};

use crate::support;
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric};

/// What the model agent of these tests reports for every answer.
fn spent() -> TokenUsage {
    TokenUsage {
        reasoning_output_tokens: Some(7),
        ..TokenUsage::new(812, 64)
    }
}

/// A pool for agent `model`: `complete` answers with a response and its
/// fields, `stream` with a chunk stream whose final chunk carries them.
fn model(fabric: &support::fabric::Fabric) -> agdx::worker::Worker {
    fabric
        .worker("model")
        .handle(
            "complete",
            handler_fn(|_| async move {
                Ok(HandlerReply::raw("Paris").with(
                    ReplyFields::default()
                        .finish_reason("stop")
                        .usage(spent())
                        .tool("atlas")
                        .task_state(TaskState::Completed)
                        .metadata("model", "small-1"),
                ))
            }),
        )
        .handle(
            "stream",
            handler_fn(|request| async move {
                let fail = |e: agdx::ProduceError| HandlerError::retryable(e.to_string());
                let mut writer = request
                    .stream(StreamPurpose::Chat, None)
                    .ok_or_else(|| HandlerError::fatal("a stream answers a command"))?;
                writer.send(b"Par".to_vec()).await.map_err(fail)?;
                writer
                    .finish_with(
                        b"is".to_vec(),
                        ReplyFields::default()
                            .finish_reason("length")
                            .usage(spent())
                            .metadata("model", "small-1"),
                    )
                    .await
                    .map_err(fail)?;
                Ok(HandlerReply::Streamed)
            }),
        )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_carries_usage_finish_reason_tool_task_state_and_metadata() {
    on_every_fabric("reply-fields", |fabric| async move {
        let running = Running::start(model(&fabric));
        let requester = fabric.requester("asker");
        let ask = |operation: &str| {
            requester.ask(
                CommandRequest::new(operation, b"capital of France?".to_vec())
                    .to(agent_id("model")),
                ANSWER,
            )
        };
        let Answer::Response(reply) = ask("complete").await.expect("an answer") else {
            panic!("expected a response");
        };
        let e = &reply.envelope;
        assert_eq!(reply.body, &b"Paris"[..]);
        assert_eq!(e.usage, Some(spent()));
        assert_eq!(e.finish_reason.as_deref(), Some("stop"));
        assert_eq!(e.tool.as_deref(), Some("atlas"));
        assert_eq!(e.task_state, Some(TaskState::Completed));
        let metadata = e.metadata.as_ref().expect("metadata");
        assert_eq!(
            metadata.get("model").and_then(|v| v.as_str()),
            Some("small-1")
        );
        assert!(
            agdx::fence_of(e).is_some(),
            "the handler's metadata joins the runtime's (the fence), not replaces it"
        );

        match ask("stream").await.expect("an answer") {
            Answer::Streamed {
                body,
                finish_reason,
                usage,
                ..
            } => {
                assert_eq!(body, b"Paris");
                assert_eq!(finish_reason.as_deref(), Some("length"));
                assert_eq!(usage, Some(spent()), "the stream's usage is kept");
            }
            other => panic!("expected a stream, got {other:?}"),
        }
        let last = fabric
            .responses()
            .await
            .into_iter()
            .find(|e| e.kind == Kind::Chunk && e.last)
            .expect("the final chunk");
        assert_eq!(
            last.metadata
                .as_ref()
                .and_then(|m| m.get("model"))
                .and_then(|v| v.as_str()),
            Some("small-1")
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_ask_prints_the_usage_of_a_response_and_of_a_stream() {
    let fabric = support::fabric::embedded_fabric("reply-fields-cli").await;
    let running = Running::start(model(&fabric));
    for (operation, answer) in [("complete", "Paris\n"), ("stream", "Paris\n")] {
        let out = fabric
            .agdx()
            .args(["ask", "--to", "model", "--operation", operation, "capital?"])
            .output()
            .await
            .expect("run agdx ask");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), answer);
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("usage: 812 tokens in, 64 out (7 reasoning)"),
            "{operation}: {out:?}"
        );
    }
    // `agdx timeline` shows what each turn spent: the response's and the
    // stream's.
    let mut conversations: Vec<_> = fabric
        .responses()
        .await
        .into_iter()
        .map(|e| e.conversation)
        .collect();
    conversations.dedup();
    assert_eq!(conversations.len(), 2);
    for conversation in conversations {
        let out = fabric
            .agdx()
            .args(["timeline", &conversation.to_string()])
            .output()
            .await
            .expect("run agdx timeline");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("usage 812 in / 64 out"), "{text}");
    }
    running.stop().await;
}
