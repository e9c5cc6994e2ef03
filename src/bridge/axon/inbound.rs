//! AXON → the log: a `request` becomes an AGDX command and its reply the
//! AXON answer; any other message becomes an AGDX event.
//!
//! What is shared goes into envelope fields, what is AXON's stays in the
//! body byte for byte:
//!
//! | AXON | AGDX command / event |
//! | --- | --- |
//! | `payload` (its exact bytes) | `body`, content type `json` |
//! | `payload.domain` | `operation` (`axon.request` / `axon.message` without one) and the route to `target` |
//! | the authenticated peer | `conversation` (one per peer, so a peer's requests stay in order), metadata `axon.from` |
//! | `id` | metadata `axon.id` |
//! | kind `response`, `error`, unknown (one-way) | an event with operation `axon.response`, `axon.error`, `axon.unknown` |
//! | the bridge's wait | `deadline` (a worker that takes the command up later drops it) |
//!
//! The reply: a `response` whose body is a JSON object becomes the AXON
//! `response` payload; an AGDX `error` becomes an AXON `error` with
//! `{code, message, retryable}` from the ErrorBody; no reply in time is
//! `timeout` (retryable).

use std::sync::Arc;
use std::time::Duration;

use agdx_wire::{
    AgentEnvelope, AgentId, ContentType, ConversationId, Metadata, TEXT_FIELD_MAX_LEN,
};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::envelope::{Envelope, EnvelopeError, Kind, is_object};
use super::identity::AxonId;
use super::routes::Routes;
use super::transport::Inbound;
use super::{META_AXON_FROM, META_AXON_ID, META_AXON_KIND};
use crate::ask::{Answer, AskError, Requester};
use crate::clock::SharedClock;
use crate::ids::new_record_id;
use crate::producer::{CommandRequest, Outgoing};

/// The operation of a request without a domain.
pub const REQUEST_OPERATION: &str = "axon.request";
/// The operation of a message without a domain.
pub const MESSAGE_OPERATION: &str = "axon.message";

/// Writes what AXON peers send onto the log.
pub(crate) struct ToLog {
    pub requester: Arc<Requester>,
    pub routes: Routes,
    pub timeout: Duration,
    pub bridge_id: String,
    pub clock: SharedClock,
}

#[async_trait]
impl Inbound for ToLog {
    async fn request(&self, from: &AxonId, request: Envelope) -> Envelope {
        let domain = domain_of(&request.payload);
        let Some(agent) = self.routes.agent_for(domain.as_deref()) else {
            let about = match &domain {
                Some(domain) => format!("for domain '{domain}'"),
                None => "for a request without a payload.domain".to_owned(),
            };
            let message = format!(
                "no application handler registered for request '{}': this AGDX bridge has no route {about} ({}); put a routed domain in payload.domain",
                request.id, self.routes
            );
            return Envelope::error_reply(request.id, "unhandled", &message, false);
        };
        let operation = domain.as_deref().unwrap_or(REQUEST_OPERATION);
        if operation.len() > TEXT_FIELD_MAX_LEN {
            let message = format!(
                "payload.domain is {} bytes; AGDX operations are at most {TEXT_FIELD_MAX_LEN} bytes: use a shorter domain",
                operation.len()
            );
            return Envelope::error_reply(request.id, "invalid_envelope", &message, false);
        }
        let deadline = self.clock.now_micros() + self.timeout.as_micros() as u64;
        let command = CommandRequest::new(operation, request.payload.get().as_bytes().to_vec())
            .to(agent.clone())
            .content_type(ContentType::Json)
            .conversation(self.conversation(from))
            .deadline_micros(deadline)
            .metadata(metadata(from, &request));
        match self.requester.ask(command, self.timeout).await {
            Ok(Answer::Response(reply)) => response(request.id, agent, &reply.body),
            Ok(Answer::Streamed { body, .. }) => response(request.id, agent, &body),
            Err(AskError::Remote(error)) => {
                let message = error.message.clone().unwrap_or_else(|| {
                    format!(
                        "agent '{agent}' answered with error {} and no message",
                        error.code.name()
                    )
                });
                Envelope::error_reply(request.id, error.code.name(), &message, error.retryable)
            }
            Err(AskError::Timeout { waited, .. }) => {
                let message = format!(
                    "no reply from agent '{agent}' within {} ms: no worker for it answered in time; the request may still be handled later, so retry only if that is safe",
                    waited.as_millis()
                );
                Envelope::error_reply(request.id, "timeout", &message, true)
            }
            Err(error) => {
                tracing::warn!(%error, peer = %from, "an AXON request could not be handed to the log");
                let message = format!("the AGDX bridge could not pass the request on: {error}");
                Envelope::error_reply(request.id, "internal", &message, error.is_retryable())
            }
        }
    }

