//! Testing code built on agdx (feature `testing`).
//!
//! - [`HandlerTest`]: unit-test a [`Handler`](crate::worker::Handler)
//!   without a log server: build the [`Request`](crate::worker::Request) a
//!   worker would hand it, call it, inspect its reply and what it published.
//! - [`MemoryLog`]: a complete [`Log`] in memory, to run producers,
//!   workers and requesters in one test with no I/O.
//! - [`conformance`]: the suite every log backend passes, to run against a
//!   `Log` of your own.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use agdx::CommandRequest;
//! use agdx::testing::HandlerTest;
//! use agdx::wire::AgentId;
//! use agdx::worker::{Handler, HandlerError, HandlerReply, Request};
//!
//! /// Greets whoever sent the command.
//! struct Greeter;
//!
//! #[async_trait::async_trait]
//! impl Handler for Greeter {
//!     async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError> {
//!         let name = std::str::from_utf8(&request.body)
//!             .map_err(|_| HandlerError::fatal("the name is not UTF-8"))?;
//!         Ok(HandlerReply::raw(format!("hello {name}, from {}", request.source())))
//!     }
//! }
//!
//! let test = HandlerTest::new(AgentId::new("greeter")?).caller(AgentId::new("alice")?);
//! let request = test.command(CommandRequest::new("greet", b"Alice".to_vec())).await?;
//! assert_eq!(request.operation(), Some("greet"));
//! let reply = Greeter.handle(request).await?;
//! assert_eq!(reply, HandlerReply::raw("hello Alice, from alice"));
//!
//! let request = test.command(CommandRequest::new("greet", vec![0xff])).await?;
//! let refused = Greeter.handle(request).await.unwrap_err();
//! assert!(!refused.retryable);
//! # Ok(()) }
//! ```

use std::future::Future;
use std::time::Duration;

use crate::log::{GroupMember, Log, LogRecord, OutgoingRecord, TopicInfo};

pub mod conformance;
mod handler;
mod memory;

pub use handler::{DEFAULT_CALLER, HandlerTest};
pub use memory::{MEMORY_MAX_RECORD_BYTES, MemoryLog};

/// How long the waits of the suite give something that should happen
/// within seconds, so a loaded machine is not mistaken for a broken log.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A record with no headers.
pub fn record(payload: impl Into<Vec<u8>>) -> OutgoingRecord {
    OutgoingRecord {
        headers: Vec::new(),
        payload: payload.into().into(),
    }
}

/// The payloads of `records` as strings.
pub fn texts(records: &[LogRecord]) -> Vec<String> {
    records
        .iter()
        .map(|r| String::from_utf8_lossy(&r.payload).into_owned())
        .collect()
}

/// The records of a partition from offset `from` on, read `chunk` at a time
/// until a poll comes back empty; panics when a poll fails or returns more
/// than it was asked for.
pub async fn drain(
    log: &dyn Log,
    topic: &TopicInfo,
    partition: u32,
    from: u64,
    chunk: u32,
) -> Vec<LogRecord> {
    let mut out = Vec::new();
    loop {
        let next = from + out.len() as u64;
        let got = log
            .poll(topic, partition, next, chunk, Duration::ZERO)
            .await
            .expect("poll");
        assert!(
            got.len() <= chunk as usize,
            "a poll returned more than it was asked for"
        );
        if got.is_empty() {
            return out;
        }
        out.extend(got);
    }
}

/// Calls `probe` every 50 ms until it returns `Some`, panicking with
/// `what` after [`PATIENCE`].
pub async fn eventually<T, Fut>(what: &str, mut probe: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting: {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The partitions two members own, once they split `partitions` between
/// them: disjoint, together all of them, both non-empty. (The two answers
/// are read one after the other, so a partition moving in between may show
/// up twice for a moment; the wait goes on until the picture is settled.)
pub async fn wait_for_split(
    a: &dyn GroupMember,
    b: &dyn GroupMember,
    partitions: u32,
) -> (Vec<u32>, Vec<u32>) {
    eventually("two members to split the partitions", || async {
        let owned_a = a.assigned().await.expect("member a: assigned");
        let owned_b = b.assigned().await.expect("member b: assigned");
        let disjoint = owned_a.iter().all(|p| !owned_b.contains(p));
        let mut union: Vec<u32> = owned_a.iter().chain(&owned_b).copied().collect();
        union.sort_unstable();
        let split = disjoint
            && !owned_a.is_empty()
            && !owned_b.is_empty()
            && union == (0..partitions).collect::<Vec<_>>();
        split.then_some((owned_a, owned_b))
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::conformance::{Opened, Subject, run_all};
    use super::*;

    /// The suite holds for a log outside the crate's backends, through the
    /// public API alone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_memory_log_conforms() {
        let log = MemoryLog::new();
        run_all(|check| {
            let again = log.clone();
            Subject::new(
                Arc::new(log.clone()),
                Arc::new(move || {
                    let again = again.clone();
                    Box::pin(async move { Opened::new(Arc::new(again), ()) })
                }),
                check,
            )
        })
        .await;
    }
}
