//! The log bench: how fast a log takes and gives back records, and, on Iggy,
//! how that compares with the plain `iggy` client doing the same work.
//!
//! The workload: `records` records of `size` bytes (with the three headers
//! every agent record carries, unless `headers` is off) appended in batches
//! of `batch` records, batch after batch, to the partitions of a new topic in
//! turn; then every partition read back from offset 0 in polls of `batch`
//! records. One request at a time, so the figures are those of one client.
//!
//! With a [`PlainIggyTarget`], the same workload runs in the same process
//! against the same server through the `iggy` client directly (explicit
//! partitions, the same batches, typed headers through its map API), and the
//! report gives the ratio of the two. The bench stream is deleted afterwards
//! when the plain client is there to do it.

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use agdx_wire::{HeaderValue, Headers};
use bytes::Bytes;
use iggy::prelude::{
    Client, Consumer, HeaderKey, HeaderValue as IggyHeaderValue, Identifier, IggyClient, IggyError,
    IggyMessage, MessageClient, Partitioning, PollingStrategy, StreamClient,
};

use crate::log::{LogError, LogSpec, OutgoingRecord, SharedLog, TopicInfo};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBenchOptions {
    /// How many records to append and read back.
    pub records: u64,
    /// Payload bytes per record.
    pub size: usize,
    /// Records per append and per poll.
    pub batch: u32,
    /// Partitions of the bench topic; batches go to them in turn.
    pub partitions: u32,
    /// Whether each record carries the agent record headers.
    pub headers: bool,
    /// The stream to create the bench topics in; `None` for a new one.
    pub stream: Option<String>,
}

impl Default for LogBenchOptions {
    fn default() -> Self {
        Self {
            records: 100_000,
            size: 256,
            batch: 100,
            partitions: 4,
            headers: true,
            stream: None,
        }
    }
}

/// An Iggy server to run the workload against with the plain `iggy` client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainIggyTarget {
    url: String,
}

impl PlainIggyTarget {
    /// The server of an `iggy://USER:PASSWORD@HOST:PORT` connection string.
    pub fn new(url: impl Into<String>) -> Self {
        Self { url: url.into() }
    }

    /// The server a log spec names, `None` for the embedded log.
    pub fn for_spec(spec: &LogSpec) -> Option<Self> {
        match spec {
            LogSpec::Iggy(url) => Some(Self::new(url.clone())),
            LogSpec::Embedded(_) => None,
        }
    }
}

/// Records and payload bytes moved in some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throughput {
    pub records: u64,
    pub bytes: u64,
    pub elapsed: Duration,
}

impl Throughput {
    pub fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Payload megabytes (10^6 bytes) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// The figures of one client: appending, then reading back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchFigures {
    pub append: Throughput,
    pub poll: Throughput,
}

/// What the bench measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LogBenchReport {
    /// The log, as [`crate::log::Log::describe`] puts it.
    pub log: String,
    pub options: LogBenchOptions,
    /// Through the log port.
    pub ours: BenchFigures,
    /// Through the plain `iggy` client, when it ran.
    pub plain: Option<BenchFigures>,
}

impl LogBenchReport {
    /// Ours over plain for appending and for reading, when the plain client ran.
    pub fn ratios(&self) -> Option<(f64, f64)> {
        self.plain.map(|plain| {
            (
                self.ours.append.records_per_sec() / plain.append.records_per_sec(),
                self.ours.poll.records_per_sec() / plain.poll.records_per_sec(),
            )
        })
    }
}

impl fmt::Display for LogBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "log bench on {}: {} records of {} B{}, batches of {}, {} partitions",
            self.log,
            o.records,
            o.size,
            if o.headers { " with agent headers" } else { "" },
            o.batch,
            o.partitions
        )?;
        writeln!(
            f,
            "{:<12} {:>14} {:>12} {:>14} {:>12}",
            "", "append rec/s", "append MB/s", "poll rec/s", "poll MB/s"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, x: &BenchFigures| {
            writeln!(
                f,
                "{name:<12} {:>14.0} {:>12.1} {:>14.0} {:>12.1}",
                x.append.records_per_sec(),
                x.append.mb_per_sec(),
                x.poll.records_per_sec(),
                x.poll.mb_per_sec()
            )
        };
        row(f, "agdx", &self.ours)?;
        if let Some(plain) = &self.plain {
            row(f, "plain iggy", plain)?;
        }
        if let Some((append, poll)) = self.ratios() {
            writeln!(
                f,
                "{:<12} {:>14.2} {:>12} {:>14.2} {:>12}",
                "agdx/plain", append, "", poll, ""
            )?;
        }
        Ok(())
    }
}

/// Header values of the bench records.
const CONTENT_TYPE: u8 = 1;
const WIRE_VERSION: u32 = 1;
const CONVERSATION: u128 = 0x0196_3c5e_8a1b_7c2d_9e3f_4a5b_6c7d_8e9f;

