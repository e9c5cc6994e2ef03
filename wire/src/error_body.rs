//! The body of an `error` envelope.

use crate::cbor::{Reader, Seen, required, write_bool, write_map, write_text};
use crate::dictionary::ErrorCode;
use crate::error::DecodeError;
use crate::metadata::Metadata;
use crate::payload::{Codec, wire_payload};
use crate::validation::ValidationError;

/// Why a request failed. `retryable` is always written.
///
/// ```
/// use agdx_wire::{ErrorBody, ErrorCode};
/// let body = ErrorBody::new(ErrorCode::DeadlineExceeded)
///     .with_message("search timed out")
///     .retryable(true);
/// assert_eq!(ErrorBody::decode_valid(&body.encode()).unwrap(), body);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ErrorBody {
    /// What kind of failure.
    pub code: ErrorCode,
    /// A message for people.
    pub message: Option<String>,
    /// Whether the same request may succeed if sent again.
    pub retryable: bool,
    /// Structured detail.
    pub detail: Option<Metadata>,
}

const CODE: &str = "code";
const MESSAGE: &str = "message";
const RETRYABLE: &str = "retryable";
const DETAIL: &str = "detail";

impl ErrorBody {
    /// A non-retryable error with only a code.
    pub fn new(code: ErrorCode) -> Self {
        Self {
            code,
            message: None,
            retryable: false,
            detail: None,
        }
    }

    /// Sets the message.
    pub fn with_message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// Sets whether retrying may help.
    pub fn retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// Sets the structured detail.
    pub fn with_detail(mut self, detail: Metadata) -> Self {
        self.detail = Some(detail);
        self
    }

    /// An error body has no rule beyond what decoding checks (its `detail`
    /// holds any metadata value, nested arrays included); always `Ok`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

impl Codec for ErrorBody {
    const NAME: &'static str = "error body";

    fn write(&self, out: &mut Vec<u8>) {
        write_map(
            out,
            2 + usize::from(self.message.is_some()) + usize::from(self.detail.is_some()),
        );
        write_text(out, CODE);
        self.code.write(out);
        if let Some(m) = &self.message {
            write_text(out, MESSAGE);
            write_text(out, m);
        }
        write_text(out, RETRYABLE);
        write_bool(out, self.retryable);
        if let Some(d) = &self.detail {
            write_text(out, DETAIL);
            d.write(out);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let (mut code, mut message, mut retryable, mut detail) = (None, None, false, None);
        for _ in 0..entries {
            match r.key()? {
                CODE => {
                    seen.mark(0, CODE)?;
                    code = Some(ErrorCode::read(r, CODE)?);
                }
                MESSAGE => {
                    seen.mark(1, MESSAGE)?;
                    message = Some(r.text(MESSAGE)?.to_owned());
                }
                RETRYABLE => {
                    seen.mark(2, RETRYABLE)?;
                    retryable = r.bool(RETRYABLE)?;
                }
                DETAIL => {
                    seen.mark(3, DETAIL)?;
                    detail = Some(Metadata::read(r, DETAIL)?);
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(ErrorBody {
            code: required(code, CODE)?,
            message,
            retryable,
            detail,
        })
    }
}

wire_payload!(ErrorBody, "error-body");
