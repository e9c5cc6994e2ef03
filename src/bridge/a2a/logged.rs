//! A task read back from the log: the command by its correlation in its
//! conversation, then its replies. `tasks/get` and `tasks/cancel` read it,
//! so any bridge on the log answers for any task.

use std::collections::BTreeMap;

use agdx_wire::{AgentEnvelope, AgentId, ChannelId, ContentType, Kind, LogPosition, TaskState};
use serde_json::{Value, json};

use super::error::A2aError;
use super::model::{self, REPLY_ARTIFACT, TaskId};
use crate::log::SharedLog;
use crate::producer::Sent;
use crate::reassembly::error_of;
use crate::replay::{Replay, ReplayRecord};
use crate::task_states::input_for;
use crate::topology::Topology;

/// What the log says about one task.
#[derive(Debug, Clone)]
pub struct LoggedTask {
    /// The task.
    pub id: TaskId,
    /// The context id the client named (or the conversation's).
    pub context_id: String,
    /// The agent asked.
    pub target: Option<AgentId>,
    /// The command as it was sent, to cancel it.
    pub sent: Sent,
    /// Where the task stands.
    pub state: TaskState,
    /// The status message: the prompt of an input-required task, the
    /// error of a failed one.
    pub message: Option<String>,
    /// The input-required prompt's record and position, while it waits.
    pub prompt: Option<(Option<agdx_wire::RecordId>, LogPosition)>,
    /// The reply's bytes and codec, once any arrived.
    pub reply: Option<(Vec<u8>, ContentType)>,
    /// When the task last changed, epoch microseconds (log time).
    pub updated_micros: u64,
}

impl LoggedTask {
    /// The A2A Task object.
    pub fn to_json(&self) -> Value {
        let message = self
            .message
            .as_deref()
            .map(|text| model::agent_message(&self.id, &self.context_id, text));
        let mut task = json!({
            "id": self.id.to_string(),
            "contextId": self.context_id,
            "status": model::status(self.state, message, self.updated_micros),
        });
        if let Some((body, content_type)) = &self.reply {
            task["artifacts"] = json!([{
                "artifactId": REPLY_ARTIFACT,
                "parts": [model::part_of(body, *content_type)],
            }]);
        }
        task
    }
}

/// Reads task `id` from the log; `None` when its command is not there.
pub async fn read_task(
    log: &SharedLog,
    topology: &Topology,
    id: TaskId,
) -> Result<Option<LoggedTask>, A2aError> {
    let records = Replay::new(log.clone(), topology, id.conversation)
        .read_to_end()
        .await?;
    let mut task: Option<LoggedTask> = None;
    let mut chunks: BTreeMap<ChannelId, (u64, BTreeMap<u64, Vec<u8>>)> = BTreeMap::new();
    let mut ended = false;
    for record in &records {
        let Some(envelope) = record.envelope() else {
            continue;
        };
        if envelope.correlation != Some(id.correlation) {
            continue;
        }
        let Some(found) = task.as_mut() else {
            if is_the_command(envelope) {
                task = Some(begun(id, record, envelope));
            }
            continue;
        };
        if record.topic == topology.responses.topic && !ended {
            found.updated_micros = record.timestamp_micros;
            ended = apply(found, record, envelope, &mut chunks);
        }
    }
    Ok(task)
}

fn is_the_command(envelope: &AgentEnvelope) -> bool {
    envelope.kind == Kind::Command && input_for(envelope).is_none()
}

fn begun(id: TaskId, record: &ReplayRecord, command: &AgentEnvelope) -> LoggedTask {
    LoggedTask {
        id,
        context_id: model::context_id_of(command.metadata.as_ref(), id.conversation),
        target: command.target.clone(),
        sent: Sent {
            record: command.record,
            conversation: id.conversation,
            correlation: Some(id.correlation),
            topic: record.topic.clone(),
            partition: record.position.partition,
        },
        state: TaskState::Submitted,
        message: None,
        prompt: None,
        reply: None,
        updated_micros: record.timestamp_micros,
    }
}

/// Folds one reply into `task`; true once the task has ended.
fn apply(
    task: &mut LoggedTask,
    record: &ReplayRecord,
    envelope: &AgentEnvelope,
    chunks: &mut BTreeMap<ChannelId, (u64, BTreeMap<u64, Vec<u8>>)>,
) -> bool {
    match envelope.kind {
        Kind::Status => {
            // A `submitted` adds nothing (the task starts so) and may
            // come after `working`.
            let Some(state) = envelope.task_state.filter(|s| *s != TaskState::Submitted) else {
                return false;
            };
            task.state = state;
            task.prompt = None;
            task.message = None;
            if state == TaskState::InputRequired {
                task.prompt = Some((envelope.record, record.position));
            }
            if state == TaskState::InputRequired || !envelope.body.is_empty() {
                task.message = Some(String::from_utf8_lossy(&envelope.body).into_owned());
            }
            false
        }
        Kind::Response => {
            task.state = TaskState::Completed;
            task.reply = Some((envelope.body.to_vec(), record.content_type));
            true
        }
        Kind::Error => {
            let (state, message) = ending(&error_of(envelope));
            task.state = state;
            task.message = Some(message);
            true
        }
        Kind::Chunk => {
            let Some(channel) = envelope.channel else {
                return false;
            };
            let stream = chunks.entry(channel).or_default();
            stream.0 = record.timestamp_micros;
            stream
                .1
                .insert(envelope.sequence.unwrap_or(0), envelope.body.to_vec());
            // The newest channel is the stream (a restarted writer opens a new one).
            let newest = chunks.values().max_by_key(|(at, _)| *at);
            let body: Vec<u8> = newest
                .map(|(_, parts)| parts.values().flatten().copied().collect())
                .unwrap_or_default();
            task.reply = Some((body, ContentType::Raw));
            if envelope.last {
                task.state = TaskState::Completed;
            } else {
                task.state = TaskState::Working;
            }
            envelope.last
        }
        _ => false,
    }
}

/// The state an `error` reply ends a task in, and the status text.
pub fn ending(error: &agdx_wire::ErrorBody) -> (TaskState, String) {
    let state = if error.code == agdx_wire::ErrorCode::Cancelled {
        TaskState::Canceled
    } else {
        TaskState::Failed
    };
    let text = error
        .message
        .clone()
        .unwrap_or_else(|| error.code.name().to_owned());
    (state, text)
}

#[cfg(test)]
mod tests {
    use agdx_wire::{ErrorBody, ErrorCode};

    use super::*;

    #[test]
    fn a_cancelled_error_ends_canceled_and_others_failed() {
        let cancelled = ErrorBody::new(ErrorCode::Cancelled).with_message("stopped");
        assert_eq!(ending(&cancelled), (TaskState::Canceled, "stopped".into()));
        let broke = ErrorBody::new(ErrorCode::Internal);
        assert_eq!(ending(&broke), (TaskState::Failed, "internal".into()));
    }
}
