//! The plain `iggy` client the benches compare against: the same server,
//! a connection of its own, nothing of AGDX in between.

use std::collections::BTreeMap;

use agdx::wire::{HeaderKind, HeaderValue, Headers};
use iggy::prelude::{
    Client, Consumer, ConsumerOffsetClient, HeaderKey, HeaderValue as IggyHeaderValue, Identifier,
    IggyClient, IggyError, IggyMessage, MessageClient, Partitioning, PollingStrategy, StreamClient,
};

use iggy_common::locking::IggyRwLockFn;

use agdx::log::iggy::Durability;
use agdx::log::{LogError, LogSpec, TopicInfo};

use super::BenchError;

/// An Iggy server to run a workload against with the plain `iggy` client,
/// and the durability the plain client gives its sends so that it does the
/// work agdx does: with [`Durability::Fsync`] each send is followed by the
/// flush agdx makes (`flush_unsaved_buffer` with fsync for the partition).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainIggyTarget {
    url: String,
    durability: Durability,
}

impl PlainIggyTarget {
    /// The server of an `iggy://USER:PASSWORD@HOST:PORT` connection string
    /// of the Iggy client (no `durability` option in it).
    pub fn new(url: impl Into<String>, durability: Durability) -> Self {
        Self {
            url: url.into(),
            durability,
        }
    }

    /// The server a log spec names, with the spec's durability; `None` for
    /// the other logs.
    pub fn for_spec(spec: &LogSpec) -> Option<Self> {
        match spec {
            LogSpec::Iggy { url, durability } => Some(Self::new(url.clone(), *durability)),
            _ => None,
        }
    }

    /// Whether the plain client flushes after each send.
    pub fn durability(&self) -> Durability {
        self.durability
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

/// `headers` as typed headers of the `iggy` client's map API.
pub(super) fn typed_headers(
    headers: &Headers,
) -> Result<BTreeMap<HeaderKey, IggyHeaderValue>, IggyError> {
    headers
        .iter()
        .map(|(key, value)| Ok((HeaderKey::try_from(key.as_ref())?, typed_value(value)?)))
        .collect()
}

/// One header value through the `iggy` client's typed constructors.
fn typed_value(value: &HeaderValue) -> Result<IggyHeaderValue, IggyError> {
    let bytes = value.bytes.as_slice();
    macro_rules! number {
        ($t:ty) => {
            IggyHeaderValue::from(<$t>::from_le_bytes(
                bytes
                    .try_into()
                    .map_err(|_| IggyError::InvalidHeaderValue)?,
            ))
        };
    }
    Ok(match value.kind {
        HeaderKind::Raw => IggyHeaderValue::try_from(bytes)?,
        HeaderKind::String => IggyHeaderValue::try_from(
            std::str::from_utf8(bytes).map_err(|_| IggyError::InvalidHeaderValue)?,
        )?,
        HeaderKind::Bool => IggyHeaderValue::from(bytes == [1]),
        HeaderKind::Int8 => number!(i8),
        HeaderKind::Int16 => number!(i16),
        HeaderKind::Int32 => number!(i32),
        HeaderKind::Int64 => number!(i64),
        HeaderKind::Int128 => number!(i128),
        HeaderKind::Uint8 => number!(u8),
        HeaderKind::Uint16 => number!(u16),
        HeaderKind::Uint32 => number!(u32),
        HeaderKind::Uint64 => number!(u64),
        HeaderKind::Uint128 => number!(u128),
        HeaderKind::Float32 => number!(f32),
        HeaderKind::Float64 => number!(f64),
    })
}

/// Awaits `bench`, which works in the stream `stream_id`, then deletes that
/// stream when the bench ran on the Iggy server of `target`, whether it
/// passed or failed: a bench's records (hundreds of MiB for `bench worker`)
/// are not left on a server it was pointed at. The bench's own error comes
/// first.
pub(super) async fn deleting_stream<T>(
    target: Option<&PlainIggyTarget>,
    stream_id: u32,
    bench: impl Future<Output = Result<T, BenchError>>,
) -> Result<T, BenchError> {
    let result = bench.await;
    let deleted = match target {
        Some(target) => match PlainClient::connect(target).await {
            Ok(client) => {
                let deleted = client.delete_stream(stream_id).await;
                client.close().await;
                deleted
            }
            Err(error) => Err(error),
        },
        None => Ok(()),
    };
    let value = result?;
    deleted?;
    Ok(value)
}

/// The plain `iggy` client on the bench server.
pub(super) struct PlainClient {
    client: IggyClient,
    target: String,
    durability: Durability,
    reader: Consumer,
}

impl PlainClient {
    pub(super) async fn connect(target: &PlainIggyTarget) -> Result<Self, LogError> {
        let client =
            IggyClient::from_connection_string(&with_nodelay(&target.url)).map_err(|e| {
                LogError::InvalidInput(format!(
                    "the plain Iggy client rejects the connection string: {e}"
                ))
            })?;
        let plain = Self {
            client,
            target: target.url.rsplit('@').next().unwrap_or_default().to_owned(),
            durability: target.durability,
            reader: Consumer::default(),
        };
        // The inner client's connect, as agdx's own connections do:
        // `IggyClient::connect` starts a heartbeat task that reports an
        // error for every ping once the client is shut down. A bench
        // connection is busy or soon closed, so it needs no heartbeat.
        let connected = plain.client.client().read().await.connect().await;
        connected.map_err(|e| plain.error("connecting", e))?;
        Ok(plain)
    }

    pub(super) fn error(&self, doing: &str, e: IggyError) -> LogError {
        LogError::Backend {
            reason: format!("plain iggy client at {}: {doing}: {e}", self.target),
            source: Some(e.into()),
        }
    }

    fn ids(&self, topic: &TopicInfo) -> Result<(Identifier, Identifier), LogError> {
        let numeric =
            |id: u32| Identifier::numeric(id).map_err(|e| self.error("addressing the topic", e));
        Ok((numeric(topic.stream_id)?, numeric(topic.topic_id)?))
    }

    /// Sends `messages` to `partition`, then, with [`Durability::Fsync`],
    /// flushes the partition with fsync.
    pub(super) async fn send(
        &self,
        topic: &TopicInfo,
        partition: u32,
        messages: &mut [IggyMessage],
    ) -> Result<(), LogError> {
        let (stream, topic_id) = self.ids(topic)?;
        self.client
            .send_messages(
                &stream,
                &topic_id,
                &Partitioning::partition_id(partition),
                messages,
            )
            .await
            .map_err(|e| self.error("sending", e))?;
        if self.durability == Durability::Fsync {
            self.client
                .flush_unsaved_buffer(&stream, &topic_id, partition, true)
                .await
                .map_err(|e| self.error("flushing", e))?;
        }
        Ok(())
    }

    /// Reads up to `batch` records of `partition` from `from`, reading each
    /// one's headers; how many came and the offset after the last.
    pub(super) async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        batch: u32,
    ) -> Result<(u64, u64), LogError> {
        let messages = self.poll_messages(topic, partition, from, batch).await?;
        for message in &messages {
            message
                .user_headers_map()
                .map_err(|e| self.error("reading headers", e))?;
        }
        let next = messages.last().map_or(from, |m| m.header.offset + 1);
        Ok((messages.len() as u64, next))
    }

    /// Up to `batch` messages of `partition` from `from`.
    pub(super) async fn poll_messages(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        batch: u32,
    ) -> Result<Vec<IggyMessage>, LogError> {
        let (stream, topic_id) = self.ids(topic)?;
        let polled = self
            .client
            .poll_messages(
                &stream,
                &topic_id,
                Some(partition),
                &self.reader,
                &PollingStrategy::offset(from),
                batch,
                false,
            )
            .await
            .map_err(|e| self.error("polling", e))?;
        Ok(polled.messages)
    }

    /// Stores `offset` as this client's consumer offset of `partition`.
    pub(super) async fn store_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
        offset: u64,
    ) -> Result<(), LogError> {
        let (stream, topic_id) = self.ids(topic)?;
        self.client
            .store_consumer_offset(&self.reader, &stream, &topic_id, Some(partition), offset)
            .await
            .map_err(|e| self.error("storing the offset", e))
    }

