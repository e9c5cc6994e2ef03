//! The agent topology: one stream and its five topics (docs/runtime.md §2).

use crate::log::{Log, LogError, TopicInfo};

/// Default stream holding the agent topics.
pub const DEFAULT_STREAM: &str = "agents";
/// Default partition count of every agent topic.
pub const DEFAULT_PARTITIONS: u32 = 8;

/// Names of the agent topics; every name can be overridden.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicNames {
    /// Commands (and the events that go with them).
    pub commands: String,
    /// Responses, chunk streams, errors, task status.
    pub responses: String,
    /// Agent cards and quarantine control facts.
    pub registry: String,
    /// Dead-letter capsules.
    pub dlq: String,
    /// Fold snapshots.
    pub snapshots: String,
    /// Claim-checked bodies of the log blob store
    /// ([`LogBlobStore`](crate::LogBlobStore)); not one of the five agent
    /// topics, and created only when a blob is first written to it.
    pub blobs: String,
}

impl Default for TopicNames {
    fn default() -> Self {
        Self {
            commands: "agent.commands".into(),
            responses: "agent.responses".into(),
            registry: "agent.registry".into(),
            dlq: "agent.dlq".into(),
            snapshots: "agent.snapshots".into(),
            blobs: "agent.blobs".into(),
        }
    }
}

/// Where the agent topics live: stream, topic names, partition count.
///
/// ```
/// let t = agdx::TopologyConfig::new("agents");
/// assert_eq!(t.topics.commands, "agent.commands");
/// assert_eq!(t.partitions, 8);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyConfig {
    /// The stream holding the five topics ([`DEFAULT_STREAM`] by default).
    pub stream: String,
    /// The five topic names.
    pub topics: TopicNames,
    /// Partitions of each topic when it is created ([`DEFAULT_PARTITIONS`]
    /// unless set); a topic that already exists keeps its own count.
    pub partitions: u32,
}

impl TopologyConfig {
    /// The default topics in `stream` with the default partition count.
    pub fn new(stream: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            topics: TopicNames::default(),
            partitions: DEFAULT_PARTITIONS,
        }
    }

    /// Sets the partition count used when topics are created.
    pub fn with_partitions(mut self, partitions: u32) -> Self {
        self.partitions = partitions;
        self
    }

    /// The five topic names in the order of docs/runtime.md §2.
    pub fn topic_names(&self) -> [&str; 5] {
        let t = &self.topics;
        [&t.commands, &t.responses, &t.registry, &t.dlq, &t.snapshots]
    }

    /// Resolves each of the five topics with `find`, in the order of
    /// docs/runtime.md §2.
    async fn each(
        &self,
        mut find: impl AsyncFnMut(&str) -> Result<TopicInfo, LogError>,
    ) -> Result<Topology, LogError> {
        let t = &self.topics;
        Ok(Topology {
            commands: find(&t.commands).await?,
            responses: find(&t.responses).await?,
            registry: find(&t.registry).await?,
            dlq: find(&t.dlq).await?,
            snapshots: find(&t.snapshots).await?,
        })
    }

    /// Creates whatever of the topology is missing (idempotent) and returns
    /// the resolved topics; an existing topic with another partition count
    /// is [`LogError::PartitionMismatch`].
    pub async fn ensure(&self, log: &dyn Log) -> Result<Topology, LogError> {
        self.each(async |name| log.ensure_topic(&self.stream, name, self.partitions).await)
            .await
    }

    /// Uses the topics that exist, whatever their partition count, and
    /// creates the missing ones with this configuration's count. This is
    /// what every command but `agdx init` does, so nothing needs setting up.
    pub async fn open(&self, log: &dyn Log) -> Result<Topology, LogError> {
        self.each(async |name| match log.topic(&self.stream, name).await? {
            Some(topic) => Ok(topic),
            None => log.ensure_topic(&self.stream, name, self.partitions).await,
        })
        .await
    }
}

/// The resolved agent topics: names, ids and partition counts as the log
/// has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    /// Commands (and the events that go with them).
    pub commands: TopicInfo,
    /// Responses, chunk streams, errors, task status.
    pub responses: TopicInfo,
    /// Agent cards and quarantine control facts.
    pub registry: TopicInfo,
    /// Dead-letter capsules.
    pub dlq: TopicInfo,
    /// Fold snapshots.
    pub snapshots: TopicInfo,
}

impl Topology {
    /// All topics, in the order of docs/runtime.md §2.
    pub fn all(&self) -> [&TopicInfo; 5] {
        [
            &self.commands,
            &self.responses,
            &self.registry,
            &self.dlq,
            &self.snapshots,
        ]
    }

    /// The topic with this name, when it is one of the agent topics.
    pub fn by_name(&self, name: &str) -> Option<&TopicInfo> {
        self.all().into_iter().find(|t| t.topic == name)
    }
}
