//! The actions the bridge knows and their strict request schemas.
//!
//! One JSON Schema file per action, named `ACTION.json`. A schema must be
//! strict at the top (`"additionalProperties": false`, so an undeclared
//! field is refused, as the AX host refuses it) and declare the `action`
//! field itself. The set shipped with the bridge
//! ([`ActionSchemas::defaults`]) covers the memory, web, audit and LLM
//! actions of the examples; `--schemas DIR` replaces it with the files of a
//! directory (`agdx bridge ax-ipc schemas DIR` writes the shipped set there
//! to start from).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The shipped schemas: (action, file text). One list, used to load the
/// defaults and to write them out.
pub const DEFAULT_SCHEMAS: &[(&str, &str)] = &[
    ("audit_query", include_str!("schemas/audit_query.json")),
    ("llm_call", include_str!("schemas/llm_call.json")),
    ("memory_delete", include_str!("schemas/memory_delete.json")),
    ("memory_list", include_str!("schemas/memory_list.json")),
    ("memory_query", include_str!("schemas/memory_query.json")),
    ("memory_read", include_str!("schemas/memory_read.json")),
    ("memory_write", include_str!("schemas/memory_write.json")),
    ("web_fetch", include_str!("schemas/web_fetch.json")),
    ("web_search", include_str!("schemas/web_search.json")),
];

/// At most this many validation problems are named in one answer.
const MAX_ISSUES: usize = 3;
/// A problem's text is cut here: the instance in it may be megabytes.
const MAX_ISSUE_CHARS: usize = 300;

/// Why a schema set could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum SchemaError {
    /// The directory or a file in it could not be read.
    #[error("cannot read the schemas in {}: {source}", path.display())]
    Read {
        /// The directory or file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is not JSON.
    #[error("schema for action {action:?} ({origin}) is not JSON: {source}")]
    NotJson {
        /// The action (the file's stem).
        action: String,
        /// Where it came from.
        origin: String,
        /// The parse error.
        source: serde_json::Error,
    },
    /// A file is not a valid JSON Schema.
    #[error("schema for action {action:?} ({origin}) is not a valid JSON Schema: {reason}")]
    Invalid {
        /// The action.
        action: String,
        /// Where it came from.
        origin: String,
        /// What the schema compiler said.
        reason: String,
    },
    /// A schema would let undeclared fields through, or does not declare `action`.
    #[error("schema for action {action:?} ({origin}) is not strict: {what}")]
    NotStrict {
        /// The action.
        action: String,
        /// Where it came from.
        origin: String,
        /// What to change.
        what: &'static str,
    },
    /// The file name cannot be an action name.
    #[error(
        "{} cannot be an action's schema: name it ACTION.json, with ACTION of 1 to 256 bytes of letters, digits, '_', '-' or '.'",
        path.display()
    )]
    BadName {
        /// The file.
        path: PathBuf,
    },
    /// The directory holds no schema.
    #[error(
        "no ACTION.json schema in {}; write the shipped ones there to start from",
        dir.display()
    )]
    Empty {
        /// The directory.
        dir: PathBuf,
    },
}

impl SchemaError {
    /// Whether loading again may succeed without anyone changing a file.
    pub fn is_retryable(&self) -> bool {
        match self {
            SchemaError::Read { .. } => true,
            SchemaError::NotJson { .. } => false,
            SchemaError::Invalid { .. } => false,
            SchemaError::NotStrict { .. } => false,
            SchemaError::BadName { .. } => false,
            SchemaError::Empty { .. } => false,
        }
    }
}

/// The known actions and a compiled validator for each.
pub struct ActionSchemas {
    validators: BTreeMap<String, jsonschema::Validator>,
}

