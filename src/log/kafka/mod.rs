//! The Kafka-protocol binding of the log port, over `rdkafka` (librdkafka),
//! for clusters of several brokers: Apache Kafka, Redpanda, Tansu, managed
//! services.
//!
//! # Mapping
//!
//! - **Connection.** `kafka://HOST:PORT[,HOST:PORT...][?options]`: the
//!   bootstrap brokers, and options (`session_timeout`, `handover`,
//!   `delivery_timeout`, `fetch_wait`, `replication`, `max_record_bytes`,
//!   or any librdkafka setting by its dotted name, such as
//!   `security.protocol`). One log holds one idempotent producer, one
//!   reader, and an admin client; every consumer group member is a consumer
//!   of its own.
//! - **Streams** are topic-name prefixes: topic `agent.commands` of stream
//!   `agents` is the Kafka topic `agents.agent.commands`. Stream names
//!   therefore have no dot. Kafka numbers neither streams nor topics, so the
//!   ids in [`TopicInfo`] (and in record positions) are the xxHash32 of the
//!   names, the same for every client. Topics are created with the
//!   partitions asked for and the broker's replication unless the
//!   connection string sets `replication`.
//! - **Partitions** are Kafka's, numbered from 0, and every append names
//!   one: [`crate::routing::partition_for_key`] chooses it exactly as on Iggy,
//!   so a conversation lands in the same partition number on every backend.
//! - **Records** are Kafka records: the payload is the value, the offset is
//!   Kafka's (both count from 0), the timestamp Kafka's in milliseconds
//!   times 1000. Headers carry the typed values' bytes unchanged (`agdx.ct`
//!   one byte, `agdx.av` u32 little-endian, `gen_ai.conversation.id` u128
//!   little-endian, `agdx.to` UTF-8); Kafka headers have no kind, so the
//!   agent record headers get theirs back from the wire crate's table and
//!   any other header is raw. Malformed headers written by another client
//!   make the record [`LogError::Corrupt`].
//! - **Offsets.** The port stores the last offset processed, Kafka commits
//!   the next one to read; `records::committed_for` and
//!   `records::last_processed` convert, nowhere else.
//! - **Durability.** The producer is idempotent with `acks=all`: an append
//!   returns `Ok` only when every record of it is acknowledged by all
//!   in-sync replicas, in order and once each. A batch is checked whole
//!   before anything is sent, but unlike Iggy's single request it is not
//!   atomic on the broker: when a later record fails, earlier ones may stay.
//! - **Polling** is done by one consumer outside any group (see `reader`).
//! - **Consumer groups** use the Kafka group protocol with cooperative-sticky
//!   assignment (see `group`). Kafka's group ids are cluster-wide, so group
//!   `echo` of stream `agents` is the Kafka group `agents.echo`: the pools
//!   of two streams on one cluster never share a group. A dead member is
//!   evicted after the session timeout, and a member that reports its work
//!   hands a partition over only after finishing and committing what it
//!   has in hand.

mod background;
mod context;
mod errors;
mod group;
mod reader;
mod records;
mod target;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rdkafka::TopicPartitionList;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{FutureProducer, FutureRecord};

use self::context::Quiet;
use self::errors::{request_error, topic_error, unreachable};
use self::group::{KafkaMember, Routed};
use self::reader::{Reader, blocking};
pub(crate) use self::records::topic_name;
use self::records::{group_id, kafka_headers, kafka_partition};
pub(crate) use self::target::KafkaTarget;
use super::{GroupMember, Log, LogError, LogRecord, OutgoingRecord, Retention, TopicInfo, lock};

/// How long a metadata or offset request may take: the Kafka clients'
/// request timeout, since a busy broker answers these behind its fetches.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a new topic may take to show in the cluster's metadata.
const TOPIC_PROPAGATION: Duration = Duration::from_secs(30);

/// Most partitions a topic may have here.
const MAX_PARTITIONS: u32 = 100_000;

/// A log on a Kafka-protocol cluster.
pub struct KafkaLog {
    target: KafkaTarget,
    /// Taken when the log is dropped, to be closed off the async threads.
    clients: Option<Clients>,
    reader: Reader,
    /// Kafka topics known to exist, with their partition counts.
    known: Mutex<HashMap<String, u32>>,
}

/// The librdkafka clients of a log besides its reader.
struct Clients {
    producer: FutureProducer<Quiet>,
    admin: AdminClient<Quiet>,
    /// Reads group offsets, and commits for groups without live members.
    committers: Mutex<HashMap<String, Arc<BaseConsumer<Quiet>>>>,
}

