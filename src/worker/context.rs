//! What the partition tasks of one pool share: the reading side
//! ([`super::partition`]) and the publishing side ([`super::flush`]) both
//! take it.

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::trust::Pause;

use super::process::Processor;
use super::{WorkerConfig, WorkerStats};

/// What the partition tasks of one pool share.
pub(super) struct PartitionContext {
    pub processor: Arc<Processor>,
    pub group: String,
    pub config: WorkerConfig,
    pub permits: Arc<Semaphore>,
    pub stats: Arc<WorkerStats>,
    /// Set when the pool honours quarantine.
    pub pause: Option<Arc<Pause>>,
}

impl PartitionContext {
    /// Whether the pool's agent is quarantined now (take no new records).
    pub fn paused(&self) -> bool {
        self.pause
            .as_ref()
            .is_some_and(|p| p.quarantined().is_some())
    }
}
