//! The Apache Iggy binding of the log port, over the official `iggy` client
//! (0.10, which speaks the protocol of server release 0.8.x) on TCP.
//!
//! # Mapping
//!
//! - **Connection.** `iggy://USER:PASSWORD@HOST:PORT[?options]` (or
//!   `iggy://TOKEN@HOST:PORT` with a personal access token). The client
//!   signs in on every (re)connection and sends heartbeats in the
//!   background. The client answers one request of a connection at a time,
//!   so appends (and their flushes) have a connection of their own, opened
//!   with the first append: an append does not wait behind a poll in
//!   flight. Another carries polls, lookups and offset reads; every
//!   consumer group member gets a connection of its own.
//! - **Streams and topics** are Iggy's, found by name. Iggy numbers them
//!   itself (from 0 on a fresh server); [`TopicInfo`] carries those numbers,
//!   and every later request addresses the topic by them. Topics are created
//!   with the server's defaults for expiry, size limit and compression. A
//!   topic found without partitions (Iggy allows one) is refused with
//!   [`LogError::NoPartitions`].
//! - **Partitions** are Iggy's, numbered from 0. An append goes to one
//!   explicit partition in one request. Iggy's own choice for a message key
//!   (`xxhash32(seed 0, key) % partitions`) is what
//!   [`crate::routing::partition_for_key`] computes, so records partitioned here
//!   by key land where any Iggy client sending with that key would put them.
//! - **Records** are Iggy messages: the payload is the message payload, the
//!   headers are typed user headers (kept in order), the offset is Iggy's
//!   per-partition offset and the timestamp the server's, in microseconds.
//!   Iggy's limit for one payload is [`MAX_RECORD_BYTES`]. A message whose
//!   header block cannot be read (any Iggy client can write one) is reported
//!   as [`LogError::Corrupt`], as the embedded log reports a damaged record.
//! - **Polling** reads a partition from an offset as a plain consumer with
//!   auto-commit off, so it never moves a stored offset. Iggy has no long
//!   poll: when nothing is there yet the poll asks again after a pause of a
//!   tenth of the time the partition has been quiet (from 1 ms up to
//!   100 ms), until the wait runs out; an append through any handle of this
//!   process wakes it as the append is sent, and it asks again without
//!   pausing until the append is answered, so it reads the record as soon
//!   as the server has it. A poll keeps to the byte budget of the
//!   embedded log: it asks for as many records as would fit if each were as
//!   large as the largest of the partition's previous poll (one record when
//!   it knows nothing yet), and returns no more than fit.
//! - **Consumer groups** are Iggy consumer groups; see the `group` module.
//!   Offsets are stored explicitly (the offset of the last record
//!   processed); nothing is committed automatically.
//! - **Durability.** By default an append is followed by a flush of the
//!   partition with fsync and returns when that is done, so it is durable
//!   on a server with its default settings; `?durability=server` leaves the
//!   flush to a server configured to save and fsync every batch. See
//!   [`Durability`].

mod connection;
mod durability;
mod errors;
mod group;
mod records;
mod topics;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use async_trait::async_trait;
use iggy::prelude::{
    CompressionAlgorithm, Consumer, ConsumerGroupClient, ConsumerOffsetClient, Identifier,
    IggyError, IggyExpiry, IggyTimestamp, MAX_PAYLOAD_SIZE, MaxTopicSize, MessageClient,
    Partitioning, PolledMessages, PollingStrategy, TopicClient,
};

use self::connection::Connection;
pub(crate) use self::connection::IggyTarget;
use self::durability::FlushGroup;
pub use self::durability::{Durability, UnknownDurability};
pub(crate) use self::durability::{join_durability, split_durability};
use self::errors::{request_error, topic_error};
use self::group::{IggyMember, Routed};
use super::{GroupMember, Log, LogError, LogRecord, OutgoingRecord, Retention, TopicInfo};

