//! One tool call: a command to the tool's agent, its replies followed to
//! the answer, reporting chunks and task states as progress and cancelling
//! the command when the client cancels the call.

use std::time::Duration;

use agdx_wire::{ContentType, ErrorBody, TaskState};
use rmcp::RoleServer;
use rmcp::model::{CallToolResult, ContentBlock, ProgressNotificationParam, ProgressToken};
use rmcp::service::Peer;
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::tools::ToolTarget;
use crate::ask::{
    Answer, AskError, GiveUp, ReplyEvent, Requester, TERMINAL_STATE_GRACE, task_outcome,
};
use crate::bridge::clip;
use crate::producer::CommandRequest;
use crate::reassembly::StreamEnd;

/// The most of a chunk or status body a progress message quotes.
const PROGRESS_QUOTE: usize = 200;

/// Where a call's progress goes: the client's progress token, on its
/// connection.
pub(super) struct Progress {
    token: ProgressToken,
    peer: Peer<RoleServer>,
    count: u64,
}

impl Progress {
    pub(super) fn new(token: ProgressToken, peer: Peer<RoleServer>) -> Self {
        Self {
            token,
            peer,
            count: 0,
        }
    }

    /// One more step, saying `message`. A client that went away misses it;
    /// the call goes on.
    async fn report(&mut self, message: String) {
        self.count += 1;
        let mut param = ProgressNotificationParam::new(self.token.clone(), self.count as f64);
        param.message = Some(message);
        if let Err(error) = self.peer.notify_progress(param).await {
            tracing::debug!(%error, "a progress notification could not be sent");
        }
    }
}

/// What the call came to.
pub(super) enum Outcome {
    /// The agent answered: its body and codec (`None` for a stream, whose
    /// chunks name none).
    Answered(Vec<u8>, Option<ContentType>),
    /// The agent answered with an error, or the call failed on the way.
    Failed(AskError),
    /// The client cancelled the call: the command was cancelled.
    Cancelled,
}

/// Sends `command` and follows its replies until the answer, the
/// `timeout` without a sign of life, or `cancelled` (the client's
/// `notifications/cancelled`, or its connection closing), which cancels
/// the command on the log.
pub(super) async fn run(
    requester: &Requester,
    command: CommandRequest,
    timeout: Duration,
    mut progress: Option<Progress>,
    cancelled: CancellationToken,
) -> Outcome {
    let target = command.target.clone();
    let mut watch = match requester.send(command).await {
        Ok(watch) => watch,
        Err(error) => return Outcome::Failed(error),
    };
    // Dropped unanswered (the transport let the call go): cancelled too.
    let mut give_up = GiveUp::new(requester.producer().clone(), watch.sent().clone(), target);
    let mut deadline = Instant::now() + timeout;
    let mut body = Vec::new();
    // A terminal task state seen, and until when its answer may follow.
    let mut ended = None;
    loop {
        let until = ended.as_ref().map_or(deadline, |(_, by)| *by);
        let event = tokio::select! {
            () = cancelled.cancelled() => {
                give_up.now().await;
                return Outcome::Cancelled;
            }
            event = watch.next_until(until) => event,
        };
        let event = match event {
            Ok(event) => event,
            Err(AskError::Timeout { .. }) if ended.is_some() => {
                give_up.disarm();
                let (status, _) = ended.take().expect("a terminal state");
                return match task_outcome(status) {
                    Ok(Answer::Response(reply)) => {
                        Outcome::Answered(reply.body.to_vec(), Some(reply.content_type))
                    }
                    Ok(Answer::Streamed { body, .. }) => Outcome::Answered(body, None),
                    Err(error) => Outcome::Failed(error),
                };
            }
            Err(error) => {
                if matches!(error, AskError::Timeout { .. }) {
                    give_up.now().await;
                }
                give_up.disarm();
                return Outcome::Failed(requester.explain(error).await);
            }
        };
        if event.is_terminal() {
            give_up.disarm();
        }
        match event {
            ReplyEvent::Status(status) => {
                deadline = Instant::now() + timeout;
                let state = status.envelope.task_state;
                if state.is_some_and(TaskState::is_terminal) && ended.is_none() {
                    ended = Some((status.clone(), Instant::now() + TERMINAL_STATE_GRACE));
                }
                if let Some(progress) = progress.as_mut() {
                    progress.report(status_message(state, &status.body)).await;
                }
            }
            ReplyEvent::Chunk {
                sequence,
                body: chunk,
            } => {
                deadline = Instant::now() + timeout;
                if let Some(progress) = progress.as_mut() {
                    progress
                        .report(format!("chunk {sequence}: {}", quote(&chunk)))
                        .await;
                }
                body.extend_from_slice(&chunk);
            }
            ReplyEvent::StreamRestarted { .. } => body.clear(),
            ReplyEvent::Response(reply) => {
                return Outcome::Answered(reply.body.to_vec(), Some(reply.content_type));
            }
            ReplyEvent::Error(error) => return Outcome::Failed(AskError::Remote(error)),
            ReplyEvent::StreamEnd(StreamEnd::Finished { .. }) => {
                return Outcome::Answered(body, None);
            }
            ReplyEvent::StreamEnd(StreamEnd::Failed(error)) => {
                return Outcome::Failed(AskError::Remote(error));
            }
            ReplyEvent::StreamEnd(end) => return Outcome::Failed(AskError::StreamBroken(end)),
        }
    }
}

/// A status as a progress message: `task working`, or the progress
/// record's text.
fn status_message(state: Option<TaskState>, body: &[u8]) -> String {
    match (state, body.is_empty()) {
        (Some(state), true) => format!("task {}", state.name()),
        (Some(state), false) => format!("task {}: {}", state.name(), quote(body)),
        (None, _) => quote(body),
    }
}

