//! Token accounting (`usage`): advisory, reported by whoever spent the tokens.

use crate::payload::wire_payload;
use crate::table::{Uint, wire_struct};
use crate::validation::ValidationError;

wire_struct! {
    /// Tokens a model call spent.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct TokenUsage {
        cbor: "token usage",
        json: "usage",
        keys: field;
        /// Prompt tokens.
        pub input_tokens: u64 [INPUT = "input_tokens", Uint, required],
        /// Completion tokens.
        pub output_tokens: u64 [OUTPUT = "output_tokens", Uint, required],
        /// Completion tokens spent on reasoning.
        pub reasoning_output_tokens: Option<u64>
            [REASONING = "reasoning_output_tokens", Uint, optional],
        /// Prompt tokens served from a cache.
        pub cache_read_input_tokens: Option<u64>
            [CACHE_READ = "cache_read_input_tokens", Uint, optional],
        /// Prompt tokens written to a cache.
        pub cache_creation_input_tokens: Option<u64>
            [CACHE_CREATION = "cache_creation_input_tokens", Uint, optional],
    }
}

impl TokenUsage {
    /// Usage with the two required counts.
    pub fn new(input_tokens: u64, output_tokens: u64) -> Self {
        Self {
            input_tokens,
            output_tokens,
            ..Self::default()
        }
    }

    /// Token usage has no rules beyond its shape; always `Ok`.
    pub fn validate(&self) -> Result<(), ValidationError> {
        Ok(())
    }
}

wire_payload!(TokenUsage, "usage");
#[cfg(feature = "json")]
crate::table::json_payload!(TokenUsage);