/// The headers an agent record carries (content type, wire version,
/// conversation id), as in the wire contract.
fn agent_headers() -> Headers {
    vec![
        ("agdx.ct".to_owned(), HeaderValue::u8(CONTENT_TYPE)),
        ("agdx.av".to_owned(), HeaderValue::u32(WIRE_VERSION)),
        (
            "gen_ai.conversation.id".to_owned(),
            HeaderValue::u128(CONVERSATION),
        ),
    ]
}

/// The sizes of the batches of the workload, in order.
fn batches(opts: &LogBenchOptions) -> impl Iterator<Item = u32> + '_ {
    let batch = u64::from(opts.batch);
    (0..opts.records.div_ceil(batch))
        .map(move |i| u32::try_from(batch.min(opts.records - i * batch)).unwrap_or(opts.batch))
}

fn check(opts: &LogBenchOptions) -> Result<(), LogError> {
    if opts.records == 0 || opts.size == 0 || opts.batch == 0 || opts.partitions == 0 {
        return Err(LogError::InvalidInput(format!(
            "the bench needs at least one record of at least one byte, batches of at least one and one partition, not {opts:?}"
        )));
    }
    Ok(())
}

/// Runs the workload through `log`, then (with `plain`) through the plain
/// `iggy` client on the same server.
pub async fn run_log_bench(
    log: SharedLog,
    plain: Option<PlainIggyTarget>,
    opts: LogBenchOptions,
) -> Result<LogBenchReport, LogError> {
    check(&opts)?;
    let stream = opts.stream.clone().unwrap_or_else(|| {
        format!(
            "agdx-bench-{}",
            ulid::Ulid::new().to_string().to_lowercase()
        )
    });
    let topic = log.ensure_topic(&stream, "ours", opts.partitions).await?;
    let ours = bench_ours(&log, &topic, &opts).await?;
    let plain = match plain {
        Some(target) => {
            let plain_topic = log.ensure_topic(&stream, "plain", opts.partitions).await?;
            let client = PlainClient::connect(&target).await?;
            let figures = client.bench(&plain_topic, &opts).await;
            let deleted = client.delete_stream(topic.stream_id).await;
            client.close().await;
            let figures = figures?;
            deleted?;
            Some(figures)
        }
        None => None,
    };
    Ok(LogBenchReport {
        log: log.describe(),
        options: opts,
        ours,
        plain,
    })
}

async fn bench_ours(
    log: &SharedLog,
    topic: &TopicInfo,
    opts: &LogBenchOptions,
) -> Result<BenchFigures, LogError> {
    let payload = vec![b'a'; opts.size];
    let headers = if opts.headers {
        agent_headers()
    } else {
        Vec::new()
    };
    let started = Instant::now();
    for (i, count) in batches(opts).enumerate() {
        let records = (0..count)
            .map(|_| OutgoingRecord {
                headers: headers.clone(),
                payload: payload.clone(),
            })
            .collect();
        log.append(topic, partition_of(i, opts), records).await?;
    }
    let append = throughput(opts, started.elapsed());

    let started = Instant::now();
    let mut read = 0u64;
    for partition in 0..opts.partitions {
        let mut from = 0;
        loop {
            let records = log
                .poll(topic, partition, from, opts.batch, Duration::ZERO)
                .await?;
            let Some(last) = records.last() else { break };
            from = last.position.offset + 1;
            read += records.len() as u64;
        }
    }
    let poll = throughput(opts, started.elapsed());
    expect_all(opts, read)?;
    Ok(BenchFigures { append, poll })
}

fn partition_of(batch: usize, opts: &LogBenchOptions) -> u32 {
    u32::try_from(batch as u64 % u64::from(opts.partitions)).unwrap_or(0)
}

fn throughput(opts: &LogBenchOptions, elapsed: Duration) -> Throughput {
    Throughput {
        records: opts.records,
        bytes: opts.records * opts.size as u64,
        elapsed,
    }
}

fn expect_all(opts: &LogBenchOptions, read: u64) -> Result<(), LogError> {
    if read == opts.records {
        return Ok(());
    }
    Err(LogError::Backend(format!(
        "the bench read back {read} of the {} records it appended",
        opts.records
    )))
}

/// The plain `iggy` client on the bench server.
struct PlainClient {
    client: IggyClient,
    target: String,
}

impl PlainClient {
    async fn connect(target: &PlainIggyTarget) -> Result<Self, LogError> {
        let client = IggyClient::from_connection_string(&with_nodelay(&target.url)).map_err(|e| {
            LogError::InvalidInput(format!(
                "the plain Iggy client rejects the connection string: {e}"
            ))
        })?;
        let plain = Self {
            client,
            target: target.url.rsplit('@').next().unwrap_or_default().to_owned(),
        };
        plain
            .client
            .connect()
            .await
            .map_err(|e| plain.error("connecting", e))?;
        Ok(plain)
    }

