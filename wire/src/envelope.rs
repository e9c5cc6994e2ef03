//! The agent envelope: the one CBOR map every agent record carries.

use bytes::Bytes;

use crate::agent_id::{AgentId, IdempotencyKey};
use crate::cbor::decode_exact_shared;
use crate::dictionary::TaskState;
use crate::error::DecodeError;
use crate::id::{ChannelId, ConversationId, CorrelationId, RecordId};
use crate::kind::Kind;
use crate::metadata::Metadata;
use crate::payload::wire_payload;
use crate::payload::{Codec, WireError};
use crate::position::LogPosition;
use crate::signature::Signature;
use crate::table::{
    Agent, Bool, Capsule, Dict, Key, KindName, Meta, Opaque, Shown, Text, Uint, wire_struct,
};
use crate::usage::TokenUsage;

wire_struct! {
    /// The agent envelope: what every agent record's payload is.
    ///
    /// Fields are in wire declaration order. Build envelopes with the typed
    /// constructors ([`command`](Self::command), [`response`](Self::response),
    /// [`event`](Self::event), [`chunk_open`](Self::chunk_open),
    /// [`chunk`](Self::chunk), [`chunk_last`](Self::chunk_last),
    /// [`status_task`](Self::status_task), [`status`](Self::status),
    /// [`error`](Self::error)) and the `with_*` refinements; they produce
    /// envelopes that pass [`validate`](Self::validate).
    ///
    /// ```
    /// use agdx_wire::*;
    /// let cmd = AgentEnvelope::command(
    ///     RecordId::from_u128(1),
    ///     ConversationId::from_u128(2),
    ///     AgentId::new("planner")?,
    ///     CorrelationId::from_u128(3),
    ///     Some("summarize"),
    ///     b"summarize incident 42".to_vec(),
    /// )
    /// .with_target(AgentId::new("summarizer")?);
    /// cmd.validate()?;
    /// let bytes = cmd.encode();
    /// assert_eq!(AgentEnvelope::decode_valid(&bytes)?, cmd);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[derive(Debug, Clone, PartialEq, Eq)]
    pub struct AgentEnvelope {
        cbor: "envelope",
        json: "envelope",
        keys: field,
        // Key names, ids and positions take up to some 350 bytes beside the
        // variable fields; a guess short of the whole grows the buffer (a
        // copy of the body) on every encode.
        size_hint: |e| 384
            + e.body.len()
            + e.source.as_str().len()
            + e.target.as_ref().map_or(0, |t| t.as_str().len())
            + e.idempotency_key.as_ref().map_or(0, |k| k.as_str().len())
            + [&e.operation, &e.tool, &e.finish_reason]
                .into_iter()
                .map(|text| text.as_ref().map_or(0, String::len))
                .sum::<usize>()
            + e.usage.as_ref().map_or(0, |_| 192)
            + e.signature.as_ref().map_or(0, |_| 160);
        /// What the envelope is; decides which fields are required or forbidden.
        pub kind: Kind [KIND = "kind", KindName, required],
        /// This record's id (required except on chunks).
        pub record: Option<RecordId> [RECORD = "record", Shown, optional],
        /// The conversation: the partition key and the trace identity.
        pub conversation: ConversationId [CONVERSATION = "conversation", Shown, required],
        /// Who wrote it; a claim unless signed.
        pub source: AgentId [SOURCE = "source", Agent, required],
        /// Who it is for; a routing refinement, never access control.
        pub target: Option<AgentId> [TARGET = "target", Agent, optional],
        /// The causal parent's record id.
        pub cause: Option<RecordId> [CAUSE = "cause", Shown, optional],
        /// The causal parent's log position (binding-local).
        pub cause_at: Option<LogPosition> [CAUSE_AT = "cause_at", Shown, optional],
        /// Pairs a request with its replies.
        pub correlation: Option<CorrelationId> [CORRELATION = "correlation", Shown, optional],
        /// Groups a chunk stream.
        pub channel: Option<ChannelId> [CHANNEL = "channel", Shown, optional],
        /// Makes a command's effect happen once.
        pub idempotency_key: Option<IdempotencyKey>
            [IDEMPOTENCY_KEY = "idempotency_key", Key, optional],
        /// Absolute deadline, epoch microseconds.
        pub deadline_micros: Option<u64> [DEADLINE_MICROS = "deadline_micros", Uint, optional],
        /// Chunk order within a channel.
        pub sequence: Option<u64> [SEQUENCE = "sequence", Uint, optional],
        /// Marks a stream's final chunk (or a final status); omitted when false.
        pub last: bool [LAST = "last", Bool, default],
        /// Why a response or stream ended (`stop`, `length`, `tool_call`, ...).
        pub finish_reason: Option<String> [FINISH_REASON = "finish_reason", Text, optional],
        /// Where a task stands.
        pub task_state: Option<TaskState> [TASK_STATE = "task_state", Dict, optional],
        /// What is asked or reported; open except on `status` and opening chunks.
        pub operation: Option<String> [OPERATION = "operation", Text, optional],
        /// The tool involved.
        pub tool: Option<String> [TOOL = "tool", Text, optional],
        /// Tokens spent (advisory accounting).
        pub usage: Option<TokenUsage> [USAGE = "usage", Capsule, optional],
        /// Small routing and policy facts.
        pub metadata: Option<Metadata> [METADATA = "metadata", Meta, optional],
        /// Features the receiver must implement (bitset); omitted when 0.
        pub must_understand: u64 [MUST_UNDERSTAND = "must_understand", Uint, default],
        /// The content, its codec named out of band (`agdx.ct`); omitted when
        /// empty. In JSON, an error's body shows as its ErrorBody when it is one.
        pub body: Bytes [BODY = "body", Opaque, default],
        /// A signature over the rest of the envelope.
        pub signature: Option<Signature> [SIGNATURE = "signature", Capsule, optional],
    }
}

