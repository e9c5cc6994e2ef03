//! Reading partitions from any offset with one consumer per log.
//!
//! The reader is a librdkafka consumer outside any group that assigns itself
//! each partition the first time it is read, with a queue of its own per
//! partition. A partition read on from where the last poll ended goes on
//! with what librdkafka has already fetched; a poll from elsewhere seeks
//! first. librdkafka wakes a waiting poll as soon as a fetch brings records.
//!
//! Records the consumer has not fetched yet are still on the log, so a poll
//! that ends empty asks the partition's end offset once: when records lie
//! beyond `from`, it goes on waiting for them. A poll with no wait thus
//! returns what is on the log, as on the other backends.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::consumer::base_consumer::PartitionQueue;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::REQUEST_TIMEOUT;
use super::context::Quiet;
use super::errors::{request_error, topic_error};
use super::records::{self, kafka_offset, kafka_partition};
use crate::log::{LogError, LogRecord, TopicInfo, lock};

/// How long a poll waits for records that are on the log but not fetched yet.
const CATCH_UP: Duration = Duration::from_secs(10);

type ReaderConsumer = BaseConsumer<Quiet>;

/// A partition this reader has assigned itself.
struct PartitionReader {
    /// Woken by librdkafka when the partition's queue gets records.
    fetched: Arc<Notify>,
    state: tokio::sync::Mutex<ReadState>,
}

struct ReadState {
    queue: PartitionQueue<Quiet>,
    /// The offset the queue delivers next; `None` when a seek must come first.
    next: Option<u64>,
}

/// The reads of one log.
pub(crate) struct Reader {
    target: String,
    consumer: Arc<ReaderConsumer>,
    partitions: Mutex<HashMap<(String, i32), Arc<PartitionReader>>>,
}

impl Reader {
    /// A reader on its own consumer.
    pub(crate) fn new(target: String, consumer: ReaderConsumer) -> Result<Self, LogError> {
        let consumer = Arc::new(consumer);
        super::background::serve(&consumer, "agdx-kafka-reader", || true).map_err(|e| {
            LogError::Backend {
                reason: format!("cannot start the Kafka reader's thread: {e}"),
                source: Some(e.into()),
            }
        })?;
        Ok(Self {
            target,
            consumer,
            partitions: Mutex::new(HashMap::new()),
        })
    }

    /// The end offset of a partition (the offset the next record will get).
    pub(crate) async fn end_offset(
        &self,
        topic: &TopicInfo,
        name: &str,
        partition: u32,
    ) -> Result<u64, LogError> {
        let consumer = self.consumer.clone();
        let owned = name.to_owned();
        let p = kafka_partition(partition);
        let (_, high) = blocking(move || consumer.fetch_watermarks(&owned, p, REQUEST_TIMEOUT))
            .await?
            .map_err(|e| {
                topic_error(
                    &self.target,
                    topic,
                    &format!("reading the end of partition {partition}"),
                    &e,
                )
            })?;
        Ok(u64::try_from(high).unwrap_or_default())
    }

    /// Reads up to `max` records of a partition from `from` on, waiting up
    /// to `wait` for the first one (see the module docs).
    pub(crate) async fn poll(
        &self,
        topic: &TopicInfo,
        name: &str,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        let reader = self.partition(name, partition, from)?;
        let mut state = reader.state.lock().await;
        if state.next != Some(from) {
            self.seek(topic, name, partition, from).await?;
            state.next = Some(from);
        }
        let mut deadline = Instant::now() + wait;
        let mut asked_end = false;
        loop {
            let records = self.take(&mut state, topic, partition, max)?;
            if !records.is_empty() {
                return Ok(records);
            }
            if Instant::now() >= deadline {
                if asked_end || self.end_offset(topic, name, partition).await? <= from {
                    return Ok(Vec::new());
                }
                asked_end = true;
                deadline = Instant::now() + CATCH_UP;
            }
            // A wake-up that came while the queue was being read is kept
            // by the Notify, so none is lost between the two.
            let _ = tokio::time::timeout_at(deadline, reader.fetched.notified()).await;
        }
    }

