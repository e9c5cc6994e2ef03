//! The log blob store: a blob as chunked records on a blob topic of the
//! same log, so every host that reads the log reads the blob too.
//!
//! A blob is cut into chunks of at most [`MAX_BLOB_CHUNK_BYTES`] (and below
//! the log's [`Log::max_record_bytes`](crate::log::Log::max_record_bytes)),
//! appended in one batch to a partition chosen from its SHA-256. Each chunk
//! record carries one raw header, [`HEADER_BLOB`]: the blob's random id (16
//! bytes), the chunk's index and the chunk count (4 bytes each, big-endian).
//! The reference, [`LogBlobRef`], names the topic, the partition and the
//! offsets the chunks sit in: `log:<topic>/<partition>/<first>+<records>`.
//!
//! Where the records of one append land is learned from the partition's
//! last offset before and after it: when exactly that many records were
//! added they are all this blob's. When other records came in between (a
//! Kafka cluster can interleave concurrent appends), the writer reads the
//! range back to find its chunks, and the reference spans them with the
//! records in between, which a reader skips by their id.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::Duration;

use agdx_wire::{HeaderBytes, HeaderKind, HeaderName, HeaderValue};
use async_trait::async_trait;
use bytes::Bytes;

use super::{BlobError, BlobStore};
use crate::log::{LogError, LogRecord, OutgoingRecord, Retention, SharedLog, TopicInfo, lock};
use crate::routing::partition_for_key;
use crate::topology::TopologyConfig;

/// Most bytes of one chunk record: below Kafka's and Tansu's default
/// `message.max.bytes` (1 MB) and Iggy's default largest message, with
/// room for headers and framing.
pub const MAX_BLOB_CHUNK_BYTES: usize = 512 * 1024;

/// Most chunk records of one blob, which with [`MAX_BLOB_CHUNK_BYTES`]
/// bounds a blob at 2 GiB; a reader never reads more than this many.
pub const MAX_BLOB_CHUNKS: u32 = 4096;

/// Most records one reference may span (its chunks and the records of
/// other writers in between): a bound on what a reader reads.
const MAX_SPAN: u64 = 65_536;

/// The header of a chunk record: blob id, chunk index, chunk count.
pub const HEADER_BLOB: &str = "agdx.blob";

/// Bytes of [`HEADER_BLOB`]'s value.
const HEADER_BLOB_LEN: usize = 24;

/// How long a read of the blob topic waits for records the log said it has.
const POLL_WAIT: Duration = Duration::from_millis(200);

/// Empty polls in a row after which a read gives up.
const MAX_EMPTY_POLLS: u32 = 10;

/// What the log blob store reads for its errors.
const STORE: &str = "log blob store";

/// How a log blob reference starts.
const REFERENCE_PREFIX: &str = "log:";

/// The form of a log blob reference, for errors.
const REFERENCE_FORM: &str = "expected `log:<topic>/<partition>/<first offset>+<records>`, e.g. `log:agent.blobs/3/120+2`, numbers in decimal without leading zeros";

/// Where a blob's chunks sit: `log:<topic>/<partition>/<first>+<records>`.
///
/// `records` counts the offsets from `first` on that the reference spans:
/// the blob's chunks and any records of other writers in between; 0 for an
/// empty blob, which has no records.
///
/// ```
/// use agdx::LogBlobRef;
/// let r: LogBlobRef = "log:agent.blobs/3/120+2".parse()?;
/// assert_eq!((r.partition, r.first, r.records), (3, 120, 2));
/// assert_eq!(r.to_string(), "log:agent.blobs/3/120+2");
/// assert!("log:agent.blobs/3/0120+2".parse::<LogBlobRef>().is_err());
/// # Ok::<(), String>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBlobRef {
    /// The blob topic, in the stream of the store reading it.
    pub topic: String,
    /// The partition of the topic.
    pub partition: u32,
    /// The offset of the blob's first record.
    pub first: u64,
    /// How many offsets from `first` on the blob's records span.
    pub records: u64,
}

impl fmt::Display for LogBlobRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}/{}/{}+{}",
            REFERENCE_PREFIX, self.topic, self.partition, self.first, self.records
        )
    }
}

impl FromStr for LogBlobRef {
    type Err = String;

