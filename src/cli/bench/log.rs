//! The log bench: how fast a log takes and gives back records, and, on Iggy,
//! how that compares with the plain `iggy` client doing the same work.
//!
//! The workload: `records` records of `size` bytes (with the three headers
//! every agent record carries, unless `headers` is off) appended in batches
//! of `batch` records to the partitions of a new topic in turn, one request
//! at a time; then every partition read back from offset 0 in polls of
//! `batch` records. The time of an append counts from building the batch's
//! records (each payload and its headers, as an application would) to the
//! log's answer; the time of a poll from asking to having the records with
//! their headers read.
//!
//! With a [`PlainIggyTarget`], the plain `iggy` client does the same in the
//! same process against the same server, on a connection of its own: the
//! same batches to the same partitions of the same topic (explicit
//! partitions, typed headers through its map API), then reading back every
//! partition in polls of `batch` records and reading each record's headers
//! (the log port hands them out read). The two take turns request by
//! request (who goes first alternating), so both meet the same server state,
//! the same load from elsewhere and, on a server with several shards, the
//! same placement of their connections. Each then reads every record of the
//! topic, its own and the other's. The report gives the ratio of the two.
//! The bench stream is deleted afterwards when the plain client is there to
//! do it.
//!
//! On the embedded log, [`LogBaseline::Local`] sets two baselines beside
//! it on the same disk (see [`super::plain_local`]), taking turns batch by
//! batch the same way: plain SQLite with the log's schema and settings, one
//! transaction per batch, and the disk itself, each batch's bytes written
//! to a preallocated file and `fdatasync`ed. Each reads back only its own.
//!
//! The comparison is like for like in either durability mode of the log
//! (see [`agdx::log::iggy::Durability`]): with `fsync`, each of our appends
//! is flushed with fsync before it returns, and the plain client flushes
//! the same way after each send; with `server`, neither flushes. The
//! target's durability must be the log's.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use agdx::wire::{HeaderValue, Headers};
use bytes::Bytes;
use iggy::prelude::{HeaderKey, HeaderValue as IggyHeaderValue, IggyError, IggyMessage};

use super::plain::{PlainClient, PlainIggyTarget};
use super::plain_local::{PlainDisk, PlainSqlite};
use agdx::log::iggy::Durability;
use agdx::log::{LogError, OutgoingRecord, SharedLog, TopicInfo};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBenchOptions {
    /// How many records to append (per client) and read back.
    pub records: u64,
    /// Payload bytes per record.
    pub size: usize,
    /// Records per append and per poll.
    pub batch: u32,
    /// Partitions of the bench topic; batches go to them in turn.
    pub partitions: u32,
    /// Producers appending at once, each its next batch as soon as its
    /// previous one returned, to different partitions.
    pub producers: u32,
    /// Whether each record carries the agent record headers.
    pub headers: bool,
    /// The stream to create the bench topic in; `None` for a new one.
    pub stream: Option<String>,
}

impl Default for LogBenchOptions {
    fn default() -> Self {
        Self {
            records: 100_000,
            size: 256,
            batch: 100,
            partitions: 4,
            producers: 1,
            headers: true,
            stream: None,
        }
    }
}

/// Records and payload bytes moved in some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Throughput {
    /// Records moved.
    pub records: u64,
    /// Payload bytes moved (headers not counted).
    pub bytes: u64,
    /// Time spent in the timed requests, summed; the other client's turns
    /// are not in it.
    pub elapsed: Duration,
}

impl Throughput {
    /// Records per second of `elapsed`.
    pub fn records_per_sec(&self) -> f64 {
        self.records as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    /// Payload megabytes (10^6 bytes) per second.
    pub fn mb_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }

    fn add(&mut self, records: u64, size: usize, elapsed: Duration) {
        self.records += records;
        self.bytes += records * size as u64;
        self.elapsed += elapsed;
    }
}

/// The figures of one client: appending, then reading back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BenchFigures {
    /// Appending every batch.
    pub append: Throughput,
    /// Reading every partition back.
    pub poll: Throughput,
}

