//! The two closed sub-vocabularies of `operation`.

use std::fmt;
use std::str::FromStr;

/// An `operation` text outside a closed vocabulary.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{name:?} is not a {vocabulary}; expected one of {}", known.join(", "))]
pub struct UnknownOperationError {
    /// Which vocabulary.
    pub vocabulary: &'static str,
    /// The text given.
    pub name: String,
    /// The allowed values.
    pub known: &'static [&'static str],
}

macro_rules! vocabulary {
    ($(#[$doc:meta])* $name:ident ($what:literal) { $( $(#[$vdoc:meta])* $variant:ident => $text:literal, )* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $( $(#[$vdoc])* $variant, )*
        }

        impl $name {
            /// Every value, in the contract's order.
            pub const ALL: &'static [$name] = &[$($name::$variant),*];

            /// Every value's `operation` text.
            pub const NAMES: &'static [&'static str] = &[$($text),*];

            /// The `operation` text.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $text, )*
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownOperationError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $text => Ok($name::$variant), )*
                    _ => Err(UnknownOperationError { vocabulary: $what, name: s.to_owned(), known: Self::NAMES }),
                }
            }
        }
    };
}

vocabulary! {
    /// What a `status` envelope reports (its `operation`).
    StatusOperation ("status operation") {
        /// Task progress: needs `correlation` and `task_state`.
        Task => "task",
        /// The agent's card: by convention the body is an
        /// [`AgentCard`](crate::AgentCard) (read it with
        /// [`AgentEnvelope::card_body`](crate::AgentEnvelope::card_body)).
        Card => "card",
        /// Free-form progress.
        Progress => "progress",
        /// A control fact: by convention the body is the UTF-8 agent id being
        /// quarantined (read it with
        /// [`AgentEnvelope::control_fact`](crate::AgentEnvelope::control_fact)).
        Quarantine => "quarantine",
        /// A control fact: by convention the body is the UTF-8 agent id being
        /// released.
        Unquarantine => "unquarantine",
    }
}

vocabulary! {
    /// What a chunk stream carries, named by its opening chunk (sequence 0).
    StreamPurpose ("stream purpose") {
        /// Conversational output.
        Chat => "chat",
        /// Model reasoning.
        Reasoning => "reasoning",
        /// Arguments of a tool call, streamed.
        ToolArgs => "tool_args",
    }
}

/// The conventional `event` operation whose body is the full state.
pub const EVENT_STATE_SNAPSHOT: &str = "state_snapshot";
/// The conventional `event` operation whose body is an RFC 6902 JSON Patch.
pub const EVENT_STATE_DELTA: &str = "state_delta";
