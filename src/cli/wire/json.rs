//! The JSON view of wire payloads used by `agdx wire decode` / `encode`.
//!
//! Ids are their 26-character text, log positions `stream/topic/partition/
//! offset`, dictionaries their names (a number when the code is unknown).
//!
//! Whether bytes print as text or hex is decided by the field, never guessed
//! from the value alone, so `decode | encode` is byte-identical:
//! - digests and keys (a signature's `key_id` and `bytes`, a BodyRef's
//!   `sha256`) are always a lowercase hex string;
//! - opaque content (an envelope `body`, a dead letter's `payload`, a
//!   snapshot's `state`) is a JSON string when it is UTF-8 text without
//!   control characters other than tab, newline and carriage return, and
//!   `{"hex": "..."}` otherwise; a string reads back as its UTF-8 bytes.
//!
//! A dead letter's payload and an error envelope's body are shown decoded
//! when they decode and re-encode to the same bytes. Objects keep their key
//! order, so metadata order (and thus the bytes) survives a round trip.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use agdx_wire::{
    AgentCard, AgentEnvelope, AgentId, AgentPresence, BodyRef, CapabilityDescriptor, ChannelId,
    ContentRef, ContentType, ConversationId, CorrelationId, DeadLetter, DeadLetterReason,
    ErrorBody, ErrorCode, Float, FoldSnapshot, Health, IdempotencyKey, Kind, LogPosition, Metadata,
    RecordId, Scalar, Signature, SignatureContext, SignatureScheme, TaskState, TokenUsage,
    WirePayload,
};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, SerializeSeq, Serializer};

