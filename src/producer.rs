//! Producing: typed verbs that build valid envelopes and append them.
//!
//! Every verb builds its envelope through the `agdx-wire` constructors,
//! validates it **before** anything is sent (an invalid envelope is a local
//! [`ProduceError::Invalid`] naming the field), mints a ULID record id,
//! claim-checks a large body, stamps the wire headers and appends to the
//! partition of the conversation. A batch for several partitions becomes one
//! append per partition. A batch can also be prepared apart from its append
//! ([`Producer::prepare_commands`], then [`Producer::publish_prepared`]), so
//! that the next batch is prepared while the log appends the current one.
//!
//! ```no_run
//! # async fn demo(log: agdx::log::SharedLog) -> Result<(), Box<dyn std::error::Error>> {
//! use agdx::{CommandRequest, Producer, TopologyConfig};
//! use agdx::wire::AgentId;
//!
//! let topology = TopologyConfig::new("agents").ensure(log.as_ref()).await?;
//! let producer = Producer::new(log, topology, AgentId::new("planner")?);
//! let sent = producer
//!     .command(CommandRequest::new("summarize", b"incident 42".to_vec()).to(AgentId::new("summarizer")?))
//!     .await?;
//! println!("record {} correlation {}", sent.record.unwrap(), sent.correlation.unwrap());
//! # Ok(()) }
//! ```

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use agdx_wire::{
    AgentCard, AgentEnvelope, AgentId, BodyRef, ContentType, ConversationId, CorrelationId,
    ErrorBody, HeaderCapError, IntoBody, Metadata, RecordId, StreamPurpose, TaskState,
    ValidationError, check_header_caps, record_headers,
};
use tracing::Instrument;

use crate::claim_check::{ClaimCheck, ClaimCheckError};
use crate::ids::{Mint, new_conversation_id, new_record_id};
use crate::log::{LogError, OutgoingRecord, SharedLog, TopicInfo};
use crate::routing::{card_conversation, conversation_for_key, partition_of};
use crate::topology::{CommandRouting, Topology};
use crate::trust::{META_REASON, QuarantineWatch, Quarantined, Signer};

mod chunks;
mod fields;
mod prepared;
mod request;

pub use chunks::ChunkWriter;
pub use fields::ReplyFields;
pub use prepared::PreparedBatch;
pub(crate) use prepared::{ByPartition, Prepared, appends};
pub use request::{CommandRequest, ReplyTo};

/// Why something could not be produced.
#[derive(Debug, thiserror::Error)]
pub enum ProduceError {
    /// The envelope breaks the wire contract; nothing was sent.
    #[error("not sent: {0}")]
    Invalid(#[from] ValidationError),
    /// The content type says `ref` but the body is no BodyRef; nothing was sent.
    #[error(
        "not sent: content type `ref` marks a claim check, but the body is not a valid BodyRef ({0}); send the bytes with their own content type and let the producer claim-check them"
    )]
    NotABodyRef(agdx_wire::WireError),
    /// The headers are over the wire caps; nothing was sent.
    #[error("not sent: {0}")]
    Headers(#[from] HeaderCapError),
    /// The body could not be claim-checked.
    #[error("not sent: {0}")]
    ClaimCheck(#[from] ClaimCheckError),
    /// The target agent is quarantined; nothing was sent.
    #[error("not sent: {0}")]
    Quarantined(#[from] Quarantined),
    /// What was to be cancelled is no command (it has no correlation);
    /// nothing was sent.
    #[error("not sent: only a command can be cancelled: {0}")]
    NotACommand(String),
    /// The log refused or could not be reached.
    #[error(transparent)]
    Log(#[from] LogError),
}

impl ProduceError {
    /// Whether sending the same thing again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            ProduceError::Invalid(_) => false,
            ProduceError::NotABodyRef(_) => false,
            ProduceError::Headers(_) => false,
            ProduceError::ClaimCheck(e) => e.is_retryable(),
            // Lifted only by an operator; a retry loop would not see it.
            ProduceError::Quarantined(_) => false,
            ProduceError::NotACommand(_) => false,
            ProduceError::Log(e) => e.is_retryable(),
        }
    }
}

/// What a produced record was: its ids and where it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sent {
    /// The record id (chunks carry none).
    pub record: Option<RecordId>,
    /// The conversation it belongs to; it picked the partition.
    pub conversation: ConversationId,
    /// The id pairing a request with its replies, when the record has one
    /// (a command always does).
    pub correlation: Option<CorrelationId>,
    /// Topic name.
    pub topic: String,
    /// The partition of `topic` it was appended to.
    pub partition: u32,
}

