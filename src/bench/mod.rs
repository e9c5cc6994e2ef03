//! Benchmarks the CLI runs (`agdx bench log|ask|pipeline`). Each one works
//! in a stream of its own, named `bench-...`, so it never touches the agent
//! topics in use.

pub mod ask;
pub mod log;
pub mod pipeline;
pub mod plain;

use crate::ask::AskError;
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
    /// An ask got no answer.
    #[error(transparent)]
    Ask(#[from] AskError),
    /// The in-process echo worker stopped with an error.
    #[error(transparent)]
    Worker(#[from] WorkerError),
}
