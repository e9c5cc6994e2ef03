//! The agent topology: one stream and its five topics (docs/runtime.md §2),
//! and, with the inbox routing, one commands topic per agent.

use agdx_wire::AgentId;

use std::time::Duration;

use crate::log::{Log, LogError, Retention, TopicInfo};

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
    /// What the name of every agent's inbox topic starts with
    /// ([`inbox_topic_name`]); inboxes are used only with
    /// [`CommandRouting::Inbox`].
    pub inbox_prefix: String,
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
            inbox_prefix: "agent.inbox.".into(),
        }
    }
}

/// A day, for the retention table.
const DAY: Duration = Duration::from_secs(86_400);

/// How long each agent topic keeps its records when agdx creates it; a
/// topic that exists keeps its own (change it with the backend's tools).
///
/// The one table of the runtime's retention: commands (and every inbox and
/// the log blob store's topic, so a claim-checked body lives as long as the
/// command naming it), replies and the registry 7 days, dead letters 30
/// days, snapshots forever (a view's newest snapshot is what lets the
/// registry's old records go).
///
/// ```
/// use std::time::Duration;
/// use agdx::log::Retention;
/// let r = agdx::Retentions::default();
/// assert_eq!(r.registry, Retention::For(Duration::from_secs(7 * 86_400)));
/// assert_eq!(r.snapshots, Retention::Forever);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retentions {
    /// `agent.commands`, every inbox and the blob topic.
    pub commands: Retention,
    /// `agent.responses`.
    pub responses: Retention,
    /// `agent.registry`: cards and control facts (facts in force outlive it
    /// in the quarantine view's snapshots).
    pub registry: Retention,
    /// `agent.dlq`.
    pub dlq: Retention,
    /// `agent.snapshots`.
    pub snapshots: Retention,
}

impl Default for Retentions {
    fn default() -> Self {
        Self {
            commands: Retention::For(7 * DAY),
            responses: Retention::For(7 * DAY),
            registry: Retention::For(7 * DAY),
            dlq: Retention::For(30 * DAY),
            snapshots: Retention::Forever,
        }
    }
}

/// Which topic a command addressed to an agent travels on.
///
/// ```
/// use agdx::{CommandRouting, TopologyConfig};
/// let t = TopologyConfig::new("agents").with_routing(CommandRouting::Inbox);
/// assert_eq!(t.routing, CommandRouting::Inbox);
/// assert_eq!(TopologyConfig::new("agents").routing, CommandRouting::Shared);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum CommandRouting {
    /// Every command goes to the shared `agent.commands`, which every
    /// agent's pool reads, skipping what is addressed to others: what every
    /// AGDX implementation does.
    #[default]
    Shared,
    /// A command addressed to agent X goes to X's own inbox topic
    /// ([`inbox_topic_name`]), so X's pool reads only its own commands.
    ///
    /// Both sides keep working with peers of the other routing: a pool with
    /// this routing creates its inbox when it starts and reads it **and**
    /// `agent.commands`; a producer sends to X's inbox only when that topic
    /// exists, and to `agent.commands` otherwise (X's pool then reads the
    /// shared topic, whichever routing it has). Commands without a target
    /// and events stay on `agent.commands`.
    Inbox,
}

impl CommandRouting {
    /// The name the command line uses for it: `shared` or `inbox`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CommandRouting::Shared => "shared",
            CommandRouting::Inbox => "inbox",
        }
    }
}

impl std::fmt::Display for CommandRouting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What a pool's group name gains when it reads its inbox
/// ([`Topology::consumer_group`]).
pub const INBOX_GROUP_SUFFIX: &str = ".inbox";

/// Longest agent id that names its inbox as it is.
const PLAIN_INBOX_ID_MAX: usize = 64;

/// Characters of an agent id kept in the readable part of a hashed inbox name.
const INBOX_SLUG_MAX: usize = 32;

/// The name of `agent`'s inbox topic: `prefix` then the agent id itself
/// when it is 1 to 64 lowercase ASCII letters, digits and `-`; otherwise
/// a readable slug (at most 32 of those characters, others as `-`, letters
/// lowercased), `_`, and the XXH3-128 (seed 0) of the id's UTF-8 bytes as
/// 32 lowercase hex digits.
///
/// Every valid agent id gives a valid topic name on every backend (ASCII
/// letters, digits, `.`, `_` and `-`, at most 77 bytes with the default
/// prefix, so Kafka's 249 characters leave room for the stream), and two
/// ids never share one: a plain name has no `_`, a hashed one ends in the
/// id's hash. Case-insensitive backends do not merge ids either, since
/// only lowercase ids are used as they are.
///
/// ```
/// use agdx::inbox_topic_name;
/// use agdx::wire::AgentId;
/// let inbox = |id: &str| inbox_topic_name("agent.inbox.", &AgentId::new(id).unwrap());
/// assert_eq!(inbox("summarizer"), "agent.inbox.summarizer");
/// assert!(inbox("Team/Planner").starts_with("agent.inbox.team-planner_"));
/// ```
pub fn inbox_topic_name(prefix: &str, agent: &AgentId) -> String {
    let id = agent.as_str();
    let plain = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
    if id.len() <= PLAIN_INBOX_ID_MAX && id.chars().all(plain) {
        return format!("{prefix}{id}");
    }
    let slug: String = id
        .chars()
        .take(INBOX_SLUG_MAX)
        .map(|c| match c.to_ascii_lowercase() {
            c if plain(c) => c,
            _ => '-',
        })
        .collect();
    let hash = xxhash_rust::xxh3::xxh3_128(id.as_bytes());
    format!("{prefix}{slug}_{hash:032x}")
}

