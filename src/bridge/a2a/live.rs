//! Tasks this bridge sent and still follows: a driver per task reads its
//! replies and turns them into A2A events, in order, for `message/send` to
//! wait on and `message/stream` to forward.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agdx_wire::{ContentType, TaskState};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::logged::ending;
use super::model::{self, REPLY_ARTIFACT, TaskId};
use crate::ask::{ReplyEvent, ReplyWatch};
use crate::clock::{SharedClock, system_clock};
use crate::reassembly::StreamEnd;

/// One step of a task, as A2A streams it.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskEvent {
    /// The task's state changed (with its message: a prompt or an error).
    Status(TaskState, Option<String>, u64),
    /// A piece of the reply.
    Artifact {
        /// The part.
        part: Value,
        /// Whether it adds to the parts sent before.
        append: bool,
        /// Whether it is the reply's last piece.
        last: bool,
    },
}

impl TaskEvent {
    /// Whether a caller waiting for the task stops here: it ended, or it
    /// needs input.
    pub fn is_stop(&self) -> bool {
        matches!(self, TaskEvent::Status(s, ..) if s.is_terminal() || *s == TaskState::InputRequired)
    }

    /// The `StreamResponse` of this event.
    pub fn to_json(&self, task: &TaskId, context_id: &str) -> Value {
        match self {
            TaskEvent::Status(state, message, at) => {
                let message = message
                    .as_deref()
                    .map(|text| model::agent_message(task, context_id, text));
                json!({"statusUpdate": {
                    "taskId": task.to_string(),
                    "contextId": context_id,
                    "status": model::status(*state, message, *at),
                }})
            }
            TaskEvent::Artifact { part, append, last } => json!({"artifactUpdate": {
                "taskId": task.to_string(),
                "contextId": context_id,
                "artifact": {"artifactId": REPLY_ARTIFACT, "parts": [part]},
                "append": append,
                "lastChunk": last,
            }}),
        }
    }
}

/// What is known of a live task.
#[derive(Debug, Default)]
struct Progress {
    events: Vec<TaskEvent>,
    state: Option<TaskState>,
    reply: Vec<u8>,
    content_type: Option<ContentType>,
}

/// A task this bridge follows.
pub struct LiveTask {
    /// The task.
    pub id: TaskId,
    /// The context id the client sees.
    pub context_id: String,
    progress: Mutex<Progress>,
    changed: watch::Sender<usize>,
}

impl LiveTask {
    /// How many events there are.
    pub fn event_count(&self) -> usize {
        self.lock().events.len()
    }

    /// The events from index `from` on.
    pub fn events_from(&self, from: usize) -> Vec<TaskEvent> {
        self.lock().events.get(from..).unwrap_or_default().to_vec()
    }

