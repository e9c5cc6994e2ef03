//! The envelope validity matrix: which fields each kind requires, allows
//! or forbids, and the rules that depend on another field. It sits beside
//! the envelope: it reads the envelope, the envelope never calls into it.

use crate::envelope::{AgentEnvelope, field};
use crate::kind::Kind;
use crate::operation::{StatusOperation, StreamPurpose};
use crate::validation::{Problem, Reason, Subject, ValidationError, check_text_cap};

impl AgentEnvelope {
    /// Checks the validity matrix, the closed operation vocabularies and
    /// every cap of the contract, no more: a body is checked for presence
    /// only (never for its content), and metadata values only against the
    /// caps. Read conventional bodies with [`card_body`](Self::card_body),
    /// [`control_fact`](Self::control_fact) or `ErrorBody::decode_valid`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        validate_envelope(self)
    }
}

struct Rules<'a> {
    env: &'a AgentEnvelope,
}

impl Rules<'_> {
    fn fail(&self, field: &'static str, reason: Reason, hint: &'static str) -> ValidationError {
        ValidationError {
            subject: Subject::Envelope(self.env.kind),
            field,
            reason,
            hint,
        }
    }

    fn missing(&self, field: &'static str, hint: &'static str) -> Result<(), ValidationError> {
        Err(self.fail(field, Reason::Missing, hint))
    }

    fn forbidden(&self, field: &'static str, hint: &'static str) -> Result<(), ValidationError> {
        Err(self.fail(field, Reason::Forbidden, hint))
    }

    fn problem(&self, field: &'static str, p: Problem) -> ValidationError {
        p.at(Subject::Envelope(self.env.kind), field)
    }
}

/// The validity matrix of docs/wire.md. Unconditional presence rules and caps run
/// first, in declaration order; rules that depend on another field (sequence
/// 0, `last`, status operation, stream terminal) run after, so an error
/// always names the root cause.
fn validate_envelope(env: &AgentEnvelope) -> Result<(), ValidationError> {
    let r = Rules { env };
    presence_and_caps(&r)?;
    match env.kind {
        Kind::Chunk => chunk_rules(&r),
        Kind::Status => status_rules(&r),
        Kind::Error => error_rules(&r),
        Kind::Command | Kind::Response | Kind::Event => Ok(()),
    }
}

fn presence_and_caps(r: &Rules<'_>) -> Result<(), ValidationError> {
    use Kind::*;
    let e = r.env;
    let k = e.kind;

    if e.record.is_none() && k != Chunk {
        r.missing(
            field::RECORD,
            "every envelope except a chunk is a durable record that replies and causes point at; set a record id",
        )?;
    }
    if e.correlation.is_none() {
        match k {
            Command => r.missing(
                field::CORRELATION,
                "every command needs a correlation id so its reply can be matched; set one \
                 (fire-and-forget messages are `event`s)",
            )?,
            Response => r.missing(
                field::CORRELATION,
                "a response answers a command; copy the command's correlation id",
            )?,
            Chunk => r.missing(
                field::CORRELATION,
                "a chunk answers a request; copy the request's correlation id",
            )?,
            Error => r.missing(
                field::CORRELATION,
                "an error answers a request; copy the request's correlation id",
            )?,
            Event | Status => {}
        }
    }
    match (k, e.channel.is_some()) {
        (Chunk, false) => r.missing(field::CHANNEL, "chunks are grouped into a stream by channel; set the stream's channel id")?,
        (Command | Response | Event | Status, true) => r.forbidden(
            field::CHANNEL,
            "only chunks, and an error that ends a stream, belong to a channel; send stream output as chunks or drop `channel`",
        )?,
        _ => {}
    }
    if e.idempotency_key.is_some() && matches!(k, Chunk | Status | Error) {
        r.forbidden(
            field::IDEMPOTENCY_KEY,
            "idempotency keys guard the effect of a command, response or event; drop the key here",
        )?;
    }
    if e.deadline_micros.is_some() && matches!(k, Response | Event | Status | Error) {
        r.forbidden(
            field::DEADLINE_MICROS,
            "a deadline bounds a request; set it on the command (or on a stream's opening chunk)",
        )?;
    }
    match (k, e.sequence.is_some()) {
        (Chunk, false) => r.missing(
            field::SEQUENCE,
            "chunks are ordered by sequence within their channel; number them from 0",
        )?,
        (Command | Response | Event | Status, true) => r.forbidden(
            field::SEQUENCE,
            "only chunks, and an error that ends a stream, carry a sequence; drop `sequence`",
        )?,
        _ => {}
    }
    if e.last && matches!(k, Command | Response | Event | Error) {
        r.forbidden(
            field::LAST,
            "`last` marks the final chunk of a stream or the final status; this kind is a single message already",
        )?;
    }
    if e.finish_reason.is_some() && matches!(k, Command | Event | Status | Error) {
        r.forbidden(
            field::FINISH_REASON,
            "a finish reason says why a response or a stream's final chunk ended; drop it here",
        )?;
    }
    check_text_cap(
        e.finish_reason.as_deref(),
        "finish reasons are short codes such as stop, length, tool_call",
    )
    .map_err(|p| r.problem(field::FINISH_REASON, p))?;
    if e.task_state.is_some() && matches!(k, Command | Event | Chunk) {
        r.forbidden(
            field::TASK_STATE,
            "task state belongs on a status, a response or an error; drop it here",
        )?;
    }
    if e.operation.is_none() && k == Status {
        r.missing(
            field::OPERATION,
            "a status names what it reports: operation task, card, progress, quarantine or unquarantine",
        )?;
    }
    check_text_cap(
        e.operation.as_deref(),
        "operations are short names; put arguments in the body",
    )
    .map_err(|p| r.problem(field::OPERATION, p))?;
    if e.tool.is_some() && k == Status {
        r.forbidden(
            field::TOOL,
            "a status reports on a task or an agent, not a tool call; put the tool on the command, response, event, chunk or error",
        )?;
    }
    check_text_cap(
        e.tool.as_deref(),
        "tool names are short; put arguments in the body",
    )
    .map_err(|p| r.problem(field::TOOL, p))?;
    if e.usage.is_some() && k == Command {
        r.forbidden(
            field::USAGE,
            "token usage is reported by whoever spent it: on a response, event, status, error or a stream's final chunk",
        )?;
    }
    if let Some(metadata) = &e.metadata {
        metadata
            .check_envelope_rules()
            .map_err(|p| r.problem(field::METADATA, p))?;
    }
    if e.body.is_empty() {
        match k {
            Command => r.missing(
                field::BODY,
                "a command carries its request in the body; send a non-empty body",
            )?,
            Response => r.missing(
                field::BODY,
                "a response carries its result in the body; send a non-empty body",
            )?,
            Event => r.missing(
                field::BODY,
                "an event carries its fact in the body; send a non-empty body",
            )?,
            Error => r.missing(
                field::BODY,
                "an error carries an encoded ErrorBody in its body (see AgentEnvelope::error)",
            )?,
            Chunk | Status => {}
        }
    }
    if let Some(signature) = &e.signature {
        signature.validate().map_err(|inner| {
            r.problem(field::SIGNATURE, Problem::invalid(inner.to_string(), ""))
        })?;
    }
    Ok(())
}