/// A topic's message expiry for `retention`. The server removes expired
/// messages only with its message cleaner on (`[data_maintenance.messages]
/// cleaner_enabled`, off in its default settings), and then whole segments
/// once every message in one has expired.
pub(crate) fn message_expiry(retention: Retention) -> IggyExpiry {
    match retention {
        Retention::BackendDefault => IggyExpiry::ServerDefault,
        Retention::Forever => IggyExpiry::NeverExpire,
        Retention::For(age) => IggyExpiry::ExpireDuration(age.into()),
    }
}

/// The largest payload Iggy accepts in one message.
pub const MAX_RECORD_BYTES: usize = MAX_PAYLOAD_SIZE as usize;

/// Most partitions Iggy allows in one topic.
const MAX_PARTITIONS: u32 = iggy_common::MAX_PARTITIONS_COUNT;

/// Shortest and longest pause between polls while waiting for records.
/// Iggy has no long poll, so a waiting reader asks again; the pause is a
/// tenth of the time since records from elsewhere last came, so a partition
/// another process appends to busily is read within a millisecond or two of
/// an append, and one that only this process appends to (whose appends wake
/// its polls at once) or nobody does costs at most ten requests a second.
const POLL_PAUSE_MIN: Duration = Duration::from_millis(1);
const POLL_PAUSE_MAX: Duration = Duration::from_millis(100);

/// How long a reader asks again without pausing after [`Log::expect`]: a
/// reply to a command just sent usually comes within a round trip or two
/// of the server, well before the shortest pause a timer gives.
const EAGER_FOR: Duration = Duration::from_millis(5);
/// The record size a first poll of a partition plans for: records are
/// usually far smaller, and asking for one record at first would make a
/// poll return one record where the caller asked for many.
const ASSUMED_RECORD_BYTES: usize = 64 * 1024;

/// How long a topic found without partitions may be another client's
/// creation still under way (see `IggyLog::find_settled_topic`).
const TOPIC_SETTLE: Duration = Duration::from_secs(2);

/// A partition of a topic on one server: (server, stream id, topic id, partition).
type PartitionKey = (Arc<str>, u32, u32, u32);

/// Waiters of this process per partition. An append through any handle in
/// this process wakes them at once instead of at their next poll.
static APPENDED: LazyLock<dashmap::DashMap<PartitionKey, Arc<Appended>>> =
    LazyLock::new(dashmap::DashMap::new);

/// This process's appends to one partition: the wake-up of its waiting
/// polls, how many appends started, and how many are in flight.
#[derive(Default)]
struct Appended {
    wake: tokio::sync::Notify,
    started: AtomicU64,
    in_flight: AtomicU64,
}

impl Appended {
    /// Counts an append about to be sent and wakes the waiting polls,
    /// which ask again without pausing until it is answered: a poll sent
    /// beside the append finds the record as soon as the server has it,
    /// a round trip before the appender hears so. Dropping the returned
    /// guard ends the append (answered, failed or given up) and wakes the
    /// polls again.
    fn start(self: &Arc<Self>) -> InFlight {
        self.started.fetch_add(1, Ordering::Relaxed);
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        self.wake.notify_waiters();
        InFlight(self.clone())
    }

    /// Appends started so far.
    fn count(&self) -> u64 {
        self.started.load(Ordering::Relaxed)
    }

    fn in_flight(&self) -> bool {
        self.in_flight.load(Ordering::Relaxed) > 0
    }
}

/// An append of this process on its way to the server (see
/// [`Appended::start`]).
struct InFlight(Arc<Appended>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::Relaxed);
        self.0.wake.notify_waiters();
    }
}

/// A log on an Apache Iggy server.
pub struct IggyLog {
    target: IggyTarget,
    connection: Connection,
    /// The appends' connection, opened with the first append.
    appending: tokio::sync::OnceCell<Connection>,
    reader: Consumer,
    /// The flushes of each partition appended to, by (stream, topic, partition).
    flushes: dashmap::DashMap<(u32, u32, u32), Arc<FlushGroup>>,
    /// What the polls of each partition saw last, by (stream, topic, partition).
    reading: dashmap::DashMap<(u32, u32, u32), Reading>,
    /// The server, as [`APPENDED`] names it: described once, at connect.
    server: Arc<str>,
}