/// What the bench sets the log against.
#[derive(Debug, Clone)]
pub enum LogBaseline {
    /// The plain `iggy` client on the same server.
    Iggy(PlainIggyTarget),
    /// Plain SQLite and the disk itself, in a temporary directory inside
    /// this one (the embedded log's, so that all meet the same disk).
    Local(PathBuf),
}

/// What the bench measured.
#[derive(Debug, Clone, PartialEq)]
pub struct LogBenchReport {
    /// The log, as [`agdx::log::Log::describe`] puts it.
    pub log: String,
    /// The options it ran with.
    pub options: LogBenchOptions,
    /// Through the log port.
    pub ours: BenchFigures,
    /// Each baseline that ran, by name.
    pub baselines: Vec<(&'static str, BenchFigures)>,
    /// The durability both clients appended with, on Iggy.
    pub durability: Option<Durability>,
}

impl LogBenchReport {
    /// Ours over each baseline, in records per second, for appending and
    /// for reading.
    pub fn ratios(&self) -> Vec<(&'static str, f64, f64)> {
        self.baselines
            .iter()
            .map(|(name, plain)| {
                (
                    *name,
                    self.ours.append.records_per_sec() / plain.append.records_per_sec(),
                    self.ours.poll.records_per_sec() / plain.poll.records_per_sec(),
                )
            })
            .collect()
    }
}

impl fmt::Display for LogBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let o = &self.options;
        writeln!(
            f,
            "log bench on {}{}: {} records of {} B{}, batches of {}, {} partitions, {} producer{}{}",
            self.log,
            durability_note(self.durability),
            o.records,
            o.size,
            if o.headers { " with agent headers" } else { "" },
            o.batch,
            o.partitions,
            o.producers,
            if o.producers == 1 {
                ""
            } else {
                "s appending at once (time per append is the time of the whole group)"
            },
            match self.baselines.len() {
                0 => String::new(),
                _ => format!(
                    ", taking turns with {}",
                    self.baselines
                        .iter()
                        .map(|(name, _)| *name)
                        .collect::<Vec<_>>()
                        .join(" and ")
                ),
            }
        )?;
        writeln!(
            f,
            "{:<18} {:>14} {:>12} {:>14} {:>12}",
            "", "append rec/s", "append MB/s", "poll rec/s", "poll MB/s"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, x: &BenchFigures| {
            writeln!(
                f,
                "{name:<18} {:>14.0} {:>12.1} {:>14.0} {:>12.1}",
                x.append.records_per_sec(),
                x.append.mb_per_sec(),
                x.poll.records_per_sec(),
                x.poll.mb_per_sec()
            )
        };
        row(f, "agdx", &self.ours)?;
        for (name, figures) in &self.baselines {
            row(f, name, figures)?;
        }
        for (name, append, poll) in self.ratios() {
            writeln!(
                f,
                "{:<18} {:>14.2} {:>12} {:>14.2} {:>12}",
                format!("agdx/{name}"),
                append,
                "",
                poll,
                ""
            )?;
        }
        Ok(())
    }
}

/// How the reports name a durability mode: what each side does per append.
pub(super) fn durability_note(durability: Option<Durability>) -> &'static str {
    match durability {
        Some(Durability::Fsync) => {
            " with durability=fsync (every append, ours and plain, flushed with fsync before it returns)"
        }
        Some(Durability::Server) => {
            " with durability=server (appends answered as the server is configured, no flushes)"
        }
        None => "",
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
        ("agdx.ct".into(), HeaderValue::u8(CONTENT_TYPE)),
        ("agdx.av".into(), HeaderValue::u32(WIRE_VERSION)),
        (
            "gen_ai.conversation.id".into(),
            HeaderValue::u128(CONVERSATION),
        ),
    ]
}

