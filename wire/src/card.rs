//! Agent cards: what an agent offers, published as a `status` `card`.

use crate::cbor::{Item, Reader, write_array, write_map, write_text, wrong_type};
use crate::dictionary::{ContentType, Health};
use crate::error::DecodeError;
use crate::metadata::bounded;
use crate::payload::{Codec, wire_payload};
use crate::table::{Cbor, Dict, Text, Uint, wire_struct};
use crate::validation::{Problem, Subject, ValidationError, check_text_cap};
#[cfg(feature = "json")]
use crate::{
    json::{
        JsonError, Value,
        value::{Fields, Obj, parse, text},
    },
    table::{Json, JsonObject},
};

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

wire_struct! {
    /// One skill an agent offers.
    #[derive(Debug, Clone, PartialEq, Eq, Hash)]
    pub struct CapabilityDescriptor {
        cbor: "capability",
        json: "capability",
        keys: capability_field;
        /// The skill's id (at most 256 bytes).
        pub skill_id: String [SKILL_ID = "skill_id", Text, required],
        /// What it takes.
        pub input: Option<ContentRef> [INPUT = "input", Content, optional],
        /// What it returns.
        pub output: Option<ContentRef> [OUTPUT = "output", Content, optional],
        /// Relative cost class.
        pub cost_class: Option<u8> [COST_CLASS = "cost_class", Uint, optional],
        /// Relative latency class.
        pub latency_class: Option<u8> [LATENCY_CLASS = "latency_class", Uint, optional],
        /// How many requests it serves at once.
        pub max_concurrency: Option<u32> [MAX_CONCURRENCY = "max_concurrency", Uint, optional],
        /// How it is doing.
        pub health: Option<Health> [HEALTH = "health", Dict, optional],
        /// Current load, per mille.
        pub load: Option<u16> [LOAD = "load", Uint, optional],
    }
}

wire_struct! {
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
        cbor: "agent card",
        json: "agent card",
        keys: field;
        /// Display name (at most 256 bytes).
        pub name: Option<String> [NAME = "name", Text, optional],
        /// Version (at most 256 bytes).
        pub version: Option<String> [VERSION = "version", Text, optional],
        /// Skills offered (at most 64; omitted on the wire when empty).
        pub capabilities: Vec<CapabilityDescriptor>
            [CAPABILITIES = "capabilities", Capabilities, default],
        /// How long the card stays true, in microseconds.
        pub ttl_micros: Option<u64> [TTL_MICROS = "ttl_micros", Uint, optional],
    }
}

// The keys of a ContentRef's one-entry map.
const CONTENT_TYPE: &str = "content_type";
const SCHEMA_ID: &str = "schema_id";

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
            .map_err(|p| p.at(CARD, capability_field::SKILL_ID))?;
        if let Some(input) = &self.input {
            input.check(capability_field::INPUT)?;
        }
        if let Some(output) = &self.output {
            output.check(capability_field::OUTPUT)?;
        }
        Ok(())
    }
}

impl AgentCard {
    /// Caps: name, version and each skill id at most 256 bytes; at most 64
    /// capabilities; content types named, not coded.
    pub fn validate(&self) -> Result<(), ValidationError> {
        check_text_cap(self.name.as_deref(), "card names are short")
            .map_err(|p| p.at(CARD, field::NAME))?;
        check_text_cap(self.version.as_deref(), "versions are short")
            .map_err(|p| p.at(CARD, field::VERSION))?;
        if self.capabilities.len() > CARD_MAX_CAPABILITIES {
            return Err(Problem::too_large(
                self.capabilities.len(),
                CARD_MAX_CAPABILITIES,
                "capabilities",
                "split the agent or publish its most important skills",
            )
            .at(CARD, field::CAPABILITIES));
        }
        self.capabilities
            .iter()
            .try_for_each(CapabilityDescriptor::check)
    }
}

/// A capability's `input` or `output`: a one-entry map naming a content
/// type or a schema id.
enum Content {}

impl Cbor<ContentRef> for Content {
    fn write(value: &ContentRef, out: &mut Vec<u8>) {
        value.write(out);
    }
    fn read(r: &mut Reader<'_>, field: &'static str) -> Result<ContentRef, DecodeError> {
        ContentRef::read(r, field)
    }
}

#[cfg(feature = "json")]
impl Json<ContentRef> for Content {
    fn to_json(value: &ContentRef) -> Value {
        let object = Obj::default();
        match value {
            ContentRef::ContentType(ct) => object.put(CONTENT_TYPE, ct.name()),
            ContentRef::Schema(id) => object.put(SCHEMA_ID, id.as_str()),
        }
        .done()
    }

    fn from_json(json: Value) -> Result<ContentRef, JsonError> {
        let mut f = Fields::new("content ref", json)?;
        let r = match (
            f.map(CONTENT_TYPE, parse::<ContentType>)?,
            f.map(SCHEMA_ID, text)?,
        ) {
            (Some(ct), None) => ContentRef::ContentType(ct),
            (None, Some(id)) => ContentRef::Schema(id),
            _ => {
                return Err(JsonError::Invalid(
                    "a content ref is {\"content_type\": NAME} or {\"schema_id\": TEXT}".into(),
                ));
            }
        };
        f.finish()?;
        Ok(r)
    }
}

/// A card's capabilities: an array of capability maps, each one's errors
/// placed in the field.
enum Capabilities {}

impl Cbor<Vec<CapabilityDescriptor>> for Capabilities {
    fn write(value: &Vec<CapabilityDescriptor>, out: &mut Vec<u8>) {
        write_array(out, value.len());
        for c in value {
            c.write(out);
        }
    }

    fn read(
        r: &mut Reader<'_>,
        field: &'static str,
    ) -> Result<Vec<CapabilityDescriptor>, DecodeError> {
        let n = match r.item()? {
            Item::Array(n) => n,
            other => return Err(wrong_type(field, "an array", &other)),
        };
        r.open()?;
        let mut list = Vec::with_capacity(bounded(n, r.remaining()));
        for _ in 0..n {
            list.push(CapabilityDescriptor::read(r).map_err(|e| e.within(field))?);
        }
        r.close();
        Ok(list)
    }
}

#[cfg(feature = "json")]
impl Json<Vec<CapabilityDescriptor>> for Capabilities {
    fn to_json(value: &Vec<CapabilityDescriptor>) -> Value {
        Value::Array(value.iter().map(JsonObject::to_json_object).collect())
    }

    fn from_json(json: Value) -> Result<Vec<CapabilityDescriptor>, JsonError> {
        match json {
            Value::Array(items) => items
                .into_iter()
                .map(CapabilityDescriptor::from_json_object)
                .collect(),
            _ => Err(JsonError::Expected("an array")),
        }
    }
}

wire_payload!(AgentCard, "card");
#[cfg(feature = "json")]
crate::table::json_payload!(AgentCard);

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