impl KafkaLog {
    /// Connects to `kafka://HOST:PORT[,HOST:PORT...]` and checks that a
    /// broker answers.
    ///
    /// Fails with [`LogError::Unavailable`] when none does within
    /// [`crate::log::DEFAULT_CONNECT_TIMEOUT`] and
    /// [`LogError::InvalidInput`] for a malformed connection string.
    pub async fn connect(url: &str) -> Result<Self, LogError> {
        Self::connect_within(url, crate::log::DEFAULT_CONNECT_TIMEOUT).await
    }

    /// Like [`KafkaLog::connect`], waiting at most `limit` for a broker to answer.
    pub async fn connect_within(url: &str, limit: Duration) -> Result<Self, LogError> {
        let target = KafkaTarget::parse(url)?;
        let describe = target.describe();
        let create = |what: &str, e| request_error(&describe, &format!("creating the {what}"), &e);
        let producer: FutureProducer<Quiet> = target
            .producer()
            .create_with_context(Quiet)
            .map_err(|e| create("producer", e))?;
        let admin: AdminClient<Quiet> = target
            .admin()
            .create_with_context(Quiet)
            .map_err(|e| create("admin client", e))?;
        let reader = Reader::new(
            describe.clone(),
            target
                .reader()
                .create_with_context(Quiet)
                .map_err(|e| create("reader", e))?,
        )?;
        let log = Self {
            target,
            clients: Some(Clients {
                producer,
                admin,
                committers: Mutex::new(HashMap::new()),
            }),
            reader,
            known: Mutex::new(HashMap::new()),
        };
        log.metadata(None, limit).await?;
        Ok(log)
    }

    fn clients(&self) -> &Clients {
        self.clients
            .as_ref()
            .expect("a log's clients live until the log is dropped")
    }

    /// The cluster's metadata for one Kafka topic, or for all of them,
    /// waiting at most `limit` for it.
    async fn metadata(
        &self,
        topic: Option<&str>,
        limit: Duration,
    ) -> Result<rdkafka::metadata::Metadata, LogError> {
        let consumer = self.committer("")?;
        let owned = topic.map(str::to_owned);
        blocking(move || consumer.fetch_metadata(owned.as_deref(), limit))
            .await?
            .map_err(|e| {
                unreachable(
                    &self.target.describe(),
                    &format!(
                        "asking the cluster for its topics (waiting up to {}): {e}",
                        humantime::format_duration(limit)
                    ),
                    Some(e.into()),
                )
            })
    }

