//! What a worker runs for each command: the [`Handler`] trait and its inputs
//! and outputs.

use std::sync::{Arc, Mutex};

use agdx_wire::{
    AgentEnvelope, AgentId, Bytes, ContentType, ErrorBody, ErrorCode, IntoBody, LogPosition,
    StreamPurpose, TaskState,
};
use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::producer::{ChunkWriter, Outgoing, ProduceError, Producer, ReplyFields, ReplyTo};

/// One command (or event) handed to a handler.
#[derive(Clone)]
pub struct Request {
    /// The decoded, validated envelope (boxed: a request moves through
    /// several futures, and a pointer is cheaper to move than the envelope).
    pub envelope: Box<AgentEnvelope>,
    /// Where it sits in the log.
    pub position: LogPosition,
    /// When the log accepted it, epoch microseconds.
    pub timestamp_micros: u64,
    /// The body's codec (`agdx.ct`); for a claim-checked body, the codec
    /// its sender named in the `agdx.ref.ct` metadata (`raw` when none).
    pub content_type: ContentType,
    /// The body, fetched and verified when it was claim-checked. A slice
    /// of the buffer the record was read into, which it keeps alive: copy
    /// it (`Bytes::copy_from_slice`) to keep it beyond the request.
    pub body: Bytes,
    /// Whether the body came through the blob store.
    pub claim_checked: bool,
    /// Which attempt this is, from 1.
    pub attempt: u32,
    pub(crate) producer: Producer,
    pub(crate) reply_to: Option<ReplyTo>,
    pub(crate) fence: Option<u64>,
    pub(crate) recorder: Arc<Mutex<Vec<Outgoing>>>,
    pub(crate) cancel: CancellationToken,
    /// The commands topic the request was read from (`None` outside a pool).
    pub(crate) commands: Option<Arc<crate::log::TopicInfo>>,
}

impl Request {
    /// The requested operation.
    pub fn operation(&self) -> Option<&str> {
        self.envelope.operation.as_deref()
    }

    /// Who sent it (a claim unless signed).
    pub fn source(&self) -> &AgentId {
        &self.envelope.source
    }

    /// The fence token the pool holds the command's partition under
    /// (docs/runtime.md, "Fencing"); `None` outside a pool. An effect that
    /// must not repeat when a paused holder resumes passes it to a store
    /// that refuses an effect whose fence is below the highest it accepted.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// Where replies go; `None` for an event (nobody waits).
    pub fn reply_to(&self) -> Option<&ReplyTo> {
        self.reply_to.as_ref()
    }

    /// Opens a chunk stream answering this command; return
    /// [`HandlerReply::Streamed`] once it is finished. `None` for an event.
    pub fn stream(
        &self,
        purpose: StreamPurpose,
        deadline_micros: Option<u64>,
    ) -> Option<ChunkWriter> {
        let to = self.reply_to.as_ref()?;
        Some(
            self.producer
                .stream(to, purpose, deadline_micros)
                .record_into(self.recorder.clone()),
        )
    }

    /// Publishes where the task stands (`status` `task`). No-op for an event.
    pub async fn status(&self, state: TaskState) -> Result<(), ProduceError> {
        match &self.reply_to {
            Some(to) => self.producer.status_task(to, state).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// Completes once the command's sender has cancelled it (see
    /// docs/runtime.md, "Cancellation"). A handler that has something to
    /// clean up or a partial answer to end selects on it; the pool waits
    /// [`WorkerConfig::cancel_grace`](super::WorkerConfig::cancel_grace)
    /// for the handler to return, then stops it. Whatever the handler
    /// returns after a cancel, the command is answered `cancelled`.
    ///
    /// ```
    /// # use agdx::worker::{HandlerError, HandlerReply, Request};
    /// async fn slow(request: Request) -> Result<HandlerReply, HandlerError> {
    ///     tokio::select! {
    ///         () = tokio::time::sleep(std::time::Duration::from_secs(60)) => {
    ///             Ok(HandlerReply::raw("done"))
    ///         }
    ///         () = request.cancelled() => Err(HandlerError::fatal("stopped: cancelled")),
    ///     }
    /// }
    /// ```
    pub async fn cancelled(&self) {
        self.cancel.cancelled().await;
    }

    /// Whether the command's sender has cancelled it (see
    /// [`Request::cancelled`]).
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Asks the command's caller for more input and waits up to `wait` for
    /// it: a `status` `task` `input-required` carrying `prompt` goes to
    /// the caller, who answers with
    /// [`ReplyWatch::provide_input`](crate::ReplyWatch::provide_input) (or
    /// at `agdx ask`'s prompt); then a `status` `task` `working` follows
    /// and the handler goes on with the input's body.
    pub async fn ask_input(
        &self,
        prompt: impl IntoBody,
        wait: std::time::Duration,
    ) -> Result<Bytes, crate::task_states::InputError> {
        use crate::task_states::{InputError, input_arrived};
        let (Some(to), Some(commands)) = (&self.reply_to, &self.commands) else {
            return Err(InputError::NoCaller);
        };
        let mut status = self
            .producer
            .status_task_envelope(to, TaskState::InputRequired);
        status.envelope.body = prompt.into_body();
        status.content_type = ContentType::Raw;
        let responses = &self.producer.topology().responses;
        let sent = self.producer.publish_one(responses, status).await?;
        let arrived = input_arrived(
            self.producer.log(),
            commands,
            self.position.partition,
            self.position.offset + 1,
            (to.correlation, &to.target, sent.record),
        );
        let input = tokio::select! {
            input = tokio::time::timeout(wait, arrived) => match input {
                Ok(input) => input,
                Err(_) => return Err(InputError::TimedOut(wait)),
            },
            () = self.cancelled() => return Err(InputError::Cancelled),
        };
        self.producer.status_task(to, TaskState::Working).await?;
        Ok(input)
    }

    /// Tells the requester the command is still being worked on (a
    /// `status` `progress` carrying `body`, JSON), which also starts its
    /// wait over. No-op for an event.
    pub async fn progress(&self, body: Vec<u8>) -> Result<(), ProduceError> {
        match &self.reply_to {
            Some(to) => self
                .producer
                .progress(to, body, ContentType::Json)
                .await
                .map(|_| ()),
            None => Ok(()),
        }
    }
}

/// What a handler answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HandlerReply {
    /// Reply with a `response` carrying this body (must be non-empty).
    Body {
        /// The response body; claim-checked when the worker's producer has
        /// a [`ClaimCheck`](crate::ClaimCheck) and the body is over its
        /// threshold.
        body: Bytes,
        /// The body's codec.
        content_type: ContentType,
        /// What the response carries beside its body (usage, finish
        /// reason, tool, task state, metadata).
        fields: ReplyFields,
    },
    /// The handler answered with a chunk stream it finished itself (its
    /// final chunk carries the stream's fields: [`ChunkWriter::finish_with`]).
    Streamed,
    /// No reply (the only sensible answer to an event).
    Nothing,
}

impl HandlerReply {
    /// A response with `body` in codec `content_type`.
    pub fn body(body: impl IntoBody, content_type: ContentType) -> Self {
        HandlerReply::Body {
            body: body.into_body(),
            content_type,
            fields: ReplyFields::default(),
        }
    }
    /// A raw-bytes response.
    pub fn raw(body: impl IntoBody) -> Self {
        Self::body(body, ContentType::Raw)
    }
    /// A JSON response.
    pub fn json(body: impl IntoBody) -> Self {
        Self::body(body, ContentType::Json)
    }