    /// Parses a reference in its one form; the error says what is wrong.
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = |why: &str| format!("{why}; {}", REFERENCE_FORM);
        if text.len() > agdx_wire::BODY_REF_MAX_LEN {
            return Err(bad("it is longer than a BodyRef reference may be"));
        }
        let rest = text
            .strip_prefix(REFERENCE_PREFIX)
            .ok_or_else(|| bad("it does not start with `log:`"))?;
        let mut parts = rest.split('/');
        let (Some(topic), Some(partition), Some(offsets), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad("it does not have three parts separated by `/`"));
        };
        if topic.is_empty() || topic.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("its topic is empty or has blanks"));
        }
        let partition = number::<u32>(partition, "partition").map_err(|why| bad(&why))?;
        let (first, records) = offsets.split_once('+').ok_or_else(|| {
            bad("its last part has no `+` between the first offset and the record count")
        })?;
        let first = number::<u64>(first, "first offset").map_err(|why| bad(&why))?;
        let records = number::<u64>(records, "record count").map_err(|why| bad(&why))?;
        if records > MAX_SPAN {
            return Err(bad(&format!(
                "it spans {records} records, more than the {MAX_SPAN} a reader reads"
            )));
        }
        if first.checked_add(records).is_none() {
            return Err(bad("its records would end past the largest offset"));
        }
        Ok(Self {
            topic: topic.to_owned(),
            partition,
            first,
            records,
        })
    }
}

/// A decimal number in its one spelling: digits only, no leading zero.
fn number<T: FromStr>(text: &str, what: &str) -> Result<T, String> {
    let canonical = !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'));
    canonical
        .then(|| text.parse().ok())
        .flatten()
        .ok_or_else(|| format!("its {what} {text:?} is not a decimal number in range"))
}

/// One chunk record's [`HEADER_BLOB`]: whose chunk, which, of how many.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ChunkTag {
    id: [u8; 16],
    index: u32,
    count: u32,
}

impl ChunkTag {
    fn header(&self) -> (HeaderName, HeaderValue) {
        let mut bytes = HeaderBytes::new();
        bytes.extend_from_slice(&self.id);
        bytes.extend_from_slice(&self.index.to_be_bytes());
        bytes.extend_from_slice(&self.count.to_be_bytes());
        let value = HeaderValue {
            kind: HeaderKind::Raw,
            bytes,
        };
        (HeaderName::Borrowed(HEADER_BLOB), value)
    }

    /// The tag of a record, `None` when it is not a chunk of a blob.
    fn of(record: &LogRecord) -> Option<Self> {
        let (_, value) = record.headers.iter().find(|(k, _)| k == HEADER_BLOB)?;
        let bytes: &[u8; HEADER_BLOB_LEN] = value.bytes.as_slice().try_into().ok()?;
        let (id, rest) = bytes.split_at(16);
        let (index, count) = rest.split_at(4);
        let tag = Self {
            id: id.try_into().ok()?,
            index: u32::from_be_bytes(index.try_into().ok()?),
            count: u32::from_be_bytes(count.try_into().ok()?),
        };
        (tag.index < tag.count && tag.count <= MAX_BLOB_CHUNKS).then_some(tag)
    }
}

/// A blob store on a topic of the log itself (see the module docs).
///
/// The blob topic is created on the first write, in the stream of the
/// agent topics, with their partition count; readers follow a reference to
/// whichever topic of that stream it names.
pub struct LogBlobStore {
    log: SharedLog,
    stream: String,
    topic: String,
    partitions: u32,
    retention: Retention,
    chunk_bytes: usize,
    /// Topics looked up so far, by name.
    topics: Mutex<HashMap<String, TopicInfo>>,
}

impl fmt::Debug for LogBlobStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogBlobStore")
            .field("log", &self.log.describe())
            .field("stream", &self.stream)
            .field("topic", &self.topic)
            .finish()
    }
}

impl LogBlobStore {
    /// A store on `log`, writing to the blob topic of `topology`
    /// ([`TopicNames::blobs`](crate::TopicNames::blobs), `agent.blobs`
    /// unless renamed) in its stream.
    pub fn new(log: SharedLog, topology: &TopologyConfig) -> Self {
        let chunk_bytes = MAX_BLOB_CHUNK_BYTES.min(log.max_record_bytes()).max(1);
        Self {
            log,
            stream: topology.stream.clone(),
            topic: topology.topics.blobs.clone(),
            partitions: topology.partitions,
            retention: topology.retention.commands,
            chunk_bytes,
            topics: Mutex::new(HashMap::new()),
        }
    }

