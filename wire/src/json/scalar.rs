//! The JSON forms of dictionaries and metadata.

use serde_json::{Map, Number, Value};

use super::error::JsonError;
use super::value::{Obj, parse, uint};
use crate::dictionary::{
    ContentType, DeadLetterReason, ErrorCode, Health, SignatureScheme, TaskState,
};
use crate::metadata::{Float, Metadata, Scalar};

/// A u8 dictionary: its name, or its number when the code is unknown.
pub(crate) trait DictJson: Sized {
    fn to_json(self) -> Value;
    fn from_json(json: Value) -> Result<Self, JsonError>;
}

macro_rules! dictionary_json {
    ($($t:ty),*) => {$(
        impl DictJson for $t {
            fn to_json(self) -> Value {
                if self.is_recognized() {
                    Value::from(self.name())
                } else {
                    Value::from(u64::from(self.code()))
                }
            }
            fn from_json(json: Value) -> Result<Self, JsonError> {
                match json {
                    Value::Number(_) => uint::<u8>(json).map(<$t>::from_code),
                    other => parse(other),
                }
            }
        }
    )*};
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
fn float_json(f: Float) -> Value {
    let v = f.value();
    if let Some(n) = Number::from_f64(v) {
        return Value::Number(n);
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

fn scalar_json(s: &Scalar) -> Value {
    match s {
        Scalar::Null => Value::Null,
        Scalar::Bool(b) => Value::Bool(*b),
        Scalar::Int(i) => match i.as_u64() {
            Some(u) => Value::from(u),
            // Not a u64, so a negative i64 (the metadata integer range).
            None => Value::from(i.get() as i64),
        },
        Scalar::Float(f) => float_json(*f),
        Scalar::Text(t) => Value::String(t.clone()),
        Scalar::Array(items) => Value::Array(items.iter().map(scalar_json).collect()),
    }
}

/// The one entry of a `{"float": ...}` or `{"float_bits": ...}` object.
fn special_float(key: &str, value: Value) -> Result<Scalar, JsonError> {
    match key {
        "float" => {
            let v = match value {
                Value::String(s) => match s.as_str() {
                    "NaN" => f64::NAN,
                    "Infinity" => f64::INFINITY,
                    "-Infinity" => f64::NEG_INFINITY,
                    _ => {
                        return Err(JsonError::Invalid(format!(
                            "{s:?} is not NaN, Infinity or -Infinity"
                        )));
                    }
                },
                _ => return Err(JsonError::Invalid("not NaN, Infinity or -Infinity".into())),
            };
            Ok(Scalar::from(v))
        }
        "float_bits" => {
            let hex: String = parse(value)?;
            let bits = u64::from_str_radix(&hex, 16).map_err(|_| {
                JsonError::Invalid(format!("{hex:?} is not 16 hex digits of a float"))
            })?;
            Ok(Scalar::Float(Float::new(f64::from_bits(bits))))
        }
        _ => Err(JsonError::Invalid(format!(
            "unknown scalar form {{\"{key}\": ...}}"
        ))),
    }
}

fn scalar_from(json: Value) -> Result<Scalar, JsonError> {
    Ok(match json {
        Value::Null => Scalar::Null,
        Value::Bool(b) => Scalar::Bool(b),
        Value::String(s) => Scalar::Text(s),
        Value::Number(n) => match (n.as_u64(), n.as_i64(), n.as_f64()) {
            (Some(u), _, _) => Scalar::from(u),
            (None, Some(i), _) => Scalar::from(i),
            (None, None, Some(f)) => Scalar::from(f),
            _ => return Err(JsonError::Invalid(format!("unsupported number {n}"))),
        },
        Value::Array(items) => Scalar::Array(
            items
                .into_iter()
                .map(scalar_from)
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(entries) => {
            let mut entries = entries.into_iter();
            match (entries.next(), entries.next()) {
                (Some((key, value)), None) => special_float(&key, value)?,
                _ => {
                    return Err(JsonError::Invalid(
                        "a scalar is text, a number, a boolean, null or an array".into(),
                    ));
                }
            }
        }
    })
}

pub(crate) fn metadata_json(m: &Metadata) -> Value {
    Value::Object(
        m.iter()
            .map(|(k, v)| (k.to_owned(), scalar_json(v)))
            .collect::<Map<_, _>>(),
    )
}

pub(crate) fn metadata_from(json: Value) -> Result<Metadata, JsonError> {
    match json {
        Value::Object(entries) => {
            // Keys are unique already: a JSON object holds each once.
            let mut m = Metadata::new();
            for (k, v) in entries {
                let value = scalar_from(v).map_err(|e| e.within(k.clone()))?;
                m.insert(k, value);
            }
            Ok(m)
        }
        _ => Err(JsonError::Expected("an object of scalars")),
    }
}
