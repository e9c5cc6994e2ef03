//! What the partition tasks of one pool share: the reading side
//! ([`super::partition`]) and the publishing side ([`super::flush`]) both
//! take it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::fence::Fences;
use crate::log::{TopicInfo, lock};
use crate::trust::Pause;

use super::process::Processor;
use super::{WorkerConfig, WorkerStats};

/// What the partition tasks of one pool reading one commands topic share.
pub(super) struct PartitionContext {
    pub processor: Arc<Processor>,
    /// The commands topic these tasks read: `agent.commands` or the
    /// agent's inbox.
    pub commands: Arc<TopicInfo>,
    pub group: String,
    pub config: WorkerConfig,
    pub permits: Arc<Semaphore>,
    pub stats: Arc<WorkerStats>,
    /// Set when the pool honours quarantine.
    pub pause: Option<Arc<Pause>>,
    /// The partition claims: each partition task works under its fence.
    pub fences: Arc<Fences>,
    /// This pool's group member on [`Self::commands`], named in its claims.
    pub member: String,
    /// Partitions whose task stopped because a newer holder claimed them,
    /// when, and the fence token it held them under: not claimed again
    /// while the assignment still lists them (see
    /// [`PartitionContext::claimable`]).
    pub fenced: Mutex<HashMap<u32, (Instant, u64)>>,
}

/// How long a fenced partition that the group still assigns to this member
/// waits before the member claims it again. A backend's view of the
/// assignment can lag behind the group (a Kafka client resumed after a
/// pause learns it was dropped at its next heartbeat); claiming at once
/// would fence the new holder in turn.
pub(super) const FENCED_PAUSE: Duration = Duration::from_secs(10);

impl PartitionContext {
    /// The partitions of `assigned` a task may claim: all but those fenced
    /// less than [`FENCED_PAUSE`] ago that someone still holds. A fenced
    /// partition the assignment no longer lists is forgotten, so it is
    /// claimed as soon as it comes back; so is one nobody holds (its newest
    /// claim is released: the group moved it away and back before this
    /// member read an assignment without it), since claiming it fences no
    /// one.
    pub async fn claimable(&self, assigned: &[u32]) -> Vec<u32> {
        let paused: Vec<(u32, u64)> = {
            let mut fenced = lock(&self.fenced);
            fenced.retain(|partition, (at, _)| {
                assigned.contains(partition) && at.elapsed() < FENCED_PAUSE
            });
            fenced.iter().map(|(&p, &(_, token))| (p, token)).collect()
        };
        for (partition, token) in paused {
            match self.fences.released_since(token).await {
                Ok(true) => {
                    lock(&self.fenced).remove(&partition);
                }
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(%error, partition, "could not read the partition claims; the fenced partition waits");
                }
            }
        }
        let fenced = lock(&self.fenced);
        assigned
            .iter()
            .copied()
            .filter(|partition| !fenced.contains_key(partition))
            .collect()
    }

    /// Notes that a newer holder claimed `partition`, which this member
    /// held under `fence`.
    pub fn fenced_out(&self, partition: u32, fence: u64) {
        lock(&self.fenced).insert(partition, (Instant::now(), fence));
    }

    /// Whether the pool's agent is quarantined now (take no new records).
    pub fn paused(&self) -> bool {
        self.pause
            .as_ref()
            .is_some_and(|p| p.quarantined().is_some())
    }
}
