//! Benchmarks the CLI runs (`agdx bench log|ask|ax-ipc|bridge-axon|pipeline`).
//! Each one works in a stream of its own, named `bench-...`, so it never
//! touches the agent topics in use.

pub mod ask;
pub mod ax_ipc;
pub mod bridge_axon;
pub mod log;
pub mod pipeline;
pub mod plain;
mod timing;

use crate::ask::AskError;
use crate::bridge::ax_ipc::{BindError, SchemaError};
use crate::bridge::axon::{BridgeError, SendError, TokenError, TransportError};
use crate::log::LogError;
use crate::producer::ProduceError;
use crate::worker::WorkerError;

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
}

impl From<AskError> for BenchError {
    fn from(error: AskError) -> Self {
        BenchError::Ask(Box::new(error))
    }
}

/// The value below which `fraction` of the sorted `latencies` fall.
pub(crate) fn percentile(latencies: &[std::time::Duration], fraction: f64) -> std::time::Duration {
    let last = latencies.len().saturating_sub(1);
    let index = ((last as f64) * fraction.clamp(0.0, 1.0)).round() as usize;
    latencies.get(index).copied().unwrap_or_default()
}

/// A duration in milliseconds, for reports.
pub(crate) fn ms(d: std::time::Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