/// What the last polls of a partition that found records saw.
#[derive(Debug, Clone, Copy)]
struct Reading {
    /// When a poll last found records appended elsewhere (or the first poll
    /// asked).
    active_at: tokio::time::Instant,
    /// This process's appends to the partition so far (see [`Appended`])
    /// when a poll last found records.
    local_appends: u64,
    /// The largest payload of that poll; `None` before any.
    largest: Option<usize>,
    /// When a record was last expected ([`Log::expect`]), until a poll
    /// finds records.
    expected_at: Option<tokio::time::Instant>,
}

impl Reading {
    fn new(now: tokio::time::Instant, local_appends: u64) -> Self {
        Self {
            active_at: now,
            local_appends,
            largest: None,
            expected_at: None,
        }
    }

    /// The reading after a poll at `now` found records, the largest
    /// `largest` bytes, when this process had started `local_appends`
    /// appends. Records that came after an append of this process are taken
    /// for its own: its appends wake its polls, so they do not shorten the
    /// pause for records from elsewhere. (A record from elsewhere found
    /// along with them is read all the same; only the pause before the
    /// next one stays as long as the quiet from elsewhere.)
    fn found(&self, now: tokio::time::Instant, largest: Option<usize>, local_appends: u64) -> Self {
        let from_here = local_appends != self.local_appends;
        Self {
            active_at: if from_here { self.active_at } else { now },
            local_appends,
            largest,
            // What was expected came.
            expected_at: None,
        }
    }

    /// How many records to ask for: as many as fit the byte budget if each
    /// were as large as the largest seen last (before any poll found one,
    /// as large as [`ASSUMED_RECORD_BYTES`]).
    fn count(&self, max: u32) -> u32 {
        let largest = self.largest.unwrap_or(ASSUMED_RECORD_BYTES);
        let fit = u32::try_from(super::POLL_BYTES_BUDGET / largest.max(1)).unwrap_or(u32::MAX);
        fit.clamp(1, max)
    }

    /// The pause before asking again: none while an append of this
    /// process to the partition is on its way (`appending`), nor for
    /// [`EAGER_FOR`] after a record was expected, then a tenth of the time
    /// since it was; with nothing expected, a tenth of the quiet time so far.
    fn pause(&self, now: tokio::time::Instant, appending: bool) -> Duration {
        if appending {
            return Duration::ZERO;
        }
        let since = match self.expected_at {
            Some(expected) if now - expected < EAGER_FOR => return Duration::ZERO,
            Some(expected) => expected,
            None => self.active_at,
        };
        ((now - since) / 10).clamp(POLL_PAUSE_MIN, POLL_PAUSE_MAX)
    }
}

impl IggyLog {
    /// Connects to `iggy://USER:PASSWORD@HOST:PORT` and signs in. The
    /// option `durability` (`?durability=server`) chooses what an append
    /// waits for; see [`Durability`].
    ///
    /// Fails with [`LogError::Unavailable`] when no server answers there,
    /// [`LogError::AccessDenied`] when it refuses the credentials and
    /// [`LogError::InvalidInput`] for a malformed connection string.
    /// Connecting and signing in may take
    /// [`crate::log::DEFAULT_CONNECT_TIMEOUT`].
    pub async fn connect(url: &str) -> Result<Self, LogError> {
        Self::connect_within(url, crate::log::DEFAULT_CONNECT_TIMEOUT).await
    }

