//! A2A 0.3's JSON, for clients that call the 0.3 method names (the SDK's
//! compatibility transport does, for an interface of version 0.3): the same
//! objects with `kind` tags, lower-case states and roles, file parts.

use serde_json::{Map, Value, json};

use super::model::state_of;

/// A v1 `SendMessageResponse` or `StreamResponse` as 0.3 writes its
/// result: the task or event itself, tagged by `kind`.
pub fn result(v1: Value) -> Value {
    let Value::Object(mut wrapper) = v1 else {
        return v1;
    };
    if let Some(task) = wrapper.remove("task") {
        return self::task(task);
    }
    if let Some(Value::Object(mut event)) = wrapper.remove("statusUpdate") {
        let status = event.remove("status").unwrap_or(Value::Null);
        let state = status["state"].as_str().and_then(state_of);
        let last =
            state.is_some_and(|s| s.is_terminal() || s == agdx_wire::TaskState::InputRequired);
        event.insert("status".into(), self::status(status));
        event.insert("final".into(), last.into());
        event.insert("kind".into(), "status-update".into());
        return Value::Object(event);
    }
    if let Some(Value::Object(mut event)) = wrapper.remove("artifactUpdate") {
        let artifact = event.remove("artifact").unwrap_or(Value::Null);
        event.insert("artifact".into(), self::artifact(artifact));
        event.insert("kind".into(), "artifact-update".into());
        return Value::Object(event);
    }
    Value::Object(wrapper)
}

/// A v1 Task in 0.3's shape.
pub fn task(v1: Value) -> Value {
    let Value::Object(mut task) = v1 else {
        return v1;
    };
    let status = task.remove("status").unwrap_or(Value::Null);
    task.insert("status".into(), self::status(status));
    if let Some(Value::Array(artifacts)) = task.remove("artifacts") {
        let artifacts = artifacts.into_iter().map(self::artifact).collect();
        task.insert("artifacts".into(), Value::Array(artifacts));
    }
    task.insert("kind".into(), "task".into());
    Value::Object(task)
}

fn status(v1: Value) -> Value {
    let Value::Object(mut status) = v1 else {
        return v1;
    };
    let state = status
        .get("state")
        .and_then(Value::as_str)
        .and_then(state_of)
        .map_or("unknown", |s| s.name());
    status.insert("state".into(), state.into());
    if let Some(Value::Object(mut message)) = status.remove("message") {
        let role = message["role"].as_str().unwrap_or_default().to_owned();
        let role = role
            .strip_prefix("ROLE_")
            .unwrap_or(&role)
            .to_ascii_lowercase();
        message.insert("role".into(), role.into());
        convert_parts(&mut message);
        message.insert("kind".into(), "message".into());
        status.insert("message".into(), Value::Object(message));
    }
    Value::Object(status)
}

fn artifact(v1: Value) -> Value {
    let Value::Object(mut artifact) = v1 else {
        return v1;
    };
    convert_parts(&mut artifact);
    Value::Object(artifact)
}

fn convert_parts(holder: &mut Map<String, Value>) {
    if let Some(Value::Array(parts)) = holder.remove("parts") {
        holder.insert("parts".into(), parts.into_iter().map(part).collect());
    }
}

fn part(v1: Value) -> Value {
    if let Some(text) = v1.get("text") {
        return json!({"kind": "text", "text": text});
    }
    if let Some(data) = v1.get("data") {
        // 0.3 data parts hold an object.
        let data = if data.is_object() {
            data.clone()
        } else {
            json!({"value": data})
        };
        return json!({"kind": "data", "data": data});
    }
    if let Some(raw) = v1.get("raw") {
        let mime = v1.get("mediaType").cloned().unwrap_or(Value::Null);
        return json!({"kind": "file", "file": {"bytes": raw, "mimeType": mime}});
    }
    v1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_and_events_take_the_0_3_shape() {
        let v1 = json!({"task": {"id": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_INPUT_REQUIRED",
                "message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "which day?"}]}},
            "artifacts": [{"artifactId": "reply", "parts": [{"data": {"a": 1}}]}]}});
        let old = result(v1);
        assert_eq!(old["kind"], "task");
        assert_eq!(old["status"]["state"], "input-required");
        assert_eq!(old["status"]["message"]["role"], "agent");
        assert_eq!(
            old["status"]["message"]["parts"][0],
            json!({"kind": "text", "text": "which day?"})
        );
        assert_eq!(
            old["artifacts"][0]["parts"][0],
            json!({"kind": "data", "data": {"a": 1}})
        );
        let update = result(json!({"statusUpdate": {"taskId": "t", "contextId": "c",
            "status": {"state": "TASK_STATE_COMPLETED"}}}));
        assert_eq!(
            (update["kind"].as_str(), update["final"].as_bool()),
            (Some("status-update"), Some(true))
        );
        let piece = result(json!({"artifactUpdate": {"taskId": "t", "contextId": "c",
            "artifact": {"artifactId": "reply", "parts": [{"raw": "AAE="}]}, "append": true}}));
        assert_eq!(piece["kind"], "artifact-update");
        assert_eq!(piece["artifact"]["parts"][0]["file"]["bytes"], "AAE=");
    }
}
