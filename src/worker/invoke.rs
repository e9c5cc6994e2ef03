//! Calling a handler (step 8 of docs/runtime.md §4): retryable failures are
//! tried again with backoff and jitter, and a handler that panics fails
//! that one call, not the pool.
//!
//! A panic is caught where the handler's future is polled and becomes a
//! non-retryable `internal` failure carrying the panic message: the record
//! is dead-lettered and committed like any other final failure, instead of
//! killing the partition task (which would read the record, and the ones
//! before its commit, again and again).

use std::panic::AssertUnwindSafe;

use agdx_wire::ErrorCode;
use futures_util::FutureExt;

use crate::metrics::PoolMetrics;
use crate::retry::RetryPolicy;

use super::handler::{Handler, HandlerError, HandlerReply, Request};
use super::heartbeat::Heartbeat;

/// Runs `handler` on `first` until it succeeds, fails for good, or the
/// retries of `retry` are used up; what it answered and how many attempts
/// that took. A retry calls the handler with `again()`, the same request
/// made anew (`None` when it cannot be: the last failure stands), unless a
/// call `streamed` chunks. Each call runs inside `heartbeat` (progress
/// beats, the hard limit) and is timed in `metrics` under the `operation`
/// label.
///
/// The request is made again rather than copied before each call: a copy
/// (the envelope and the body) would be paid by every record, a retry is
/// rare.
pub(super) async fn run_with_retries(
    handler: &dyn Handler,
    (first, again): (Request, impl Fn() -> Option<Request>),
    streamed: impl Fn() -> bool,
    retry: &RetryPolicy,
    heartbeat: &Heartbeat<'_>,
    (metrics, operation): (&PoolMetrics, &str),
) -> (Result<HandlerReply, HandlerError>, u32) {
    let mut request = first;
    let mut attempt = 1;
    loop {
        request.attempt = attempt;
        // One reading of the clock serves the heartbeat and the metric.
        let started = tokio::time::Instant::now();
        // Pinned here, where it is made, rather than moved into a pinned
        // copy inside `around`.
        let call = std::pin::pin!(call(handler, request));
        let outcome = heartbeat.around(started, call).await;
        metrics.handler_time(operation, started.elapsed());
        match outcome {
            Ok(reply) => return (Ok(reply), attempt),
            // A retry after chunks went out would start a second stream the
            // reader has no use for; such a failure is final.
            Err(error) if error.retryable && retry.should_retry(attempt) && !streamed() => {
                let Some(next) = again() else {
                    return (Err(error), attempt);
                };
                let delay = retry.delay_after(attempt, rand::random::<f64>());
                tracing::info!(attempt, ?delay, %error, "retryable failure; trying again");
                metrics.retry();
                tokio::time::sleep(delay).await;
                request = next;
                attempt += 1;
            }
            Err(error) => return (Err(error), attempt),
        }
    }
}

/// One call of the handler; a panic in it is a non-retryable failure.
async fn call(handler: &dyn Handler, request: Request) -> Result<HandlerReply, HandlerError> {
    match AssertUnwindSafe(handler.handle(request))
        .catch_unwind()
        .await
    {
        Ok(result) => result,
        Err(panic) => {
            let message = panic_message(panic.as_ref());
            tracing::error!(%message, "the handler panicked; dead-lettering the record");
            Err(HandlerError {
                code: ErrorCode::Internal,
                message: format!("the handler panicked: {message}"),
                retryable: false,
            })
        }
    }
}

/// The text a panic was raised with.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "a panic without a message".to_owned()
    }
}