/// How commands are routed to agents, and how inbox topics are named and
/// made (see [`CommandRouting`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inboxes {
    /// Shared `agent.commands`, or one inbox per agent.
    pub routing: CommandRouting,
    /// What every inbox topic's name starts with.
    pub prefix: String,
    /// Partitions of an inbox topic when it is created.
    pub partitions: u32,
    /// Retention of an inbox topic when it is created (the commands
    /// topic's).
    pub retention: Retention,
}

impl Default for Inboxes {
    fn default() -> Self {
        Self {
            routing: CommandRouting::Shared,
            prefix: TopicNames::default().inbox_prefix,
            partitions: DEFAULT_PARTITIONS,
            retention: Retentions::default().commands,
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
    /// Shared `agent.commands` ([`CommandRouting::Shared`], the default) or
    /// one inbox topic per agent.
    pub routing: CommandRouting,
    /// How long each topic keeps its records when it is created.
    pub retention: Retentions,
}

impl TopologyConfig {
    /// The default topics in `stream` with the default partition count.
    pub fn new(stream: impl Into<String>) -> Self {
        Self {
            stream: stream.into(),
            topics: TopicNames::default(),
            partitions: DEFAULT_PARTITIONS,
            routing: CommandRouting::Shared,
            retention: Retentions::default(),
        }
    }

    /// Routes commands as `routing` says.
    pub fn with_routing(mut self, routing: CommandRouting) -> Self {
        self.routing = routing;
        self
    }

    /// Sets how long topics created from now on keep their records.
    pub fn with_retention(mut self, retention: Retentions) -> Self {
        self.retention = retention;
        self
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
        mut find: impl AsyncFnMut(&str, Retention) -> Result<TopicInfo, LogError>,
    ) -> Result<Topology, LogError> {
        let (t, r) = (&self.topics, &self.retention);
        Ok(Topology {
            commands: find(&t.commands, r.commands).await?,
            responses: find(&t.responses, r.responses).await?,
            registry: find(&t.registry, r.registry).await?,
            dlq: find(&t.dlq, r.dlq).await?,
            snapshots: find(&t.snapshots, r.snapshots).await?,
            inboxes: Inboxes {
                routing: self.routing,
                prefix: t.inbox_prefix.clone(),
                partitions: self.partitions,
                retention: r.commands,
            },
        })
    }

    /// Creates whatever of the topology is missing (idempotent) and returns
    /// the resolved topics; an existing topic with another partition count
    /// is [`LogError::PartitionMismatch`].
    pub async fn ensure(&self, log: &dyn Log) -> Result<Topology, LogError> {
        self.each(async |name, retention| {
            log.ensure_topic_retained(&self.stream, name, self.partitions, retention)
                .await
        })
        .await
    }

    /// Uses the topics that exist, whatever their partition count, and
    /// creates the missing ones with this configuration's count. This is
    /// what every command but `agdx init` does, so nothing needs setting up.
    pub async fn open(&self, log: &dyn Log) -> Result<Topology, LogError> {
        self.each(
            async |name, retention| match log.topic(&self.stream, name).await? {
                Some(topic) => Ok(topic),
                None => {
                    log.ensure_topic_retained(&self.stream, name, self.partitions, retention)
                        .await
                }
            },
        )
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
    /// How commands reach their agent (shared topic or inboxes).
    pub inboxes: Inboxes,
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

    /// The same topics, with commands routed as `routing` says.
    pub fn with_routing(mut self, routing: CommandRouting) -> Self {
        self.inboxes.routing = routing;
        self
    }

    /// The name of `agent`'s inbox topic in this topology.
    pub fn inbox_name(&self, agent: &AgentId) -> String {
        inbox_topic_name(&self.inboxes.prefix, agent)
    }

    /// Whether `topic` is an inbox topic of this topology's stream.
    pub fn is_inbox(&self, topic: &TopicInfo) -> bool {
        topic.stream == self.commands.stream && topic.topic.starts_with(&self.inboxes.prefix)
    }

    /// Whether commands are read from `topic`: `agent.commands` or an inbox.
    pub fn is_commands(&self, topic: &TopicInfo) -> bool {
        *topic == self.commands || self.is_inbox(topic)
    }

    /// Every inbox topic of this topology's stream, whichever agents made
    /// them and whatever this topology's own routing, ascending by name.
    pub async fn inboxes(&self, log: &dyn Log) -> Result<Vec<TopicInfo>, LogError> {
        let mut topics = log.topics(&self.commands.stream).await?;
        topics.retain(|topic| self.is_inbox(topic));
        Ok(topics)
    }

    /// The five agent topics (in the order of docs/runtime.md §2), then
    /// every inbox of the stream ([`Topology::inboxes`]): everything a
    /// reader of the whole topology reads.
    pub async fn all_with_inboxes(&self, log: &dyn Log) -> Result<Vec<TopicInfo>, LogError> {
        let mut topics: Vec<TopicInfo> = self.all().into_iter().cloned().collect();
        topics.extend(self.inboxes(log).await?);
        Ok(topics)
    }

    /// `agent`'s inbox topic when it exists (nothing is created).
    pub async fn find_inbox(
        &self,
        log: &dyn Log,
        agent: &AgentId,
    ) -> Result<Option<TopicInfo>, LogError> {
        log.topic(&self.commands.stream, &self.inbox_name(agent))
            .await
    }

    /// `agent`'s inbox topic, created (with [`Inboxes::partitions`]) when
    /// missing; one that exists keeps its partition count.
    pub async fn open_inbox(&self, log: &dyn Log, agent: &AgentId) -> Result<TopicInfo, LogError> {
        let name = self.inbox_name(agent);
        match log.topic(&self.commands.stream, &name).await? {
            Some(topic) => Ok(topic),
            None => {
                log.ensure_topic_retained(
                    &self.commands.stream,
                    &name,
                    self.inboxes.partitions,
                    self.inboxes.retention,
                )
                .await
            }
        }
    }

    /// The consumer group a pool named `group` reads `topic` as: `group`
    /// itself on `agent.commands`, `group` then [`INBOX_GROUP_SUFFIX`] on an
    /// inbox. Apart, so that on Kafka, where a group's rebalance spans every
    /// topic its members subscribe to, the inbox and the shared topic never
    /// share one generation (a member of one would stall the other).
    pub fn consumer_group(&self, topic: &TopicInfo, group: &str) -> String {
        if self.is_inbox(topic) {
            format!("{group}{INBOX_GROUP_SUFFIX}")
        } else {
            group.to_owned()
        }
    }

    /// The topics `agent`'s pool reads commands from: `agent.commands`, and
    /// before it the agent's inbox (created when missing) with the inbox
    /// routing.
    pub async fn command_topics(
        &self,
        log: &dyn Log,
        agent: &AgentId,
    ) -> Result<Vec<TopicInfo>, LogError> {
        Ok(match self.inboxes.routing {
            CommandRouting::Shared => vec![self.commands.clone()],
            CommandRouting::Inbox => {
                vec![self.open_inbox(log, agent).await?, self.commands.clone()]
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The retention table, and the topics that share the commands' one.
    #[test]
    fn the_retention_table() {
        let r = Retentions::default();
        let days = |n: u64| Retention::For(Duration::from_secs(n * 86_400));
        assert_eq!(
            [r.commands, r.responses, r.registry, r.dlq, r.snapshots],
            [days(7), days(7), days(7), days(30), Retention::Forever]
        );
        assert_eq!(Inboxes::default().retention, r.commands);
        assert_eq!(TopologyConfig::new("s").retention, r);
    }

    fn inbox(id: &str) -> String {
        inbox_topic_name("agent.inbox.", &AgentId::new(id).expect("an agent id"))
    }

    /// The inbox naming rule: plain ids as they are, every other id as a
    /// slug and its hash, each within every backend's topic-name rules.
    #[test]
    fn every_agent_id_names_a_valid_distinct_inbox() {
        assert_eq!(inbox("summarizer"), "agent.inbox.summarizer");
        assert_eq!(inbox("a-1"), "agent.inbox.a-1");
        assert_eq!(
            inbox("Planner"),
            format!(
                "agent.inbox.planner_{:032x}",
                xxhash_rust::xxh3::xxh3_128(b"Planner")
            )
        );
        let long = "é".repeat(128);
        let ids = [
            "planner",
            "Planner",
            "plan_ner",
            "plan.ner",
            "plan ner",
            "team/planner",
            "ünïcode agent",
            &"x".repeat(64),
            &"x".repeat(65),
            &long,
        ];
        let names: std::collections::BTreeSet<String> = ids.iter().map(|id| inbox(id)).collect();
        assert_eq!(names.len(), ids.len(), "{names:?}");
        for name in &names {
            assert!(name.len() <= 77, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')),
                "{name}"
            );
            assert!(!name.chars().any(|c| c.is_ascii_uppercase()), "{name}");
        }
    }
}