    /// The topic blobs are written to.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The largest blob this store writes, in bytes.
    pub fn max_blob_bytes(&self) -> u64 {
        u64::from(MAX_BLOB_CHUNKS) * self.chunk_bytes as u64
    }

    fn log_error(&self, topic: &str) -> impl Fn(LogError) -> BlobError {
        let topic = topic.to_owned();
        move |source| BlobError::Log {
            topic: topic.clone(),
            source,
        }
    }

    /// The blob topic, created when missing.
    ///
    /// The one place the blob topic's settings are decided: it is created
    /// like the agent topics, with the commands topic's partition count and
    /// retention, so a blob lives as long as the records that reference it.
    async fn write_topic(&self) -> Result<TopicInfo, BlobError> {
        if let Some(topic) = lock(&self.topics).get(&self.topic) {
            return Ok(topic.clone());
        }
        let on_log = self.log_error(&self.topic);
        let topic = match self.log.topic(&self.stream, &self.topic).await {
            Ok(Some(topic)) => topic,
            Ok(None) => self
                .log
                .ensure_topic_retained(&self.stream, &self.topic, self.partitions, self.retention)
                .await
                .map_err(&on_log)?,
            Err(e) => return Err(on_log(e)),
        };
        lock(&self.topics).insert(self.topic.clone(), topic.clone());
        Ok(topic)
    }

    /// The topic a reference names, which must exist.
    async fn read_topic(&self, reference: &str, name: &str) -> Result<TopicInfo, BlobError> {
        if let Some(topic) = lock(&self.topics).get(name) {
            return Ok(topic.clone());
        }
        match self.log.topic(&self.stream, name).await {
            Ok(Some(topic)) => {
                lock(&self.topics).insert(name.to_owned(), topic.clone());
                Ok(topic)
            }
            Ok(None) => Err(self.not_on_log(
                reference,
                format!("stream {} has no topic {name}", self.stream),
            )),
            Err(e) => Err(self.log_error(name)(e)),
        }
    }

    fn not_on_log(&self, reference: &str, why: String) -> BlobError {
        BlobError::NotOnLog {
            reference: reference.to_owned(),
            log: self.log.describe(),
            why,
        }
    }

    /// Finds this blob's chunks among the records from `from` on: the offset
    /// of the first and of the last.
    async fn locate(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        tag: ChunkTag,
    ) -> Result<(u64, u64), BlobError> {
        let on_log = self.log_error(&topic.topic);
        let lost = |why: String| {
            on_log(LogError::Backend {
                reason: format!(
                    "the chunks just appended to partition {partition} were not found when read back: {why}"
                ),
                source: None,
            })
        };
        let mut seen = vec![false; tag.count as usize];
        let mut found = 0u32;
        let (mut first, mut last) = (None, 0);
        let mut next = from;
        let mut empty = 0;
        while found < tag.count {
            if next - from >= MAX_SPAN {
                return Err(lost(format!(
                    "{MAX_SPAN} records of other writers came in between"
                )));
            }
            let max = u32::try_from(MAX_SPAN - (next - from)).unwrap_or(u32::MAX);
            let records = self
                .log
                .poll(topic, partition, next, max, POLL_WAIT)
                .await
                .map_err(&on_log)?;
            if records.is_empty() {
                empty += 1;
                if empty >= MAX_EMPTY_POLLS {
                    return Err(lost(format!("nothing to read at offset {next}")));
                }
                continue;
            }
            empty = 0;
            for record in &records {
                let offset = record.position.offset;
                next = offset + 1;
                let Some(t) =
                    ChunkTag::of(record).filter(|t| t.id == tag.id && t.count == tag.count)
                else {
                    continue;
                };
                if !std::mem::replace(&mut seen[t.index as usize], true) {
                    found += 1;
                    first.get_or_insert(offset);
                    last = offset;
                }
            }
        }
        Ok((first.unwrap_or(from), last))
    }
}

