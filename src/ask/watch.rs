//! Following the replies to one sent command.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agdx_wire::{AgentEnvelope, AgentId, ChannelId, ContentType, CorrelationId, Kind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::{AskError, Reply, ReplyEvent, WaiterGuard};
use crate::cards::WorkerSeen;
use crate::claim_check::resolve_body;
use crate::clock::SharedClock;
use crate::fence::{Fences, fence_of};
use crate::producer::{Producer, Sent};
use crate::reassembly::{StreamAssembler, StreamCounters, StreamEvent, error_of};
use crate::record::content_type_of;
use crate::trust::Verifier;

/// The replies to one sent command, in log order.
pub struct ReplyWatch {
    pub(super) rx: mpsc::UnboundedReceiver<(AgentEnvelope, crate::log::LogRecord)>,
    pub(super) _guard: WaiterGuard,
    pub(super) sent: Sent,
    pub(super) target: Option<AgentId>,
    pub(super) operation: String,
    pub(super) correlation: CorrelationId,
    pub(super) sent_at: Instant,
    pub(super) clock: SharedClock,
    pub(super) producer: Producer,
    pub(super) verifier: Option<Verifier>,
    pub(super) unverified: u64,
    pub(super) unverified_total: Arc<AtomicU64>,
    pub(super) fences: Arc<Fences>,
    pub(super) fenced: u64,
    pub(super) stream: Option<StreamAssembler>,
    pub(super) ended: bool,
    pub(super) pending: Vec<ReplyEvent>,
}

impl ReplyWatch {
    /// What was sent.
    pub fn sent(&self) -> &Sent {
        &self.sent
    }

    /// Cancels the watched command ([`crate::Producer::cancel`]); its
    /// answer, an `error` `cancelled`, still arrives on this watch.
    pub async fn cancel(&self) -> Result<Sent, AskError> {
        Ok(self
            .producer
            .cancel(&self.sent, self.target.as_ref())
            .await?)
    }

    /// Answers the watched command's handler, which asked for input (a
    /// `status` `task` `input-required`, its body the prompt, reported as
    /// `prompt`): a command in the same conversation, caused by the
    /// prompt, carrying [`INPUT_FOR_KEY`](crate::INPUT_FOR_KEY). The
    /// handler goes on with `input` as its answer.
    pub async fn provide_input(
        &self,
        prompt: &super::Reply,
        input: Vec<u8>,
    ) -> Result<Sent, AskError> {
        send_input(
            &self.producer,
            (self.sent.conversation, self.correlation),
            self.target.as_ref(),
            (prompt.envelope.record, prompt.position),
            input,
        )
        .await
    }

    /// Replies to this command ignored because they did not verify.
    pub fn unverified(&self) -> u64 {
        self.unverified
    }

    /// Replies to this command ignored because a newer holder of the
    /// answering partition had fenced their writer.
    pub fn fenced(&self) -> u64 {
        self.fenced
    }

    /// The reply stream's counters, once a stream was seen.
    pub fn stream_counters(&self) -> Option<StreamCounters> {
        self.stream.as_ref().map(StreamAssembler::counters)
    }

    /// The reply stream's channel, once a stream was seen.
    pub fn stream_channel(&self) -> Option<ChannelId> {
        self.stream.as_ref().map(StreamAssembler::channel)
    }

    /// The next reply event, waiting at most `timeout`.
    pub async fn next(&mut self, timeout: Duration) -> Result<ReplyEvent, AskError> {
        self.next_until(instant_after(timeout)).await
    }

