//! What the JSON-RPC methods do: send a message (a new command, or the
//! input a waiting task asked for), read a task, cancel one.

use std::sync::Arc;

use agdx_wire::TaskState;
use serde_json::Value;

use super::A2aBridge;
use super::error::A2aError;
use super::live::LiveTask;
use super::logged::{LoggedTask, read_task};
use super::model::{self, Inbound, META_CONTEXT_ID, TaskId};
use crate::ask::send_input;
use crate::bridge::BridgeLoop;
use crate::cards::{ANY_OPERATION, LiveAgent};
use crate::producer::CommandRequest;

/// What a message started or continued.
pub enum Started {
    /// A task this bridge follows, and the index of its first event that
    /// this message caused.
    Live(Arc<LiveTask>, usize),
    /// The input for a task another bridge follows: the task as the log
    /// has it once the input is sent.
    Logged(Box<LoggedTask>),
}

impl A2aBridge {
    /// `message/send` and `message/stream`: the message to `agent` as a new
    /// command, or as the input its task asked for.
    pub(super) async fn send(
        &self,
        agent: &LiveAgent,
        params: &Value,
    ) -> Result<Started, A2aError> {
        let inbound = model::inbound(params)?;
        BridgeLoop::check(&inbound.hops, &self.inner.config.bridge_id)?;
        if let Some(task) = &inbound.task_id {
            return self.answer(agent, task, inbound.body.clone()).await;
        }
        self.start(agent, inbound).await
    }

    async fn start(&self, agent: &LiveAgent, inbound: Inbound) -> Result<Started, A2aError> {
        let operation = operation_for(agent, inbound.skill.as_deref())?;
        let mut metadata = inbound.hops;
        let conversation = match inbound.context_id.as_deref() {
            Some(context) => {
                let conversation = model::context_conversation(context);
                if conversation.to_string() != context {
                    metadata = metadata.with(META_CONTEXT_ID, context);
                }
                conversation
            }
            None => crate::new_conversation_id(),
        };
        let request = CommandRequest::new(operation, inbound.body)
            .content_type(inbound.content_type)
            .to(agent.agent.clone())
            .conversation(conversation)
            .metadata(metadata)
            .task_states();
        let watch = self.inner.requester.send(request).await?;
        let sent = watch.sent();
        let id = TaskId {
            conversation: sent.conversation,
            correlation: sent.correlation.unwrap_or_else(crate::new_correlation_id),
        };
        let context_id = inbound
            .context_id
            .unwrap_or_else(|| conversation.to_string());
        let config = &self.inner.config;
        let task = self.inner.tasks.follow(
            id,
            context_id,
            watch,
            config.reply_timeout,
            config.send_wait.max(config.cancel_wait),
        );
        Ok(Started::Live(task, 0))
    }

    /// A message naming a task answers its prompt.
    async fn answer(
        &self,
        agent: &LiveAgent,
        task: &str,
        input: Vec<u8>,
    ) -> Result<Started, A2aError> {
        let logged = self.task(agent, task).await?;
        let Some(prompt) = logged
            .prompt
            .filter(|_| logged.state == TaskState::InputRequired)
        else {
            return Err(A2aError::Unsupported(format!(
                "task {task} is {}, not waiting for input: a message names a task only to answer its prompt",
                logged.state.name()
            )));
        };
        let live = self.inner.tasks.get(&logged.id);
        let from = live.as_ref().map_or(0, |t| t.event_count());
        send_input(
            self.inner.requester.producer(),
            (logged.id.conversation, logged.id.correlation),
            logged.target.as_ref(),
            prompt,
            input,
        )
        .await?;
        match live {
            Some(live) => Ok(Started::Live(live, from)),
            None => Ok(Started::Logged(Box::new(self.task(agent, task).await?))),
        }
    }

    /// `tasks/get`: task `id` of `agent` as the log has it.
    pub(super) async fn task(&self, agent: &LiveAgent, id: &str) -> Result<LoggedTask, A2aError> {
        let parsed: TaskId = id.parse()?;
        let task = read_task(&self.inner.log, &self.inner.topology, parsed).await?;
        task.filter(|t| t.target.as_ref() == Some(&agent.agent))
            .ok_or_else(|| A2aError::TaskNotFound(id.to_owned()))
    }

    /// `tasks/cancel`: cancels task `id`'s command and waits (a while) for
    /// the task to end.
    pub(super) async fn cancel(&self, agent: &LiveAgent, id: &str) -> Result<LoggedTask, A2aError> {
        let task = self.task(agent, id).await?;
        if task.state.is_terminal() {
            return Err(A2aError::NotCancelable {
                id: id.to_owned(),
                state: task.state.name(),
            });
        }
        self.inner
            .requester
            .cancel(&task.sent, task.target.as_ref())
            .await?;
        let deadline = tokio::time::Instant::now() + self.inner.config.cancel_wait;
        loop {
            let now = self.task(agent, id).await?;
            if now.state.is_terminal() || tokio::time::Instant::now() >= deadline {
                return Ok(now);
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
    }
}

/// The operation a message asks `agent` for: the skill it names, else the
/// agent's only operation.
fn operation_for(agent: &LiveAgent, skill: Option<&str>) -> Result<String, A2aError> {
    let any = agent.operations.iter().any(|o| o == ANY_OPERATION);
    let named: Vec<&str> = agent
        .operations
        .iter()
        .map(String::as_str)
        .filter(|o| *o != ANY_OPERATION)
        .collect();
    match skill {
        Some(skill) if any || named.contains(&skill) => Ok(skill.to_owned()),
        Some(skill) => Err(A2aError::InvalidParams(format!(
            "agent '{}' has no skill '{skill}' (its skills: {})",
            agent.agent,
            named.join(", ")
        ))),
        None if named.len() == 1 => Ok(named[0].to_owned()),
        None => Err(A2aError::InvalidParams(format!(
            "agent '{}' has skills {}: name one as message.metadata.skill",
            agent.agent,
            if named.is_empty() {
                "of any name".to_owned()
            } else {
                named.join(", ")
            }
        ))),
    }
}
