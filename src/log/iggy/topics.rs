//! Looking Iggy streams and topics up, one by name or a stream's all.

use std::time::Duration;

use iggy::prelude::{IggyError, StreamClient, StreamDetails, TopicClient};

use super::{IggyLog, LogError, TOPIC_SETTLE, TopicInfo, named, numeric};

impl IggyLog {
    /// The stream named `stream`, `None` when there is none.
    pub(super) async fn find_stream(
        &self,
        stream: &str,
    ) -> Result<Option<StreamDetails>, LogError> {
        match self.client().get_stream(&named("stream", stream)?).await {
            Ok(found) => Ok(found),
            Err(IggyError::StreamIdNotFound(_) | IggyError::StreamNameNotFound(_)) => Ok(None),
            Err(e) => Err(self.request_error(&format!("looking up stream '{stream}'"), e)),
        }
    }

    /// The stream named `stream`, created when missing.
    pub(super) async fn ensure_stream(&self, stream: &str) -> Result<StreamDetails, LogError> {
        if let Some(found) = self.find_stream(stream).await? {
            return Ok(found);
        }
        match self.client().create_stream(stream).await {
            Ok(created) => Ok(created),
            Err(IggyError::StreamNameAlreadyExists(_)) => self
                .find_stream(stream)
                .await?
                .ok_or_else(|| LogError::Backend {
                    reason: format!("stream '{stream}' was reported to exist but cannot be found"),
                    source: None,
                }),
            Err(e) => Err(self.request_error(&format!("creating stream '{stream}'"), e)),
        }
    }

    /// The topic `topic` of the stream numbered `stream_id`, `None` when there is none.
    async fn find_topic(
        &self,
        stream: &str,
        stream_id: u32,
        topic: &str,
    ) -> Result<Option<TopicInfo>, LogError> {
        let found = self
            .client()
            .get_topic(&numeric(stream_id)?, &named("topic", topic)?)
            .await;
        match found {
            Ok(Some(details)) => TopicInfo::resolved(
                stream.to_owned(),
                topic.to_owned(),
                stream_id,
                details.id,
                details.partitions_count,
            )
            .map(Some),
            Ok(None)
            | Err(
                IggyError::StreamIdNotFound(_)
                | IggyError::TopicIdNotFound(..)
                | IggyError::TopicNameNotFound(..),
            ) => Ok(None),
            Err(e) => Err(self.request_error(&format!("looking up topic '{stream}/{topic}'"), e)),
        }
    }

    /// [`Self::find_topic`], waiting out another client's creation of the
    /// topic: while one connection creates a topic, Iggy shows it to the
    /// others before its partitions exist, for a moment. A topic still
    /// without partitions after [`TOPIC_SETTLE`] is refused as usual.
    pub(super) async fn find_settled_topic(
        &self,
        stream: &str,
        stream_id: u32,
        topic: &str,
    ) -> Result<Option<TopicInfo>, LogError> {
        let deadline = tokio::time::Instant::now() + TOPIC_SETTLE;
        loop {
            match self.find_topic(stream, stream_id, topic).await {
                Err(LogError::NoPartitions { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                found => return found,
            }
        }
    }

    /// Every topic of `stream`, ascending by name ([`crate::log::Log::topics`]).
    pub(super) async fn list_topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError> {
        let Some(found) = self.find_stream(stream).await? else {
            return Ok(Vec::new());
        };
        let listed = match self.client().get_topics(&numeric(found.id)?).await {
            Ok(listed) => listed,
            Err(IggyError::StreamIdNotFound(_)) => return Ok(Vec::new()),
            Err(e) => {
                return Err(self.request_error(&format!("listing the topics of '{stream}'"), e));
            }
        };
        let mut topics = Vec::with_capacity(listed.len());
        for listed in listed {
            let resolved = if listed.partitions_count > 0 {
                TopicInfo::resolved(
                    stream.to_owned(),
                    listed.name,
                    found.id,
                    listed.id,
                    listed.partitions_count,
                )
                .map(Some)
            } else {
                // Maybe still being made by another client: as `topic` does.
                self.find_settled_topic(stream, found.id, &listed.name)
                    .await
            };
            match resolved {
                Ok(Some(topic)) => topics.push(topic),
                // Gone since, or left without partitions: as the port says.
                Ok(None) | Err(LogError::NoPartitions { .. }) => {}
                Err(error) => return Err(error),
            }
        }
        topics.sort_by(|a, b| a.topic.cmp(&b.topic));
        Ok(topics)
    }
}
