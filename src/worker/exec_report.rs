//! What an `--exec` command reports besides its output: JSON lines it
//! appends to the file `AGDX_REPORT` names.
//!
//! Each line is one JSON object with any of these keys:
//!
//! | key | value | what it does |
//! | --- | --- | --- |
//! | `progress` | any JSON | a `status` `progress` to the requester now, this as its body |
//! | `finish_reason` | text | why the answer ended (`stop`, `length`, ...) |
//! | `usage` | `{"input_tokens": N, "output_tokens": N, ...}` | the tokens the answer cost |
//! | `tool` | text | the tool involved |
//! | `task_state` | a task state name (`completed`, ...) | where the task stands (on a response) |
//! | `metadata` | `{"key": text, number or bool}` | facts added to the answer's metadata |
//! | `input_required` | text (or any JSON, sent as its JSON text) | asks the caller for input with this prompt; the answer is read from `AGDX_INPUT` |
//!
//! A later line overrides an earlier one key by key (metadata entries are
//! added). A line that is not such an object fails the command with an
//! error naming the line: a report that says something else than meant is
//! not guessed at.

use agdx_wire::{Scalar, TaskState, TokenUsage};
use serde_json::Value;

use crate::producer::ReplyFields;

/// The keys a report line may carry.
const KEYS: [&str; 7] = [
    "progress",
    "finish_reason",
    "usage",
    "tool",
    "task_state",
    "metadata",
    "input_required",
];

/// What a report line asks for now, beside the fields it sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Asked {
    /// A `status` `progress` with this body.
    Progress(Vec<u8>),
    /// The caller's input, prompted with this body.
    Input(Vec<u8>),
}

/// A report line that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line} of the AGDX_REPORT file is not a report: {problem}")]
pub struct ReportError {
    /// The line's number, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub problem: String,
}

/// The report read so far: the answer's fields, and the lines read.
#[derive(Debug, Default)]
pub(super) struct Report {
    pub fields: ReplyFields,
    lines: usize,
    /// Bytes after the last complete line, kept for the next read.
    partial: Vec<u8>,
}

impl Report {
    /// Takes `bytes` appended to the file since the last call; returns what
    /// the complete lines ask for now (progress, input), in order. With
    /// `at_end`, a last line without its newline counts too.
    pub fn take(&mut self, bytes: &[u8], at_end: bool) -> Result<Vec<Asked>, ReportError> {
        self.partial.extend_from_slice(bytes);
        let mut progress = Vec::new();
        while let Some(end) = self.partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            progress.extend(self.line(&line[..end])?);
        }
        if at_end && !self.partial.is_empty() {
            let line = std::mem::take(&mut self.partial);
            progress.extend(self.line(&line)?);
        }
        Ok(progress)
    }

    /// Applies one line; what it asks for now (progress first).
    fn line(&mut self, line: &[u8]) -> Result<Vec<Asked>, ReportError> {
        self.lines += 1;
        let fail = |problem: String| ReportError {
            line: self.lines,
            problem,
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            return Ok(Vec::new());
        }
        let value: Value = serde_json::from_slice(line)
            .map_err(|e| fail(format!("{e}; each line is one JSON object")))?;
        let Value::Object(object) = value else {
            return Err(fail(format!("expected a JSON object with any of {KEYS:?}")));
        };
        let (mut progress, mut input) = (None, None);
        for (key, value) in object {
            match key.as_str() {
                "progress" => progress = Some(Asked::Progress(value.to_string().into_bytes())),
                "input_required" => {
                    let prompt = match value {
                        Value::String(text) => text.into_bytes(),
                        other => other.to_string().into_bytes(),
                    };
                    input = Some(Asked::Input(prompt));
                }
                "finish_reason" => {
                    self.fields.finish_reason = Some(text(&key, value).map_err(fail)?)
                }
                "tool" => self.fields.tool = Some(text(&key, value).map_err(fail)?),
                "usage" => self.fields.usage = Some(usage(value).map_err(fail)?),
                "task_state" => {
                    let name = text(&key, value).map_err(fail)?;
                    let state = name.parse::<TaskState>().map_err(|e| fail(e.to_string()))?;
                    self.fields.task_state = Some(state);
                }
                "metadata" => {
                    let Value::Object(entries) = value else {
                        return Err(fail("`metadata` must be an object of scalars".into()));
                    };
                    for (name, value) in entries {
                        let scalar =
                            scalar(value).map_err(|p| fail(format!("metadata `{name}`: {p}")))?;
                        self.fields = std::mem::take(&mut self.fields).metadata(name, scalar);
                    }
                }
                other => {
                    return Err(fail(format!(
                        "unknown key `{other}`; the keys are {KEYS:?}"
                    )));
                }
            }
        }
        Ok(progress.into_iter().chain(input).collect())
    }
}

