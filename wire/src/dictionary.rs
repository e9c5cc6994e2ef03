//! The u8-coded dictionaries. Each is declared once, as one table, by
//! [`dictionary!`]; an unknown code stays representable as `Unrecognized(n)`
//! and re-encodes as `n`, so a newer peer's record survives a round trip.

use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

use crate::cbor::{Reader, write_uint};
use crate::error::DecodeError;

/// A name that is not in a dictionary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a known {dictionary}; the known names are {}", known.join(", "))]
pub struct UnknownNameError {
    /// Which dictionary was asked.
    pub dictionary: &'static str,
    /// The name given.
    pub name: String,
    /// The names the dictionary knows.
    pub known: &'static [&'static str],
}

macro_rules! dictionary {
    (
        $(#[$doc:meta])*
        $name:ident ($what:literal) {
            $( $(#[$vdoc:meta])* $variant:ident = $code:literal => $text:literal, )*
        }
    ) => {
        $(#[$doc])*
        ///
        /// Equality and hashing go by code, so `Unrecognized(n)` of a known
        /// code equals that code's variant.
        #[derive(Debug, Clone, Copy)]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )*
            /// A code this version does not know; it re-encodes unchanged.
            Unrecognized(u8),
        }

        impl $name {
            /// Every known value, in code order.
            pub const KNOWN: &'static [$name] = &[$($name::$variant),*];

            /// Every known name, in code order.
            pub const NAMES: &'static [&'static str] = &[$($text),*];

            /// The wire code.
            pub const fn code(self) -> u8 {
                match self {
                    $( $name::$variant => $code, )*
                    $name::Unrecognized(n) => n,
                }
            }

            /// The value for a wire code; unknown codes are kept as `Unrecognized`.
            pub const fn from_code(code: u8) -> Self {
                match code {
                    $( $code => $name::$variant, )*
                    n => $name::Unrecognized(n),
                }
            }

            /// The name (`"unrecognized"` for an unknown code).
            pub const fn name(self) -> &'static str {
                match Self::from_code(self.code()) {
                    $( $name::$variant => $text, )*
                    $name::Unrecognized(_) => "unrecognized",
                }
            }

            /// Whether the code is one this version knows.
            pub const fn is_recognized(self) -> bool {
                !matches!(Self::from_code(self.code()), $name::Unrecognized(_))
            }

            pub(crate) fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
                r.uint_as::<u8>(field, "u8").map(Self::from_code)
            }

            pub(crate) fn write(self, out: &mut Vec<u8>) {
                write_uint(out, u64::from(self.code()));
            }
        }

        impl PartialEq for $name {
            fn eq(&self, other: &Self) -> bool {
                self.code() == other.code()
            }
        }

        impl Eq for $name {}

        impl Hash for $name {
            fn hash<H: Hasher>(&self, state: &mut H) {
                self.code().hash(state);
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                if self.is_recognized() {
                    f.write_str(self.name())
                } else {
                    write!(f, "unrecognized {} code {}", $what, self.code())
                }
            }
        }

        impl FromStr for $name {
            type Err = UnknownNameError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $text => Ok($name::$variant), )*
                    _ => Err(UnknownNameError {
                        dictionary: $what,
                        name: s.to_owned(),
                        known: Self::NAMES,
                    }),
                }
            }
        }
    };
}

dictionary! {
    /// The codec of a body (`agdx.ct` header, `SignatureContext.content_type`).
    ContentType ("content type") {
        /// Opaque bytes.
        Raw = 0 => "raw",
        /// JSON text.
        Json = 1 => "json",
        /// MessagePack.
        Msgpack = 2 => "msgpack",
        /// CBOR.
        Cbor = 3 => "cbor",
        /// BSON.
        Bson = 4 => "bson",
        /// Avro.
        Avro = 5 => "avro",
        /// Protocol Buffers.
        Protobuf = 6 => "protobuf",
        /// Arrow IPC.
        Arrow = 7 => "arrow",
        /// A [`BodyRef`](crate::BodyRef) claim check.
        Ref = 8 => "ref",
        /// Any codec (a card's wildcard).
        Any = 255 => "any",
    }
}

dictionary! {
    /// Where a task stands (`task_state` of a `status` `task` or a response).
    TaskState ("task state") {
        /// Accepted, not started.
        Submitted = 1 => "submitted",
        /// In progress.
        Working = 2 => "working",
        /// Waiting for more input from the requester.
        InputRequired = 3 => "input-required",
        /// Finished successfully (terminal).
        Completed = 4 => "completed",
        /// Stopped on request (terminal).
        Canceled = 5 => "canceled",
        /// Finished with an error (terminal).
        Failed = 6 => "failed",
        /// Refused (terminal).
        Rejected = 7 => "rejected",
        /// Waiting for authorization.
        AuthRequired = 8 => "auth-required",
        /// Not known.
        Unknown = 9 => "unknown",
    }
}

impl TaskState {
    /// Whether the task can no longer change: completed, canceled, failed or rejected.
    pub const fn is_terminal(self) -> bool {
        matches!(
            Self::from_code(self.code()),
            TaskState::Completed | TaskState::Canceled | TaskState::Failed | TaskState::Rejected
        )
    }
}

