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
            // Told once: a task finishing its record in hand is not told
            // again at every look at the assignment.
            if !assigned.contains(partition) && !cancel.is_cancelled() {
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

    /// Tells every task to stop after the record in hand and its commit.
    pub(super) fn cancel_all(&self) {
        for (cancel, _) in self.running.values() {
            cancel.cancel();
        }
    }

    /// Waits for every task to end. Tasks not yet waited for stay in the
    /// set, so dropping this future part-way leaves them to [`Self::abort`]
    /// or to the set's drop.
    pub(super) async fn wait(&mut self) {
        while let Some(&partition) = self.running.keys().next() {
            if let Some((_, task)) = self.running.get_mut(&partition)
                && let Err(error) = task.await
            {
                tracing::error!(partition, %error, "a partition task failed");
            }
            self.running.remove(&partition);
        }
    }

    /// Aborts the tasks still running and waits until each is gone: a
    /// handler in a call is dropped mid-way (an `--exec` command's processes
    /// are killed) and its record stays uncommitted. Returns how many tasks
    /// were still running.
    pub(super) async fn abort(&mut self) -> usize {
        let mut stopped = 0;
        for (_, task) in self.running.values() {
            if !task.is_finished() {
                stopped += 1;
                task.abort();
            }
        }
        for (partition, (_, task)) in self.running.drain() {
            match task.await {
                Err(error) if !error.is_cancelled() => {
                    tracing::error!(partition, %error, "a partition task failed");
                }
                _ => {}
            }
        }
        stopped
    }
}

impl Drop for PartitionTasks {
    fn drop(&mut self) {
        for (_, (_, task)) in self.running.drain() {
            task.abort();
        }
    }
}
