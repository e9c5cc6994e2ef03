//! Agent cards: what an agent offers, published as a `status` `card`.

use crate::cbor::{
    Item, Reader, Seen, required, write_array, write_map, write_text, write_uint, wrong_type,
};
use crate::dictionary::{ContentType, Health};
use crate::error::DecodeError;
use crate::metadata::bounded;
use crate::payload::{Codec, wire_payload};
use crate::validation::{Problem, Subject, ValidationError, check_text_cap};

/// Most capabilities one card may list.
pub const CARD_MAX_CAPABILITIES: usize = 64;

/// What a capability reads or writes: a content type (written by its
/// snake_case name) or a schema id.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum ContentRef {
    /// `{"content_type": "<name>"}`.
    ContentType(ContentType),
    /// `{"schema_id": "<text>"}`.
    Schema(String),
}

/// One skill an agent offers.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CapabilityDescriptor {
    /// The skill's id (at most 256 bytes).
    pub skill_id: String,
    /// What it takes.
    pub input: Option<ContentRef>,
    /// What it returns.
    pub output: Option<ContentRef>,
    /// Relative cost class.
    pub cost_class: Option<u8>,
    /// Relative latency class.
    pub latency_class: Option<u8>,
    /// How many requests it serves at once.
    pub max_concurrency: Option<u32>,
    /// How it is doing.
    pub health: Option<Health>,
    /// Current load, per mille.
    pub load: Option<u16>,
}

/// An agent's self-description.
///
/// ```
/// use agdx_wire::{AgentCard, CapabilityDescriptor, ContentRef, ContentType};
/// let card = AgentCard {
///     name: Some("summarizer".into()),
///     capabilities: vec![CapabilityDescriptor::new("summarize")
///         .with_input(ContentRef::ContentType(ContentType::Json))],
///     ..AgentCard::default()
/// };
/// assert_eq!(AgentCard::decode_valid(&card.encode()).unwrap(), card);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct AgentCard {
    /// Display name (at most 256 bytes).
    pub name: Option<String>,
    /// Version (at most 256 bytes).
    pub version: Option<String>,
    /// Skills offered (at most 64; omitted on the wire when empty).
    pub capabilities: Vec<CapabilityDescriptor>,
    /// How long the card stays true, in microseconds.
    pub ttl_micros: Option<u64>,
}

const CONTENT_TYPE: &str = "content_type";
const SCHEMA_ID: &str = "schema_id";
const SKILL_ID: &str = "skill_id";
const INPUT: &str = "input";
const OUTPUT: &str = "output";
const COST_CLASS: &str = "cost_class";
const LATENCY_CLASS: &str = "latency_class";
const MAX_CONCURRENCY: &str = "max_concurrency";
const HEALTH: &str = "health";
const LOAD: &str = "load";
const NAME: &str = "name";
const VERSION: &str = "version";
const CAPABILITIES: &str = "capabilities";
const TTL_MICROS: &str = "ttl_micros";

const CARD: Subject = Subject::Capsule("agent card");

impl ContentRef {
    fn check(&self, field: &'static str) -> Result<(), ValidationError> {
        match self {
            ContentRef::ContentType(ct) if !ct.is_recognized() => Err(Problem::invalid(
                format!("content type code {} has no name", ct.code()),
                "a card names content types by name; use a known content type or a schema id",
            )
            .at(CARD, field)),
            _ => Ok(()),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        write_map(out, 1);
        match self {
            ContentRef::ContentType(ct) => {
                write_text(out, CONTENT_TYPE);
                write_text(out, ct.name());
            }
            ContentRef::Schema(id) => {
                write_text(out, SCHEMA_ID);
                write_text(out, id);
            }
        }
    }

    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        if r.map(field)? != 1 {
            return Err(DecodeError::WrongType {
                field,
                expected: "a one-entry map (content_type or schema_id)",
                found: "a map of another size",
            });
        }
        let content = match r.key()? {
            CONTENT_TYPE => {
                let name = r.text(CONTENT_TYPE)?;
                name.parse()
                    .map(ContentRef::ContentType)
                    .map_err(|_| DecodeError::UnknownName {
                        field: CONTENT_TYPE,
                        dictionary: "content type",
                        name: name.to_owned(),
                    })?
            }
            SCHEMA_ID => ContentRef::Schema(r.text(SCHEMA_ID)?.to_owned()),
            _ => {
                return Err(DecodeError::MissingField {
                    field: "content_type or schema_id",
                });
            }
        };
        r.close();
        Ok(content)
    }
}

