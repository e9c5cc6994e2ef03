//! Why a call was refused, as A2A's JSON-RPC error codes.

use crate::ask::AskError;
use crate::bridge::BridgeLoop;
use crate::replay::ReplayError;

/// A refused or failed A2A call; [`A2aError::code`] is its JSON-RPC code.
#[derive(Debug, thiserror::Error)]
pub enum A2aError {
    /// The body is not JSON.
    #[error("invalid JSON: {0}")]
    Parse(#[source] serde_json::Error),
    /// Not a JSON-RPC 2.0 request object.
    #[error("invalid request: {0}")]
    InvalidRequest(String),
    /// No such method.
    #[error("method not found: {0}")]
    MethodNotFound(String),
    /// The params do not fit the method.
    #[error("invalid params: {0}")]
    InvalidParams(String),
    /// No live agent by that name.
    #[error("no live agent '{0}' (GET /agents lists them)")]
    NoAgent(String),
    /// No task by that id on the log.
    #[error("task not found: {0}")]
    TaskNotFound(String),
    /// The task already ended.
    #[error("task {id} cannot be canceled: it is {state}")]
    NotCancelable {
        /// The task.
        id: String,
        /// Its terminal state.
        state: &'static str,
    },
    /// A method or a use of one this bridge does not serve.
    #[error("unsupported operation: {0}")]
    Unsupported(String),
    /// Push notifications are not served.
    #[error("push notifications are not supported by this bridge")]
    NoPush,
    /// A part this bridge cannot carry.
    #[error("content type not supported: {0}")]
    ContentType(String),
    /// The message already passed through this bridge.
    #[error(transparent)]
    Loop(#[from] BridgeLoop),
    /// Writing to the log (a command, an input, a cancel) failed.
    #[error("writing to the log failed: {0}")]
    Ask(#[source] Box<AskError>),
    /// The bridge's own configuration is unusable.
    #[error("invalid bridge configuration: {0}")]
    Config(String),
    /// Reading the registry failed.
    #[error("reading the live agents failed: {0}")]
    Log(#[from] crate::log::LogError),
    /// Reading the task back from the log failed.
    #[error("the task could not be read from the log: {0}")]
    Replay(#[from] ReplayError),
}

impl From<AskError> for A2aError {
    fn from(error: AskError) -> Self {
        A2aError::Ask(Box::new(error))
    }
}

impl A2aError {
    /// The JSON-RPC error code the A2A specification gives this refusal.
    pub fn code(&self) -> i64 {
        match self {
            A2aError::Parse(_) => -32700,
            A2aError::InvalidRequest(_) | A2aError::Loop(_) => -32600,
            A2aError::MethodNotFound(_) | A2aError::NoAgent(_) => -32601,
            A2aError::InvalidParams(_) => -32602,
            A2aError::TaskNotFound(_) => -32001,
            A2aError::NotCancelable { .. } => -32002,
            A2aError::NoPush => -32003,
            A2aError::Unsupported(_) => -32004,
            A2aError::ContentType(_) => -32005,
            A2aError::Ask(_) | A2aError::Replay(_) | A2aError::Log(_) | A2aError::Config(_) => {
                -32603
            }
        }
    }

    /// The JSON-RPC error object.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"code": self.code(), "message": self.to_string()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_are_the_specs() {
        assert_eq!(A2aError::TaskNotFound("t".into()).code(), -32001);
        let ended = A2aError::NotCancelable {
            id: "t".into(),
            state: "completed",
        };
        assert_eq!(ended.code(), -32002);
        assert_eq!(A2aError::Unsupported("x".into()).code(), -32004);
        assert_eq!(A2aError::MethodNotFound("x".into()).code(), -32601);
        assert_eq!(A2aError::InvalidParams("x".into()).code(), -32602);
    }
}
