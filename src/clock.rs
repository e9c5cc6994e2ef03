//! Time as an input.
//!
//! Deadlines, stream abandonment and retry backoff read the time through a
//! [`Clock`], so the logic that depends on time takes `now` as a value and can
//! be tested without sleeping ([`ManualClock`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in epoch microseconds.
pub trait Clock: Send + Sync + 'static {
    /// Now, in microseconds since the Unix epoch.
    fn now_micros(&self) -> u64;
}

/// The system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_micros(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to.
///
/// ```
/// use agdx::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance_micros(500);
/// assert_eq!(clock.now_micros(), 1_500);
/// ```
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `now_micros`.
    pub fn new(now_micros: u64) -> Self {
        Self(AtomicU64::new(now_micros))
    }
    /// Moves the clock forward.
    pub fn advance_micros(&self, micros: u64) {
        self.0.fetch_add(micros, Ordering::SeqCst);
    }
    /// Sets the clock.
    pub fn set_micros(&self, now_micros: u64) {
        self.0.store(now_micros, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_micros(&self) -> u64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// A shared clock handle.
pub type SharedClock = Arc<dyn Clock>;

/// The system clock as a shared handle.
pub fn system_clock() -> SharedClock {
    Arc::new(SystemClock)
}