#[async_trait]
impl BlobStore for LogBlobStore {
    async fn put(&self, bytes: Vec<u8>, sha256: [u8; 32]) -> Result<String, BlobError> {
        let size = bytes.len() as u64;
        if size > self.max_blob_bytes() {
            return Err(BlobError::TooLarge {
                size,
                limit: self.max_blob_bytes(),
                store: STORE,
            });
        }
        let topic = self.write_topic().await?;
        let partition = partition_for_key(&sha256, topic.partitions);
        let reference = |first, records| {
            LogBlobRef {
                topic: topic.topic.clone(),
                partition,
                first,
                records,
            }
            .to_string()
        };
        if bytes.is_empty() {
            return Ok(reference(0, 0));
        }
        let chunks = bytes.chunks(self.chunk_bytes);
        let count = u32::try_from(chunks.len()).unwrap_or(u32::MAX);
        let id: [u8; 16] = rand::random();
        let records: Vec<OutgoingRecord> = chunks
            .enumerate()
            .map(|(index, chunk)| OutgoingRecord {
                headers: vec![
                    ChunkTag {
                        id,
                        index: index as u32,
                        count,
                    }
                    .header(),
                ],
                payload: Bytes::copy_from_slice(chunk),
            })
            .collect();
        drop(bytes);
        let on_log = self.log_error(&topic.topic);
        let before = self
            .log
            .last_offset(&topic, partition)
            .await
            .map_err(&on_log)?;
        self.log
            .append(&topic, partition, records)
            .await
            .map_err(&on_log)?;
        let after = self
            .log
            .last_offset(&topic, partition)
            .await
            .map_err(&on_log)?;
        let from = before.map_or(0, |o| o + 1);
        let added = after.map_or(0, |o| o + 1).saturating_sub(from);
        if added == u64::from(count) {
            return Ok(reference(from, added));
        }
        let tag = ChunkTag {
            id,
            index: 0,
            count,
        };
        let (first, last) = self.locate(&topic, partition, from, tag).await?;
        Ok(reference(first, last - first + 1))
    }

    async fn get(&self, reference: &str) -> Result<Vec<u8>, BlobError> {
        let at: LogBlobRef = reference.parse().map_err(|why| BlobError::BadReference {
            reference: reference.to_owned(),
            store: STORE,
            why,
        })?;
        if at.records == 0 {
            return Ok(Vec::new());
        }
        let topic = self.read_topic(reference, &at.topic).await?;
        let on_log = self.log_error(&topic.topic);
        if at.partition >= topic.partitions.get() {
            return Err(self.not_on_log(
                reference,
                format!(
                    "topic {} has {} partitions, numbered from 0",
                    topic.topic, topic.partitions
                ),
            ));
        }
        let end = at.first + at.records;
        let last = self
            .log
            .last_offset(&topic, at.partition)
            .await
            .map_err(&on_log)?;
        if last.is_none_or(|last| last + 1 < end) {
            let ends = last.map_or("is empty".to_owned(), |o| format!("ends at offset {o}"));
            return Err(self.not_on_log(
                reference,
                format!("partition {} of {} {ends}", at.partition, topic.topic),
            ));
        }
        let incomplete = |why: String| BlobError::Incomplete {
            reference: reference.to_owned(),
            why,
        };
        let mut tag: Option<ChunkTag> = None;
        let mut chunks: Vec<Option<Bytes>> = Vec::new();
        let mut next = at.first;
        let mut empty = 0;
        while next < end {
            let max = u32::try_from(end - next).unwrap_or(u32::MAX);
            let records = self
                .log
                .poll(&topic, at.partition, next, max, POLL_WAIT)
                .await
                .map_err(&on_log)?;
            if records.is_empty() {
                empty += 1;
                if empty >= MAX_EMPTY_POLLS {
                    return Err(incomplete(format!(
                        "nothing could be read at offset {next}"
                    )));
                }
                continue;
            }
            empty = 0;
            for record in records {
                let offset = record.position.offset;
                if tag.is_none() && offset > at.first {
                    return Err(BlobError::GoneFromLog {
                        reference: reference.to_owned(),
                        first: at.first,
                        now_first: offset,
                    });
                }
                if offset >= end {
                    next = end;
                    break;
                }
                next = offset + 1;
                let expected = match tag {
                    Some(tag) => tag,
                    None => {
                        let first = ChunkTag::of(&record).ok_or_else(|| {
                            incomplete(format!(
                                "the record at offset {offset} is not a chunk of a blob"
                            ))
                        })?;
                        chunks = vec![None; first.count as usize];
                        *tag.insert(first)
                    }
                };
                // Records of other writers in between are skipped.
                let Some(t) = ChunkTag::of(&record).filter(|t| t.id == expected.id) else {
                    continue;
                };
                if t.count != expected.count {
                    return Err(incomplete(format!(
                        "its chunks disagree on their count ({} and {})",
                        expected.count, t.count
                    )));
                }
                chunks[t.index as usize].get_or_insert(record.payload);
            }
        }
        let missing = chunks.iter().filter(|c| c.is_none()).count();
        if missing > 0 {
            return Err(incomplete(format!(
                "{missing} of its {} chunks are not in the records the reference names",
                chunks.len()
            )));
        }
        let mut bytes = Vec::with_capacity(chunks.iter().flatten().map(Bytes::len).sum());
        chunks
            .iter()
            .flatten()
            .for_each(|chunk| bytes.extend_from_slice(chunk));
        Ok(bytes)
    }
}