/// The same headers through the `iggy` client's map API.
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
    if opts.producers == 0 || opts.producers > opts.partitions {
        return Err(LogError::InvalidInput(format!(
            "--producers must be 1 to the number of partitions ({}), not {}: each producer appends to a partition of its own at a time",
            opts.partitions, opts.producers
        )));
    }
    Ok(())
}

/// One client of the bench, with the payload every record carries and
/// whether records carry the agent headers.
enum Side<'a> {
    Ours {
        log: &'a SharedLog,
        payload: Vec<u8>,
        headers: bool,
    },
    Plain {
        client: &'a PlainClient,
        payload: Vec<u8>,
        headers: bool,
    },
    /// Plain SQLite and the next offset of each partition.
    Sqlite {
        db: Mutex<(PlainSqlite, Vec<i64>)>,
        payload: Vec<u8>,
    },
    /// The disk, and where each partition's records went in its file.
    Disk {
        disk: Mutex<(PlainDisk, Vec<Vec<u64>>)>,
        payload: Vec<u8>,
    },
}

/// Records ready to append, in the form each client takes them.
enum Batch {
    Ours(Vec<OutgoingRecord>),
    Plain(Vec<IggyMessage>),
    Rows(Vec<Vec<u8>>),
    Bytes { count: u32, bytes: Vec<u8> },
}

/// A local baseline's state; a bench that panicked holding it is over anyway.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn local_error<E>(what: &str, error: E) -> LogError
where
    E: std::fmt::Display + Into<agdx::log::Cause>,
{
    LogError::Backend {
        reason: format!("the {what} baseline failed: {error}"),
        source: Some(error.into()),
    }
}

impl Side<'_> {
    /// Builds `count` records in the form this client takes them, as an
    /// application would from its data: a payload of its own and typed
    /// headers made through the client's API.
    fn batch(&self, count: u32) -> Result<Batch, LogError> {
        match self {
            Side::Ours {
                payload, headers, ..
            } => Ok(Batch::Ours(
                (0..count)
                    .map(|_| OutgoingRecord {
                        headers: if *headers {
                            agent_headers()
                        } else {
                            Vec::new()
                        },
                        payload: payload.clone().into(),
                    })
                    .collect(),
            )),
            Side::Plain {
                client,
                payload,
                headers,
            } => (0..count)
                .map(|_| {
                    let headers = if *headers {
                        Some(plain_headers()?)
                    } else {
                        None
                    };
                    IggyMessage::builder()
                        .payload(Bytes::from(payload.clone()))
                        .maybe_user_headers(headers)
                        .build()
                })
                .collect::<Result<Vec<_>, _>>()
                .map(Batch::Plain)
                .map_err(|e| client.error("building messages", e)),
            Side::Sqlite { payload, .. } => {
                Ok(Batch::Rows((0..count).map(|_| payload.clone()).collect()))
            }
            Side::Disk { payload, .. } => Ok(Batch::Bytes {
                count,
                bytes: payload.repeat(count as usize),
            }),
        }
    }

    /// Appends a batch to `partition`.
    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        batch: Batch,
    ) -> Result<(), LogError> {
        match (self, batch) {
            (Side::Ours { log, .. }, Batch::Ours(records)) => {
                log.append(topic, partition, records).await
            }
            (Side::Plain { client, .. }, Batch::Plain(mut messages)) => {
                client.send(topic, partition, &mut messages).await
            }
            (Side::Sqlite { db, .. }, Batch::Rows(rows)) => {
                let (db, next) = &mut *lock(db);
                let next = &mut next[partition as usize];
                db.append((1, i64::from(partition)), *next, &rows, None)
                    .map_err(|e| local_error("plain SQLite", e))?;
                *next += rows.len() as i64;
                Ok(())
            }
            (Side::Disk { disk, payload }, Batch::Bytes { count, bytes }) => {
                let (disk, positions) = &mut *lock(disk);
                let at = disk.append(&bytes).map_err(|e| local_error("disk", e))?;
                let size = payload.len() as u64;
                positions[partition as usize].extend((0..u64::from(count)).map(|k| at + k * size));
                Ok(())
            }
            _ => Err(LogError::InvalidInput(
                "a bench batch went to the other client".into(),
            )),
        }
    }

    /// Reads up to `batch` records of `partition` from `from`; how many
    /// came and the offset after the last.
    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        batch: u32,
    ) -> Result<(u64, u64), LogError> {
        match self {
            Side::Ours { log, .. } => {
                let records = log
                    .poll(topic, partition, from, batch, Duration::ZERO)
                    .await?;
                let next = records.last().map_or(from, |r| r.position.offset + 1);
                Ok((records.len() as u64, next))
            }
            Side::Plain { client, .. } => client.poll(topic, partition, from, batch).await,
            Side::Sqlite { db, .. } => {
                let (db, _) = &*lock(db);
                let rows = db
                    .read((1, i64::from(partition)), from as i64, batch)
                    .map_err(|e| local_error("plain SQLite", e))?;
                let next = rows.last().map_or(from, |(off, _, _)| *off as u64 + 1);
                Ok((rows.len() as u64, next))
            }
            Side::Disk { disk, payload } => {
                let (disk, positions) = &*lock(disk);
                let wanted = positions[partition as usize]
                    .iter()
                    .skip(from as usize)
                    .take(batch as usize);
                let mut record = vec![0; payload.len()];
                let mut read = 0;
                for &at in wanted {
                    disk.read(at, &mut record)
                        .map_err(|e| local_error("disk", e))?;
                    read += 1;
                }
                Ok((read, from + read))
            }
        }
    }

    /// Whether this side writes to the bench topic of the log (and so
    /// reads back the records of every other side that does).
    fn on_the_log(&self) -> bool {
        matches!(self, Side::Ours { .. } | Side::Plain { .. })
    }
}