    fn error(&self, doing: &str, e: IggyError) -> LogError {
        LogError::Backend(format!(
            "plain iggy client at {}: {doing}: {e}",
            self.target
        ))
    }

    async fn bench(
        &self,
        topic: &TopicInfo,
        opts: &LogBenchOptions,
    ) -> Result<BenchFigures, LogError> {
        let numeric =
            |id: u32| Identifier::numeric(id).map_err(|e| self.error("addressing the topic", e));
        let (stream, topic_id) = (numeric(topic.stream_id)?, numeric(topic.topic_id)?);
        let payload = Bytes::from(vec![b'a'; opts.size]);
        let headers = if opts.headers {
            Some(plain_headers().map_err(|e| self.error("building headers", e))?)
        } else {
            None
        };
        let started = Instant::now();
        for (i, count) in batches(opts).enumerate() {
            let mut messages = (0..count)
                .map(|_| {
                    IggyMessage::builder()
                        .payload(payload.clone())
                        .maybe_user_headers(headers.clone())
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| self.error("building messages", e))?;
            let partitioning = Partitioning::partition_id(partition_of(i, opts));
            self.client
                .send_messages(&stream, &topic_id, &partitioning, &mut messages)
                .await
                .map_err(|e| self.error("sending", e))?;
        }
        let append = throughput(opts, started.elapsed());

        let consumer = Consumer::default();
        let started = Instant::now();
        let mut read = 0u64;
        for partition in 0..opts.partitions {
            let mut from = 0;
            loop {
                let strategy = PollingStrategy::offset(from);
                let polled = self
                    .client
                    .poll_messages(
                        &stream,
                        &topic_id,
                        Some(partition),
                        &consumer,
                        &strategy,
                        opts.batch,
                        false,
                    )
                    .await
                    .map_err(|e| self.error("polling", e))?;
                let Some(last) = polled.messages.last() else {
                    break;
                };
                from = last.header.offset + 1;
                read += polled.messages.len() as u64;
            }
        }
        let poll = throughput(opts, started.elapsed());
        expect_all(opts, read)?;
        Ok(BenchFigures { append, poll })
    }

    async fn delete_stream(&self, stream_id: u32) -> Result<(), LogError> {
        let id = Identifier::numeric(stream_id)
            .map_err(|e| self.error("addressing the bench stream", e))?;
        self.client
            .delete_stream(&id)
            .await
            .map_err(|e| self.error("deleting the bench stream", e))
    }

    async fn close(&self) {
        // The bench is over; a failure to say goodbye changes nothing.
        let _ = self.client.shutdown().await;
    }
}

/// The connection string with `nodelay=true` unless it sets `nodelay`, as
/// agdx's own connections have it: with Nagle's algorithm on, every small
/// request waits for the server's delayed acknowledgement.
fn with_nodelay(url: &str) -> String {
    match url.split_once('?') {
        Some((_, query)) if query.split('&').any(|kv| kv.starts_with("nodelay=")) => url.to_owned(),
        Some(_) => format!("{url}&nodelay=true"),
        None => format!("{url}?nodelay=true"),
    }
}

/// The agent record headers through the `iggy` client's map API.
fn plain_headers() -> Result<BTreeMap<HeaderKey, IggyHeaderValue>, IggyError> {
    Ok(BTreeMap::from([
        (
            HeaderKey::try_from("agdx.ct")?,
            IggyHeaderValue::from(CONTENT_TYPE),
        ),
        (
            HeaderKey::try_from("agdx.av")?,
            IggyHeaderValue::from(WIRE_VERSION),
        ),
        (
            HeaderKey::try_from("gen_ai.conversation.id")?,
            IggyHeaderValue::from(CONVERSATION),
        ),
    ]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_cover_every_record() {
        let opts = LogBenchOptions {
            records: 250,
            batch: 100,
            ..LogBenchOptions::default()
        };
        assert_eq!(batches(&opts).collect::<Vec<_>>(), vec![100, 100, 50]);
    }

    #[test]
    fn the_report_is_a_table_with_ratios() {
        let figures = |secs| {
            let t = Throughput {
                records: 1000,
                bytes: 256_000,
                elapsed: Duration::from_secs(secs),
            };
            BenchFigures { append: t, poll: t }
        };
        let report = LogBenchReport {
            log: "iggy://127.0.0.1:8090".into(),
            options: LogBenchOptions {
                records: 1000,
                ..LogBenchOptions::default()
            },
            ours: figures(2),
            plain: Some(figures(1)),
        };
        assert_eq!(report.ratios(), Some((0.5, 0.5)));
        let text = report.to_string();
        assert!(
            text.contains("plain iggy") && text.contains("agdx/plain") && text.contains("0.50"),
            "{text}"
        );
    }
}