fn chunk_rules(r: &Rules<'_>) -> Result<(), ValidationError> {
    let e = r.env;
    if e.sequence == Some(0) {
        match e.operation.as_deref() {
            None => r.missing(
                field::OPERATION,
                "the opening chunk (sequence 0) names the stream's purpose: chat, reasoning or tool_args",
            )?,
            Some(op) => {
                op.parse::<StreamPurpose>().map_err(|err| {
                    r.problem(
                        field::OPERATION,
                        Problem::invalid(err.to_string(), "an opening chunk names the stream's purpose"),
                    )
                })?;
            }
        }
    } else {
        if e.operation.is_some() {
            r.forbidden(
                field::OPERATION,
                "only the opening chunk (sequence 0) names the stream's purpose; drop it on later chunks",
            )?;
        }
        if e.deadline_micros.is_some() {
            r.forbidden(
                field::DEADLINE_MICROS,
                "a stream's deadline is set once, on its opening chunk (sequence 0)",
            )?;
        }
    }
    if !e.last {
        if e.finish_reason.is_some() {
            r.forbidden(
                field::FINISH_REASON,
                "only the final chunk (`last`) says why the stream finished; set `last` or drop the finish reason",
            )?;
        }
        if e.usage.is_some() {
            r.forbidden(
                field::USAGE,
                "a stream reports usage once, on its final chunk (`last`); set `last` or drop `usage`",
            )?;
        }
        if e.body.is_empty() {
            r.missing(
                field::BODY,
                "only the final chunk (`last`) of a stream may be empty",
            )?;
        }
    }
    Ok(())
}

/// Any status body, or none, is valid whatever the operation: a card or a
/// control fact is checked by its reader (`AgentEnvelope::card_body`,
/// `AgentEnvelope::control_fact`), so a peer's record is never refused for it.
fn status_rules(r: &Rules<'_>) -> Result<(), ValidationError> {
    let e = r.env;
    let Some(text) = e.operation.as_deref() else {
        return Ok(());
    };
    let op = text.parse::<StatusOperation>().map_err(|err| {
        r.problem(
            field::OPERATION,
            Problem::invalid(err.to_string(), "status operations are a closed set"),
        )
    })?;
    // Another status may carry a task state too (the reference accepts it).
    if op == StatusOperation::Task {
        if e.correlation.is_none() {
            r.missing(
                field::CORRELATION,
                "a status `task` reports on a request; copy the request's correlation id",
            )?;
        }
        if e.task_state.is_none() {
            r.missing(
                field::TASK_STATE,
                "a status `task` says where the task stands; set a task state",
            )?;
        }
    }
    Ok(())
}

/// The body is required (checked with the presence rules) but not decoded:
/// its codec is named out of band (`agdx.ct`), and a claim-checked error
/// carries a BodyRef. Readers decode the ErrorBody and cope when they cannot.
fn error_rules(r: &Rules<'_>) -> Result<(), ValidationError> {
    let e = r.env;
    if e.sequence.is_some() && e.channel.is_none() {
        r.forbidden(
            field::SEQUENCE,
            "an error carries a sequence only when it ends a stream; set `channel` too, or drop `sequence`",
        )?;
    }
    Ok(())
}