impl std::fmt::Debug for ActionSchemas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ActionSchemas")
            .field("actions", &self.validators.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl ActionSchemas {
    /// The shipped set ([`DEFAULT_SCHEMAS`]).
    pub fn defaults() -> Result<Self, SchemaError> {
        let mut validators = BTreeMap::new();
        for (action, text) in DEFAULT_SCHEMAS {
            let origin = format!("shipped {action}.json");
            validators.insert((*action).to_owned(), compile(action, &origin, text)?);
        }
        Ok(Self { validators })
    }

    /// Every `ACTION.json` in `dir` (other files are ignored).
    pub fn load_dir(dir: &Path) -> Result<Self, SchemaError> {
        let read = |source| SchemaError::Read {
            path: dir.to_owned(),
            source,
        };
        let mut validators = BTreeMap::new();
        for entry in std::fs::read_dir(dir).map_err(read)? {
            let path = entry.map_err(read)?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let action = path
                .file_stem()
                .and_then(|s| s.to_str())
                .filter(|s| is_action_name(s))
                .ok_or_else(|| SchemaError::BadName { path: path.clone() })?
                .to_owned();
            let text = std::fs::read_to_string(&path).map_err(|source| SchemaError::Read {
                path: path.clone(),
                source,
            })?;
            let validator = compile(&action, &path.display().to_string(), &text)?;
            validators.insert(action, validator);
        }
        if validators.is_empty() {
            return Err(SchemaError::Empty {
                dir: dir.to_owned(),
            });
        }
        Ok(Self { validators })
    }

    /// Whether `action` has a schema.
    pub fn knows(&self, action: &str) -> bool {
        self.validators.contains_key(action)
    }

    /// The known actions, sorted.
    pub fn actions(&self) -> impl Iterator<Item = &str> {
        self.validators.keys().map(String::as_str)
    }

    /// Checks `request` against `action`'s schema: the first few problems,
    /// each as `path: message`, when it does not conform (or when the action
    /// is unknown).
    pub fn check(&self, action: &str, request: &Value) -> Result<(), Vec<String>> {
        let Some(validator) = self.validators.get(action) else {
            return Err(vec![format!("no schema for action {action:?}")]);
        };
        let issues: Vec<String> = validator
            .iter_errors(request)
            .take(MAX_ISSUES)
            .map(|error| {
                let path = error.instance_path().to_string();
                let path = if path.is_empty() { "(request)" } else { &path };
                cut(format!("{path}: {error}"))
            })
            .collect();
        if issues.is_empty() {
            Ok(())
        } else {
            Err(issues)
        }
    }
}

/// Writes the shipped schemas into `dir` (created if missing), leaving files
/// that are already there alone; returns the files written.
pub fn write_defaults(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for (action, text) in DEFAULT_SCHEMAS {
        let path = dir.join(format!("{action}.json"));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
        {
            Ok(mut file) => {
                std::io::Write::write_all(&mut file, text.as_bytes())?;
                written.push(path);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(written)
}

/// Action names are operations on the log (at most 256 bytes) and file stems.
fn is_action_name(name: &str) -> bool {
    (1..=256).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
}

fn compile(action: &str, origin: &str, text: &str) -> Result<jsonschema::Validator, SchemaError> {
    let schema: Value = serde_json::from_str(text).map_err(|source| SchemaError::NotJson {
        action: action.to_owned(),
        origin: origin.to_owned(),
        source,
    })?;
    let not_strict = |what| SchemaError::NotStrict {
        action: action.to_owned(),
        origin: origin.to_owned(),
        what,
    };
    if schema.get("additionalProperties") != Some(&Value::Bool(false)) {
        return Err(not_strict(
            "set \"additionalProperties\": false at the top level, so an undeclared field is refused",
        ));
    }
    if schema.pointer("/properties/action").is_none() {
        return Err(not_strict(
            "declare the action field: \"properties\": {\"action\": {\"const\": \"<action>\"}, ...}",
        ));
    }
    jsonschema::options()
        .should_validate_formats(true)
        .build(&schema)
        .map_err(|e| SchemaError::Invalid {
            action: action.to_owned(),
            origin: origin.to_owned(),
            reason: e.to_string(),
        })
}

fn cut(mut text: String) -> String {
    if let Some((at, _)) = text.char_indices().nth(MAX_ISSUE_CHARS) {
        text.truncate(at);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_shipped_schemas_are_strict_and_compile() {
        let schemas = ActionSchemas::defaults().unwrap();
        assert_eq!(schemas.actions().count(), DEFAULT_SCHEMAS.len());
        let ok = json!({"action": "memory_write", "scope": "notes", "content": "hi"});
        assert_eq!(schemas.check("memory_write", &ok), Ok(()));
        let extra = json!({"action": "memory_write", "scope": "notes", "content": "hi", "evil": 1});
        let issues = schemas.check("memory_write", &extra).unwrap_err();
        assert!(issues[0].contains("evil"), "{issues:?}");
        let nul = json!({"action": "memory_query", "scope": "notes", "query": "a\u{0}b"});
        assert!(schemas.check("memory_query", &nul).is_err());
        let blocks = json!({"action": "llm_call", "messages": [
            {"role": "user", "content": "list files"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "c1", "name": "bash", "input": {"command": "ls"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "a.txt"}]}
        ]});
        assert_eq!(schemas.check("llm_call", &blocks), Ok(()));
        let bad_url = json!({"action": "web_fetch", "url": "not a url"});
        assert!(schemas.check("web_fetch", &bad_url).is_err());
    }

    #[test]
    fn a_lax_schema_is_refused_with_what_to_change() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("ping.json"),
            r#"{"type":"object","properties":{"action":{"const":"ping"}}}"#,
        )
        .unwrap();
        let error = ActionSchemas::load_dir(dir.path()).unwrap_err();
        assert!(matches!(error, SchemaError::NotStrict { .. }), "{error}");
        assert!(
            error
                .to_string()
                .contains("\"additionalProperties\": false")
        );
    }

    #[test]
    fn written_defaults_load_back() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            write_defaults(dir.path()).unwrap().len(),
            DEFAULT_SCHEMAS.len()
        );
        assert!(write_defaults(dir.path()).unwrap().is_empty());
        let loaded = ActionSchemas::load_dir(dir.path()).unwrap();
        assert!(loaded.knows("memory_list"));
        assert!(!loaded.knows("evil"));
    }
}
