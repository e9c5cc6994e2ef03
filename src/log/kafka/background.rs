//! librdkafka clients that need a thread of their own.

use std::sync::{Arc, Weak};
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, ConsumerContext};

/// How long one turn of a serving thread waits for events.
const TURN: Duration = Duration::from_millis(100);

/// Serves a consumer's own queue (errors, logs, rebalance callbacks) on a
/// thread of its own until the last other handle to the consumer is gone or
/// `serving` says to stop. Messages arriving there are dropped: the readers
/// take theirs from their partition queues, and group members pause their
/// partitions.
pub(crate) fn serve<C: ConsumerContext + 'static>(
    consumer: &Arc<BaseConsumer<C>>,
    name: &str,
    serving: impl Fn() -> bool + Send + 'static,
) -> std::io::Result<()> {
    let consumer: Weak<BaseConsumer<C>> = Arc::downgrade(consumer);
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            while let Some(consumer) = consumer.upgrade().filter(|_| serving()) {
                if let Some(Err(error)) = consumer.poll(TURN) {
                    tracing::debug!(%error, "a Kafka consumer reported an error");
                }
            }
        })
        .map(drop)
}

/// Drops `value` on a thread of its own: closing a librdkafka client waits
/// for its threads (and, for a group member, for leaving the group), which
/// must not stall an async task.
pub(crate) fn drop_in_background<T: Send + 'static>(value: T) {
    let dropped = std::thread::Builder::new()
        .name("agdx-kafka-close".to_owned())
        .spawn(move || drop(value));
    if let Err(error) = dropped {
        tracing::warn!(%error, "cannot start a thread to close a Kafka client");
    }
}