    /// Waits until an event at index `from` or later is a stop, or `wait`
    /// passes.
    pub async fn wait_stop(&self, from: usize, wait: Duration) {
        let mut changed = self.changed.subscribe();
        let _ = tokio::time::timeout(wait, async {
            loop {
                if self.events_from(from).iter().any(TaskEvent::is_stop) {
                    return;
                }
                if changed.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    /// Waits until there are more than `seen` events (or the driver ended).
    pub async fn more_than(&self, seen: usize) {
        let mut changed = self.changed.subscribe();
        let _ = changed.wait_for(|len| *len > seen).await;
    }

    /// The A2A Task object as it was sent: submitted, nothing more.
    pub fn initial_json(&self) -> Value {
        let at = match self.lock().events.first() {
            Some(TaskEvent::Status(_, _, at)) => *at,
            _ => system_clock().now_micros(),
        };
        json!({
            "id": self.id.to_string(),
            "contextId": self.context_id,
            "status": model::status(TaskState::Submitted, None, at),
        })
    }

    /// The A2A Task object as this bridge last saw it.
    pub fn to_json(&self) -> Value {
        let progress = self.lock();
        let state = progress.state.unwrap_or(TaskState::Submitted);
        let (message, at) = progress
            .events
            .iter()
            .rev()
            .find_map(|e| match e {
                TaskEvent::Status(_, message, at) => Some((message.clone(), *at)),
                TaskEvent::Artifact { .. } => None,
            })
            .unwrap_or((None, system_clock().now_micros()));
        let message = message.map(|text| model::agent_message(&self.id, &self.context_id, &text));
        let mut task = json!({
            "id": self.id.to_string(),
            "contextId": self.context_id,
            "status": model::status(state, message, at),
        });
        if let Some(content_type) = progress.content_type {
            task["artifacts"] = json!([{
                "artifactId": REPLY_ARTIFACT,
                "parts": [model::part_of(&progress.reply, content_type)],
            }]);
        }
        task
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Progress> {
        // A poisoned lock only means a driver panicked mid-push; the events stay usable.
        self.progress.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn push(&self, event: TaskEvent) {
        let len = {
            let mut progress = self.lock();
            if let TaskEvent::Status(state, message, _) = &event {
                // The worker's own `submitted` repeats the bridge's (and
                // may come after its `working`): a task never goes back.
                let repeated = progress.state == Some(*state) && message.is_none();
                let back = *state == TaskState::Submitted && progress.state.is_some();
                if repeated || back {
                    return;
                }
                progress.state = Some(*state);
            }
            progress.events.push(event);
            progress.events.len()
        };
        self.changed.send_replace(len);
    }

    fn reply(&self, bytes: &[u8], content_type: ContentType, append: bool) {
        let mut progress = self.lock();
        if !append {
            progress.reply.clear();
        }
        progress.reply.extend_from_slice(bytes);
        progress.content_type = Some(content_type);
    }
}

/// The tasks this bridge follows, by id; a task leaves once it ended and
/// `linger` passed, so late `message/stream` readers still find it.
#[derive(Default)]
pub struct LiveTasks {
    tasks: Mutex<HashMap<TaskId, Arc<LiveTask>>>,
}

impl LiveTasks {
    /// The live task `id`.
    pub fn get(&self, id: &TaskId) -> Option<Arc<LiveTask>> {
        self.lock().get(id).cloned()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<TaskId, Arc<LiveTask>>> {
        self.tasks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Follows `watch` as task `id` until it ends (or `timeout` passes with
    /// no sign of it), then keeps it `linger` longer.
    pub fn follow(
        self: &Arc<Self>,
        id: TaskId,
        context_id: String,
        replies: ReplyWatch,
        timeout: Duration,
        linger: Duration,
    ) -> Arc<LiveTask> {
        let (changed, _) = watch::channel(0);
        let task = Arc::new(LiveTask {
            id,
            context_id,
            progress: Mutex::default(),
            changed,
        });
        let clock = system_clock();
        task.push(TaskEvent::Status(
            TaskState::Submitted,
            None,
            clock.now_micros(),
        ));
        self.lock().insert(id, task.clone());
        let tasks = self.clone();
        let driven = task.clone();
        tokio::spawn(async move {
            drive(&driven, replies, timeout, &clock).await;
            tokio::time::sleep(linger).await;
            tasks.lock().remove(&id);
        });
        task
    }
}

/// Turns replies into events until the task ends.
async fn drive(task: &LiveTask, mut replies: ReplyWatch, timeout: Duration, clock: &SharedClock) {
    // The newest chunk, held back so that the last one can say it is last.
    let mut held: Option<Vec<u8>> = None;
    let mut appending = false;
    loop {
        let event = match replies.next(timeout).await {
            Ok(event) => event,
            Err(error) => {
                let why = format!("the bridge stopped waiting: {error}");
                task.push(TaskEvent::Status(
                    TaskState::Failed,
                    Some(why),
                    clock.now_micros(),
                ));
                return;
            }
        };
        let now = clock.now_micros();
        match event {
            ReplyEvent::Status(status) => {
                let Some(state) = status.envelope.task_state else {
                    continue;
                };
                // The answer that follows a terminal state ends the task.
                if state.is_terminal() {
                    continue;
                }
                let prompt = (state == TaskState::InputRequired)
                    .then(|| String::from_utf8_lossy(&status.body).into_owned());
                task.push(TaskEvent::Status(state, prompt, now));
            }
            ReplyEvent::Response(reply) => {
                task.reply(&reply.body, reply.content_type, false);
                let part = model::part_of(&reply.body, reply.content_type);
                task.push(TaskEvent::Artifact {
                    part,
                    append: false,
                    last: true,
                });
                task.push(TaskEvent::Status(TaskState::Completed, None, now));
                return;
            }
            ReplyEvent::Error(error) | ReplyEvent::StreamEnd(StreamEnd::Failed(error)) => {
                let (state, message) = ending(&error);
                task.push(TaskEvent::Status(state, Some(message), now));
                return;
            }
            ReplyEvent::Chunk { body, .. } => {
                task.push(TaskEvent::Status(TaskState::Working, None, now));
                if let Some(previous) = held.replace(body.to_vec()) {
                    task.reply(&previous, ContentType::Raw, appending);
                    task.push(TaskEvent::Artifact {
                        part: model::part_of(&previous, ContentType::Raw),
                        append: appending,
                        last: false,
                    });
                    appending = true;
                }
            }
            ReplyEvent::StreamRestarted { .. } => {
                held = None;
                appending = false;
            }
            ReplyEvent::StreamEnd(StreamEnd::Finished { .. }) => {
                let last = held.take().unwrap_or_default();
                task.reply(&last, ContentType::Raw, appending);
                task.push(TaskEvent::Artifact {
                    part: model::part_of(&last, ContentType::Raw),
                    append: appending,
                    last: true,
                });
                task.push(TaskEvent::Status(TaskState::Completed, None, now));
                return;
            }
            ReplyEvent::StreamEnd(end) => {
                let why = format!("the reply stream broke: {end:?}");
                task.push(TaskEvent::Status(TaskState::Failed, Some(why), now));
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task() -> LiveTask {
        LiveTask {
            id: TaskId {
                conversation: crate::new_conversation_id(),
                correlation: crate::new_correlation_id(),
            },
            context_id: "ctx".into(),
            progress: Mutex::default(),
            changed: watch::channel(0).0,
        }
    }

    #[test]
    fn a_repeated_state_is_one_event_and_stops_are_ends_and_prompts() {
        let live = task();
        live.push(TaskEvent::Status(TaskState::Submitted, None, 1));
        live.push(TaskEvent::Status(TaskState::Submitted, None, 2));
        live.push(TaskEvent::Status(TaskState::Working, None, 3));
        live.push(TaskEvent::Status(TaskState::Submitted, None, 4));
        assert_eq!(live.event_count(), 2, "no repeat, no going back");
        assert!(!live.events_from(0).iter().any(TaskEvent::is_stop));
        let prompt = TaskEvent::Status(TaskState::InputRequired, Some("which day?".into()), 4);
        assert!(prompt.is_stop());
        assert!(TaskEvent::Status(TaskState::Canceled, None, 5).is_stop());
        let json = prompt.to_json(&live.id, "ctx");
        let status = &json["statusUpdate"]["status"];
        assert_eq!(status["state"], "TASK_STATE_INPUT_REQUIRED");
        assert_eq!(status["message"]["parts"][0]["text"], "which day?");
        assert_eq!(status["message"]["role"], "ROLE_AGENT");
        assert_eq!(json["statusUpdate"]["taskId"], live.id.to_string());
    }

    #[test]
    fn the_task_holds_the_reply_so_far_as_its_artifact() {
        let live = task();
        live.push(TaskEvent::Status(TaskState::Submitted, None, 1));
        assert_eq!(live.to_json()["status"]["state"], "TASK_STATE_SUBMITTED");
        assert!(live.to_json().get("artifacts").is_none());
        live.reply(b"once ", ContentType::Raw, false);
        live.reply(b"upon", ContentType::Raw, true);
        live.push(TaskEvent::Status(TaskState::Completed, None, 2));
        let json = live.to_json();
        assert_eq!(json["status"]["state"], "TASK_STATE_COMPLETED");
        assert_eq!(json["artifacts"][0]["artifactId"], "reply");
        assert_eq!(json["artifacts"][0]["parts"][0]["text"], "once upon");
        assert_eq!(
            live.initial_json()["status"]["state"],
            "TASK_STATE_SUBMITTED"
        );
    }
}
