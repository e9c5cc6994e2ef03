//! Chunk-stream reassembly, per channel (docs/runtime.md §5).
//!
//! Pure and deterministic: the reader passes each record of the channel in
//! log order together with `now`, and gets back the chunks to apply and, once,
//! how the stream ended. The rules:
//!
//! - chunks apply in sequence order from 0, each once; a repeated sequence
//!   is dropped and counted as a duplicate;
//! - a sequence beyond the next expected one ends the stream with a
//!   reader-local [`StreamEnd::Gap`];
//! - the first terminal (a `last` chunk or an `error` carrying the channel)
//!   ends the stream; everything after it is dropped and counted as late;
//! - once `now` passes the opening chunk's deadline the stream ends as
//!   [`StreamEnd::Abandoned`].
//!
//! `Gap` and `Abandoned` are the reader's conclusions; they are never written
//! to the log, and replay shows the raw records.
//!
//! ```
//! use agdx::{StreamAssembler, StreamEnd, StreamEvent};
//! use agdx::wire::*;
//! use std::num::NonZeroU64;
//!
//! let (conv, corr, chan) = (ConversationId::from_u128(1), CorrelationId::from_u128(2), ChannelId::from_u128(3));
//! let me = AgentId::new("writer").unwrap();
//! let open = AgentEnvelope::chunk_open(conv, me.clone(), corr, chan, StreamPurpose::Chat, b"Hel".to_vec());
//! let last = AgentEnvelope::chunk_last(conv, me, corr, chan, NonZeroU64::MIN, b"lo".to_vec(), Some("stop"), None);
//!
//! let mut stream = StreamAssembler::new(chan);
//! assert_eq!(stream.push(&open, 0), vec![StreamEvent::Chunk { sequence: 0, body: b"Hel"[..].into() }]);
//! assert_eq!(stream.push(&open, 0), vec![]); // duplicate, dropped
//! let events = stream.push(&last, 0);
//! assert!(matches!(events.last(), Some(StreamEvent::End(StreamEnd::Finished { .. }))));
//! assert_eq!(stream.counters().duplicates, 1);
//! ```

use agdx_wire::{AgentEnvelope, Bytes, ChannelId, ErrorBody, ErrorCode, Kind, TokenUsage};

/// How a stream ended, as this reader saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// The writer finished it with a `last` chunk.
    Finished {
        /// Why the writer ended it (`stop`, `length`, ...), when it said.
        finish_reason: Option<String>,
        /// The tokens the writer reported spending, when it did.
        usage: Option<TokenUsage>,
    },
    /// The writer ended it with an `error` carrying the channel.
    Failed(ErrorBody),
    /// A chunk is missing: `received` came where `expected` should have.
    Gap {
        /// The sequence that was due next.
        expected: u64,
        /// The sequence that came instead.
        received: u64,
    },
    /// The opening chunk's deadline passed before the terminal arrived.
    Abandoned {
        /// The deadline that passed, epoch microseconds.
        deadline_micros: u64,
    },
}

/// What happened to a stream's records.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StreamCounters {
    /// Chunks applied, in order.
    pub applied: u64,
    /// Chunks dropped because their sequence was already applied.
    pub duplicates: u64,
    /// Records dropped because the stream had already ended.
    pub late: u64,
}

/// One step of a stream, for the reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// The next chunk's bytes (empty chunks are applied but not reported).
    Chunk {
        /// Its position in the stream, from 0.
        sequence: u64,
        /// Its bytes, never empty.
        body: Bytes,
    },
    /// The stream ended; nothing follows.
    End(StreamEnd),
}

/// Reassembles one channel's chunk stream.
#[derive(Debug, Clone)]
pub struct StreamAssembler {
    channel: ChannelId,
    next: u64,
    deadline_micros: Option<u64>,
    ended: bool,
    counters: StreamCounters,
}

impl StreamAssembler {
    /// A reader of `channel`, expecting sequence 0 first.
    pub fn new(channel: ChannelId) -> Self {
        Self {
            channel,
            next: 0,
            deadline_micros: None,
            ended: false,
            counters: StreamCounters::default(),
        }
    }

    /// The channel read.
    pub fn channel(&self) -> ChannelId {
        self.channel
    }

    /// The counters so far.
    pub fn counters(&self) -> StreamCounters {
        self.counters
    }

    /// Whether the stream has ended.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// The abandonment deadline, once the opening chunk was applied.
    pub fn deadline_micros(&self) -> Option<u64> {
        self.deadline_micros
    }

    fn end(&mut self, end: StreamEnd) -> StreamEvent {
        self.ended = true;
        StreamEvent::End(end)
    }

    /// Ends the stream as abandoned when `now_micros` is past its deadline.
    pub fn tick(&mut self, now_micros: u64) -> Option<StreamEvent> {
        match self.deadline_micros {
            Some(deadline_micros) if !self.ended && now_micros > deadline_micros => {
                Some(self.end(StreamEnd::Abandoned { deadline_micros }))
            }
            _ => None,
        }
    }

    /// Applies the next record of the channel (records of other channels and
    /// kinds other than `chunk`/`error` are ignored).
    pub fn push(&mut self, envelope: &AgentEnvelope, now_micros: u64) -> Vec<StreamEvent> {
        if envelope.channel != Some(self.channel)
            || !matches!(envelope.kind, Kind::Chunk | Kind::Error)
        {
            return Vec::new();
        }
        if self.ended {
            self.counters.late += 1;
            return Vec::new();
        }
        if let Some(abandoned) = self.tick(now_micros) {
            self.counters.late += 1;
            return vec![abandoned];
        }
        if envelope.kind == Kind::Error {
            return vec![self.end(StreamEnd::Failed(error_of(envelope)))];
        }
        let sequence = envelope.sequence.unwrap_or(u64::MAX);
        if sequence < self.next {
            self.counters.duplicates += 1;
            return Vec::new();
        }
        if sequence > self.next {
            let expected = self.next;
            return vec![self.end(StreamEnd::Gap {
                expected,
                received: sequence,
            })];
        }
        self.next += 1;
        self.counters.applied += 1;
        if sequence == 0 {
            self.deadline_micros = envelope.deadline_micros;
        }
        let mut events = Vec::with_capacity(2);
        if !envelope.body.is_empty() {
            events.push(StreamEvent::Chunk {
                sequence,
                body: envelope.body.clone(),
            });
        }
        if envelope.last {
            events.push(self.end(StreamEnd::Finished {
                finish_reason: envelope.finish_reason.clone(),
                usage: envelope.usage,
            }));
        }
        events
    }
}

/// The error an `error` envelope carries; an unreadable body becomes an
/// `internal` error that says so.
pub(crate) fn error_of(envelope: &AgentEnvelope) -> ErrorBody {
    ErrorBody::decode_valid(&envelope.body).unwrap_or_else(|e| {
        ErrorBody::new(ErrorCode::Internal).with_message(format!(
            "the reply is an error whose body is unreadable: {e}"
        ))
    })
}