#[cfg(all(test, feature = "embedded"))]
mod tests {
    use std::sync::Arc;

    use sha2::{Digest, Sha256};

    use super::*;
    use crate::log::embedded::EmbeddedLog;
    use crate::log::{Log, LogDecorator};

    fn embedded() -> (tempfile::TempDir, SharedLog) {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = EmbeddedLog::open(&dir.path().join("log")).expect("open the embedded log");
        (dir, Arc::new(log))
    }

    fn config() -> TopologyConfig {
        TopologyConfig::new("agents").with_partitions(2)
    }

    fn blob(len: usize) -> (Vec<u8>, [u8; 32]) {
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
        let sha256 = Sha256::digest(&bytes).into();
        (bytes, sha256)
    }

    fn foreign() -> OutgoingRecord {
        OutgoingRecord {
            headers: Vec::new(),
            payload: Bytes::from_static(b"another writer"),
        }
    }

    #[tokio::test]
    async fn a_blob_comes_back_from_its_chunks_through_another_store() {
        let (_dir, log) = embedded();
        let (bytes, sha256) = blob(2 * MAX_BLOB_CHUNK_BYTES + 10);
        let reference = LogBlobStore::new(log.clone(), &config())
            .put(bytes.clone(), sha256)
            .await
            .expect("put");
        let at: LogBlobRef = reference.parse().expect("a log reference");
        assert_eq!(
            (at.topic.as_str(), at.first, at.records),
            ("agent.blobs", 0, 3)
        );
        let reader = LogBlobStore::new(log, &config());
        assert!(reader.get(&reference).await.expect("get") == bytes);
        let (empty, sha256) = blob(0);
        let reference = reader.put(empty, sha256).await.expect("put nothing");
        assert_eq!(reader.get(&reference).await.expect("get nothing"), b"");
    }

    /// Appends a record of another writer before each batch, and one more
    /// after its first record.
    struct Interleaving(SharedLog);

    #[async_trait]
    impl LogDecorator for Interleaving {
        fn inner(&self) -> &dyn Log {
            self.0.as_ref()
        }
        async fn append(
            &self,
            topic: &TopicInfo,
            partition: u32,
            mut records: Vec<OutgoingRecord>,
        ) -> Result<(), LogError> {
            let rest = records.split_off(1);
            self.0.append(topic, partition, vec![foreign()]).await?;
            self.0.append(topic, partition, records).await?;
            self.0.append(topic, partition, vec![foreign()]).await?;
            self.0.append(topic, partition, rest).await
        }
    }

    #[tokio::test]
    async fn records_of_other_writers_in_between_are_found_and_skipped() {
        let (_dir, log) = embedded();
        let interleaving: SharedLog = Arc::new(Interleaving(log.clone()));
        let (bytes, sha256) = blob(MAX_BLOB_CHUNK_BYTES + 1);
        let reference = LogBlobStore::new(interleaving, &config())
            .put(bytes.clone(), sha256)
            .await
            .expect("put");
        let at: LogBlobRef = reference.parse().expect("a log reference");
        assert_eq!(
            (at.first, at.records),
            (1, 3),
            "two chunks and a record between them"
        );
        let reader = LogBlobStore::new(log, &config());
        assert!(reader.get(&reference).await.expect("get") == bytes);
    }