    pub(super) async fn delete_stream(&self, stream_id: u32) -> Result<(), LogError> {
        let id = Identifier::numeric(stream_id)
            .map_err(|e| self.error("addressing the bench stream", e))?;
        self.client
            .delete_stream(&id)
            .await
            .map_err(|e| self.error("deleting the bench stream", e))
    }

    pub(super) async fn close(&self) {
        // The bench is over; a failure to say goodbye changes nothing.
        let _ = self.client.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agdx::wire::HeaderBytes;

    #[test]
    fn nodelay_is_added_unless_set() {
        assert_eq!(
            with_nodelay("iggy://a:b@h:1"),
            "iggy://a:b@h:1?nodelay=true"
        );
        assert_eq!(
            with_nodelay("iggy://a:b@h:1?heartbeat_interval=1s"),
            "iggy://a:b@h:1?heartbeat_interval=1s&nodelay=true"
        );
        assert_eq!(
            with_nodelay("iggy://a:b@h:1?nodelay=false"),
            "iggy://a:b@h:1?nodelay=false"
        );
    }

    #[test]
    fn typed_headers_keep_kinds_and_values() {
        let headers = vec![
            ("agdx.ct".into(), HeaderValue::u8(3)),
            ("agdx.av".into(), HeaderValue::u32(1)),
            ("gen_ai.conversation.id".into(), HeaderValue::u128(7)),
            ("agdx.to".into(), HeaderValue::string("echo")),
        ];
        let map = typed_headers(&headers).unwrap();
        let get = |k: &str| &map[&HeaderKey::try_from(k).unwrap()];
        assert_eq!(get("agdx.ct").as_uint8().unwrap(), 3);
        assert_eq!(get("agdx.av").as_uint32().unwrap(), 1);
        assert_eq!(get("gen_ai.conversation.id").as_uint128().unwrap(), 7);
        assert_eq!(get("agdx.to").as_str().unwrap(), "echo");
        let short = HeaderValue {
            kind: HeaderKind::Uint32,
            bytes: HeaderBytes::from_slice(&[1]),
        };
        assert!(typed_headers(&vec![("k".into(), short)]).is_err());
    }
}