impl AgentEnvelope {
    /// An envelope of `kind` with only the always-required fields set.
    /// Prefer the typed constructors, which fill what each kind needs.
    pub fn bare(kind: Kind, conversation: ConversationId, source: AgentId) -> Self {
        Self {
            kind,
            record: None,
            conversation,
            source,
            target: None,
            cause: None,
            cause_at: None,
            correlation: None,
            channel: None,
            idempotency_key: None,
            deadline_micros: None,
            sequence: None,
            last: false,
            finish_reason: None,
            task_state: None,
            operation: None,
            tool: None,
            usage: None,
            metadata: None,
            must_understand: 0,
            body: Bytes::new(),
            signature: None,
        }
    }

    /// Whether this envelope needs a feature outside `understood`; a
    /// receiver must reject it (dead-letter reason `rejected`).
    pub fn requires_unknown_features(&self, understood: u64) -> bool {
        self.must_understand & !understood != 0
    }

    /// [`decode`](Self::decode) from a shared buffer: the body is a slice
    /// of `bytes` (it keeps the whole buffer alive while held), not a copy.
    ///
    /// ```
    /// use agdx_wire::*;
    /// let cmd = AgentEnvelope::command(
    ///     RecordId::from_u128(1),
    ///     ConversationId::from_u128(2),
    ///     AgentId::new("shop")?,
    ///     CorrelationId::from_u128(3),
    ///     Some("charge"),
    ///     &b"{\"cents\":250}"[..],
    /// );
    /// let payload = Bytes::from(cmd.encode());
    /// let decoded = AgentEnvelope::decode_shared(&payload)?;
    /// assert_eq!(decoded, cmd);
    /// assert!(payload.as_ptr_range().contains(&decoded.body.as_ptr()));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn decode_shared(bytes: &Bytes) -> Result<Self, DecodeError> {
        decode_exact_shared(bytes, <Self as Codec>::read)
    }

    /// [`decode_shared`](Self::decode_shared), then
    /// [`validate`](Self::validate).
    pub fn decode_valid_shared(bytes: &Bytes) -> Result<Self, WireError> {
        let envelope = Self::decode_shared(bytes)?;
        envelope.validate()?;
        Ok(envelope)
    }
}

wire_payload!(AgentEnvelope, "envelope");

/// An error envelope's body is shown as its ErrorBody when it decodes and
/// re-encodes to the same bytes (else as opaque bytes), and read back from
/// either form; every other body is opaque bytes.
#[cfg(feature = "json")]
mod json_view {
    use super::{AgentEnvelope, field};
    use crate::error_body::ErrorBody;
    use crate::json::value::{bytes_json, nested_from, nested_json};
    use crate::json::{JsonCodec, JsonError, Value};
    use crate::kind::Kind;
    use crate::table::JsonObject;

    impl JsonCodec for AgentEnvelope {
        fn to_json(&self) -> Value {
            let mut json = self.to_json_object();
            if self.kind == Kind::Error
                && !self.body.is_empty()
                && let Value::Object(fields) = &mut json
            {
                fields.insert(field::BODY.to_owned(), nested_json::<ErrorBody>(&self.body));
            }
            json
        }

