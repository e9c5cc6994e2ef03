//! The plain Kafka loop the worker bench compares against: `rdkafka` on
//! its own, nothing of AGDX in between. One consumer assigns itself every
//! partition of the commands topic (split into a queue per partition, so
//! each partition is a loop of its own, as a pool's are) and one
//! idempotent producer with `acks=all` and `linger.ms=1`, the settings of
//! the Kafka backend's producer. Per partition: read a batch, send one
//! reply per record (the record's payload and headers) to the same
//! partition of a reply topic, wait for every acknowledgement, commit the
//! offset synchronously.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use super::{BenchError, Spent, Stopwatch};

/// How long a partition's loop waits for a record before its batch is
/// taken as complete.
const BATCH_WAIT: Duration = Duration::from_millis(5);

/// How long a partition may stay silent before the loop gives up on it.
const STALL: Duration = Duration::from_secs(60);

/// The brokers of a `kafka://HOST:PORT[,HOST:PORT...][?options]` string.
pub(super) fn brokers_of(url: &str) -> &str {
    let rest = url.strip_prefix("kafka://").unwrap_or(url);
    rest.split_once('?').map_or(rest, |(brokers, _)| brokers)
}

fn failed(what: &str, error: impl std::fmt::Display) -> BenchError {
    BenchError::Options(format!("the plain Kafka loop: {what}: {error}"))
}

/// Handles every record of `commands` (a Kafka topic name) with
/// `partitions` partitions, `expected` in all, replying to `replies` in
/// reads of up to `batch` records; the time from its start to its last
/// commit.
pub(super) async fn plain_kafka(
    brokers: &str,
    commands: &str,
    replies: &str,
    partitions: u32,
    expected: u64,
    batch: u32,
) -> Result<Spent, BenchError> {
    let mut common = ClientConfig::new();
    common
        .set("bootstrap.servers", brokers)
        .set("socket.nagle.disable", "true");
    let consumer: StreamConsumer = common
        .clone()
        .set("group.id", "bench-plain")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .map_err(|e| failed("creating the consumer", e))?;
    let producer: FutureProducer = common
        .clone()
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", "1")
        .create()
        .map_err(|e| failed("creating the producer", e))?;
    let consumer = Arc::new(consumer);
    let mut queues = Vec::new();
    for partition in 0..partitions as i32 {
        let queue = consumer
            .split_partition_queue(commands, partition)
            .ok_or_else(|| failed("splitting a partition queue", partition))?;
        queues.push((partition, queue));
    }
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions as i32 {
        assignment
            .add_partition_offset(commands, partition, Offset::Beginning)
            .map_err(|e| failed("assigning", e))?;
    }
    consumer
        .assign(&assignment)
        .map_err(|e| failed("assigning", e))?;
    // The main queue still has to be served for the client's own events.
    let events = {
        let consumer = consumer.clone();
        tokio::spawn(async move { while consumer.recv().await.is_ok() {} })
    };
    // Where each partition ends: its loop is done once it committed that.
    let mut ends = Vec::new();
    for partition in 0..partitions as i32 {
        let (consumer, topic) = (consumer.clone(), commands.to_owned());
        let (_, high) = tokio::task::spawn_blocking(move || {
            consumer.fetch_watermarks(&topic, partition, Duration::from_secs(10))
        })
        .await
        .map_err(|e| failed("reading the end offsets", e))?
        .map_err(|e| failed("reading the end offsets", e))?;
        ends.push(high);
    }
    let stopwatch = Stopwatch::start();
    let loops = queues.into_iter().map(|(partition, queue)| {
        let (consumer, producer) = (consumer.clone(), producer.clone());
        let end = ends[partition as usize];
        async move {
            let mut handled = 0u64;
            let mut next = 0;
            let mut quiet_since = Instant::now();
            while next < end {
                let mut deliveries = Vec::new();
                let mut last = None;
                while deliveries.len() < batch as usize {
                    let Ok(received) = tokio::time::timeout(BATCH_WAIT, queue.recv()).await else {
                        break;
                    };
                    let message = received.map_err(|e| failed("reading", e))?;
                    let mut reply = FutureRecord::<(), [u8]>::to(replies)
                        .partition(partition)
                        .payload(message.payload().unwrap_or_default());
                    if let Some(headers) = message.headers() {
                        reply = reply.headers(headers.detach());
                    }
                    deliveries.push(
                        producer
                            .send_result(reply)
                            .map_err(|(e, _)| failed("sending", e))?,
                    );
                    last = Some(message.offset());
                }
                let Some(last) = last else {
                    if quiet_since.elapsed() > STALL {
                        return Err(failed(
                            "reading",
                            format!("partition {partition} stopped at offset {next} of {end}"),
                        ));
                    }
                    continue;
                };
                quiet_since = Instant::now();
                handled += deliveries.len() as u64;
                for delivery in deliveries {
                    delivery
                        .await
                        .map_err(|e| failed("awaiting a delivery", e))?
                        .map_err(|(e, _)| failed("a reply was refused", e))?;
                }
                let mut offsets = TopicPartitionList::new();
                offsets
                    .add_partition_offset(commands, partition, Offset::Offset(last + 1))
                    .map_err(|e| failed("committing", e))?;
                let consumer = consumer.clone();
                tokio::task::spawn_blocking(move || consumer.commit(&offsets, CommitMode::Sync))
                    .await
                    .map_err(|e| failed("committing", e))?
                    .map_err(|e| failed("committing", e))?;
                next = last + 1;
            }
            Ok::<u64, BenchError>(handled)
        }
    });
    let handled: u64 = futures_util::future::try_join_all(loops)
        .await?
        .into_iter()
        .sum();
    let spent = stopwatch.stop();
    events.abort();
    if handled != expected {
        return Err(failed(
            "counting",
            format!("read {handled} commands of {expected}"),
        ));
    }
    Ok(spent)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_brokers_come_without_scheme_or_options() {
        assert_eq!(brokers_of("kafka://a:1,b:2?linger=5"), "a:1,b:2");
        assert_eq!(brokers_of("kafka://127.0.0.1:9092"), "127.0.0.1:9092");
    }
}