impl CapabilityDescriptor {
    /// A capability with only its skill id.
    pub fn new(skill_id: impl Into<String>) -> Self {
        Self {
            skill_id: skill_id.into(),
            input: None,
            output: None,
            cost_class: None,
            latency_class: None,
            max_concurrency: None,
            health: None,
            load: None,
        }
    }

    /// Sets what the skill takes.
    pub fn with_input(mut self, input: ContentRef) -> Self {
        self.input = Some(input);
        self
    }

    /// Sets what the skill returns.
    pub fn with_output(mut self, output: ContentRef) -> Self {
        self.output = Some(output);
        self
    }

    fn check(&self) -> Result<(), ValidationError> {
        check_text_cap(Some(&self.skill_id), "skill ids are short names")
            .map_err(|p| p.at(CARD, SKILL_ID))?;
        if let Some(input) = &self.input {
            input.check(INPUT)?;
        }
        if let Some(output) = &self.output {
            output.check(OUTPUT)?;
        }
        Ok(())
    }

    fn write(&self, out: &mut Vec<u8>) {
        let count = 1
            + usize::from(self.input.is_some())
            + usize::from(self.output.is_some())
            + usize::from(self.cost_class.is_some())
            + usize::from(self.latency_class.is_some())
            + usize::from(self.max_concurrency.is_some())
            + usize::from(self.health.is_some())
            + usize::from(self.load.is_some());
        write_map(out, count);
        write_text(out, SKILL_ID);
        write_text(out, &self.skill_id);
        if let Some(v) = &self.input {
            write_text(out, INPUT);
            v.write(out);
        }
        if let Some(v) = &self.output {
            write_text(out, OUTPUT);
            v.write(out);
        }
        let classes = [
            (COST_CLASS, self.cost_class.map(u64::from)),
            (LATENCY_CLASS, self.latency_class.map(u64::from)),
            (MAX_CONCURRENCY, self.max_concurrency.map(u64::from)),
        ];
        for (key, value) in classes {
            if let Some(v) = value {
                write_text(out, key);
                write_uint(out, v);
            }
        }
        if let Some(h) = self.health {
            write_text(out, HEALTH);
            h.write(out);
        }
        if let Some(v) = self.load {
            write_text(out, LOAD);
            write_uint(out, u64::from(v));
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map("capability")?;
        let mut seen = Seen::default();
        let mut skill_id = None;
        let mut c = CapabilityDescriptor::new(String::new());
        for _ in 0..entries {
            match r.key()? {
                SKILL_ID => {
                    seen.mark(0, SKILL_ID)?;
                    skill_id = Some(r.text(SKILL_ID)?.to_owned());
                }
                INPUT => {
                    seen.mark(1, INPUT)?;
                    c.input = Some(ContentRef::read(r, INPUT)?);
                }
                OUTPUT => {
                    seen.mark(2, OUTPUT)?;
                    c.output = Some(ContentRef::read(r, OUTPUT)?);
                }
                COST_CLASS => {
                    seen.mark(3, COST_CLASS)?;
                    c.cost_class = Some(r.uint_as(COST_CLASS, "u8")?);
                }
                LATENCY_CLASS => {
                    seen.mark(4, LATENCY_CLASS)?;
                    c.latency_class = Some(r.uint_as(LATENCY_CLASS, "u8")?);
                }
                MAX_CONCURRENCY => {
                    seen.mark(5, MAX_CONCURRENCY)?;
                    c.max_concurrency = Some(r.uint_as(MAX_CONCURRENCY, "u32")?);
                }
                HEALTH => {
                    seen.mark(6, HEALTH)?;
                    c.health = Some(Health::read(r, HEALTH)?);
                }
                LOAD => {
                    seen.mark(7, LOAD)?;
                    c.load = Some(r.uint_as(LOAD, "u16")?);
                }
                _ => r.skip()?,
            }
        }
        r.close();
        c.skill_id = required(skill_id, SKILL_ID)?;
        Ok(c)
    }
}

impl AgentCard {
    /// Caps: name, version and each skill id at most 256 bytes; at most 64
    /// capabilities; content types named, not coded.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_text_cap(self.name.as_deref(), "card names are short")
            .map_err(|p| p.at(CARD, NAME))?;
        check_text_cap(self.version.as_deref(), "versions are short")
            .map_err(|p| p.at(CARD, VERSION))?;
        if self.capabilities.len() > CARD_MAX_CAPABILITIES {
            return Err(Problem::too_large(
                self.capabilities.len(),
                CARD_MAX_CAPABILITIES,
                "capabilities",
                "split the agent or publish its most important skills",
            )
            .at(CARD, CAPABILITIES));
        }
        self.capabilities
            .iter()
            .try_for_each(CapabilityDescriptor::check)
    }
}

