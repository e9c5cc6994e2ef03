//! The body of an `error` envelope.

use crate::dictionary::ErrorCode;
use crate::metadata::Metadata;
use crate::payload::wire_payload;
use crate::table::{Bool, Dict, Meta, Text, wire_struct};
use crate::validation::ValidationError;

wire_struct! {
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
        cbor: "error body",
        json: "error body",
        keys: field;
        /// What kind of failure.
        pub code: ErrorCode [CODE = "code", Dict, required],
        /// A message for people.
        pub message: Option<String> [MESSAGE = "message", Text, optional],
        /// Whether the same request may succeed if sent again.
        pub retryable: bool [RETRYABLE = "retryable", Bool, always],
        /// Structured detail.
        pub detail: Option<Metadata> [DETAIL = "detail", Meta, optional],
    }
}

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

wire_payload!(ErrorBody, "error-body");
#[cfg(feature = "json")]
crate::table::json_payload!(ErrorBody);