/// `bytes` as text for a progress message: clipped, without the line end
/// a line-wise stream's chunks carry.
fn quote(bytes: &[u8]) -> String {
    clip(String::from_utf8_lossy(bytes).trim_end(), PROGRESS_QUOTE)
}

/// The tool result of an outcome: a JSON object answer as structured
/// content (with its text), any other answer as text; an error as a tool
/// error naming the agent and the AGDX code, with `{code, message,
/// retryable}` as structured content when the agent sent an error body.
pub(super) fn result_of(target: &ToolTarget, outcome: Outcome) -> CallToolResult {
    match outcome {
        Outcome::Answered(body, content_type) => answer(body, content_type),
        Outcome::Failed(AskError::Remote(error)) => remote_error(target, &error),
        Outcome::Failed(error) => CallToolResult::error(vec![ContentBlock::text(format!(
            "operation '{}' of agent '{}': {error}",
            target.operation, target.agent
        ))]),
        Outcome::Cancelled => CallToolResult::error(vec![ContentBlock::text(format!(
            "cancelled: the command to agent '{}' was cancelled",
            target.agent
        ))]),
    }
}

fn answer(body: Vec<u8>, content_type: Option<ContentType>) -> CallToolResult {
    // A stream names no codec: a body that parses as a JSON object is one.
    if matches!(content_type, None | Some(ContentType::Json))
        && let Ok(Value::Object(object)) = serde_json::from_slice::<Value>(&body)
    {
        let text = String::from_utf8_lossy(&body).into_owned();
        let mut result = CallToolResult::structured(Value::Object(object));
        result.content = vec![ContentBlock::text(text)];
        return result;
    }
    CallToolResult::success(vec![ContentBlock::text(
        String::from_utf8_lossy(&body).into_owned(),
    )])
}

fn remote_error(target: &ToolTarget, error: &ErrorBody) -> CallToolResult {
    let message = error.message.as_deref().unwrap_or("(no message)");
    let mut result = CallToolResult::structured_error(json!({
        "code": error.code.name(),
        "message": message,
        "retryable": error.retryable,
    }));
    result.content = vec![ContentBlock::text(format!(
        "agent '{}' answered operation '{}' with error {}: {message}",
        target.agent,
        target.operation,
        error.code.name()
    ))];
    result
}

#[cfg(test)]
mod tests {
    use agdx_wire::{AgentId, ErrorCode};

    use super::*;
    use crate::bridge::mcp::tools::Input;

    fn target() -> ToolTarget {
        ToolTarget {
            agent: AgentId::new("calc").unwrap(),
            operation: "add".into(),
            input: Input::Json,
            schema_id: None,
            description: String::new(),
        }
    }

    fn json_of(result: &CallToolResult) -> Value {
        serde_json::to_value(result).unwrap()
    }

    #[test]
    fn a_json_object_is_structured_anything_else_text() {
        let result = result_of(
            &target(),
            Outcome::Answered(br#"{"sum":3}"#.to_vec(), Some(ContentType::Json)),
        );
        let json = json_of(&result);
        assert_eq!(json["structuredContent"], json!({"sum": 3}));
        assert_eq!(json["content"][0]["text"], r#"{"sum":3}"#);
        assert_eq!(json["isError"], false);

        let streamed = json_of(&result_of(
            &target(),
            Outcome::Answered(br#"{"a":[1]}"#.to_vec(), None),
        ));
        assert_eq!(streamed["structuredContent"], json!({"a": [1]}));

        for (body, ct) in [
            (&b"[1,2]"[..], Some(ContentType::Json)),
            (&br#"{"looks":"json"}"#[..], Some(ContentType::Raw)),
            (&b"once upon"[..], None),
        ] {
            let json = json_of(&result_of(&target(), Outcome::Answered(body.to_vec(), ct)));
            assert!(json.get("structuredContent").is_none(), "{json}");
            assert_eq!(
                json["content"][0]["text"],
                String::from_utf8_lossy(body).as_ref()
            );
        }
    }

    #[test]
    fn an_error_reply_is_a_tool_error_with_the_agdx_code() {
        let error = ErrorBody::new(ErrorCode::Unsupported).with_message("no such sum");
        let json = json_of(&result_of(
            &target(),
            Outcome::Failed(AskError::Remote(error)),
        ));
        assert_eq!(json["isError"], true);
        assert_eq!(
            json["structuredContent"],
            json!({"code": "unsupported", "message": "no such sum", "retryable": false})
        );
        assert_eq!(
            json["content"][0]["text"],
            "agent 'calc' answered operation 'add' with error unsupported: no such sum"
        );
        let broken = json_of(&result_of(
            &target(),
            Outcome::Failed(AskError::StreamBroken(StreamEnd::Gap {
                expected: 1,
                received: 3,
            })),
        ));
        assert_eq!(broken["isError"], true);
        assert!(
            broken["content"][0]["text"]
                .as_str()
                .unwrap()
                .contains("chunk 1 is missing"),
            "{broken}"
        );
    }

    #[test]
    fn statuses_read_as_progress_messages() {
        assert_eq!(
            status_message(Some(TaskState::Working), b""),
            "task working"
        );
        assert_eq!(
            status_message(Some(TaskState::Working), b"half way"),
            "task working: half way"
        );
        assert_eq!(status_message(None, b"42%"), "42%");
        assert_eq!(quote(b"upon\n"), "upon");
        let long = "x".repeat(500);
        assert_eq!(quote(long.as_bytes()).chars().count(), PROGRESS_QUOTE + 1);
    }
}