        fn from_json(mut json: Value) -> Result<Self, JsonError> {
            let is_error =
                json.get(field::KIND).and_then(Value::as_str) == Some(Kind::Error.as_str());
            if is_error && let Some(body) = json.get_mut(field::BODY) {
                let bytes =
                    nested_from::<ErrorBody>(body.take()).map_err(|e| e.within(field::BODY))?;
                *body = bytes_json(&bytes);
            }
            Self::from_json_object(json)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::{ChannelId, CorrelationId, RecordId};
    use crate::payload::Codec;

    /// An envelope with every fixed-size field set encodes into the buffer
    /// its size hint reserves, without growing it.
    #[test]
    fn a_full_envelope_encodes_within_its_size_hint() {
        let agent = |name: &str| AgentId::new(name).unwrap();
        let mut envelope = AgentEnvelope::response(
            RecordId::from_u128(u128::MAX),
            ConversationId::from_u128(u128::MAX),
            agent(&"s".repeat(200)),
            CorrelationId::from_u128(u128::MAX),
            vec![b'x'; 1024],
        )
        .with_target(agent(&"t".repeat(200)))
        .with_cause(
            RecordId::from_u128(u128::MAX),
            Some(LogPosition {
                stream: u32::MAX,
                topic: u32::MAX,
                partition: u32::MAX,
                offset: u64::MAX,
            }),
        )
        .with_channel(ChannelId::from_u128(u128::MAX))
        .with_idempotency_key(IdempotencyKey::new("k".repeat(64)).unwrap())
        .with_deadline_micros(u64::MAX)
        .with_finish_reason("stop")
        .with_operation("summarize")
        .with_usage(TokenUsage {
            input_tokens: u64::MAX,
            output_tokens: u64::MAX,
            cache_creation_input_tokens: Some(u64::MAX),
            cache_read_input_tokens: Some(u64::MAX),
            reasoning_output_tokens: Some(u64::MAX),
        })
        .with_must_understand(u64::MAX);
        envelope.sequence = Some(u64::MAX);
        envelope.task_state = Some(TaskState::Working);
        let encoded = envelope.encode();
        assert!(
            encoded.len() <= envelope.size_hint(),
            "{} bytes encoded, {} hinted",
            encoded.len(),
            envelope.size_hint()
        );
    }

    /// Keys are matched as bytes; a key no field has is skipped with its
    /// value when it is text, and refused when it is not UTF-8.
    #[test]
    fn unknown_keys_are_skipped_unless_they_are_not_utf8() {
        let envelope = AgentEnvelope::event(
            RecordId::from_u128(1),
            ConversationId::from_u128(7),
            AgentId::new("ledger").unwrap(),
            b"paid",
        );
        let with_entry = |key: &[u8]| {
            let mut bytes = envelope.encode();
            // A small map head (0xa0 | n) counts the entries; one more follows.
            assert!(bytes[0] > 0xa0 && bytes[0] < 0xb7);
            bytes[0] += 1;
            bytes.push(0x60 | key.len() as u8);
            bytes.extend_from_slice(key);
            bytes.push(0x00);
            bytes
        };
        assert_eq!(
            AgentEnvelope::decode(&with_entry(b"x-later")),
            Ok(envelope.clone())
        );
        assert_eq!(
            AgentEnvelope::decode(&with_entry(&[b'k', 0xff, b'd'])),
            Err(DecodeError::InvalidUtf8 { field: "map key" })
        );
        // A known key's bytes with one changed is an unknown key, not it.
        assert_eq!(AgentEnvelope::decode(&with_entry(b"kinc")), Ok(envelope));
    }

    /// Decoded from a shared buffer, an envelope is the one decoded by
    /// copying, its body a slice of the buffer; an empty body too.
    #[test]
    fn a_shared_decode_slices_the_body_out_of_the_buffer() {
        let conversation = ConversationId::from_u128(7);
        let source = AgentId::new("ledger").unwrap();
        let mut envelope =
            AgentEnvelope::event(RecordId::from_u128(1), conversation, source, b"paid");
        let encoded = Bytes::from(envelope.encode());
        let shared = AgentEnvelope::decode_valid_shared(&encoded).unwrap();
        assert_eq!(shared, AgentEnvelope::decode_valid(&encoded).unwrap());
        let within = encoded.as_ptr_range();
        assert!(
            within.contains(&shared.body.as_ptr()),
            "the body was copied"
        );
        assert_eq!(&encoded[encoded.len() - 4..], &shared.body[..]);

        envelope.body = Bytes::new();
        let encoded = Bytes::from(envelope.encode());
        assert_eq!(AgentEnvelope::decode_shared(&encoded).unwrap(), envelope);
        let mut truncated = encoded.clone();
        truncated.truncate(encoded.len() - 1);
        assert_eq!(
            AgentEnvelope::decode_shared(&truncated),
            AgentEnvelope::decode(&truncated)
        );
    }
}