dictionary! {
    /// Why an agent failed a request (`ErrorBody.code`).
    ErrorCode ("error code") {
        /// The request is malformed or breaks a rule.
        InvalidRequest = 1 => "invalid_request",
        /// The requester may not do this.
        Unauthorized = 2 => "unauthorized",
        /// The agent does not support the operation.
        Unsupported = 3 => "unsupported",
        /// The deadline passed first.
        DeadlineExceeded = 4 => "deadline_exceeded",
        /// The request was cancelled.
        Cancelled = 5 => "cancelled",
        /// A tool the agent called failed.
        ToolFailure = 6 => "tool_failure",
        /// The agent itself failed.
        Internal = 7 => "internal",
    }
}

dictionary! {
    /// Why a record was dead-lettered (`DeadLetter.reason`).
    DeadLetterReason ("dead-letter reason") {
        /// The handler kept failing until retries ran out.
        RetryExhausted = 1 => "retry_exhausted",
        /// The receiver refused it (e.g. unknown `must_understand` bits).
        Rejected = 2 => "rejected",
        /// The payload did not decode or validate.
        DecodeFailed = 3 => "decode_failed",
        /// Its deadline passed before it was handled.
        DeadlineExceeded = 4 => "deadline_exceeded",
    }
}

dictionary! {
    /// How a capability is doing (`CapabilityDescriptor.health`).
    Health ("health") {
        /// Working normally.
        Healthy = 1 => "healthy",
        /// Working, but slow or partial.
        Degraded = 2 => "degraded",
        /// Not working.
        Unavailable = 3 => "unavailable",
    }
}

dictionary! {
    /// How a signature was made (`Signature.scheme`).
    SignatureScheme ("signature scheme") {
        /// Ed25519: 8-byte key id, 64-byte signature.
        Ed25519 = 1 => "ed25519",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table<T: Copy>(
        known: &[T],
        code: impl Fn(T) -> u8,
        name: impl Fn(T) -> &'static str,
    ) -> Vec<(u8, &'static str)> {
        known.iter().map(|v| (code(*v), name(*v))).collect()
    }

    /// The one place every dictionary's codes and names are pinned.
    #[test]
    fn dictionaries_match_the_contract() {
        assert_eq!(
            table(ContentType::KNOWN, ContentType::code, ContentType::name),
            [
                (0, "raw"),
                (1, "json"),
                (2, "msgpack"),
                (3, "cbor"),
                (4, "bson"),
                (5, "avro"),
                (6, "protobuf"),
                (7, "arrow"),
                (8, "ref"),
                (255, "any")
            ]
        );
        assert_eq!(
            table(TaskState::KNOWN, TaskState::code, TaskState::name),
            [
                (1, "submitted"),
                (2, "working"),
                (3, "input-required"),
                (4, "completed"),
                (5, "canceled"),
                (6, "failed"),
                (7, "rejected"),
                (8, "auth-required"),
                (9, "unknown")
            ]
        );
        assert_eq!(
            table(ErrorCode::KNOWN, ErrorCode::code, ErrorCode::name),
            [
                (1, "invalid_request"),
                (2, "unauthorized"),
                (3, "unsupported"),
                (4, "deadline_exceeded"),
                (5, "cancelled"),
                (6, "tool_failure"),
                (7, "internal")
            ]
        );
        assert_eq!(
            table(
                DeadLetterReason::KNOWN,
                DeadLetterReason::code,
                DeadLetterReason::name
            ),
            [
                (1, "retry_exhausted"),
                (2, "rejected"),
                (3, "decode_failed"),
                (4, "deadline_exceeded")
            ]
        );
        assert_eq!(
            table(Health::KNOWN, Health::code, Health::name),
            [(1, "healthy"), (2, "degraded"), (3, "unavailable")]
        );
        assert_eq!(
            table(
                SignatureScheme::KNOWN,
                SignatureScheme::code,
                SignatureScheme::name
            ),
            [(1, "ed25519")]
        );
        let terminal: Vec<_> = TaskState::KNOWN
            .iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.name())
            .collect();
        assert_eq!(terminal, ["completed", "canceled", "failed", "rejected"]);
    }

    #[test]
    fn codes_names_and_unknowns_round_trip() {
        for v in ContentType::KNOWN {
            assert_eq!(ContentType::from_code(v.code()), *v);
            assert_eq!(v.name().parse::<ContentType>(), Ok(*v));
        }
        let odd = ContentType::from_code(42);
        assert_eq!(odd, ContentType::Unrecognized(42));
        assert_eq!(odd.code(), 42);
        assert!(!odd.is_recognized());
        assert_eq!(ContentType::Unrecognized(1), ContentType::Json);
        assert_eq!(ContentType::Unrecognized(1).name(), "json");
        assert_eq!(odd.to_string(), "unrecognized content type code 42");
        let err = "yaml".parse::<ContentType>().unwrap_err();
        assert_eq!(err.dictionary, "content type");
        assert!(err.to_string().contains("raw, json"), "{err}");
    }
}
