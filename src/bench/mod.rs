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
    #[error(transparent)]
    Log(#[from] LogError),
    #[error(transparent)]
    Produce(#[from] ProduceError),
    #[error(transparent)]
    Ask(#[from] AskError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
}