    /// Like [`IggyLog::connect`], with connecting and signing in (here and
    /// for each consumer group member's connection) limited to `limit`.
    pub async fn connect_within(url: &str, limit: Duration) -> Result<Self, LogError> {
        let target = IggyTarget::parse(url)?.with_connect_timeout(limit);
        let connection = target.connect().await?;
        Ok(Self {
            server: target.describe().into(),
            target,
            connection,
            appending: tokio::sync::OnceCell::new(),
            reader: Consumer::default(),
            flushes: dashmap::DashMap::new(),
            reading: dashmap::DashMap::new(),
        })
    }

    /// What an append waits for before it returns.
    pub fn durability(&self) -> Durability {
        self.target.durability()
    }

    /// Makes the appends to `partition` answered so far durable, sharing
    /// the flush with other appends to it (see [`FlushGroup`]).
    async fn flush_appended(&self, topic: &TopicInfo, partition: u32) -> Result<(), LogError> {
        let group = self
            .flushes
            .entry((topic.stream_id, topic.topic_id, partition))
            .or_default()
            .clone();
        let ticket = group.sent();
        group
            .covering(ticket, || async {
                let (stream, topic_id) = (numeric(topic.stream_id)?, numeric(topic.topic_id)?);
                self.appending_client()
                    .await?
                    .flush_unsaved_buffer(&stream, &topic_id, partition, true)
                    .await
                    .map_err(|e| {
                        self.topic_error(topic, &format!("flushing partition {partition}"), e)
                    })
            })
            .await
    }

    /// The wake-up of a partition, shared by the handles of this process.
    fn appended(&self, topic: &TopicInfo, partition: u32) -> Arc<Appended> {
        let key = (
            self.server.clone(),
            topic.stream_id,
            topic.topic_id,
            partition,
        );
        if let Some(appended) = APPENDED.get(&key) {
            return appended.clone();
        }
        APPENDED.entry(key).or_default().clone()
    }

    fn client(&self) -> &iggy::prelude::IggyClient {
        self.connection.client()
    }

    /// The client of the appends' connection, connecting it first if this
    /// handle has not appended yet.
    async fn appending_client(&self) -> Result<&iggy::prelude::IggyClient, LogError> {
        self.appending
            .get_or_try_init(|| self.target.connect())
            .await
            .map(Connection::client)
    }

    fn request_error(&self, doing: &str, e: IggyError) -> LogError {
        request_error(&self.target.describe(), doing, e)
    }

    fn topic_error(&self, topic: &TopicInfo, doing: &str, e: IggyError) -> LogError {
        topic_error(&self.target.describe(), topic, doing, e)
    }

    /// One poll of a partition as the plain reader (never commits).
    async fn poll_once(
        &self,
        topic: &TopicInfo,
        partition: u32,
        strategy: PollingStrategy,
        count: u32,
    ) -> Result<PolledMessages, LogError> {
        let (stream, topic_id) = (numeric(topic.stream_id)?, numeric(topic.topic_id)?);
        self.client()
            .poll_messages(
                &stream,
                &topic_id,
                Some(partition),
                &self.reader,
                &strategy,
                count,
                false,
            )
            .await
            .map_err(|e| self.topic_error(topic, &format!("polling partition {partition}"), e))
    }
}

/// The records of a poll answer from offset `from` on, up to the first one
/// that cannot be read: like the embedded log, a poll returns the records
/// before it and only a poll starting at it fails, so a consumer handles
/// everything before the bad record and then steps over it. Also like the
/// embedded log, it stops adding records once their payloads reach the
/// byte budget.
fn readable_records(
    topic: &TopicInfo,
    partition: u32,
    from: u64,
    polled: PolledMessages,
) -> Result<Vec<LogRecord>, LogError> {
    let mut records = Vec::with_capacity(polled.messages.len());
    let mut bytes = 0;
    for message in polled.messages {
        if message.header.offset < from {
            continue;
        }
        match records::from_message(topic, partition, message) {
            Ok(record) => {
                bytes += record.payload.len();
                records.push(record);
                if bytes >= super::POLL_BYTES_BUDGET {
                    break;
                }
            }
            Err(error) if records.is_empty() => return Err(error),
            Err(error) => {
                tracing::error!(%error, "an unreadable record on Iggy; the next poll reports it");
                break;
            }
        }
    }
    Ok(records)
}

