//! Token accounting (`usage`): advisory, reported by whoever spent the tokens.

use crate::cbor::{Reader, Seen, required, write_map, write_text, write_uint};
use crate::error::DecodeError;
use crate::payload::{Codec, wire_payload};
use crate::validation::ValidationError;

/// Tokens a model call spent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input_tokens: u64,
    /// Completion tokens.
    pub output_tokens: u64,
    /// Completion tokens spent on reasoning.
    pub reasoning_output_tokens: Option<u64>,
    /// Prompt tokens served from a cache.
    pub cache_read_input_tokens: Option<u64>,
    /// Prompt tokens written to a cache.
    pub cache_creation_input_tokens: Option<u64>,
}

const INPUT: &str = "input_tokens";
const OUTPUT: &str = "output_tokens";
const REASONING: &str = "reasoning_output_tokens";
const CACHE_READ: &str = "cache_read_input_tokens";
const CACHE_CREATION: &str = "cache_creation_input_tokens";

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

impl Codec for TokenUsage {
    const NAME: &'static str = "token usage";

    fn write(&self, out: &mut Vec<u8>) {
        let optional = [
            (REASONING, self.reasoning_output_tokens),
            (CACHE_READ, self.cache_read_input_tokens),
            (CACHE_CREATION, self.cache_creation_input_tokens),
        ];
        write_map(
            out,
            2 + optional.iter().filter(|(_, v)| v.is_some()).count(),
        );
        write_text(out, INPUT);
        write_uint(out, self.input_tokens);
        write_text(out, OUTPUT);
        write_uint(out, self.output_tokens);
        for (key, value) in optional {
            if let Some(v) = value {
                write_text(out, key);
                write_uint(out, v);
            }
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let (mut input, mut output) = (None, None);
        let mut usage = TokenUsage::default();
        for _ in 0..entries {
            match r.key()? {
                INPUT => {
                    seen.mark(0, INPUT)?;
                    input = Some(r.uint(INPUT)?);
                }
                OUTPUT => {
                    seen.mark(1, OUTPUT)?;
                    output = Some(r.uint(OUTPUT)?);
                }
                REASONING => {
                    seen.mark(2, REASONING)?;
                    usage.reasoning_output_tokens = Some(r.uint(REASONING)?);
                }
                CACHE_READ => {
                    seen.mark(3, CACHE_READ)?;
                    usage.cache_read_input_tokens = Some(r.uint(CACHE_READ)?);
                }
                CACHE_CREATION => {
                    seen.mark(4, CACHE_CREATION)?;
                    usage.cache_creation_input_tokens = Some(r.uint(CACHE_CREATION)?);
                }
                _ => r.skip()?,
            }
        }
        r.close();
        usage.input_tokens = required(input, INPUT)?;
        usage.output_tokens = required(output, OUTPUT)?;
        Ok(usage)
    }
}

wire_payload!(TokenUsage, "usage");