/// The text value of `key`.
fn text(key: &str, value: Value) -> Result<String, String> {
    match value {
        Value::String(text) => Ok(text),
        other => Err(format!("`{key}` must be a string, not {other}")),
    }
}

/// A `usage` object.
fn usage(value: Value) -> Result<TokenUsage, String> {
    let count = |name: &str| -> Result<Option<u64>, String> {
        match value.get(name) {
            None => Ok(None),
            Some(n) => n
                .as_u64()
                .map(Some)
                .ok_or_else(|| format!("usage `{name}` must be a whole number, not {n}")),
        }
    };
    let required = |name: &str| {
        count(name)?.ok_or_else(|| format!("usage needs `{name}` (input_tokens and output_tokens)"))
    };
    if !value.is_object() {
        return Err(format!("`usage` must be an object, not {value}"));
    }
    Ok(TokenUsage {
        input_tokens: required("input_tokens")?,
        output_tokens: required("output_tokens")?,
        reasoning_output_tokens: count("reasoning_output_tokens")?,
        cache_read_input_tokens: count("cache_read_input_tokens")?,
        cache_creation_input_tokens: count("cache_creation_input_tokens")?,
    })
}

/// A metadata value.
fn scalar(value: Value) -> Result<Scalar, String> {
    match value {
        Value::String(text) => Ok(text.into()),
        Value::Bool(flag) => Ok(flag.into()),
        Value::Number(n) => {
            if let Some(n) = n.as_u64() {
                Ok(n.into())
            } else if let Some(n) = n.as_i64() {
                Ok(n.into())
            } else {
                Ok(n.as_f64().unwrap_or_default().into())
            }
        }
        other => Err(format!("must be a string, number or bool, not {other}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_set_fields_and_progress_goes_out_in_order() {
        let mut report = Report::default();
        let progress = report
            .take(
                b"{\"progress\": {\"done\": 1}}\n{\"finish_reason\": \"len",
                false,
            )
            .expect("a report");
        assert_eq!(progress, [Asked::Progress(b"{\"done\":1}".to_vec())]);
        assert_eq!(
            report.fields.finish_reason, None,
            "the line is not complete yet"
        );
        let progress = report
            .take(
                b"gth\", \"usage\": {\"input_tokens\": 3, \"output_tokens\": 4}}\n{\"metadata\": {\"model\": \"m\", \"n\": 2}, \"task_state\": \"completed\"}",
                true,
            )
            .expect("a report");
        assert!(progress.is_empty());
        assert_eq!(report.fields.finish_reason.as_deref(), Some("length"));
        assert_eq!(report.fields.usage, Some(TokenUsage::new(3, 4)));
        assert_eq!(report.fields.task_state, Some(TaskState::Completed));
        let metadata = report.fields.metadata.expect("metadata");
        assert_eq!(metadata.get("model").and_then(Scalar::as_str), Some("m"));
        assert_eq!(metadata.get("n").and_then(Scalar::as_u64), Some(2));
    }

    #[test]
    fn an_input_line_asks_with_its_prompt_after_its_progress() {
        let mut report = Report::default();
        let asked = report
            .take(
                b"{\"input_required\": \"which day?\", \"progress\": 1}\n{\"input_required\": {\"q\": 2}}\n",
                false,
            )
            .expect("a report");
        assert_eq!(
            asked,
            [
                Asked::Progress(b"1".to_vec()),
                Asked::Input(b"which day?".to_vec()),
                Asked::Input(b"{\"q\":2}".to_vec()),
            ]
        );
    }

    #[test]
    fn a_line_that_is_not_a_report_is_refused_by_number() {
        for (bad, says) in [
            ("not json", "each line is one JSON object"),
            ("[1]", "expected a JSON object"),
            ("{\"usage\": {\"input_tokens\": 1}}", "output_tokens"),
            ("{\"colour\": \"red\"}", "unknown key `colour`"),
            ("{\"task_state\": \"sleeping\"}", "sleeping"),
            ("{\"metadata\": {\"k\": [1]}}", "metadata `k`"),
        ] {
            let mut report = Report::default();
            let error = report
                .take(format!("{{}}\n{bad}\n").as_bytes(), true)
                .expect_err(bad);
            assert_eq!(error.line, 2, "{bad}");
            assert!(error.to_string().contains(says), "{bad}: {error}");
        }
    }
}
