//! The agent topology: one stream and its five topics (runtime.md §2).

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
}

impl Default for TopicNames {
    fn default() -> Self {
        Self {
            commands: "agent.commands".into(),
            responses: "agent.responses".into(),
            registry: "agent.registry".into(),
            dlq: "agent.dlq".into(),
            snapshots: "agent.snapshots".into(),
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
    pub stream: String,
    pub topics: TopicNames,
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

    /// The five topic names in the order of runtime.md §2.
    pub fn topic_names(&self) -> [&str; 5] {
        let t = &self.topics;
        [&t.commands, &t.responses, &t.registry, &t.dlq, &t.snapshots]
    }

    /// Creates whatever of the topology is missing (idempotent) and returns
    /// the resolved topics.
    pub async fn ensure(&self, log: &dyn Log) -> Result<Topology, LogError> {
        let mut found = Vec::with_capacity(5);
        for name in self.topic_names() {
            found.push(
                log.ensure_topic(&self.stream, name, self.partitions)
                    .await?,
            );
        }
        Ok(Topology::from_vec(found))
    }

    /// Uses the topics that exist, whatever their partition count, and
    /// creates the missing ones with this configuration's count. This is
    /// what every command but `agdx init` does, so nothing needs setting up.
    pub async fn open(&self, log: &dyn Log) -> Result<Topology, LogError> {
        let mut found = Vec::with_capacity(5);
        for name in self.topic_names() {
            let topic = match log.topic(&self.stream, name).await? {
                Some(topic) => topic,
                None => {
                    log.ensure_topic(&self.stream, name, self.partitions)
                        .await?
                }
            };
            found.push(topic);
        }
        Ok(Topology::from_vec(found))
    }

    /// Resolves the existing topology without creating anything; a missing
    /// topic is [`LogError::NoSuchTopic`] (its message says to run `agdx init`).
    pub async fn resolve(&self, log: &dyn Log) -> Result<Topology, LogError> {
        let mut found = Vec::with_capacity(5);
        for name in self.topic_names() {
            let topic =
                log.topic(&self.stream, name)
                    .await?
                    .ok_or_else(|| LogError::NoSuchTopic {
                        stream: self.stream.clone(),
                        topic: name.to_owned(),
                    })?;
            found.push(topic);
        }
        Ok(Topology::from_vec(found))
    }
}

/// The resolved agent topics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topology {
    pub commands: TopicInfo,
    pub responses: TopicInfo,
    pub registry: TopicInfo,
    pub dlq: TopicInfo,
    pub snapshots: TopicInfo,
}

impl Topology {
    fn from_vec(topics: Vec<TopicInfo>) -> Self {
        let mut it = topics.into_iter();
        let mut next = || it.next().expect("exactly five topics were resolved");
        Self {
            commands: next(),
            responses: next(),
            registry: next(),
            dlq: next(),
            snapshots: next(),
        }
    }

    /// All topics, in the order of runtime.md §2.
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
