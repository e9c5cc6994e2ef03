//! The partition tasks of a running pool: one per partition the member
//! owns, started and stopped as the group assignment changes.
//!
//! The set owns its tasks: dropping it (a `Worker::run` future dropped
//! part-way, say by a `select!` or a timeout) aborts every task still
//! running, so no partition goes on being handled for a pool that is gone.

use std::collections::HashMap;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Running partition tasks by partition, each with its stop signal.
#[derive(Default)]
pub(super) struct PartitionTasks {
    running: HashMap<u32, (CancellationToken, JoinHandle<()>)>,
}

impl PartitionTasks {
    /// Follows the assignment `assigned`: stops the tasks of partitions that
    /// moved away, forgets finished ones (one that failed is started again),
    /// and starts one with `start` for each newly owned partition.
    pub(super) fn follow(
        &mut self,
        assigned: &[u32],
        mut start: impl FnMut(u32) -> (CancellationToken, JoinHandle<()>),
    ) {
        for (partition, (cancel, _)) in &self.running {
            if !assigned.contains(partition) {
                tracing::info!(partition, "partition moved to another member");
                cancel.cancel();
            }
        }
        for (partition, (_, task)) in self
            .running
            .iter_mut()
            .filter(|(_, (_, t))| t.is_finished())
        {
            if let Some(Err(error)) = futures_util::FutureExt::now_or_never(task) {
                tracing::error!(partition, %error, "a partition task failed; starting it again");
            }
        }
        self.running.retain(|_, (_, task)| !task.is_finished());
        for &partition in assigned {
            if let std::collections::hash_map::Entry::Vacant(slot) = self.running.entry(partition) {
                tracing::info!(partition, "partition assigned");
                slot.insert(start(partition));
            }
        }
    }

    /// The partitions with a task.
    pub(super) fn partitions(&self) -> Vec<u32> {
        self.running.keys().copied().collect()
    }

    /// Tells every task to stop and waits for each to finish the record in
    /// hand and commit. Tasks not yet waited for stay in the set, so they
    /// are aborted should this future be dropped.
    pub(super) async fn stop(mut self) {
        for (cancel, _) in self.running.values() {
            cancel.cancel();
        }
        while let Some(&partition) = self.running.keys().next() {
            if let Some((_, task)) = self.running.get_mut(&partition)
                && let Err(error) = task.await
            {
                tracing::error!(partition, %error, "a partition task failed");
            }
            self.running.remove(&partition);
        }
    }
}

impl Drop for PartitionTasks {
    fn drop(&mut self) {
        for (_, (_, task)) in self.running.drain() {
            task.abort();
        }
    }
}