/// An envelope ready to publish and the content type of its body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// The envelope, body included.
    pub envelope: AgentEnvelope,
    /// The body's codec, sent as the `agdx.ct` header; `ref` when the body
    /// already is a BodyRef.
    pub content_type: ContentType,
}

impl Outgoing {
    /// Pairs an envelope with its body's content type.
    pub fn new(envelope: AgentEnvelope, content_type: ContentType) -> Self {
        Self {
            envelope,
            content_type,
        }
    }
}

/// Collects the replies a handler publishes, for the processed-key store.
pub(crate) type ReplyRecorder = Arc<Mutex<Vec<Outgoing>>>;

/// Publishes typed envelopes as one agent (`source`).
///
/// Cheap to clone; clones share the log connection and configuration.
#[derive(Clone)]
pub struct Producer {
    inner: Arc<ProducerInner>,
}

#[derive(Clone)]
struct ProducerInner {
    log: SharedLog,
    topology: Topology,
    source: AgentId,
    claim_check: Option<ClaimCheck>,
    signer: Option<Signer>,
    quarantine: Option<Arc<QuarantineWatch>>,
    bridge_hop: Option<String>,
    /// What is known of agents' inbox topics (inbox routing only).
    inboxes: Arc<dashmap::DashMap<AgentId, Inbox>>,
}

/// What a producer knows of one agent's inbox topic.
#[derive(Clone)]
enum Inbox {
    /// It exists: commands to the agent go there.
    Found(TopicInfo),
    /// It did not exist when looked for at this instant.
    Missing(std::time::Instant),
}

/// How long a producer sends to `agent.commands` for an agent whose inbox
/// it found missing before it looks again: a pool started meanwhile with
/// the inbox routing reads `agent.commands` too, so nothing waits on it.
const INBOX_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

impl Producer {
    /// A producer writing as `source` into `topology` on `log`.
    pub fn new(log: SharedLog, topology: Topology, source: AgentId) -> Self {
        Self {
            inner: Arc::new(ProducerInner {
                log,
                topology,
                source,
                claim_check: None,
                signer: None,
                quarantine: None,
                bridge_hop: None,
                inboxes: Arc::default(),
            }),
        }
    }

