//! Heartbeats on long work: while a handler runs longer than the progress
//! interval, the pool publishes a `status` `progress` record for the
//! command (same correlation) every interval, so the requester knows it is
//! being worked on and keeps waiting (the ax-ipc rule: heartbeats keep the
//! caller alive). A hard limit still ends a handler that never returns.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use agdx_wire::{ContentType, ErrorCode};
use tokio::time::Instant;

use crate::producer::{Producer, ReplyTo};

use super::handler::{HandlerError, HandlerReply};

/// How often a long handler's requester hears that it is still running,
/// unless configured otherwise.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(15);

/// When and how to beat for one handler call.
pub(crate) struct Heartbeat<'a> {
    pub producer: &'a Producer,
    /// Where the beats go; `None` for an event (nobody waits).
    pub to: Option<&'a ReplyTo>,
    pub every: Duration,
    pub limit: Option<Duration>,
}

impl Heartbeat<'_> {
    /// Runs `work`, started at `started`, beating every interval while it
    /// runs, and fails it (not retryably, `deadline_exceeded`) when it
    /// outlives the limit.
    pub async fn around(
        &self,
        started: Instant,
        mut work: Pin<&mut impl Future<Output = Result<HandlerReply, HandlerError>>>,
    ) -> Result<HandlerReply, HandlerError> {
        // A handler done at once (the usual case) needs no timers at all.
        if let Poll::Ready(done) =
            std::future::poll_fn(|cx| Poll::Ready(work.as_mut().poll(cx))).await
        {
            return done;
        }
        let mut beats = tokio::time::interval_at(started + self.every, self.every);
        let limit = async {
            match self.limit {
                Some(limit) => tokio::time::sleep_until(started + limit).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(limit);
        loop {
            tokio::select! {
                biased;
                done = &mut work => return done,
                _ = &mut limit => {
                    let limit = self.limit.unwrap_or_default();
                    return Err(HandlerError::fatal(format!(
                        "the handler ran longer than its limit of {limit:?} and was stopped; make it faster, or raise the worker's handler limit"
                    ))
                    .with_code(ErrorCode::DeadlineExceeded));
                }
                // Boxed: a beat is rare, and inline its future would make
                // every handler call's future, moved per record, larger.
                _ = beats.tick() => Box::pin(self.beat(started.elapsed())).await,
            }
        }
    }

    async fn beat(&self, elapsed: Duration) {
        let Some(to) = self.to else { return };
        let body = format!("{{\"elapsed_ms\":{}}}", elapsed.as_millis()).into_bytes();
        if let Err(error) = self.producer.progress(to, body, ContentType::Json).await {
            tracing::warn!(%error, "could not publish a progress heartbeat; the handler goes on");
        }
    }
}