    /// The partition count of Kafka topic `name`, `None` when it does not exist.
    async fn partitions_of(&self, name: &str) -> Result<Option<u32>, LogError> {
        let metadata = self.metadata(Some(name), REQUEST_TIMEOUT).await?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == name) else {
            return Ok(None);
        };
        match found.error() {
            None => {}
            Some(code)
                if matches!(
                    RDKafkaErrorCode::from(code),
                    RDKafkaErrorCode::UnknownTopicOrPartition | RDKafkaErrorCode::UnknownTopic
                ) =>
            {
                return Ok(None);
            }
            Some(code) => {
                return Err(request_error(
                    &self.target.describe(),
                    &format!("looking up topic {name}"),
                    &rdkafka::error::KafkaError::MetadataFetch(code.into()),
                ));
            }
        }
        let partitions = u32::try_from(found.partitions().len()).unwrap_or(u32::MAX);
        if partitions > 0 {
            lock(&self.known).insert(name.to_owned(), partitions);
        }
        Ok(Some(partitions))
    }

    /// The Kafka topic of `topic`, checked to exist (once per log).
    async fn existing(&self, topic: &TopicInfo) -> Result<String, LogError> {
        let name = topic_name(&topic.stream, &topic.topic)?;
        if lock(&self.known).contains_key(&name) {
            return Ok(name);
        }
        match self.partitions_of(&name).await? {
            Some(partitions) if partitions > 0 => Ok(name),
            _ => Err(LogError::NoSuchTopic {
                stream: topic.stream.clone(),
                topic: topic.topic.clone(),
            }),
        }
    }

    /// The consumer that reads and commits offsets of `group` without joining it.
    fn committer(&self, group: &str) -> Result<Arc<BaseConsumer<Quiet>>, LogError> {
        let mut committers = lock(&self.clients().committers);
        if let Some(found) = committers.get(group) {
            return Ok(found.clone());
        }
        let mut config = if group.is_empty() {
            self.target.admin()
        } else {
            self.target.committer(group)
        };
        let consumer: BaseConsumer<Quiet> = config
            .set_log_level(rdkafka::config::RDKafkaLogLevel::Warning)
            .create_with_context(Quiet)
            .map_err(|e| request_error(&self.target.describe(), "creating an offset client", &e))?;
        let consumer = Arc::new(consumer);
        committers.insert(group.to_owned(), consumer.clone());
        Ok(consumer)
    }

    async fn wait_for_topic(&self, stream: &str, topic: &str, name: &str) -> Result<u32, LogError> {
        let deadline = tokio::time::Instant::now() + TOPIC_PROPAGATION;
        loop {
            if let Some(partitions) = self.partitions_of(name).await?
                && partitions > 0
            {
                return Ok(partitions);
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(LogError::Backend {
                    reason: format!(
                        "topic '{stream}/{topic}' ({name}) was created but does not show in the cluster's metadata after {TOPIC_PROPAGATION:?}"
                    ),
                    source: None,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for KafkaLog {
    fn drop(&mut self) {
        if let Some(clients) = self.clients.take() {
            background::drop_in_background(clients);
        }
    }
}

/// The topic's `retention.ms` for `retention` (`-1`: forever), `None` to
/// leave the broker's default.
fn retention_ms(retention: Retention) -> Option<String> {
    match retention {
        Retention::BackendDefault => None,
        Retention::Forever => Some("-1".to_owned()),
        Retention::For(age) => Some(age.as_millis().min(i64::MAX as u128).to_string()),
    }
}

#[async_trait]
impl Log for KafkaLog {
    fn describe(&self) -> String {
        self.target.describe()
    }

    fn max_record_bytes(&self) -> usize {
        self.target.max_record_bytes
    }

    async fn ensure_topic_retained(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
        retention: Retention,
    ) -> Result<TopicInfo, LogError> {
        if partitions == 0 || partitions > MAX_PARTITIONS {
            return Err(LogError::InvalidInput(format!(
                "a topic needs 1 to {MAX_PARTITIONS} partitions, not {partitions}"
            )));
        }
        let name = topic_name(stream, topic)?;
        let existing = match self.partitions_of(&name).await? {
            Some(existing) => existing,
            None => {
                let replication = self.target.replication.unwrap_or(-1);
                let retention_ms = retention_ms(retention);
                let mut new = NewTopic::new(
                    &name,
                    i32::try_from(partitions).unwrap_or(i32::MAX),
                    TopicReplication::Fixed(replication),
                )
                // The broker's clock stamps records, as on Iggy.
                .set("message.timestamp.type", "LogAppendTime");
                if let Some(ms) = &retention_ms {
                    new = new.set("retention.ms", ms);
                }
                let options = AdminOptions::new().operation_timeout(Some(REQUEST_TIMEOUT));
                let created = self
                    .clients()
                    .admin
                    .create_topics([&new], &options)
                    .await
                    .map_err(|e| {
                        request_error(
                            &self.target.describe(),
                            &format!("creating topic {name}"),
                            &e,
                        )
                    })?;
                for result in created {
                    match result {
                        Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                        Err((_, code)) => {
                            return Err(request_error(
                                &self.target.describe(),
                                &format!("creating topic {name}"),
                                &rdkafka::error::KafkaError::AdminOp(code),
                            ));
                        }
                    }
                }
                self.wait_for_topic(stream, topic, &name).await?
            }
        };
        let info = records::topic_info(stream, topic, existing)?;
        if existing != partitions {
            return Err(LogError::PartitionMismatch {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                existing,
                wanted: partitions,
            });
        }
        Ok(info)
    }

    async fn topic(&self, stream: &str, topic: &str) -> Result<Option<TopicInfo>, LogError> {
        let name = topic_name(stream, topic)?;
        let Some(partitions) = self.partitions_of(&name).await? else {
            return Ok(None);
        };
        records::topic_info(stream, topic, partitions).map(Some)
    }

    async fn topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError> {
        let prefix = records::stream_prefix(stream)?;
        let metadata = self.metadata(None, REQUEST_TIMEOUT).await?;
        let mut topics = Vec::new();
        for found in metadata.topics() {
            let Some(topic) = found.name().strip_prefix(prefix.as_str()) else {
                continue;
            };
            let partitions = u32::try_from(found.partitions().len()).unwrap_or(u32::MAX);
            // A topic the cluster reports an error for (being deleted, say)
            // or without partitions is left out, as the port says.
            if found.error().is_some() || partitions == 0 {
                continue;
            }
            topics.push(records::topic_info(stream, topic, partitions)?);
        }
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
        Ok(topics)
    }

    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError> {
        super::check_append(topic, partition, &records, self.target.max_record_bytes)?;
        let headers = records
            .iter()
            .map(|record| kafka_headers(&record.headers))
            .collect::<Result<Vec<_>, _>>()?;
        let name = self.existing(topic).await?;
        let p = kafka_partition(partition);
        let mut deliveries = Vec::with_capacity(records.len());
        for (record, headers) in records.iter().zip(headers) {
            let mut outgoing = FutureRecord::<(), _>::to(&name)
                .partition(p)
                .payload(&record.payload[..]);
            if let Some(headers) = headers {
                outgoing = outgoing.headers(headers);
            }
            // Enqueued one after the other, so the batch keeps its order.
            loop {
                match self.clients().producer.send_result(outgoing) {
                    Ok(delivery) => {
                        deliveries.push(delivery);
                        break;
                    }
                    Err((e, back))
                        if e.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull) =>
                    {
                        outgoing = back;
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    Err((e, _)) => {
                        return Err(topic_error(
                            &self.target.describe(),
                            topic,
                            &format!("appending to partition {partition}"),
                            &e,
                        ));
                    }
                }
            }
        }
        for delivery in deliveries {
            match delivery.await {
                Ok(Ok(_)) => {}
                Ok(Err((e, _))) => {
                    return Err(topic_error(
                        &self.target.describe(),
                        topic,
                        &format!("appending to partition {partition}"),
                        &e,
                    ));
                }
                Err(_) => {
                    return Err(LogError::Backend {
                        reason: format!(
                            "the Kafka producer went away while appending to partition {partition} of {name}"
                        ),
                        source: None,
                    });
                }
            }
        }
        Ok(())
    }

    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        super::check_poll(topic, partition, max)?;
        let name = self.existing(topic).await?;
        self.reader
            .poll(topic, &name, partition, from, max, wait)
            .await
    }

    async fn last_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        topic.check_partition(partition)?;
        let name = self.existing(topic).await?;
        let end = self.reader.end_offset(topic, &name, partition).await?;
        Ok(end.checked_sub(1))
    }

    async fn join_group(
        &self,
        topic: &TopicInfo,
        group: &str,
    ) -> Result<Box<dyn GroupMember>, LogError> {
        if group.is_empty() {
            return Err(LogError::InvalidInput(
                "a consumer group needs a name of at least one character".into(),
            ));
        }
        let name = self.existing(topic).await?;
        let group = group_id(&topic.stream, group);
        Ok(Box::new(
            KafkaMember::join(&self.target, &name, &group).await?,
        ))
    }

    async fn store_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), LogError> {
        topic.check_partition(partition)?;
        let name = self.existing(topic).await?;
        let next = records::committed_for(offset)?;
        let not_owner = || LogError::NotOwner {
            stream: topic.stream.clone(),
            topic: topic.topic.clone(),
            group: group.to_owned(),
            partition,
        };
        let id = group_id(&topic.stream, group);
        match group::commit_through_members(&self.target, &name, &id, partition, next).await? {
            Routed::Stored => Ok(()),
            Routed::OwnedElsewhere => Err(not_owner()),
            Routed::NoLocalMember => {
                let committer = self.committer(&id)?;
                let describe = self.target.describe();
                if group::has_members(&describe, committer.clone(), &id).await? {
                    return Err(not_owner());
                }
                group::commit_outside(&describe, committer, &name, &id, partition, next).await
            }
        }
    }

    async fn committed_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        topic.check_partition(partition)?;
        let name = self.existing(topic).await?;
        let committer = self.committer(&group_id(&topic.stream, group))?;
        let mut list = TopicPartitionList::new();
        list.add_partition(&name, kafka_partition(partition));
        let committed = blocking(move || committer.committed_offsets(list, REQUEST_TIMEOUT))
            .await?
            .map_err(|e| {
                topic_error(
                    &self.target.describe(),
                    topic,
                    &format!("reading the offset of group '{group}' on partition {partition}"),
                    &e,
                )
            })?;
        Ok(committed
            .find_partition(&name, kafka_partition(partition))
            .and_then(|element| records::last_processed(element.offset())))
    }
}