    /// Reads the blob topic as a log whose retention removed its first
    /// records: a poll from before them starts at the first one left, as
    /// Kafka and Iggy do.
    struct Retained(SharedLog, u64);

    #[async_trait]
    impl LogDecorator for Retained {
        fn inner(&self) -> &dyn Log {
            self.0.as_ref()
        }
        async fn poll(
            &self,
            topic: &TopicInfo,
            partition: u32,
            from: u64,
            max: u32,
            wait: Duration,
        ) -> Result<Vec<LogRecord>, LogError> {
            let from = from.max(self.1);
            self.0.poll(topic, partition, from, max, wait).await
        }
    }

    #[tokio::test]
    async fn a_blob_whose_records_are_gone_says_so() {
        let (_dir, log) = embedded();
        let store = LogBlobStore::new(log.clone(), &config());
        let (bytes, sha256) = blob(10);
        let old = store.put(bytes.clone(), sha256).await.expect("put");
        let newer = store.put(bytes, sha256).await.expect("put again");
        let reader = LogBlobStore::new(Arc::new(Retained(log, 1)), &config());
        let error = reader.get(&old).await.expect_err("gone");
        assert!(matches!(
            error,
            BlobError::GoneFromLog {
                first: 0,
                now_first: 1,
                ..
            }
        ));
        assert!(
            error
                .to_string()
                .contains("is no longer on the log (retention?)"),
            "{error}"
        );
        reader
            .get(&newer)
            .await
            .expect("the newer one is still there");
    }

    #[tokio::test]
    async fn a_reference_to_records_this_log_lacks_names_what_it_has() {
        let (_dir, log) = embedded();
        let store = LogBlobStore::new(log.clone(), &config());
        let (bytes, sha256) = blob(10);
        let reference = store.put(bytes, sha256).await.expect("put");
        let at: LogBlobRef = reference.parse().expect("a log reference");
        let past_the_end = LogBlobRef {
            first: 5,
            ..at.clone()
        }
        .to_string();
        let error = store.get(&past_the_end).await.expect_err("past the end");
        assert!(matches!(error, BlobError::NotOnLog { .. }), "{error}");
        assert!(error.to_string().contains("ends at offset 0"), "{error}");
        let elsewhere = LogBlobRef {
            topic: "other.blobs".into(),
            ..at.clone()
        };
        let error = store
            .get(&elsewhere.to_string())
            .await
            .expect_err("no such topic");
        assert!(
            error.to_string().contains("has no topic other.blobs"),
            "{error}"
        );
        // A record that is not a chunk of a blob.
        let topic = store.write_topic().await.expect("the blob topic");
        log.append(&topic, at.partition, vec![foreign()])
            .await
            .expect("append");
        let not_a_blob = LogBlobRef { first: 1, ..at }.to_string();
        let error = store.get(&not_a_blob).await.expect_err("not a blob");
        assert!(matches!(error, BlobError::Incomplete { .. }), "{error}");
        assert!(!error.is_retryable());
    }

    #[tokio::test]
    async fn a_malformed_reference_is_refused_naming_the_form() {
        let (_dir, log) = embedded();
        let store = LogBlobStore::new(log, &config());
        let too_long = format!("log:{}/0/0+1", "t".repeat(1100));
        for bad in [
            "blob:sha256:00",
            "log:",
            "log:agent.blobs/0/0",
            "log:agent.blobs/0/0+1/x",
            "log:/0/0+1",
            "log:agent.blobs/-1/0+1",
            "log:agent.blobs/01/0+1",
            "log:agent.blobs/0/+1+1",
            "log:agent.blobs/0/0+ 1",
            "log:agent.blobs/4294967296/0+1",
            "log:agent.blobs/0/18446744073709551615+1",
            "log:agent.blobs/0/0+65537",
            "log:agent blobs/0/0+1",
            too_long.as_str(),
        ] {
            let error = store.get(bad).await.expect_err(bad);
            assert!(
                matches!(error, BlobError::BadReference { .. }),
                "{bad}: {error}"
            );
            assert!(
                error
                    .to_string()
                    .contains("log:<topic>/<partition>/<first offset>+<records>"),
                "{error}"
            );
        }
    }
}