    /// The next reply event, waiting until `deadline`. After a terminal
    /// event there is none: the call reads (and counts as late) whatever
    /// still arrives until `deadline`, then times out.
    pub async fn next_until(&mut self, deadline: Instant) -> Result<ReplyEvent, AskError> {
        loop {
            if !self.pending.is_empty() {
                return Ok(self.pending.remove(0));
            }
            if self.ended {
                // Nothing more will be reported, but records still arriving are
                // read until the deadline so the stream counts them as late.
                while let Ok(Some((envelope, record))) =
                    tokio::time::timeout_at(deadline, self.rx.recv()).await
                {
                    self.apply(envelope, record).await?;
                }
                return Err(self.timeout());
            }
            // Wake at the stream's abandonment deadline even when nothing arrives.
            let wake = self
                .abandon_instant()
                .map_or(deadline, |at| at.min(deadline));
            let received = tokio::time::timeout_at(wake, self.rx.recv()).await;
            match received {
                Ok(Some((envelope, record))) => self.apply(envelope, record).await?,
                Ok(None) => return Err(self.timeout()),
                Err(_) => {
                    if let Some(event) = self
                        .stream
                        .as_mut()
                        .and_then(|s| s.tick(self.clock.now_micros()))
                    {
                        self.ended = true;
                        return Ok(stream_event(event));
                    }
                    if Instant::now() >= deadline {
                        return Err(self.timeout());
                    }
                }
            }
        }
    }

    fn timeout(&self) -> AskError {
        AskError::Timeout {
            target: self.target.clone(),
            operation: self.operation.clone(),
            correlation: self.correlation,
            worker: WorkerSeen::Unchecked,
            log: self.producer.log().describe(),
            waited: Duration::from_millis(
                self.sent_at
                    .elapsed()
                    .as_millis()
                    .try_into()
                    .unwrap_or(u64::MAX),
            ),
        }
    }

    fn abandon_instant(&self) -> Option<Instant> {
        let deadline = self.stream.as_ref()?.deadline_micros()?;
        let now = self.clock.now_micros();
        Some(instant_after(Duration::from_micros(
            deadline.saturating_sub(now).saturating_add(1),
        )))
    }

    async fn apply(
        &mut self,
        envelope: AgentEnvelope,
        record: crate::log::LogRecord,
    ) -> Result<(), AskError> {
        if let Some(verifier) = &self.verifier
            && let Err(why) = admit_reply(verifier, self.target.as_ref(), &envelope, &record)
        {
            self.unverified += 1;
            self.unverified_total.fetch_add(1, Ordering::Relaxed);
            tracing::info!(position = %record.position, %why, "ignoring a reply that does not verify");
            return Ok(());
        }
        // A holder that lost its partition may still write; what it wrote
        // after the newer holder's claim does not count.
        if let Some(fence) = fence_of(&envelope)
            && self.fences.is_stale_lately(fence).await?
        {
            self.fenced += 1;
            tracing::info!(position = %record.position, fence, "ignoring a reply from a partition holder that a newer one has fenced");
            return Ok(());
        }
        if self.ended {
            if let Some(stream) = self.stream.as_mut() {
                stream.push(&envelope, self.clock.now_micros());
            }
            return Ok(());
        }
        let now = self.clock.now_micros();
        match (envelope.kind, envelope.channel) {
            (Kind::Chunk, Some(channel)) | (Kind::Error, Some(channel)) => {
                let envelope = self.with_body_resolved(envelope, &record).await?;
                let restarted = envelope.kind == Kind::Chunk && envelope.sequence == Some(0);
                let stream = match &mut self.stream {
                    Some(stream) if stream.channel() == channel => stream,
                    // A second stream for the same request while the first is
                    // unfinished: its writer started over (a worker that
                    // crashed mid-stream ran the command again). Follow the
                    // new stream; what the old one delivered is void.
                    Some(_) if restarted => {
                        self.pending.push(ReplyEvent::StreamRestarted { channel });
                        self.stream.insert(StreamAssembler::new(channel))
                    }
                    Some(_) => return Ok(()),
                    None => self.stream.insert(StreamAssembler::new(channel)),
                };
                for event in stream.push(&envelope, now) {
                    self.ended |= matches!(event, StreamEvent::End(_));
                    self.pending.push(stream_event(event));
                }
            }
            (Kind::Response, _) => {
                self.ended = true;
                let reply = self.resolve(envelope, record).await?;
                self.pending.push(ReplyEvent::Response(reply));
            }
            (Kind::Error, None) => {
                self.ended = true;
                let envelope = self.with_body_resolved(envelope, &record).await?;
                self.pending.push(ReplyEvent::Error(error_of(&envelope)));
            }
            (Kind::Status, _) => {
                let reply = self.resolve(envelope, record).await?;
                self.pending.push(ReplyEvent::Status(reply));
            }
            _ => {}
        }
        Ok(())
    }