    async fn message(&self, from: &AxonId, message: Envelope) {
        let domain = domain_of(&message.payload);
        let operation = match message.kind {
            Kind::Message => domain
                .as_deref()
                .filter(|d| d.len() <= TEXT_FIELD_MAX_LEN)
                .unwrap_or(MESSAGE_OPERATION)
                .to_owned(),
            other => format!("axon.{}", other.as_str()),
        };
        let producer = self.requester.producer();
        let mut event = AgentEnvelope::event(
            new_record_id(),
            self.conversation(from),
            producer.source().clone(),
            message.payload.get().as_bytes().to_vec(),
        )
        .with_operation(operation)
        .with_metadata(metadata(from, &message).with(META_AXON_KIND, message.kind.as_str()));
        if let Some(agent) = self.routes.agent_for(domain.as_deref()) {
            event = event.with_target(agent.clone());
        }
        let commands = &producer.topology().commands;
        let outgoing = Outgoing::new(event, ContentType::Json);
        if let Err(error) = producer.publish_one(commands, outgoing).await {
            tracing::error!(%error, peer = %from, id = %message.id, "an AXON message could not be written to the log; it is lost (AXON messages are not acknowledged)");
        }
    }
}

impl ToLog {
    /// One conversation per peer (and bridge), so its requests keep their
    /// order on the log.
    fn conversation(&self, peer: &AxonId) -> ConversationId {
        let key = format!("{} {}", self.bridge_id, peer);
        ConversationId::from_u128(xxhash_rust::xxh3::xxh3_128(key.as_bytes()))
    }
}

fn metadata(from: &AxonId, message: &Envelope) -> Metadata {
    Metadata::new()
        .with(META_AXON_FROM, from.as_str())
        .with(META_AXON_ID, message.id.to_string())
}

/// `payload.domain`, when it is a string.
fn domain_of(payload: &RawValue) -> Option<String> {
    #[derive(Deserialize)]
    struct Domain {
        domain: Option<serde_json::Value>,
    }
    let Domain { domain } = serde_json::from_str(payload.get()).ok()?;
    match domain? {
        serde_json::Value::String(domain) => Some(domain),
        _ => None,
    }
}

/// The AXON answer to a reply body: a `response` when the body is a JSON
/// object that fits in a message, else an instructive `error`.
fn response(request: uuid::Uuid, agent: &AgentId, body: &[u8]) -> Envelope {
    let payload = match serde_json::from_slice::<Box<RawValue>>(body) {
        Ok(payload) if is_object(&payload) => payload,
        _ => {
            let message = format!(
                "agent '{agent}' answered with a body that is not a JSON object ({} bytes); AXON payloads are JSON objects: have the handler answer with one, e.g. {{\"message\":\"...\"}}",
                body.len()
            );
            return Envelope::error_reply(request, "internal", &message, false);
        }
    };
    let reply = Envelope::reply(request, Kind::Response, payload);
    match reply.encode() {
        Err(EnvelopeError::TooLarge(size)) => {
            let message = format!(
                "agent '{agent}' answered with {size} bytes, over AXON's {} byte message limit; have it answer with less (or a reference to the data)",
                super::envelope::MAX_MESSAGE_SIZE
            );
            Envelope::error_reply(request, "internal", &message, false)
        }
        _ => reply,
    }
}