/// A JSON value whose objects keep their key order.
#[derive(Debug, Clone, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => s.serialize_unit(),
            Json::Bool(b) => s.serialize_bool(*b),
            Json::Number(n) => n.serialize(s),
            Json::String(t) => s.serialize_str(t),
            Json::Array(items) => {
                let mut seq = s.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(entries) => {
                let mut map = s.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Json;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("JSON")
            }
            fn visit_unit<E>(self) -> Result<Json, E> {
                Ok(Json::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
                Ok(Json::Bool(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
                Ok(Json::Number(v.into()))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
                Ok(Json::Number(v.into()))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Json, E> {
                serde_json::Number::from_f64(v)
                    .map(Json::Number)
                    .ok_or_else(|| E::custom("a JSON number must be finite"))
            }
            fn visit_str<E>(self, v: &str) -> Result<Json, E> {
                Ok(Json::String(v.to_owned()))
            }
            fn visit_string<E>(self, v: String) -> Result<Json, E> {
                Ok(Json::String(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(Json::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Json>()? {
                    entries.push((k, v));
                }
                Ok(Json::Object(entries))
            }
        }
        d.deserialize_any(V)
    }
}

impl From<&str> for Json {
    fn from(v: &str) -> Self {
        Json::String(v.to_owned())
    }
}
impl From<String> for Json {
    fn from(v: String) -> Self {
        Json::String(v)
    }
}
impl From<u64> for Json {
    fn from(v: u64) -> Self {
        Json::Number(v.into())
    }
}
impl From<bool> for Json {
    fn from(v: bool) -> Self {
        Json::Bool(v)
    }
}

/// Builds an object in field order, skipping absent optionals.
#[derive(Default)]
struct Obj(Vec<(String, Json)>);

impl Obj {
    fn put(mut self, key: &str, value: impl Into<Json>) -> Self {
        self.0.push((key.to_owned(), value.into()));
        self
    }
    fn opt<T>(self, key: &str, value: Option<T>, to: impl FnOnce(T) -> Json) -> Self {
        match value {
            Some(v) => self.put(key, to(v)),
            None => self,
        }
    }
    fn done(self) -> Json {
        Json::Object(self.0)
    }
}

/// A JSON object being read field by field; unknown fields are an error so
/// typos do not silently drop data.
struct Fields {
    what: &'static str,
    entries: Vec<(String, Json)>,
}

impl Fields {
    fn new(what: &'static str, json: Json) -> Result<Self, String> {
        match json {
            Json::Object(entries) => Ok(Self { what, entries }),
            _ => Err(format!("{what} must be a JSON object")),
        }
    }
    fn take(&mut self, key: &str) -> Option<Json> {
        let at = self.entries.iter().position(|(k, _)| k == key)?;
        Some(self.entries.remove(at).1)
    }
    fn req(&mut self, key: &str) -> Result<Json, String> {
        self.take(key)
            .ok_or_else(|| format!("{} needs `{key}`", self.what))
    }
    fn map<T>(
        &mut self,
        key: &str,
        f: impl FnOnce(Json) -> Result<T, String>,
    ) -> Result<Option<T>, String> {
        self.take(key)
            .map(f)
            .transpose()
            .map_err(|e| format!("`{key}`: {e}"))
    }
    fn req_map<T>(
        &mut self,
        key: &str,
        f: impl FnOnce(Json) -> Result<T, String>,
    ) -> Result<T, String> {
        let v = self.req(key)?;
        f(v).map_err(|e| format!("`{key}`: {e}"))
    }
    fn finish(self) -> Result<(), String> {
        match self.entries.first() {
            Some((k, _)) => Err(format!("{} has no field `{k}`", self.what)),
            None => Ok(()),
        }
    }
}

fn text(json: Json) -> Result<String, String> {
    match json {
        Json::String(s) => Ok(s),
        _ => Err("expected a string".into()),
    }
}

fn parse<T: FromStr>(json: Json) -> Result<T, String>
where
    T::Err: fmt::Display,
{
    text(json)?.parse().map_err(|e: T::Err| e.to_string())
}

fn uint<T: TryFrom<u64>>(json: Json) -> Result<T, String> {
    match json {
        Json::Number(n) => n
            .as_u64()
            .and_then(|v| T::try_from(v).ok())
            .ok_or_else(|| format!("{n} is not an unsigned integer in range")),
        _ => Err("expected a number".into()),
    }
}

fn boolean(json: Json) -> Result<bool, String> {
    match json {
        Json::Bool(b) => Ok(b),
        _ => Err("expected true or false".into()),
    }
}

fn show<T: fmt::Display>(v: T) -> Json {
    Json::String(v.to_string())
}

/// The key of the object that holds opaque bytes which are not text.
const HEX: &str = "hex";

/// Digests and keys: always lowercase hex.
fn hex_json(bytes: &[u8]) -> Json {
    Json::String(hex::encode(bytes))
}

fn hex_from(json: Json) -> Result<Vec<u8>, String> {
    let digits = text(json).map_err(|_| "expected a string of lowercase hex".to_owned())?;
    hex::decode(&digits).map_err(|e| {
        format!("{digits:?} is not lowercase hex (two digits per byte, as `decode` prints): {e}")
    })
}

/// Opaque content: text when it reads as text, else `{"hex": "..."}`.
pub(crate) fn bytes_json(bytes: &[u8]) -> Json {
    let readable = |s: &str| {
        !s.chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    };
    match std::str::from_utf8(bytes) {
        Ok(s) if readable(s) => Json::String(s.to_owned()),
        _ => Obj::default().put(HEX, hex::encode(bytes)).done(),
    }
}

fn is_hex_object(json: &Json) -> bool {
    matches!(json, Json::Object(entries) if entries.len() == 1 && entries[0].0 == HEX)
}

fn bytes_from(json: Json) -> Result<Vec<u8>, String> {
    match json {
        Json::String(s) => Ok(s.into_bytes()),
        json if is_hex_object(&json) => {
            let mut f = Fields::new("a byte string", json)?;
            f.req_map(HEX, hex_from)
        }
        _ => Err("expected UTF-8 text or {\"hex\": \"...\"}".into()),
    }
}

/// Bytes that hold a nested payload: shown decoded when they decode and
/// re-encode to exactly the same bytes, else as plain bytes.
fn nested_json<T: JsonCodec>(bytes: &[u8]) -> Json {
    match T::decode(bytes) {
        Ok(v) if v.encode() == bytes => v.to_json(),
        _ => bytes_json(bytes),
    }
}

fn nested_from<T: JsonCodec>(json: Json) -> Result<Vec<u8>, String> {
    match json {
        Json::Object(_) if !is_hex_object(&json) => T::from_json(json).map(|v| v.encode()),
        _ => bytes_from(json),
    }
}

/// u8 dictionaries: the name, or the number when the code is unknown.
macro_rules! dictionary_json {
    ($($t:ty),*) => {$(
        impl DictJson for $t {
            fn to_json(self) -> Json {
                if self.is_recognized() { Json::from(self.name()) } else { Json::from(u64::from(self.code())) }
            }
            fn from_json(json: Json) -> Result<Self, String> {
                match json {
                    Json::Number(_) => uint::<u8>(json).map(<$t>::from_code),
                    other => parse(other),
                }
            }
        }
    )*};
}

trait DictJson: Sized {
    fn to_json(self) -> Json;
    fn from_json(json: Json) -> Result<Self, String>;
}

dictionary_json!(
    ContentType,
    TaskState,
    ErrorCode,
    DeadLetterReason,
    Health,
    SignatureScheme
);

/// A finite float is a JSON number. JSON has no NaN or infinity, so those
/// are `{"float": "NaN"}` (the quiet NaN), `{"float": "Infinity"}`,
/// `{"float": "-Infinity"}`, and any other NaN `{"float_bits": "<16 hex digits>"}`.
fn float_json(f: Float) -> Json {
    let v = f.value();
    if let Some(n) = serde_json::Number::from_f64(v) {
        return Json::Number(n);
    }
    let named = match v {
        f64::INFINITY => Some("Infinity"),
        f64::NEG_INFINITY => Some("-Infinity"),
        _ if v.to_bits() == f64::NAN.to_bits() => Some("NaN"),
        _ => None,
    };
    match named {
        Some(name) => Obj::default().put("float", name).done(),
        None => Obj::default()
            .put("float_bits", format!("{:016x}", v.to_bits()))
            .done(),
    }
}

fn scalar_json(s: &Scalar) -> Json {
    match s {
        Scalar::Null => Json::Null,
        Scalar::Bool(b) => Json::Bool(*b),
        Scalar::Int(i) => match i.as_u64() {
            Some(u) => Json::from(u),
            // Not a u64, so a negative i64 (the metadata integer range).
            None => Json::Number((i.get() as i64).into()),
        },
        Scalar::Float(f) => float_json(*f),
        Scalar::Text(t) => Json::String(t.clone()),
        Scalar::Array(items) => Json::Array(items.iter().map(scalar_json).collect()),
    }
}

fn scalar_from(json: Json) -> Result<Scalar, String> {
    Ok(match json {
        Json::Null => Scalar::Null,
        Json::Bool(b) => Scalar::Bool(b),
        Json::String(s) => Scalar::Text(s),
        Json::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Scalar::from(u),
            (None, Some(i), _) => Scalar::from(i),
            (None, None, Some(f)) => Scalar::from(f),
            _ => return Err(format!("unsupported number {n}")),
        },
        Json::Array(items) => Scalar::Array(
            items
                .into_iter()
                .map(scalar_from)
                .collect::<Result<_, _>>()?,
        ),
        Json::Object(mut entries) if entries.len() == 1 => {
            let (key, value) = entries.remove(0);
            match key.as_str() {
                "float" => {
                    let v = match value {
                        Json::String(s) => match s.as_str() {
                            "NaN" => f64::NAN,
                            "Infinity" => f64::INFINITY,
                            "-Infinity" => f64::NEG_INFINITY,
                            _ => return Err(format!("{s:?} is not NaN, Infinity or -Infinity")),
                        },
                        _ => return Err("not NaN, Infinity or -Infinity".into()),
                    };
                    Scalar::from(v)
                }
                "float_bits" => {
                    let hex: String = parse(value)?;
                    let bits = u64::from_str_radix(&hex, 16)
                        .map_err(|_| format!("{hex:?} is not 16 hex digits of a float"))?;
                    Scalar::Float(Float::new(f64::from_bits(bits)))
                }
                _ => return Err(format!("unknown scalar form {{\"{key}\": ...}}")),
            }
        }
        Json::Object(_) => {
            return Err("a scalar is text, a number, a boolean, null or an array".into());
        }
    })
}

fn metadata_json(m: &Metadata) -> Json {
    Json::Object(
        m.iter()
            .map(|(k, v)| (k.to_owned(), scalar_json(v)))
            .collect(),
    )
}

fn metadata_from(json: Json) -> Result<Metadata, String> {
    match json {
        Json::Object(entries) => {
            let mut m = Metadata::new();
            for (k, v) in entries {
                let value = scalar_from(v).map_err(|e| format!("`{k}`: {e}"))?;
                if m.insert(k.clone(), value).is_some() {
                    return Err(format!("`{k}` appears twice"));
                }
            }
            Ok(m)
        }
        _ => Err("expected an object of scalars".into()),
    }
}

/// A payload with a JSON view.
pub trait JsonCodec: WirePayload {
    fn to_json(&self) -> Json;
    fn from_json(json: Json) -> Result<Self, String>;
}

impl JsonCodec for TokenUsage {
    fn to_json(&self) -> Json {
        Obj::default()
            .put("input_tokens", self.input_tokens)
            .put("output_tokens", self.output_tokens)
            .opt(
                "reasoning_output_tokens",
                self.reasoning_output_tokens,
                Json::from,
            )
            .opt(
                "cache_read_input_tokens",
                self.cache_read_input_tokens,
                Json::from,
            )
            .opt(
                "cache_creation_input_tokens",
                self.cache_creation_input_tokens,
                Json::from,
            )
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("usage", json)?;
        let usage = TokenUsage {
            input_tokens: f.req_map("input_tokens", uint)?,
            output_tokens: f.req_map("output_tokens", uint)?,
            reasoning_output_tokens: f.map("reasoning_output_tokens", uint)?,
            cache_read_input_tokens: f.map("cache_read_input_tokens", uint)?,
            cache_creation_input_tokens: f.map("cache_creation_input_tokens", uint)?,
        };
        f.finish()?;
        Ok(usage)
    }
}

impl JsonCodec for SignatureContext {
    fn to_json(&self) -> Json {
        Obj::default()
            .opt("content_type", self.content_type, DictJson::to_json)
            .opt("agent_version", self.agent_version, |v| {
                Json::from(u64::from(v))
            })
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("signature context", json)?;
        let ctx = SignatureContext {
            content_type: f.map("content_type", DictJson::from_json)?,
            agent_version: f.map("agent_version", uint)?,
        };
        f.finish()?;
        Ok(ctx)
    }
}

impl JsonCodec for Signature {
    fn to_json(&self) -> Json {
        Obj::default()
            .put("scheme", self.scheme.to_json())
            .put("key_id", hex_json(&self.key_id))
            .put("bytes", hex_json(&self.bytes))
            .opt("context", self.context.as_ref(), JsonCodec::to_json)
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("signature", json)?;
        let sig = Signature {
            scheme: f.req_map("scheme", DictJson::from_json)?,
            key_id: f.req_map("key_id", hex_from)?,
            bytes: f.req_map("bytes", hex_from)?,
            context: f.map("context", SignatureContext::from_json)?,
        };
        f.finish()?;
        Ok(sig)
    }
}

impl JsonCodec for ErrorBody {
    fn to_json(&self) -> Json {
        Obj::default()
            .put("code", self.code.to_json())
            .opt("message", self.message.clone(), Json::from)
            .put("retryable", self.retryable)
            .opt("detail", self.detail.as_ref(), metadata_json)
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("error body", json)?;
        let body = ErrorBody {
            code: f.req_map("code", DictJson::from_json)?,
            message: f.map("message", text)?,
            retryable: f.map("retryable", boolean)?.unwrap_or(false),
            detail: f.map("detail", metadata_from)?,
        };
        f.finish()?;
        Ok(body)
    }
}

impl JsonCodec for BodyRef {
    fn to_json(&self) -> Json {
        Obj::default()
            .put("reference", self.reference.clone())
            .put("size_bytes", self.size_bytes)
            .put("sha256", hex_json(&self.sha256))
            .opt("encryption", self.encryption, |e| Json::from(u64::from(e)))
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("body ref", json)?;
        let sha = f.req_map("sha256", hex_from)?;
        let body_ref = BodyRef {
            reference: f.req_map("reference", text)?,
            size_bytes: f.req_map("size_bytes", uint)?,
            sha256: sha
                .as_slice()
                .try_into()
                .map_err(|_| format!("`sha256` must be 32 bytes, got {}", sha.len()))?,
            encryption: f.map("encryption", uint)?,
        };
        f.finish()?;
        Ok(body_ref)
    }
}

impl JsonCodec for DeadLetter {
    fn to_json(&self) -> Json {
        Obj::default()
            .put("source", show(self.source))
            .put("reason", self.reason.to_json())
            .put("attempts", u64::from(self.attempts))
            .opt("detail", self.detail.clone(), Json::from)
            .put("payload", nested_json::<AgentEnvelope>(&self.payload))
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("dead letter", json)?;
        let dl = DeadLetter {
            source: f.req_map("source", parse::<LogPosition>)?,
            reason: f.req_map("reason", DictJson::from_json)?,
            attempts: f.req_map("attempts", uint)?,
            detail: f.map("detail", text)?,
            payload: f.req_map("payload", nested_from::<AgentEnvelope>)?,
        };
        f.finish()?;
        Ok(dl)
    }
}

fn content_ref_json(c: &ContentRef) -> Json {
    match c {
        ContentRef::ContentType(ct) => Obj::default().put("content_type", ct.name()).done(),
        ContentRef::Schema(id) => Obj::default().put("schema_id", id.clone()).done(),
    }
}

fn content_ref_from(json: Json) -> Result<ContentRef, String> {
    let mut f = Fields::new("content ref", json)?;
    let r = match (
        f.map("content_type", parse::<ContentType>)?,
        f.map("schema_id", text)?,
    ) {
        (Some(ct), None) => ContentRef::ContentType(ct),
        (None, Some(id)) => ContentRef::Schema(id),
        _ => {
            return Err(
                "a content ref is {\"content_type\": NAME} or {\"schema_id\": TEXT}".into(),
            );
        }
    };
    f.finish()?;
    Ok(r)
}

fn capability_json(c: &CapabilityDescriptor) -> Json {
    Obj::default()
        .put("skill_id", c.skill_id.clone())
        .opt("input", c.input.as_ref(), content_ref_json)
        .opt("output", c.output.as_ref(), content_ref_json)
        .opt("cost_class", c.cost_class, |v| Json::from(u64::from(v)))
        .opt("latency_class", c.latency_class, |v| {
            Json::from(u64::from(v))
        })
        .opt("max_concurrency", c.max_concurrency, |v| {
            Json::from(u64::from(v))
        })
        .opt("health", c.health, DictJson::to_json)
        .opt("load", c.load, |v| Json::from(u64::from(v)))
        .done()
}

fn capability_from(json: Json) -> Result<CapabilityDescriptor, String> {
    let mut f = Fields::new("capability", json)?;
    let c = CapabilityDescriptor {
        skill_id: f.req_map("skill_id", text)?,
        input: f.map("input", content_ref_from)?,
        output: f.map("output", content_ref_from)?,
        cost_class: f.map("cost_class", uint)?,
        latency_class: f.map("latency_class", uint)?,
        max_concurrency: f.map("max_concurrency", uint)?,
        health: f.map("health", DictJson::from_json)?,
        load: f.map("load", uint)?,
    };
    f.finish()?;
    Ok(c)
}

impl JsonCodec for AgentCard {
    fn to_json(&self) -> Json {
        let caps = (!self.capabilities.is_empty()).then_some(&self.capabilities);
        Obj::default()
            .opt("name", self.name.clone(), Json::from)
            .opt("version", self.version.clone(), Json::from)
            .opt("capabilities", caps, |c| {
                Json::Array(c.iter().map(capability_json).collect())
            })
            .opt("ttl_micros", self.ttl_micros, Json::from)
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("agent card", json)?;
        let card = AgentCard {
            name: f.map("name", text)?,
            version: f.map("version", text)?,
            capabilities: f
                .map("capabilities", |j| match j {
                    Json::Array(items) => items.into_iter().map(capability_from).collect(),
                    _ => Err("expected an array".to_owned()),
                })?
                .unwrap_or_default(),
            ttl_micros: f.map("ttl_micros", uint)?,
        };
        f.finish()?;
        Ok(card)
    }
}

impl JsonCodec for AgentPresence {
    fn to_json(&self) -> Json {
        Obj::default()
            .put("v", u64::from(self.version))
            .put("agent", self.agent.as_str())
            .opt("inbox", self.inbox.clone(), Json::from)
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("agent presence", json)?;
        let p = AgentPresence {
            version: f.req_map("v", uint)?,
            agent: f.req_map("agent", parse::<AgentId>)?,
            inbox: f.map("inbox", text)?,
        };
        f.finish()?;
        Ok(p)
    }
}

impl JsonCodec for FoldSnapshot {
    fn to_json(&self) -> Json {
        let as_of = self
            .as_of
            .iter()
            .map(|(p, o)| (p.to_string(), Json::from(*o)))
            .collect();
        Obj::default()
            .put("conversation", show(self.conversation))
            .put("as_of", Json::Object(as_of))
            .put("state", bytes_json(&self.state))
            .done()
    }
    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("fold snapshot", json)?;
        let as_of = f.req_map("as_of", |j| match j {
            Json::Object(entries) => entries
                .into_iter()
                .map(|(p, o)| {
                    let partition = p
                        .parse::<u32>()
                        .map_err(|_| format!("partition {p:?} is not a u32"))?;
                    Ok((partition, uint(o)?))
                })
                .collect::<Result<BTreeMap<_, _>, String>>(),
            _ => Err("expected an object of partition -> offset".into()),
        })?;
        let s = FoldSnapshot {
            conversation: f.req_map("conversation", parse::<ConversationId>)?,
            as_of,
            state: f.req_map("state", bytes_from)?,
        };
        f.finish()?;
        Ok(s)
    }
}

impl JsonCodec for AgentEnvelope {
    fn to_json(&self) -> Json {
        let body = (!self.body.is_empty()).then_some(&self.body);
        Obj::default()
            .put("kind", self.kind.as_str())
            .opt("record", self.record, show)
            .put("conversation", show(self.conversation))
            .put("source", self.source.as_str())
            .opt("target", self.target.as_ref(), show)
            .opt("cause", self.cause, show)
            .opt("cause_at", self.cause_at, show)
            .opt("correlation", self.correlation, show)
            .opt("channel", self.channel, show)
            .opt("idempotency_key", self.idempotency_key.as_ref(), show)
            .opt("deadline_micros", self.deadline_micros, Json::from)
            .opt("sequence", self.sequence, Json::from)
            .opt("last", self.last.then_some(true), Json::from)
            .opt("finish_reason", self.finish_reason.clone(), Json::from)
            .opt("task_state", self.task_state, DictJson::to_json)
            .opt("operation", self.operation.clone(), Json::from)
            .opt("tool", self.tool.clone(), Json::from)
            .opt("usage", self.usage.as_ref(), JsonCodec::to_json)
            .opt("metadata", self.metadata.as_ref(), metadata_json)
            .opt(
                "must_understand",
                (self.must_understand != 0).then_some(self.must_understand),
                Json::from,
            )
            .opt("body", body, |b| match self.kind {
                Kind::Error => nested_json::<ErrorBody>(b),
                _ => bytes_json(b),
            })
            .opt("signature", self.signature.as_ref(), JsonCodec::to_json)
            .done()
    }

    fn from_json(json: Json) -> Result<Self, String> {
        let mut f = Fields::new("envelope", json)?;
        let kind: Kind = f.req_map("kind", parse)?;
        let record = f.map("record", parse::<RecordId>)?;
        let conversation = f.req_map("conversation", parse::<ConversationId>)?;
        let source = f.req_map("source", parse::<AgentId>)?;
        let mut e = AgentEnvelope::bare(kind, conversation, source);
        e.record = record;
        e.target = f.map("target", parse::<AgentId>)?;
        e.cause = f.map("cause", parse::<RecordId>)?;
        e.cause_at = f.map("cause_at", parse::<LogPosition>)?;
        e.correlation = f.map("correlation", parse::<CorrelationId>)?;
        e.channel = f.map("channel", parse::<ChannelId>)?;
        e.idempotency_key = f.map("idempotency_key", parse::<IdempotencyKey>)?;
        e.deadline_micros = f.map("deadline_micros", uint)?;
        e.sequence = f.map("sequence", uint)?;
        e.last = f.map("last", boolean)?.unwrap_or(false);
        e.finish_reason = f.map("finish_reason", text)?;
        e.task_state = f.map("task_state", DictJson::from_json)?;
        e.operation = f.map("operation", text)?;
        e.tool = f.map("tool", text)?;
        e.usage = f.map("usage", TokenUsage::from_json)?;
        e.metadata = f.map("metadata", metadata_from)?;
        e.must_understand = f.map("must_understand", uint)?.unwrap_or(0);
        e.body = f
            .map("body", |j| match kind {
                Kind::Error => nested_from::<ErrorBody>(j),
                _ => bytes_from(j),
            })?
            .unwrap_or_default();
        e.signature = f.map("signature", Signature::from_json)?;
        f.finish()?;
        Ok(e)
    }
}
