//! The log → AXON: the bridge is the worker of an exposed agent and hands
//! what is addressed to it to an AXON peer.
//!
//! A command `--to AGENT` becomes an AXON `request` whose payload is the
//! command body (it must be a JSON object); the peer's `response` payload
//! is the AGDX reply body (content type `json`), its `error` the AGDX
//! error. An event `--to AGENT` becomes an AXON `message`. What is not
//! addressed to AGENT is left to the agents it is for.
//!
//! A record that already carries this bridge's id in `bridge_hops` came
//! through this bridge before: forwarding it again would loop, so it is
//! refused (non-retryable, so the pool dead-letters it `rejected` and
//! answers the error).

use std::sync::Arc;
use std::time::Duration;

use agdx_wire::{ErrorCode, Kind as AgdxKind};
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::envelope::{EnvelopeError, Kind, MAX_MESSAGE_SIZE, is_object};
use super::identity::AxonId;
use super::transport::{SendError, Transport};
use crate::clock::SharedClock;
use crate::worker::{Handler, HandlerError, HandlerReply, Request};

/// Hands an exposed agent's commands and events to its AXON peer.
pub(crate) struct ToAxon {
    pub transport: Arc<Transport>,
    pub peer: AxonId,
    pub bridge_id: String,
    pub timeout: Duration,
    pub clock: SharedClock,
}

#[async_trait]
impl Handler for ToAxon {
    async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError> {
        let envelope = &request.envelope;
        let agent = request.producer.source();
        if envelope.target.as_ref() != Some(agent) {
            return Ok(HandlerReply::Nothing);
        }
        if envelope
            .metadata
            .as_ref()
            .is_some_and(|m| m.has_bridge_hop(&self.bridge_id))
        {
            return Err(HandlerError::fatal(format!(
                "refused: this record already passed through bridge '{}' (its bridge_hops name it), so handing it to AXON peer {} again would loop; address it to an agent on the log instead",
                self.bridge_id, self.peer
            )));
        }
        let payload = json_object(&request.body)?;
        if envelope.kind == AgdxKind::Event {
            self.transport
                .message(&self.peer, payload)
                .await
                .map_err(|e| self.failed(e))?;
            return Ok(HandlerReply::Nothing);
        }
        let timeout = match envelope.deadline_micros {
            Some(deadline) => {
                Duration::from_micros(deadline.saturating_sub(self.clock.now_micros()))
                    .min(self.timeout)
            }
            None => self.timeout,
        };
        let reply = self
            .transport
            .request(&self.peer, payload, timeout)
            .await
            .map_err(|e| self.failed(e))?;
        match reply.kind {
            Kind::Response => Ok(HandlerReply::json(reply.payload.get().as_bytes().to_vec())),
            _ => Err(self.answered_error(&reply.payload)),
        }
    }
}

impl ToAxon {
    /// The AGDX error for an AXON `error` payload (conventionally
    /// `{code, message, retryable}`); the AXON code is kept in the message.
    fn answered_error(&self, payload: &RawValue) -> HandlerError {
        #[derive(Deserialize, Default)]
        struct ErrorPayload {
            code: Option<serde_json::Value>,
            message: Option<serde_json::Value>,
            retryable: Option<serde_json::Value>,
        }
        let fields: ErrorPayload = serde_json::from_str(payload.get()).unwrap_or_default();
        let code = fields
            .code
            .as_ref()
            .and_then(|c| c.as_str())
            .unwrap_or("internal");
        let message = fields
            .message
            .as_ref()
            .and_then(|m| m.as_str())
            .unwrap_or("(no message)");
        HandlerError {
            code: error_code(code),
            message: format!("AXON peer {} answered error '{code}': {message}", self.peer),
            retryable: fields.retryable.and_then(|r| r.as_bool()).unwrap_or(false),
        }
    }

    /// The AGDX error for a request that did not get through.
    fn failed(&self, error: SendError) -> HandlerError {
        match error {
            SendError::Outgoing(EnvelopeError::TooLarge(size)) => HandlerError::fatal(format!(
                "the command body makes an AXON message of {size} bytes, over AXON's {MAX_MESSAGE_SIZE} byte limit; send less per command"
            )),
            SendError::Timeout { waited, .. } => HandlerError {
                code: ErrorCode::DeadlineExceeded,
                message: format!(
                    "AXON peer {} did not answer within {waited:?}; the request may still have been handled there, so it is not retried: ask again if that is safe",
                    self.peer
                ),
                retryable: false,
            },
            other => HandlerError {
                code: ErrorCode::Internal,
                retryable: other.is_retryable(),
                message: other.to_string(),
            },
        }
    }
}

/// The closest AGDX error code to an AXON one; AGDX's own names pass
/// through (another AGDX bridge answers with them).
fn error_code(axon: &str) -> ErrorCode {
    match axon {
        "unhandled" | "unknown_kind" => ErrorCode::Unsupported,
        "timeout" => ErrorCode::DeadlineExceeded,
        "invalid_envelope" => ErrorCode::InvalidRequest,
        other => other.parse().unwrap_or(ErrorCode::Internal),
    }
}

/// The command body as an AXON payload, refused unless it is a JSON object.
fn json_object(body: &[u8]) -> Result<Box<RawValue>, HandlerError> {
    let hint = "AXON payloads are JSON objects: send one, e.g. {\"message\":\"hi\"} with content type json";
    let payload: Box<RawValue> = serde_json::from_slice(body).map_err(|e| {
        HandlerError::fatal(format!(
            "invalid_input: the command body is not JSON ({e}); {hint}"
        ))
    })?;
    if !is_object(&payload) {
        return Err(HandlerError::fatal(format!(
            "invalid_input: the command body is JSON but not an object; {hint}"
        )));
    }
    Ok(payload)
}
