//! Why JSON could not be read as a payload.

/// Why JSON could not be read as a payload: names the field (nested
/// fields outermost first) and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum JsonError {
    /// The payload (or a part of it) is not an object.
    #[error("{what} must be a JSON object")]
    NotAnObject {
        /// What should have been an object.
        what: &'static str,
    },
    /// A required field is absent.
    #[error("{what} needs `{field}`")]
    Missing {
        /// The object.
        what: &'static str,
        /// The absent field.
        field: &'static str,
    },
    /// A field the payload does not have.
    #[error("{what} has no field `{field}`")]
    UnknownField {
        /// The object.
        what: &'static str,
        /// The field read.
        field: String,
    },
    /// A field whose value could not be read.
    #[error("`{field}`: {source}")]
    Field {
        /// The field (or metadata key).
        field: String,
        /// What was wrong with its value.
        source: Box<JsonError>,
    },
    /// A value of the wrong JSON type.
    #[error("expected {0}")]
    Expected(&'static str),
    /// A value of the right type that does not hold.
    #[error("{0}")]
    Invalid(String),
}

impl JsonError {
    /// Places this error on `field`.
    pub(crate) fn within(self, field: impl Into<String>) -> Self {
        JsonError::Field {
            field: field.into(),
            source: Box::new(self),
        }
    }
}
