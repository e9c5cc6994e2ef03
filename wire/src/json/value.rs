//! Building and reading the objects of the view, and the JSON forms of the
//! plain values fields hold (text, numbers, hex, opaque bytes).

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use super::JsonCodec;
use super::error::JsonError;

/// Builds an object in field order, skipping absent optionals.
#[derive(Default)]
pub(crate) struct Obj(Map<String, Value>);

impl Obj {
    pub(crate) fn put(mut self, key: &str, value: impl Into<Value>) -> Self {
        self.0.insert(key.to_owned(), value.into());
        self
    }

    pub(crate) fn opt<T>(self, key: &str, value: Option<T>, to: impl FnOnce(T) -> Value) -> Self {
        match value {
            Some(v) => self.put(key, to(v)),
            None => self,
        }
    }

    pub(crate) fn done(self) -> Value {
        Value::Object(self.0)
    }
}

/// A JSON object being read field by field; what is left at
/// [`finish`](Self::finish) is an unknown field, so typos do not silently
/// drop data.
pub(crate) struct Fields {
    what: &'static str,
    entries: Map<String, Value>,
}

impl Fields {
    pub(crate) fn new(what: &'static str, json: Value) -> Result<Self, JsonError> {
        match json {
            Value::Object(entries) => Ok(Self { what, entries }),
            _ => Err(JsonError::NotAnObject { what }),
        }
    }

    /// Removes `key`, keeping the order of the rest (the first unknown
    /// field is the one reported).
    fn take(&mut self, key: &str) -> Option<Value> {
        self.entries.shift_remove(key)
    }

    pub(crate) fn map<T>(
        &mut self,
        key: &'static str,
        f: impl FnOnce(Value) -> Result<T, JsonError>,
    ) -> Result<Option<T>, JsonError> {
        self.take(key).map(f).transpose().map_err(|e| e.within(key))
    }

    pub(crate) fn req_map<T>(
        &mut self,
        key: &'static str,
        f: impl FnOnce(Value) -> Result<T, JsonError>,
    ) -> Result<T, JsonError> {
        let v = self.take(key).ok_or(JsonError::Missing {
            what: self.what,
            field: key,
        })?;
        f(v).map_err(|e| e.within(key))
    }

    pub(crate) fn finish(self) -> Result<(), JsonError> {
        match self.entries.keys().next() {
            Some(k) => Err(JsonError::UnknownField {
                what: self.what,
                field: k.clone(),
            }),
            None => Ok(()),
        }
    }
}

pub(crate) fn text(json: Value) -> Result<String, JsonError> {
    match json {
        Value::String(s) => Ok(s),
        _ => Err(JsonError::Expected("a string")),
    }
}

pub(crate) fn parse<T: FromStr>(json: Value) -> Result<T, JsonError>
where
    T::Err: fmt::Display,
{
    text(json)?
        .parse()
        .map_err(|e: T::Err| JsonError::Invalid(e.to_string()))
}

pub(crate) fn uint<T: TryFrom<u64>>(json: Value) -> Result<T, JsonError> {
    match json {
        Value::Number(n) => n
            .as_u64()
            .and_then(|v| T::try_from(v).ok())
            .ok_or_else(|| JsonError::Invalid(format!("{n} is not an unsigned integer in range"))),
        _ => Err(JsonError::Expected("a number")),
    }
}

pub(crate) fn boolean(json: Value) -> Result<bool, JsonError> {
    match json {
        Value::Bool(b) => Ok(b),
        _ => Err(JsonError::Expected("true or false")),
    }
}

pub(crate) fn show<T: fmt::Display>(v: T) -> Value {
    Value::String(v.to_string())
}

/// The key of the object that holds opaque bytes which are not text.
const HEX: &str = "hex";

/// Digests and keys: always lowercase hex.
pub(crate) fn hex_json(bytes: &[u8]) -> Value {
    Value::String(hex::encode(bytes))
}

pub(crate) fn hex_from(json: Value) -> Result<Vec<u8>, JsonError> {
    let digits = text(json).map_err(|_| JsonError::Expected("a string of lowercase hex"))?;
    hex::decode(&digits).map_err(|e| {
        JsonError::Invalid(format!(
            "{digits:?} is not lowercase hex (two digits per byte, as `decode` prints): {e}"
        ))
    })
}

/// Opaque content: text when it reads as text, else `{"hex": "..."}`.
pub(crate) fn bytes_json(bytes: &[u8]) -> Value {
    let readable = |s: &str| {
        !s.chars()
            .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r'))
    };
    match std::str::from_utf8(bytes) {
        Ok(s) if readable(s) => Value::String(s.to_owned()),
        _ => Obj::default().put(HEX, hex::encode(bytes)).done(),
    }
}

fn is_hex_object(json: &Value) -> bool {
    matches!(json, Value::Object(entries) if entries.len() == 1 && entries.contains_key(HEX))
}

pub(crate) fn bytes_from(json: Value) -> Result<Vec<u8>, JsonError> {
    match json {
        Value::String(s) => Ok(s.into_bytes()),
        json if is_hex_object(&json) => {
            let mut f = Fields::new("a byte string", json)?;
            f.req_map(HEX, hex_from)
        }
        _ => Err(JsonError::Expected("UTF-8 text or {\"hex\": \"...\"}")),
    }
}

/// Bytes that hold a nested payload: shown decoded when they decode and
/// re-encode to exactly the same bytes, else as plain bytes.
pub(crate) fn nested_json<T: JsonCodec>(bytes: &[u8]) -> Value {
    match T::decode(bytes) {
        Ok(v) if v.encode() == bytes => v.to_json(),
        _ => bytes_json(bytes),
    }
}

pub(crate) fn nested_from<T: JsonCodec>(json: Value) -> Result<Vec<u8>, JsonError> {
    match json {
        Value::Object(_) if !is_hex_object(&json) => T::from_json(json).map(|v| v.encode()),
        _ => bytes_from(json),
    }
}
