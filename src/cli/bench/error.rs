//! Why a bench stops.

use agdx::AskError;
use agdx::ProduceError;
use agdx::bridge::ax_ipc::{BindError, SchemaError};
use agdx::bridge::axon::{BridgeError, SendError, TokenError, TransportError};
use agdx::log::LogError;
use agdx::worker::WorkerError;

/// Why a bench could not run to the end.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The options make no sense.
    #[error("{0}")]
    Options(String),
    /// The log failed: creating the bench topics, appending or reading.
    #[error(transparent)]
    Log(#[from] LogError),
    /// Publishing the bench commands failed.
    #[error(transparent)]
    Produce(#[from] ProduceError),
    /// An ask got no answer. Boxed: an ask's timeout names the agent, the
    /// operation and the log, which would make every bench result large.
    #[error(transparent)]
    Ask(Box<AskError>),
    /// The in-process AXON bridge failed.
    #[error(transparent)]
    Bridge(#[from] BridgeError),
    /// The in-process AXON client could not start.
    #[error(transparent)]
    AxonClient(#[from] TransportError),
    /// The bridge's token could not be made.
    #[error(transparent)]
    Token(#[from] TokenError),
    /// An AXON round trip failed.
    #[error(transparent)]
    Axon(#[from] SendError),
    /// The in-process echo worker stopped with an error.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// A socket or temporary directory failed.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// The bridge's schemas did not load.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// The bridge's socket could not be bound.
    #[error(transparent)]
    Bind(#[from] BindError),
    /// The bridge answered something other than success.
    #[error("the bridge answered unexpectedly: {0}")]
    Answer(String),
    /// The bench's operator key could not be made or enrolled.
    #[error("the bench's operator key: {0}")]
    Key(String),
    /// What the bench waits for did not happen in time, or a task it
    /// started failed.
    #[error("{0}")]
    Stalled(String),
}

impl From<AskError> for BenchError {
    fn from(error: AskError) -> Self {
        BenchError::Ask(Box::new(error))
    }
}