    /// `envelope` with a claim-checked body (content type `ref`) fetched
    /// and verified in place: chunks and error bodies are read by the
    /// stream assembler and as an ErrorBody, which need the bytes
    /// themselves, not the BodyRef.
    async fn with_body_resolved(
        &self,
        mut envelope: AgentEnvelope,
        record: &crate::log::LogRecord,
    ) -> Result<AgentEnvelope, AskError> {
        let content_type = content_type_of(record);
        if content_type == ContentType::Ref {
            envelope.body = resolve_body(self.producer.claim_check(), content_type, &envelope)
                .await?
                .body;
        }
        Ok(envelope)
    }

    async fn resolve(
        &self,
        envelope: AgentEnvelope,
        record: crate::log::LogRecord,
    ) -> Result<Reply, AskError> {
        let content_type = content_type_of(&record);
        let resolved = resolve_body(self.producer.claim_check(), content_type, &envelope).await?;
        Ok(Reply {
            envelope,
            position: record.position,
            timestamp_micros: record.timestamp_micros,
            content_type: resolved.content_type,
            body: resolved.body,
            claim_checked: resolved.claim_checked,
        })
    }
}

/// Whether a reply counts: it verifies, and its signer is the agent asked.
fn admit_reply(
    verifier: &Verifier,
    target: Option<&AgentId>,
    envelope: &AgentEnvelope,
    record: &crate::log::LogRecord,
) -> Result<(), String> {
    let verified = verifier
        .verify_record(envelope, record)
        .map_err(|e| e.to_string())?;
    match target {
        Some(asked) if &verified.principal != asked => Err(format!(
            "signed by '{}', but the command asked '{asked}'",
            verified.principal
        )),
        _ => Ok(()),
    }
}

/// `duration` from now, or a year from now when that is further than a
/// clock can count (a deadline set far off by a peer or a user).
pub(super) fn instant_after(duration: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(duration)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

fn stream_event(event: StreamEvent) -> ReplyEvent {
    match event {
        StreamEvent::Chunk { sequence, body } => ReplyEvent::Chunk { sequence, body },
        StreamEvent::End(end) => ReplyEvent::StreamEnd(end),
    }
}

/// Sends `input` as the answer to the prompt `(record, position)` of the
/// command `(conversation, correlation)` sent to `target`: a command in the
/// same conversation, caused by the prompt, carrying
/// [`INPUT_FOR_KEY`](crate::INPUT_FOR_KEY). Also used by a bridge that
/// read the prompt back from the log rather than watching it arrive.
pub(crate) async fn send_input(
    producer: &Producer,
    (conversation, correlation): (agdx_wire::ConversationId, CorrelationId),
    target: Option<&AgentId>,
    (prompt, position): (Option<agdx_wire::RecordId>, agdx_wire::LogPosition),
    input: Vec<u8>,
) -> Result<Sent, AskError> {
    let mut request = crate::CommandRequest::new(crate::INPUT_OPERATION, input)
        .conversation(conversation)
        .metadata(agdx_wire::Metadata::new().with(crate::INPUT_FOR_KEY, correlation.to_string()));
    if let Some(target) = target {
        request = request.to(target.clone());
    }
    if let Some(record) = prompt {
        request = request.caused_by(record, Some(position));
    }
    let commands = producer
        .commands_topic(target)
        .await
        .map_err(crate::ProduceError::from)?;
    let (outgoing, _) = producer.build_command(request);
    Ok(producer.publish_one(&commands, outgoing).await?)
}
