//! The HTTP surface: `GET /agents`, each agent's card, and its JSON-RPC
//! endpoint (plain JSON answers, SSE for the streaming methods).

use std::convert::Infallible;
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use futures_util::Stream;
use serde_json::{Value, json};

use super::A2aBridge;
use super::card::a2a_card;
use super::error::A2aError;
use super::live::LiveTask;
use super::service::Started;
use super::v03;
use crate::cards::LiveAgent;

pub fn router(bridge: A2aBridge) -> Router {
    let limit = bridge.config().max_body_bytes;
    Router::new()
        .route("/agents", get(agents))
        .route("/agents/{agent}/.well-known/agent-card.json", get(card))
        .route("/agents/{agent}", post(rpc))
        .route("/agents/{agent}/", post(rpc))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(bridge)
}

/// The URL the client reached the bridge at.
fn base_url(bridge: &A2aBridge, headers: &HeaderMap) -> String {
    if let Some(url) = &bridge.config().public_url {
        return url.trim_end_matches('/').to_owned();
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    format!("http://{host}")
}

fn failed(status: StatusCode, error: &A2aError) -> Response {
    (status, axum::Json(json!({"error": error.to_string()}))).into_response()
}

async fn agents(State(bridge): State<A2aBridge>, headers: HeaderMap) -> Response {
    let base = base_url(&bridge, &headers);
    match bridge.live_agents().await {
        Ok(live) => {
            let cards: Vec<Value> = live.iter().map(|a| a2a_card(a, &base)).collect();
            axum::Json(json!({"agents": cards})).into_response()
        }
        Err(error) => failed(StatusCode::SERVICE_UNAVAILABLE, &error),
    }
}

async fn card(
    State(bridge): State<A2aBridge>,
    Path(agent): Path<String>,
    headers: HeaderMap,
) -> Response {
    match bridge.agent(&agent).await {
        Ok(live) => axum::Json(a2a_card(&live, &base_url(&bridge, &headers))).into_response(),
        Err(error @ A2aError::NoAgent(_)) => failed(StatusCode::NOT_FOUND, &error),
        Err(error) => failed(StatusCode::SERVICE_UNAVAILABLE, &error),
    }
}

/// One JSON-RPC call: its id, and whether it came by a 0.3 method name.
#[derive(Clone)]
struct Call {
    id: Value,
    legacy: bool,
}

impl Call {
    fn result(&self, result: Value) -> Value {
        let result = if self.legacy {
            v03::result(result)
        } else {
            result
        };
        json!({"jsonrpc": "2.0", "id": self.id, "result": result})
    }

    fn task(&self, task: Value) -> Response {
        let task = if self.legacy { v03::task(task) } else { task };
        axum::Json(json!({"jsonrpc": "2.0", "id": self.id, "result": task})).into_response()
    }

    fn error(&self, error: &A2aError) -> Response {
        let body = json!({"jsonrpc": "2.0", "id": self.id, "error": error.to_json()});
        let status = match error {
            A2aError::NoAgent(_) => StatusCode::NOT_FOUND,
            _ => StatusCode::OK,
        };
        (status, axum::Json(body)).into_response()
    }
}

async fn rpc(State(bridge): State<A2aBridge>, Path(agent): Path<String>, body: Bytes) -> Response {
    let mut call = Call {
        id: Value::Null,
        legacy: false,
    };
    let request: Value = match serde_json::from_slice(&body) {
        Ok(request) => request,
        Err(e) => return call.error(&A2aError::Parse(e)),
    };
    call.id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = match (request.get("jsonrpc"), request.get("method")) {
        (Some(v), Some(Value::String(m))) if v == "2.0" => m.clone(),
        _ => {
            let why = "a JSON-RPC 2.0 request object needs \"jsonrpc\":\"2.0\" and a method";
            return call.error(&A2aError::InvalidRequest(why.into()));
        }
    };
    call.legacy = method.contains('/');
    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    let live = match bridge.agent(&agent).await {
        Ok(live) => live,
        Err(error) => return call.error(&error),
    };
    match dispatch(&bridge, &live, &method, &params, &call).await {
        Ok(response) => response,
        Err(error) => call.error(&error),
    }
}

fn task_id(params: &Value) -> Result<&str, A2aError> {
    params
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| A2aError::InvalidParams("params.id (the task id) is missing".into()))
}