    /// What the partition's queue holds now, up to `max` records, in order.
    fn take(
        &self,
        state: &mut ReadState,
        topic: &TopicInfo,
        partition: u32,
        max: u32,
    ) -> Result<Vec<LogRecord>, LogError> {
        let mut records = Vec::new();
        while records.len() < max as usize {
            let Some(polled) = state.queue.poll(Duration::ZERO) else {
                break;
            };
            let message = match polled {
                Ok(message) => message,
                Err(error) if records.is_empty() => {
                    state.next = None;
                    return Err(topic_error(
                        &self.target,
                        topic,
                        &format!("reading partition {partition}"),
                        &error,
                    ));
                }
                Err(error) => {
                    tracing::warn!(%error, partition, "reading a Kafka partition failed; the next poll reports it");
                    state.next = None;
                    break;
                }
            };
            let Ok(offset) = u64::try_from(rdkafka::Message::offset(&message)) else {
                continue;
            };
            // Fetched before the last seek: not what was asked for.
            if state.next.is_some_and(|next| offset < next) {
                continue;
            }
            match records::from_message(topic, partition, &message) {
                Ok(record) => {
                    state.next = Some(offset + 1);
                    records.push(record);
                }
                Err(error) => {
                    // Read it again next time, so that the poll starting at
                    // it reports it, as on the other backends.
                    state.next = None;
                    if records.is_empty() {
                        return Err(error);
                    }
                    tracing::error!(%error, "an unreadable record on Kafka; the next poll reports it");
                    break;
                }
            }
        }
        Ok(records)
    }

    /// The reader of a partition, assigned from `from` on when it is new.
    fn partition(
        &self,
        name: &str,
        partition: u32,
        from: u64,
    ) -> Result<Arc<PartitionReader>, LogError> {
        let key = (name.to_owned(), kafka_partition(partition));
        let mut partitions = lock(&self.partitions);
        if let Some(reader) = partitions.get(&key) {
            return Ok(reader.clone());
        }
        let fetched = Arc::new(Notify::new());
        let mut queue = self
            .consumer
            .split_partition_queue(name, key.1)
            .ok_or_else(|| LogError::Backend {
                reason: format!(
                    "librdkafka gives no queue for partition {partition} of Kafka topic {name:?}"
                ),
                source: None,
            })?;
        let wake = fetched.clone();
        queue.set_nonempty_callback(move || wake.notify_one());
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(name, key.1, Offset::Offset(kafka_offset(from)?))
            .map_err(|e| request_error(&self.target, "choosing where to read", &e))?;
        self.consumer.incremental_assign(&list).map_err(|e| {
            request_error(
                &self.target,
                &format!("assigning partition {partition} of {name} to the reader"),
                &e,
            )
        })?;
        let reader = Arc::new(PartitionReader {
            fetched,
            state: tokio::sync::Mutex::new(ReadState {
                queue,
                next: Some(from),
            }),
        });
        partitions.insert(key, reader.clone());
        Ok(reader)
    }

    /// Moves the reading position of a partition to `from`.
    async fn seek(
        &self,
        topic: &TopicInfo,
        name: &str,
        partition: u32,
        from: u64,
    ) -> Result<(), LogError> {
        let consumer = self.consumer.clone();
        let owned = name.to_owned();
        let p = kafka_partition(partition);
        let offset = Offset::Offset(kafka_offset(from)?);
        blocking(move || consumer.seek(&owned, p, offset, REQUEST_TIMEOUT))
            .await?
            .map_err(|e| {
                topic_error(
                    &self.target,
                    topic,
                    &format!("moving to offset {from} of partition {partition}"),
                    &e,
                )
            })
    }
}

impl Drop for Reader {
    fn drop(&mut self) {
        let partitions = std::mem::take(&mut *lock(&self.partitions));
        super::background::drop_in_background((partitions, self.consumer.clone()));
    }
}

/// Runs a blocking librdkafka call off the async threads.
pub(crate) async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
) -> Result<T, LogError> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| LogError::Backend {
            reason: format!("a Kafka client call failed: {e}"),
            source: Some(e.into()),
        })
}
