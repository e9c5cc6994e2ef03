//! Retry policy for retryable handler failures: exponential backoff with
//! jitter, a bounded number of attempts.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How often and how patiently a retryable failure is tried again.
///
/// ```
/// use std::time::Duration;
/// use agdx::RetryPolicy;
/// let p = RetryPolicy { max_attempts: 4, base_delay: Duration::from_millis(100), max_delay: Duration::from_secs(2) };
/// // Attempt 1 failed: the wait before attempt 2 lies in [50 ms, 100 ms].
/// assert_eq!(p.delay_after(1, 0.0), Duration::from_millis(50));
/// assert_eq!(p.delay_after(1, 1.0), Duration::from_millis(100));
/// // It doubles per attempt and never exceeds max_delay.
/// assert_eq!(p.delay_after(3, 1.0), Duration::from_millis(400));
/// assert_eq!(p.delay_after(30, 1.0), Duration::from_secs(2));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first one included (at least 1).
    pub max_attempts: u32,
    /// Wait after the first failed attempt (before jitter).
    pub base_delay: Duration,
    /// Upper bound of any single wait.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(10),
        }
    }
}

impl RetryPolicy {
    /// Whether another attempt follows after `attempts` failed ones.
    pub fn should_retry(&self, attempts: u32) -> bool {
        attempts < self.max_attempts.max(1)
    }

    /// The wait after failed attempt number `attempt` (1-based): the
    /// exponential step `base · 2^(attempt-1)`, capped at `max_delay`, of which
    /// the upper half is scaled by `jitter` in `[0, 1]` ("equal jitter": never
    /// less than half the step, so retries spread out without collapsing to 0).
    pub fn delay_after(&self, attempt: u32, jitter: f64) -> Duration {
        let shift = attempt.saturating_sub(1).min(31);
        let step = self
            .base_delay
            .saturating_mul(1u32 << shift)
            .min(self.max_delay);
        let half = step / 2;
        half + half.mul_f64(jitter.clamp(0.0, 1.0))
    }
}

/// Wait before trying the log or a store again after `failures` failures in a
/// row: 100 ms doubling up to 3.2 s.
pub(crate) fn backoff(failures: u32) -> Duration {
    Duration::from_millis(50u64 << failures.clamp(1, 6))
}

/// Waits the [`backoff`] after `failures` failures in a row, returning
/// early (with `true`) when `cancel` is cancelled.
pub(crate) async fn back_off(failures: u32, cancel: &CancellationToken) -> bool {
    tokio::select! {
        _ = cancel.cancelled() => true,
        _ = tokio::time::sleep(backoff(failures)) => false,
    }
}