    /// The response with `fields` set on it: what a model call cost, why
    /// it ended, the tool involved, where the task stands, metadata. No
    /// effect on a stream (its final chunk carries them) or on no reply.
    ///
    /// ```
    /// use agdx::ReplyFields;
    /// use agdx::wire::TokenUsage;
    /// use agdx::worker::HandlerReply;
    /// let reply = HandlerReply::raw("Paris")
    ///     .with(ReplyFields::default().finish_reason("stop").usage(TokenUsage::new(40, 2)));
    /// ```
    pub fn with(mut self, added: ReplyFields) -> Self {
        if let HandlerReply::Body { fields, .. } = &mut self {
            *fields = added;
        }
        self
    }
}

/// A handler's failure.
///
/// Retryable failures are tried again with backoff and dead-lettered
/// `retry_exhausted` when attempts run out; others are dead-lettered
/// `rejected` at once. Either way the requester gets an `error` reply.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HandlerError {
    /// The error code the requester sees.
    pub code: ErrorCode,
    /// What went wrong, for people; sent in the error reply.
    pub message: String,
    /// Whether trying again may pass: the worker retries with backoff, and
    /// the error reply tells the requester so.
    pub retryable: bool,
}

impl HandlerError {
    /// A failure that may pass if tried again (code `internal`).
    pub fn retryable(message: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::Internal,
            message: message.into(),
            retryable: true,
        }
    }
    /// A failure that will not pass by trying again (code `invalid_request`).
    pub fn fatal(message: impl Into<String>) -> Self {
        Self {
            code: ErrorCode::InvalidRequest,
            message: message.into(),
            retryable: false,
        }
    }
    /// Sets the error code the requester sees.
    pub fn with_code(mut self, code: ErrorCode) -> Self {
        self.code = code;
        self
    }
    /// The error body of the reply.
    pub fn to_body(&self) -> ErrorBody {
        ErrorBody::new(self.code)
            .with_message(self.message.clone())
            .retryable(self.retryable)
    }
}

/// Handles the commands of one operation (or of all, as a fallback).
///
/// ```
/// use agdx::worker::{Handler, HandlerError, HandlerReply, Request};
/// struct Upper;
/// #[async_trait::async_trait]
/// impl Handler for Upper {
///     async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError> {
///         Ok(HandlerReply::raw(request.body.to_ascii_uppercase()))
///     }
/// }
/// ```
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Handles one command; called again on a retryable failure.
    async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError>;
}

/// Answers every command with its own body.
#[derive(Debug, Clone, Copy, Default)]
pub struct EchoHandler;

#[async_trait]
impl Handler for EchoHandler {
    async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError> {
        Ok(HandlerReply::body(request.body, request.content_type))
    }
}

/// A handler made from an async closure.
///
/// ```
/// use agdx::worker::{HandlerReply, handler_fn};
/// let shout = handler_fn(|request| async move { Ok(HandlerReply::raw(request.body.to_ascii_uppercase())) });
/// ```
pub fn handler_fn<F, Fut>(f: F) -> FnHandler<F>
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<HandlerReply, HandlerError>> + Send + 'static,
{
    FnHandler(f)
}

/// See [`handler_fn`].
pub struct FnHandler<F>(F);

#[async_trait]
impl<F, Fut> Handler for FnHandler<F>
where
    F: Fn(Request) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<HandlerReply, HandlerError>> + Send + 'static,
{
    async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError> {
        (self.0)(request).await
    }
}

/// A shared handler serves several operations.
#[async_trait]
impl<H: Handler + ?Sized> Handler for std::sync::Arc<H> {
    async fn handle(&self, request: Request) -> Result<HandlerReply, HandlerError> {
        (**self).handle(request).await
    }
}