async fn dispatch(
    bridge: &A2aBridge,
    agent: &LiveAgent,
    method: &str,
    params: &Value,
    call: &Call,
) -> Result<Response, A2aError> {
    match method {
        "SendMessage" | "message/send" => {
            let immediately = params["configuration"]["returnImmediately"] == true
                || params["configuration"]["blocking"] == false;
            match bridge.send(agent, params).await? {
                Started::Live(task, from) => {
                    if !immediately {
                        task.wait_stop(from, bridge.config().send_wait).await;
                    }
                    Ok(axum::Json(call.result(json!({"task": task.to_json()}))).into_response())
                }
                Started::Logged(task) => {
                    Ok(axum::Json(call.result(json!({"task": task.to_json()}))).into_response())
                }
            }
        }
        "SendStreamingMessage" | "message/stream" => match bridge.send(agent, params).await? {
            Started::Live(task, 0) => {
                let first = json!({"task": task.initial_json()});
                Ok(events(bridge, call, Some(first), task, 1))
            }
            Started::Live(task, from) => Ok(events(bridge, call, None, task, from)),
            Started::Logged(task) => Ok(events_of_logged(bridge, call, task.to_json())),
        },
        "SubscribeToTask" | "tasks/resubscribe" => {
            let logged = bridge.task(agent, task_id(params)?).await?;
            match bridge.inner.tasks.get(&logged.id) {
                Some(task) if !logged.state.is_terminal() => {
                    let first = json!({"task": task.to_json()});
                    let from = task.event_count();
                    Ok(events(bridge, call, Some(first), task, from))
                }
                _ => Err(A2aError::Unsupported(format!(
                    "task {} is {} and not followed by this bridge: read it with GetTask",
                    logged.id,
                    logged.state.name()
                ))),
            }
        }
        "GetTask" | "tasks/get" => {
            Ok(call.task(bridge.task(agent, task_id(params)?).await?.to_json()))
        }
        "CancelTask" | "tasks/cancel" => {
            Ok(call.task(bridge.cancel(agent, task_id(params)?).await?.to_json()))
        }
        "CreateTaskPushNotificationConfig"
        | "GetTaskPushNotificationConfig"
        | "ListTaskPushNotificationConfigs"
        | "DeleteTaskPushNotificationConfig"
        | "tasks/pushNotificationConfig/set"
        | "tasks/pushNotificationConfig/get"
        | "tasks/pushNotificationConfig/list"
        | "tasks/pushNotificationConfig/delete" => Err(A2aError::NoPush),
        "ListTasks" | "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => Err(
            A2aError::Unsupported(format!("{method} is not served by this bridge")),
        ),
        other => Err(A2aError::MethodNotFound(other.to_owned())),
    }
}

/// An SSE response of JSON-RPC results: `first` (when given), then the
/// task's events from index `from` until one stops it.
fn events(
    bridge: &A2aBridge,
    call: &Call,
    first: Option<Value>,
    task: Arc<LiveTask>,
    from: usize,
) -> Response {
    let closing = bridge.inner.closing.clone();
    let call = call.clone();
    let state = (first, task, from, false);
    let stream = futures_util::stream::unfold(state, move |(first, task, next, done)| {
        let closing = closing.clone();
        let call = call.clone();
        async move {
            if let Some(first) = first {
                let event = data(call.result(first));
                return Some((event, (None, task, next, done)));
            }
            if done {
                return None;
            }
            loop {
                if let Some(event) = task.events_from(next).into_iter().next() {
                    let stop = event.is_stop();
                    let result = call.result(event.to_json(&task.id, &task.context_id));
                    return Some((data(result), (None, task, next + 1, stop)));
                }
                tokio::select! {
                    () = task.more_than(next) => {}
                    () = closing.cancelled() => return None,
                }
            }
        }
    });
    sse(bridge, stream)
}

/// One event: the task as the log has it.
fn events_of_logged(bridge: &A2aBridge, call: &Call, task: Value) -> Response {
    let event = data(call.result(json!({"task": task})));
    sse(bridge, futures_util::stream::iter([event]))
}

fn data(result: Value) -> Result<Event, Infallible> {
    Ok(Event::default().data(result.to_string()))
}

fn sse(
    bridge: &A2aBridge,
    stream: impl Stream<Item = Result<Event, Infallible>> + Send + 'static,
) -> Response {
    let keepalive = KeepAlive::new().interval(bridge.config().keepalive);
    let mut response = Sse::new(stream).keep_alive(keepalive).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}