/// A numeric Iggy identifier.
fn numeric(id: u32) -> Result<Identifier, LogError> {
    Identifier::numeric(id)
        .map_err(|e| LogError::InvalidInput(format!("Iggy rejects the id {id}: {e}")))
}

/// An Iggy identifier by name, checking Iggy's name rules.
fn named(what: &str, name: &str) -> Result<Identifier, LogError> {
    Identifier::named(name).map_err(|e| {
        LogError::InvalidInput(format!(
            "invalid {what} name {name:?} ({e}); Iggy names have 1 to 255 bytes"
        ))
    })
}

#[async_trait]
impl Log for IggyLog {
    fn describe(&self) -> String {
        self.target.describe()
    }

    fn max_record_bytes(&self) -> usize {
        MAX_RECORD_BYTES
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
                "a topic needs 1 to {MAX_PARTITIONS} partitions on Iggy, not {partitions}"
            )));
        }
        named("stream", stream)?;
        named("topic", topic)?;
        let stream_id = self.ensure_stream(stream).await?.id;
        let info = match self.find_settled_topic(stream, stream_id, topic).await? {
            Some(info) => info,
            None => {
                let created = self
                    .client()
                    .create_topic(
                        &numeric(stream_id)?,
                        topic,
                        partitions,
                        CompressionAlgorithm::None,
                        None,
                        message_expiry(retention),
                        MaxTopicSize::ServerDefault,
                    )
                    .await;
                match created {
                    Ok(details) => TopicInfo::resolved(
                        stream.to_owned(),
                        topic.to_owned(),
                        stream_id,
                        details.id,
                        details.partitions_count,
                    )?,
                    Err(IggyError::TopicNameAlreadyExists(..)) => self
                        .find_settled_topic(stream, stream_id, topic)
                        .await?
                        .ok_or_else(|| LogError::Backend {
                            reason: format!(
                                "topic '{stream}/{topic}' was reported to exist but cannot be found"
                            ),
                            source: None,
                        })?,
                    Err(e) => {
                        return Err(
                            self.request_error(&format!("creating topic '{stream}/{topic}'"), e)
                        );
                    }
                }
            }
        };
        if info.partitions.get() != partitions {
            return Err(LogError::PartitionMismatch {
                stream: stream.to_owned(),
                topic: topic.to_owned(),
                existing: info.partitions.get(),
                wanted: partitions,
            });
        }
        Ok(info)
    }

    async fn topic(&self, stream: &str, topic: &str) -> Result<Option<TopicInfo>, LogError> {
        // Topics are made while others run (an agent's inbox when its pool
        // starts): a lookup during another client's creation waits it out.
        match self.find_stream(stream).await? {
            Some(found) => self.find_settled_topic(stream, found.id, topic).await,
            None => Ok(None),
        }
    }

    async fn topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError> {
        self.list_topics(stream).await
    }

    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError> {
        super::check_append(topic, partition, &records, MAX_RECORD_BYTES)?;
        let sent_at = IggyTimestamp::now().as_micros();
        let mut messages: Vec<_> = records
            .into_iter()
            .map(|record| records::to_message(record, sent_at))
            .collect();
        let (stream, topic_id) = (numeric(topic.stream_id)?, numeric(topic.topic_id)?);
        let client = self.appending_client().await?;
        let in_flight = self.appended(topic, partition).start();
        client
            .send_messages(
                &stream,
                &topic_id,
                &Partitioning::partition_id(partition),
                &mut messages,
            )
            .await
            .map_err(|e| {
                self.topic_error(topic, &format!("appending to partition {partition}"), e)
            })?;
        // Readable from now on, for any client: readers of this process
        // read it while the flush runs, as readers elsewhere may.
        drop(in_flight);
        if self.durability() == Durability::Fsync {
            self.flush_appended(topic, partition).await?;
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
        let deadline = tokio::time::Instant::now() + wait;
        let key = (topic.stream_id, topic.topic_id, partition);
        let appended = self.appended(topic, partition);
        loop {
            // Armed before the poll, so an append in between is not missed.
            let woken = appended.wake.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let reading = *self
                .reading
                .entry(key)
                .or_insert_with(|| Reading::new(tokio::time::Instant::now(), appended.count()));
            let polled = self
                .poll_once(
                    topic,
                    partition,
                    PollingStrategy::offset(from),
                    reading.count(max),
                )
                .await?;
            let now = tokio::time::Instant::now();
            if !polled.messages.is_empty() {
                let largest = polled.messages.iter().map(|m| m.payload.len()).max();
                self.reading
                    .insert(key, reading.found(now, largest, appended.count()));
                return readable_records(topic, partition, from, polled);
            }
            if now >= deadline {
                return Ok(Vec::new());
            }
            let pause = reading.pause(now, appended.in_flight());
            if pause.is_zero() {
                tokio::task::yield_now().await;
                continue;
            }
            tokio::select! {
                _ = woken => {}
                _ = tokio::time::sleep(pause.min(deadline - now)) => {}
            }
        }
    }

    fn expect(&self, topic: &TopicInfo, partition: u32) {
        let now = tokio::time::Instant::now();
        let appended = self.appended(topic, partition);
        let mut reading = self
            .reading
            .entry((topic.stream_id, topic.topic_id, partition))
            .or_insert_with(|| Reading::new(now, appended.count()));
        reading.expected_at = Some(now);
        drop(reading);
        // A poll pausing now asks again at once.
        appended.wake.notify_waiters();
    }

    async fn last_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        topic.check_partition(partition)?;
        // The poll answer carries the partition's current offset (the last
        // record's), which reads 0 both for an empty partition and for one
        // holding a single record: only then is record 0 worth asking for.
        let current = self
            .poll_once(topic, partition, PollingStrategy::offset(u64::MAX), 1)
            .await?
            .current_offset;
        if current > 0 {
            return Ok(Some(current));
        }
        let first = self
            .poll_once(topic, partition, PollingStrategy::offset(0), 1)
            .await?;
        Ok(first.messages.first().map(|m| m.header.offset))
    }

    async fn join_group(
        &self,
        topic: &TopicInfo,
        group: &str,
    ) -> Result<Box<dyn GroupMember>, LogError> {
        Ok(Box::new(
            IggyMember::join(&self.target, topic, group).await?,
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
        match group::commit_through_members(&self.target, topic, group, partition, offset).await? {
            Routed::Stored => Ok(()),
            Routed::OwnedElsewhere => Err(group::not_owner(topic, group, partition)),
            Routed::NoLocalMember => {
                let (stream, topic_id) = (numeric(topic.stream_id)?, numeric(topic.topic_id)?);
                let details = self
                    .client()
                    .get_consumer_group(&stream, &topic_id, &named("consumer group", group)?)
                    .await;
                let members = match details {
                    Ok(Some(details)) => details.members_count,
                    Ok(None)
                    | Err(
                        IggyError::ConsumerGroupIdNotFound(..)
                        | IggyError::ConsumerGroupNameNotFound(..),
                    ) => 0,
                    Err(e) => {
                        return Err(self.topic_error(
                            topic,
                            &format!("reading consumer group '{group}'"),
                            e,
                        ));
                    }
                };
                if members > 0 {
                    return Err(group::not_owner(topic, group, partition));
                }
                group::commit_as_temporary_member(&self.target, topic, group, partition, offset)
                    .await
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
        let (stream, topic_id) = (numeric(topic.stream_id)?, numeric(topic.topic_id)?);
        let consumer = Consumer::group(named("consumer group", group)?);
        match self
            .client()
            .get_consumer_offset(&consumer, &stream, &topic_id, Some(partition))
            .await
        {
            Ok(info) => Ok(info.map(|info| info.stored_offset)),
            Err(
                IggyError::ConsumerGroupIdNotFound(..) | IggyError::ConsumerGroupNameNotFound(..),
            ) => Ok(None),
            Err(e) => Err(self.topic_error(
                topic,
                &format!("reading the offset of group '{group}' on partition {partition}"),
                e,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_poll_asks_for_what_fits_the_byte_budget() {
        let now = tokio::time::Instant::now();
        let reading = |largest| Reading {
            largest,
            ..Reading::new(now, 0)
        };
        assert_eq!(
            reading(None).count(2048),
            1024,
            "nothing known: as many 64 KiB records as fit"
        );
        assert_eq!(reading(Some(100)).count(512), 512);
        assert_eq!(reading(Some(1_000_000)).count(512), 67);
        assert_eq!(reading(Some(MAX_RECORD_BYTES)).count(512), 1);
        assert_eq!(reading(Some(0)).count(7), 7);
    }

    #[test]
    fn waiting_polls_back_off_with_the_quiet_time() {
        let start = tokio::time::Instant::now();
        let reading = Reading::new(start, 0);
        let after = |ms| reading.pause(start + Duration::from_millis(ms), false);
        assert_eq!(after(0), POLL_PAUSE_MIN);
        assert_eq!(after(50), Duration::from_millis(5));
        assert_eq!(after(600), Duration::from_millis(60));
        assert_eq!(after(60_000), POLL_PAUSE_MAX);
    }

    #[test]
    fn an_expected_record_is_asked_for_at_once_then_after_pauses_from_when_it_was_expected() {
        let start = tokio::time::Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let reading = Reading {
            expected_at: Some(at(900)),
            ..Reading::new(start, 0)
        };
        assert_eq!(
            reading.pause(at(900), false),
            Duration::ZERO,
            "a record is expected"
        );
        assert_eq!(
            reading.pause(at(1000), false),
            Duration::from_millis(10),
            "a tenth of the wait for it, not of the quiet before"
        );
        let came = reading.found(at(1000), None, 1);
        assert_eq!(came.expected_at, None, "what was expected came");
        assert_eq!(
            came.pause(at(1000), false),
            POLL_PAUSE_MAX,
            "it came from this process: back to the quiet from elsewhere"
        );
    }

    #[test]
    fn an_append_wakes_waiting_polls_as_it_starts_and_as_it_ends() {
        use std::future::Future;
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        let appended = Arc::new(Appended::default());
        let woken = appended.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        let reading = Reading::new(tokio::time::Instant::now(), 0);
        let pause = || reading.pause(reading.active_at, appended.in_flight());
        assert_eq!(pause(), POLL_PAUSE_MIN);
        let in_flight = appended.start();
        assert_eq!(pause(), Duration::ZERO, "polls ask again without pausing");
        assert_eq!(
            appended.count(),
            1,
            "a record found now is this process's own"
        );
        assert!(
            woken.as_mut().poll(&mut cx).is_ready(),
            "a poll pausing asks again as the append is sent"
        );
        let woken = appended.wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        drop(in_flight);
        assert_eq!(pause(), POLL_PAUSE_MIN, "back to pausing");
        assert!(
            woken.as_mut().poll(&mut cx).is_ready(),
            "and asks again once it is answered"
        );
    }

    #[test]
    fn only_records_from_elsewhere_shorten_the_pause() {
        let start = tokio::time::Instant::now();
        let at = |ms| start + Duration::from_millis(ms);
        let reading = Reading::new(start, 3);
        let own = reading.found(at(500), Some(10), 4);
        assert_eq!(
            own.pause(at(500), false),
            Duration::from_millis(50),
            "records after an append of this process: as quiet as before"
        );
        let elsewhere = own.found(at(600), Some(10), 4);
        assert_eq!(
            elsewhere.pause(at(600), false),
            POLL_PAUSE_MIN,
            "records with no append of this process since: from elsewhere"
        );
    }
}