/// The local baselines, in files of their own in a new directory inside
/// `beside`: plain SQLite, and the disk with room for `opts.records`.
fn local_sides(
    beside: &std::path::Path,
    opts: &LogBenchOptions,
) -> Result<(tempfile::TempDir, Side<'static>, Side<'static>), LogError> {
    let dir = tempfile::tempdir_in(beside).map_err(|e| local_error("local", e))?;
    let db = PlainSqlite::create(&dir.path().join("plain.sqlite3"))
        .map_err(|e| local_error("plain SQLite", e))?;
    let disk = PlainDisk::create(
        &dir.path().join("plain.disk"),
        opts.records * opts.size as u64,
    )
    .map_err(|e| local_error("disk", e))?;
    let partitions = opts.partitions as usize;
    Ok((
        dir,
        Side::Sqlite {
            db: Mutex::new((db, vec![0; partitions])),
            payload: vec![b'a'; opts.size],
        },
        Side::Disk {
            disk: Mutex::new((disk, vec![Vec::new(); partitions])),
            payload: vec![b'a'; opts.size],
        },
    ))
}

/// Runs the workload through `log` and through `baseline`, taking turns.
pub async fn run_log_bench(
    log: SharedLog,
    baseline: Option<LogBaseline>,
    opts: LogBenchOptions,
) -> Result<LogBenchReport, LogError> {
    check(&opts)?;
    let stream = opts
        .stream
        .clone()
        .unwrap_or_else(|| super::fresh_stream("log"));
    let topic = log.ensure_topic(&stream, "bench", opts.partitions).await?;
    let ours = Side::Ours {
        log: &log,
        payload: vec![b'a'; opts.size],
        headers: opts.headers,
    };
    let (ours, baselines, durability) = match baseline {
        Some(LogBaseline::Iggy(target)) => {
            let client = PlainClient::connect(&target).await?;
            let plain = Side::Plain {
                client: &client,
                payload: vec![b'a'; opts.size],
                headers: opts.headers,
            };
            let measured = measure(&[ours, plain], &topic, &opts).await;
            let deleted = client.delete_stream(topic.stream_id).await;
            client.close().await;
            let figures = measured?;
            deleted?;
            (
                figures[0],
                vec![("plain iggy", figures[1])],
                Some(target.durability()),
            )
        }
        Some(LogBaseline::Local(beside)) => {
            let (_dir, sqlite, disk) = local_sides(&beside, &opts)?;
            let figures = measure(&[ours, sqlite, disk], &topic, &opts).await?;
            (
                figures[0],
                vec![("plain SQLite", figures[1]), ("disk", figures[2])],
                None,
            )
        }
        None => (measure(&[ours], &topic, &opts).await?[0], Vec::new(), None),
    };
    Ok(LogBenchReport {
        log: log.describe(),
        options: opts,
        ours,
        baselines,
        durability,
    })
}

