//! Chunk streams: one reply written as a run of chunks.

use agdx_wire::{
    AgentEnvelope, ChannelId, ContentType, ErrorBody, IntoBody, StreamPurpose, TokenUsage,
};

use super::{Outgoing, ProduceError, Producer, ReplyRecorder, ReplyTo};
use crate::ids::{new_channel_id, new_record_id};

/// Writes one chunk stream: an opening chunk naming the purpose, middle
/// chunks, then `finish` or `fail`. Sequences count from 0.
///
/// With [`batch`](ChunkWriter::batch) above 1, chunks are held back and
/// appended together (fewer appends, later delivery).
pub struct ChunkWriter {
    producer: Producer,
    to: ReplyTo,
    channel: ChannelId,
    purpose: StreamPurpose,
    deadline_micros: Option<u64>,
    content_type: ContentType,
    next_sequence: u64,
    batch: usize,
    pending: Vec<Outgoing>,
    recorder: Option<ReplyRecorder>,
}

impl ChunkWriter {
    /// A new stream on a channel of its own, as [`Producer::stream`] opens it.
    pub(super) fn new(
        producer: Producer,
        to: ReplyTo,
        purpose: StreamPurpose,
        deadline_micros: Option<u64>,
    ) -> Self {
        Self {
            producer,
            to,
            channel: new_channel_id(),
            purpose,
            deadline_micros,
            content_type: ContentType::Raw,
            next_sequence: 0,
            batch: 1,
            pending: Vec::new(),
            recorder: None,
        }
    }

    /// The stream's channel id.
    pub fn channel(&self) -> ChannelId {
        self.channel
    }

    /// Holds back up to `chunks` chunks per append (1: append each at once).
    pub fn batch(mut self, chunks: usize) -> Self {
        self.batch = chunks.max(1);
        self
    }

    /// Names the codec of the chunk bodies.
    pub fn content_type(mut self, content_type: ContentType) -> Self {
        self.content_type = content_type;
        self
    }

    pub(crate) fn record_into(mut self, recorder: ReplyRecorder) -> Self {
        self.recorder = Some(recorder);
        self
    }

    /// The chunk with the next sequence number, addressed and validated.
    fn chunk(
        &self,
        body: impl IntoBody,
        last: Option<(Option<&str>, Option<TokenUsage>)>,
    ) -> Result<AgentEnvelope, ProduceError> {
        let source = self.producer.inner.source.clone();
        let (conversation, correlation, channel) =
            (self.to.conversation, self.to.correlation, self.channel);
        let chunk = match std::num::NonZeroU64::new(self.next_sequence) {
            None => {
                let open = AgentEnvelope::chunk_open(
                    conversation,
                    source,
                    correlation,
                    channel,
                    self.purpose,
                    body,
                );
                match self.deadline_micros {
                    Some(deadline) => open.with_deadline_micros(deadline),
                    None => open,
                }
            }
            Some(seq) => {
                AgentEnvelope::chunk(conversation, source, correlation, channel, seq, body)
            }
        };
        let chunk = match last {
            Some((finish_reason, usage)) => chunk.as_last(finish_reason, usage),
            None => chunk,
        };
        let chunk = self.to.address(chunk);
        // Checked here, before the sequence number is used up, so a bad
        // chunk leaves no gap in the stream.
        chunk.validate()?;
        Ok(chunk)
    }

    async fn push(
        &mut self,
        envelope: AgentEnvelope,
        content_type: ContentType,
        force: bool,
    ) -> Result<(), ProduceError> {
        let outgoing = Outgoing::new(envelope, content_type);
        if let Some(recorder) = &self.recorder {
            crate::log::lock(recorder).push(outgoing.clone());
        }
        self.pending.push(outgoing);
        if force || self.pending.len() >= self.batch {
            self.flush().await?;
        }
        Ok(())
    }

    /// Appends the chunks held back so far. When the append fails they stay
    /// held back, to go out with the next flush.
    pub async fn flush(&mut self) -> Result<(), ProduceError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let responses = &self.producer.inner.topology.responses;
        self.producer
            .publish(responses, self.pending.clone())
            .await?;
        self.pending.clear();
        Ok(())
    }

    /// Sends the next chunk (non-empty).
    pub async fn send(&mut self, body: impl IntoBody) -> Result<(), ProduceError> {
        let chunk = self.chunk(body, None)?;
        self.next_sequence += 1;
        self.push(chunk, self.content_type, false).await
    }

    /// Ends the stream with a last chunk carrying `body` (may be empty), the
    /// finish reason and usage, and appends everything held back.
    pub async fn finish(
        mut self,
        body: impl IntoBody,
        finish_reason: Option<&str>,
        usage: Option<TokenUsage>,
    ) -> Result<(), ProduceError> {
        let last = self.chunk(body, Some((finish_reason, usage)))?;
        self.push(last, self.content_type, true).await
    }

    /// Ends the stream with a last chunk carrying `body` (may be empty) and
    /// `fields` (finish reason, usage, tool, metadata; a chunk carries no
    /// task state), and appends everything held back.
    pub async fn finish_with(
        mut self,
        body: impl IntoBody,
        fields: super::ReplyFields,
    ) -> Result<(), ProduceError> {
        let usage = fields.usage;
        let reason = fields.finish_reason.clone();
        let mut last = self.chunk(body, Some((reason.as_deref(), usage)))?;
        fields.apply_to(&mut last);
        last.validate()?;
        self.push(last, self.content_type, true).await
    }

    /// Ends the stream with an `error` carrying the channel.
    pub async fn fail(mut self, error: &ErrorBody) -> Result<(), ProduceError> {
        let envelope = AgentEnvelope::error(
            new_record_id(),
            self.to.conversation,
            self.producer.inner.source.clone(),
            self.to.correlation,
            error,
        )
        .with_stream_terminal(self.channel, self.next_sequence);
        let envelope = self.to.address(envelope);
        self.push(envelope, ContentType::Cbor, true).await
    }
}