    fn with_inner(self, change: impl FnOnce(&mut ProducerInner)) -> Self {
        let mut inner = (*self.inner).clone();
        change(&mut inner);
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Claim-checks large bodies (see [`ClaimCheck`]).
    pub fn with_claim_check(self, claim_check: ClaimCheck) -> Self {
        self.with_inner(|inner| inner.claim_check = Some(claim_check))
    }

    /// Signs every envelope it sends with `signer` (after claim-checking, so
    /// the signature covers the BodyRef that goes on the log), replacing
    /// any signature an envelope carried. The key's principal should be
    /// this producer's source, or verifiers refuse the records.
    pub fn with_signer(self, signer: Signer) -> Self {
        self.with_inner(|inner| inner.signer = Some(signer))
    }

    /// Refuses to send commands and events to an agent that `quarantine`
    /// says is quarantined ([`ProduceError::Quarantined`], nothing sent).
    pub fn with_quarantine(self, quarantine: Arc<QuarantineWatch>) -> Self {
        self.with_inner(|inner| inner.quarantine = Some(quarantine))
    }

    /// The signer, when configured.
    pub fn signer(&self) -> Option<&Signer> {
        self.inner.signer.as_ref()
    }

    /// Appends the bridge `id` to the `bridge_hops` metadata of everything
    /// this producer publishes: an edge bridge writes through such a
    /// producer, so any record it wrote can be recognised when it comes back
    /// to it (interop is an edge mapping).
    pub fn with_bridge_hop(self, id: impl Into<String>) -> Self {
        let id = id.into();
        self.with_inner(|inner| inner.bridge_hop = Some(id))
    }

    /// The agent this producer writes as.
    pub fn source(&self) -> &AgentId {
        &self.inner.source
    }

    /// The topology it writes into.
    pub fn topology(&self) -> &Topology {
        &self.inner.topology
    }

    /// The log it writes to.
    pub fn log(&self) -> &SharedLog {
        &self.inner.log
    }

    /// The claim check, when configured.
    pub fn claim_check(&self) -> Option<&ClaimCheck> {
        self.inner.claim_check.as_ref()
    }

    /// Sends a command to the topic [`commands_topic`](Self::commands_topic)
    /// names for its target. A correlation is minted when the
    /// request has none, and a conversation too (derived from the key for a
    /// keyed command; see [`CommandRequest::conversation`]).
    pub async fn command(&self, request: CommandRequest) -> Result<Sent, ProduceError> {
        let topic = self.commands_topic(request.target.as_ref()).await?;
        let (outgoing, _) = self.build_command(request);
        self.publish_one(&topic, outgoing).await
    }

    /// The topic a command addressed to `target` goes to: with
    /// [`CommandRouting::Inbox`] the target's inbox when it exists (a pool
    /// with the inbox routing creates it), else `agent.commands`, which
    /// every pool reads; without the inbox routing, and for a command
    /// without a target, `agent.commands`. A found inbox is remembered; a
    /// missing one is looked for again after a few seconds.
    pub async fn commands_topic(&self, target: Option<&AgentId>) -> Result<TopicInfo, LogError> {
        let topology = &self.inner.topology;
        let shared = || Ok(topology.commands.clone());
        let Some(target) = target.filter(|_| topology.inboxes.routing == CommandRouting::Inbox)
        else {
            return shared();
        };
        let known = self.inner.inboxes.get(target).map(|known| known.clone());
        match known {
            Some(Inbox::Found(topic)) => return Ok(topic),
            Some(Inbox::Missing(at)) if at.elapsed() < INBOX_RECHECK => return shared(),
            _ => {}
        }
        match topology.find_inbox(self.inner.log.as_ref(), target).await? {
            Some(topic) => {
                self.inner
                    .inboxes
                    .insert(target.clone(), Inbox::Found(topic.clone()));
                Ok(topic)
            }
            None => {
                let missing = Inbox::Missing(std::time::Instant::now());
                self.inner.inboxes.insert(target.clone(), missing);
                shared()
            }
        }
    }

    /// Sends many commands, one append per partition: the same as
    /// [`prepare_commands`](Self::prepare_commands) then
    /// [`publish_prepared`](Self::publish_prepared).
    pub async fn commands(&self, requests: Vec<CommandRequest>) -> Result<Vec<Sent>, ProduceError> {
        let batch = self.prepare_commands(requests).await?;
        self.publish_prepared(batch).await
    }

    /// Does everything [`commands`](Self::commands) does except the append:
    /// builds each command (ids minted, conversation chosen as
    /// [`command`](Self::command) chooses it), checks the quarantine,
    /// validates, claim-checks a large body, signs, encodes, stamps the
    /// headers and picks the partition. Nothing is sent; every way a
    /// command can be refused before the log shows here, and none is
    /// prepared when one is refused.
    ///
    /// Preparing is CPU work (plus the blob writes of a claim check), so a
    /// producer that sends batch after batch can prepare the next batch
    /// while the log appends the current one: join the two on one task,
    /// the append first, so that its requests are on their way while the
    /// next batch is prepared. (Preparing on another task costs more CPU:
    /// each batch's memory crosses threads, and the tasks wake each other.)
    /// The checks hold as of preparing: a target quarantined afterwards
    /// still gets the batch.
    ///
    /// ```no_run
    /// # async fn demo(producer: agdx::Producer) -> Result<(), agdx::ProduceError> {
    /// use agdx::CommandRequest;
    /// let batch = |n: usize| -> Vec<CommandRequest> {
    ///     (0..100)
    ///         .map(|i| CommandRequest::new("summarize", format!("incident {n}.{i}").into_bytes()))
    ///         .collect()
    /// };
    /// let mut ready = producer.prepare_commands(batch(0)).await?;
    /// for n in 1..10 {
    ///     let (sent, next) = tokio::join!(
    ///         producer.publish_prepared(ready),
    ///         producer.prepare_commands(batch(n)),
    ///     );
    ///     assert_eq!(sent?.len(), 100);
    ///     ready = next?;
    /// }
    /// producer.publish_prepared(ready).await?;
    /// # Ok(()) }
    /// ```
    pub async fn prepare_commands(
        &self,
        requests: Vec<CommandRequest>,
    ) -> Result<PreparedBatch, ProduceError> {
        let mut batch = PreparedBatch::with_capacity(requests.len());
        let topology = &self.inner.topology;
        // With the shared routing every command goes to one topic, looked
        // up (and copied) once rather than per command.
        let shared = topology.inboxes.routing != CommandRouting::Inbox;
        let mint = Mint::now();
        for request in requests {
            let inbox;
            let topic = if shared {
                &topology.commands
            } else {
                inbox = self.commands_topic(request.target.as_ref()).await?;
                &inbox
            };
            let (outgoing, _) = self.build_command_at(request, mint);
            batch.push(
                topic,
                self.prepare_one(topic, Cow::Owned(outgoing.envelope), outgoing.content_type)
                    .await?,
            );
        }
        Ok(batch)
    }

    /// Builds (without sending) the command envelope of `request`.
    pub(crate) fn build_command(&self, request: CommandRequest) -> (Outgoing, CorrelationId) {
        self.build_command_at(request, Mint::now())
    }

    /// Builds the command envelope of `request` with the ids it mints
    /// stamped by `mint`. Fields are set in place: the envelope is large,
    /// and a chain of builder calls moves it once per call.
    fn build_command_at(&self, request: CommandRequest, mint: Mint) -> (Outgoing, CorrelationId) {
        let source = &self.inner.source;
        let conversation = match (request.conversation, &request.idempotency_key) {
            (Some(conversation), _) => conversation,
            (None, Some(key)) => conversation_for_key(request.target.as_ref(), source, key),
            (None, None) => mint.conversation_id(),
        };
        let correlation = request.correlation.unwrap_or_else(|| mint.correlation_id());
        let mut envelope = AgentEnvelope::command(
            mint.record_id(),
            conversation,
            source.clone(),
            correlation,
            request.operation.as_deref(),
            request.body,
        );
        envelope.target = request.target;
        envelope.idempotency_key = request.idempotency_key;
        envelope.deadline_micros = request.deadline_micros;
        envelope.metadata = request.metadata;
        envelope.must_understand = request.must_understand;
        if let Some((cause, at)) = request.cause {
            (envelope.cause, envelope.cause_at) = (Some(cause), at);
        }
        (Outgoing::new(envelope, request.content_type), correlation)
    }

    /// The `response` envelope answering `to` (not sent).
    pub fn response_envelope(
        &self,
        to: &ReplyTo,
        body: impl IntoBody,
        content_type: ContentType,
    ) -> Outgoing {
        self.response_envelope_with(to, body, content_type, ReplyFields::default())
    }

    /// The `response` envelope answering `to` with `body` and `fields`
    /// (not sent).
    pub fn response_envelope_with(
        &self,
        to: &ReplyTo,
        body: impl IntoBody,
        content_type: ContentType,
        fields: ReplyFields,
    ) -> Outgoing {
        let mut envelope = AgentEnvelope::response(
            new_record_id(),
            to.conversation,
            self.inner.source.clone(),
            to.correlation,
            body,
        );
        // Set in place: the envelope, a large struct, is not moved per step.
        envelope.idempotency_key.clone_from(&to.idempotency_key);
        fields.apply_to(&mut envelope);
        to.address_in_place(&mut envelope);
        Outgoing::new(envelope, content_type)
    }

    /// The `error` envelope answering `to` (not sent).
    pub fn error_envelope(&self, to: &ReplyTo, error: &ErrorBody) -> Outgoing {
        let envelope = AgentEnvelope::error(
            new_record_id(),
            to.conversation,
            self.inner.source.clone(),
            to.correlation,
            error,
        );
        Outgoing::new(to.address(envelope), ContentType::Cbor)
    }

    /// Answers a command with a `response` on `agent.responses`.
    pub async fn respond(
        &self,
        to: &ReplyTo,
        body: impl IntoBody,
        content_type: ContentType,
    ) -> Result<Sent, ProduceError> {
        let outgoing = self.response_envelope(to, body, content_type);
        self.publish_one(&self.inner.topology.responses, outgoing)
            .await
    }

    /// Answers a command with an `error` on `agent.responses`.
    pub async fn fail(&self, to: &ReplyTo, error: &ErrorBody) -> Result<Sent, ProduceError> {
        let outgoing = self.error_envelope(to, error);
        self.publish_one(&self.inner.topology.responses, outgoing)
            .await
    }

    /// Publishes a fire-and-forget `event` on `agent.commands`, in
    /// `conversation` (a new one when `None`).
    pub async fn event(
        &self,
        conversation: Option<ConversationId>,
        operation: Option<&str>,
        body: impl IntoBody,
        content_type: ContentType,
    ) -> Result<Sent, ProduceError> {
        let conversation = conversation.unwrap_or_else(new_conversation_id);
        let mut envelope = AgentEnvelope::event(
            new_record_id(),
            conversation,
            self.inner.source.clone(),
            body,
        );
        if let Some(op) = operation {
            envelope = envelope.with_operation(op);
        }
        self.publish_one(
            &self.inner.topology.commands,
            Outgoing::new(envelope, content_type),
        )
        .await
    }

    /// Cancels the command `command` (as [`Producer::command`] returned
    /// it), addressed to `target`: a `status` `task` `canceled` with its
    /// correlation, naming its record, on its topic and conversation, so
    /// its worker does not run it, or stops its handler (docs/runtime.md,
    /// "Cancellation").
    pub async fn cancel(
        &self,
        command: &Sent,
        target: Option<&AgentId>,
    ) -> Result<Sent, ProduceError> {
        let Some(correlation) = command.correlation else {
            return Err(ProduceError::NotACommand(format!(
                "the record on {} partition {} has no correlation",
                command.topic, command.partition
            )));
        };
        let stream = &self.inner.topology.commands.stream;
        let topic = self
            .inner
            .log
            .topic(stream, &command.topic)
            .await?
            .ok_or_else(|| LogError::NoSuchTopic {
                stream: stream.clone(),
                topic: command.topic.clone(),
            })?;
        let mut envelope = AgentEnvelope::status_task(
            new_record_id(),
            command.conversation,
            self.inner.source.clone(),
            correlation,
            TaskState::Canceled,
        );
        if let Some(record) = command.record {
            envelope = envelope.with_cause(record, None);
        }
        if let Some(target) = target {
            envelope = envelope.with_target(target.clone());
        }
        self.publish_one(&topic, Outgoing::new(envelope, ContentType::Raw))
            .await
    }

    /// Reports where the task of the request `to` stands (`status` `task`
    /// on `agent.responses`).
    pub async fn status_task(&self, to: &ReplyTo, state: TaskState) -> Result<Sent, ProduceError> {
        let outgoing = self.status_task_envelope(to, state);
        self.publish_one(&self.inner.topology.responses, outgoing)
            .await
    }

    /// The `status` `task` that [`Producer::status_task`] publishes, not
    /// yet sent.
    pub fn status_task_envelope(&self, to: &ReplyTo, state: TaskState) -> Outgoing {
        let envelope = AgentEnvelope::status_task(
            new_record_id(),
            to.conversation,
            self.inner.source.clone(),
            to.correlation,
            state,
        );
        Outgoing::new(to.address(envelope), ContentType::Raw)
    }

    /// Reports that the request `to` is still being worked on (`status`
    /// `progress` on `agent.responses`, with its correlation): the
    /// requester's heartbeat.
    pub async fn progress(
        &self,
        to: &ReplyTo,
        body: impl IntoBody,
        content_type: ContentType,
    ) -> Result<Sent, ProduceError> {
        let envelope = AgentEnvelope::status_progress(
            new_record_id(),
            to.conversation,
            self.inner.source.clone(),
            body,
        )
        .with_correlation(to.correlation);
        self.publish_one(
            &self.inner.topology.responses,
            Outgoing::new(to.address(envelope), content_type),
        )
        .await
    }

    /// Reports progress in `conversation` (`status` `progress` on `agent.responses`).
    pub async fn status_progress(
        &self,
        conversation: ConversationId,
        body: impl IntoBody,
        content_type: ContentType,
    ) -> Result<Sent, ProduceError> {
        let envelope = AgentEnvelope::status_progress(
            new_record_id(),
            conversation,
            self.inner.source.clone(),
            body,
        );
        self.publish_one(
            &self.inner.topology.responses,
            Outgoing::new(envelope, content_type),
        )
        .await
    }

    /// Publishes this agent's card (`status` `card` on `agent.registry`).
    pub async fn status_card(&self, card: &AgentCard) -> Result<Sent, ProduceError> {
        let envelope = AgentEnvelope::status_card(
            new_record_id(),
            card_conversation(&self.inner.source),
            self.inner.source.clone(),
            card,
        );
        self.publish_one(
            &self.inner.topology.registry,
            Outgoing::new(envelope, ContentType::Cbor),
        )
        .await
    }

    /// Publishes a control fact on `agent.registry`: `agent` is quarantined
    /// (`quarantined: true`) or the quarantine is lifted, with an optional
    /// reason. Folds apply it only when it is signed by an operator key
    /// (see [`crate::trust::QuarantineFold`]), so this producer needs an
    /// operator's [`Signer`].
    pub async fn status_quarantine(
        &self,
        agent: &AgentId,
        quarantined: bool,
        reason: Option<&str>,
    ) -> Result<Sent, ProduceError> {
        let mut envelope = AgentEnvelope::status_quarantine(
            new_record_id(),
            card_conversation(agent),
            self.inner.source.clone(),
            agent,
            quarantined,
        );
        if let Some(reason) = reason {
            envelope = envelope.with_metadata(Metadata::new().with(META_REASON, reason));
        }
        self.publish_one(
            &self.inner.topology.registry,
            Outgoing::new(envelope, ContentType::Raw),
        )
        .await
    }

    /// Opens a chunk stream answering `to`, for `purpose`, optionally
    /// abandoned by readers after `deadline_micros`.
    pub fn stream(
        &self,
        to: &ReplyTo,
        purpose: StreamPurpose,
        deadline_micros: Option<u64>,
    ) -> ChunkWriter {
        ChunkWriter::new(self.clone(), to.clone(), purpose, deadline_micros)
    }

    /// Publishes one envelope to `topic`.
    pub async fn publish_one(
        &self,
        topic: &TopicInfo,
        outgoing: Outgoing,
    ) -> Result<Sent, ProduceError> {
        let e = &outgoing.envelope;
        let span = tracing::info_span!(
            "produce",
            kind = e.kind.as_str(),
            conversation = %e.conversation,
            correlation = e.correlation.map(tracing::field::display),
            agent = %self.inner.source,
            topic = %topic.topic,
            operation = e.operation.as_deref().unwrap_or(""),
        );
        let mut sent = self.publish(topic, vec![outgoing]).instrument(span).await?;
        Ok(sent.remove(0))
    }

    /// Validates, claim-checks and appends `items` to `topic`, one append per
    /// partition; nothing is sent when any item is invalid. The same as
    /// [`prepare`](Self::prepare) then [`publish_prepared`](Self::publish_prepared).
    pub async fn publish(
        &self,
        topic: &TopicInfo,
        items: Vec<Outgoing>,
    ) -> Result<Vec<Sent>, ProduceError> {
        let batch = self.prepare(topic, items).await?;
        self.publish_prepared(batch).await
    }

    /// Does everything [`publish`](Self::publish) does except the append:
    /// each item validated, claim-checked when large, signed, encoded, its
    /// headers stamped and its partition of `topic` picked. None is
    /// prepared when any is refused.
    pub async fn prepare(
        &self,
        topic: &TopicInfo,
        items: Vec<Outgoing>,
    ) -> Result<PreparedBatch, ProduceError> {
        let mut batch = PreparedBatch::with_capacity(items.len());
        for item in items {
            batch.push(
                topic,
                self.prepare_one(topic, Cow::Owned(item.envelope), item.content_type)
                    .await?,
            );
        }
        Ok(batch)
    }

    /// Appends a batch made by [`prepare_commands`](Self::prepare_commands)
    /// or [`prepare`](Self::prepare), one append per partition, all in
    /// flight at once, and returns what each record was, in the order
    /// prepared. Nothing but the append happens here.
    ///
    /// Publish a batch through the producer that prepared it (or another on
    /// the same log): the record size was checked against that log's
    /// limit. To try again after a retryable error with the same record
    /// ids, clone the batch before publishing it.
    pub async fn publish_prepared(&self, batch: PreparedBatch) -> Result<Vec<Sent>, ProduceError> {
        let PreparedBatch { sent, by_topic } = batch;
        self.append_by_partition(by_topic).await?;
        Ok(sent)
    }

    /// Turns one envelope into the record that carries it on `topic`:
    /// validated, its body claim-checked when large, headers stamped, and
    /// checked against the log's record limit. Every way one record can be
    /// refused shows here, before anything is appended. A borrowed
    /// envelope is copied only when this producer changes envelopes (a
    /// bridge hop, a claim-checked body, a signature).
    pub(crate) async fn prepare_one(
        &self,
        topic: &TopicInfo,
        mut envelope: Cow<'_, AgentEnvelope>,
        content_type: ContentType,
    ) -> Result<Prepared, ProduceError> {
        if let Some(hop) = &self.inner.bridge_hop {
            envelope
                .to_mut()
                .metadata
                .get_or_insert_with(Metadata::new)
                .push_bridge_hop(hop);
        }
        if let (Some(watch), Some(target)) = (&self.inner.quarantine, &envelope.target)
            && self.inner.topology.is_commands(topic)
        {
            watch.check(target)?;
        }
        let check = self
            .inner
            .claim_check
            .as_ref()
            .filter(|check| check.applies_to(envelope.body.len()));
        if let Some(check) = check {
            check.keep_content_type(envelope.to_mut(), content_type);
        }
        // Validate before claim-checking so an invalid envelope leaves no
        // blob behind; swapping a body for its BodyRef keeps it valid.
        envelope.validate()?;
        if content_type == ContentType::Ref {
            BodyRef::decode_valid(&envelope.body).map_err(ProduceError::NotABodyRef)?;
        }
        let mut content_type = content_type;
        if let Some(check) = check {
            let envelope = envelope.to_mut();
            let body = std::mem::take(&mut envelope.body);
            let (body, claimed) = check.outgoing(body.into(), content_type).await?;
            (envelope.body, content_type) = (body.into(), claimed);
        }
        if let Some(signer) = &self.inner.signer {
            envelope = Cow::Owned(signer.sign_record(envelope.into_owned(), content_type));
        }
        let headers = record_headers(&envelope, content_type);
        check_header_caps(&headers)?;
        let payload = envelope.encode();
        let limit = self.inner.log.max_record_bytes();
        if payload.len() > limit {
            return Err(LogError::RecordTooLarge {
                size: payload.len(),
                limit,
            }
            .into());
        }
        let partition = partition_of(topic, envelope.conversation);
        Ok(Prepared {
            sent: Sent {
                record: envelope.record,
                conversation: envelope.conversation,
                correlation: envelope.correlation,
                topic: topic.topic.clone(),
                partition,
            },
            record: OutgoingRecord {
                headers,
                payload: payload.into(),
            },
        })
    }

    /// One append per topic and partition, all in flight at once (the
    /// embedded log commits them together; Iggy takes them on one
    /// connection).
    async fn append_by_partition(&self, by_topic: Vec<ByPartition>) -> Result<(), LogError> {
        let appends = by_topic.into_iter().flat_map(|(topic, by_partition)| {
            by_partition.into_iter().map(move |(partition, records)| {
                let topic = topic.clone();
                let span = tracing::debug_span!("append", topic = %topic.topic, partition, records = records.len());
                async move { self.inner.log.append(&topic, partition, records).await }
                    .instrument(span)
            })
        });
        futures_util::future::try_join_all(appends).await?;
        Ok(())
    }
}