/// Batches each of several producers appends per turn, one after another.
const PRODUCER_RUN: usize = 64;

/// Runs the workload with every side taking turns: request by request with
/// one producer, [`PRODUCER_RUN`] batches per producer with several.
async fn measure(
    sides: &[Side<'_>],
    topic: &TopicInfo,
    opts: &LogBenchOptions,
) -> Result<Vec<BenchFigures>, LogError> {
    let mut figures = vec![BenchFigures::default(); sides.len()];
    let turn = |round: usize| (0..sides.len()).map(move |k| (round + k) % sides.len());

    // Batch k goes to partition k mod `partitions`. One producer appends a
    // batch per turn; N producers share PRODUCER_RUN batches each per turn,
    // producer p appending batches p, p + N, ... of the turn in sequence,
    // each as soon as its previous one returned.
    let counts: Vec<u32> = batches(opts).collect();
    let producers = opts.producers as usize;
    let per_turn = if producers == 1 {
        1
    } else {
        producers * PRODUCER_RUN
    };
    for (round, turn_counts) in counts.chunks(per_turn).enumerate() {
        let first_batch = round * per_turn;
        for s in turn(round) {
            let started = Instant::now();
            let appends = (0..producers).map(|p| async move {
                for (k, &count) in turn_counts.iter().enumerate().skip(p).step_by(producers) {
                    let partition = ((first_batch + k) % opts.partitions as usize) as u32;
                    let batch = sides[s].batch(count)?;
                    sides[s].append(topic, partition, batch).await?;
                }
                Ok::<_, LogError>(())
            });
            futures_util::future::try_join_all(appends).await?;
            let records = turn_counts.iter().map(|&c| u64::from(c)).sum();
            figures[s].append.add(records, opts.size, started.elapsed());
        }
    }

    for partition in 0..opts.partitions {
        let mut cursors: Vec<Option<u64>> = vec![Some(0); sides.len()];
        let mut round = 0;
        while cursors.iter().any(Option::is_some) {
            for s in turn(round) {
                let Some(from) = cursors[s] else { continue };
                let started = Instant::now();
                let (read, next) = sides[s].poll(topic, partition, from, opts.batch).await?;
                figures[s].poll.add(read, opts.size, started.elapsed());
                cursors[s] = (read > 0).then_some(next);
            }
            round += 1;
        }
    }

    let on_the_log = sides.iter().filter(|s| s.on_the_log()).count() as u64;
    for (side, f) in sides.iter().zip(&figures) {
        let expected = if side.on_the_log() {
            opts.records * on_the_log
        } else {
            opts.records
        };
        if f.poll.records != expected {
            return Err(LogError::Backend {
                reason: format!(
                    "the bench read back {} of the {expected} records appended",
                    f.poll.records
                ),
                source: None,
            });
        }
    }
    Ok(figures)
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
            baselines: vec![("plain iggy", figures(1))],
            durability: Some(Durability::Fsync),
        };
        assert_eq!(report.ratios(), vec![("plain iggy", 0.5, 0.5)]);
        let text = report.to_string();
        assert!(
            text.contains("plain iggy") && text.contains("agdx/plain") && text.contains("0.50"),
            "{text}"
        );
        assert!(text.contains("durability=fsync"), "{text}");
    }
}