impl Codec for AgentCard {
    const NAME: &'static str = "agent card";

    fn write(&self, out: &mut Vec<u8>) {
        let count = usize::from(self.name.is_some())
            + usize::from(self.version.is_some())
            + usize::from(!self.capabilities.is_empty())
            + usize::from(self.ttl_micros.is_some());
        write_map(out, count);
        if let Some(v) = &self.name {
            write_text(out, NAME);
            write_text(out, v);
        }
        if let Some(v) = &self.version {
            write_text(out, VERSION);
            write_text(out, v);
        }
        if !self.capabilities.is_empty() {
            write_text(out, CAPABILITIES);
            write_array(out, self.capabilities.len());
            for c in &self.capabilities {
                c.write(out);
            }
        }
        if let Some(v) = self.ttl_micros {
            write_text(out, TTL_MICROS);
            write_uint(out, v);
        }
    }

    fn read(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entries = r.map(Self::NAME)?;
        let mut seen = Seen::default();
        let mut card = AgentCard::default();
        for _ in 0..entries {
            match r.key()? {
                NAME => {
                    seen.mark(0, NAME)?;
                    card.name = Some(r.text(NAME)?.to_owned());
                }
                VERSION => {
                    seen.mark(1, VERSION)?;
                    card.version = Some(r.text(VERSION)?.to_owned());
                }
                CAPABILITIES => {
                    seen.mark(2, CAPABILITIES)?;
                    let n = match r.item()? {
                        Item::Array(n) => n,
                        other => return Err(wrong_type(CAPABILITIES, "an array", &other)),
                    };
                    r.open()?;
                    let mut list = Vec::with_capacity(bounded(n, r.remaining()));
                    for _ in 0..n {
                        list.push(
                            CapabilityDescriptor::read(r).map_err(|e| e.within(CAPABILITIES))?,
                        );
                    }
                    r.close();
                    card.capabilities = list;
                }
                TTL_MICROS => {
                    seen.mark(3, TTL_MICROS)?;
                    card.ttl_micros = Some(r.uint(TTL_MICROS)?);
                }
                _ => r.skip()?,
            }
        }
        r.close();
        Ok(card)
    }
}

wire_payload!(AgentCard, "card");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_ref_is_written_by_name() {
        let mut out = Vec::new();
        ContentRef::ContentType(ContentType::Json).write(&mut out);
        assert_eq!(out, b"\xa1\x6ccontent_type\x64json");
    }
}
