//! The HTTP surface: one axum router with the reference's REST paths, its
//! authentication, its error bodies, the event streams and `/mcp`.
//!
//! Authentication is the reference's: `/health`, `/ready` and
//! `/auth/register` are open; `POST /spaces` needs `X-Access-Key` (and takes
//! the caller from a bearer token or, with the key alone, from
//! `X-Node-ID`); everything else needs `Authorization: Bearer TOKEN`, and
//! the caller is the token's node. An `X-Node-ID` naming another node than
//! the token's is refused. The writes that may register their caller
//! (`POST /spaces/{id}/messages`) and `/mcp` take either a bearer token or,
//! as `POST /spaces` does, the access key with `X-Node-ID`: whoever holds
//! the key may register any node anyway. `POST /nodes` registers a node,
//! so it needs the access key too (a token alone could otherwise take
//! names others will register).
//!
//! Every JSON body nests at most [`MAX_JSON_DEPTH`](super::MAX_JSON_DEPTH)
//! levels, and a path whose segments do not decode (not UTF-8) gets IOA's
//! JSON error like any other refusal.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;

use agdx_wire::ConversationId;
use axum::body::Bytes;
use axum::extract::path::ErrorKind;
use axum::extract::rejection::{BytesRejection, PathRejection, QueryRejection};
use axum::extract::{DefaultBodyLimit, FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use futures_util::Stream;
use serde::de::DeserializeOwned;

use super::model::{
    AuthRegister, ErrorResponse, IdentityBinding, NodeCreate, SpaceCreate, too_deep, too_deep_error,
};
use super::records::StoredMessage;
use super::service::{Caller, MessageFilter, READ_INBOX, ReadOptions, own_node, read_mode};
use super::view::{Mode, View, message_out};
use super::{IoaBridge, IoaError, mcp};

impl IntoResponse for IoaError {
    fn into_response(self) -> Response {
        let status =
            StatusCode::from_u16(self.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let detail = self.to_string();
        (status, Json(ErrorResponse { detail })).into_response()
    }
}

type Answer<T> = Result<T, IoaError>;

pub(crate) fn router(bridge: IoaBridge) -> Router {
    let max_body = bridge.config().max_body_bytes;
    Router::new()
        .route("/health", get(health))
        .route("/ready", get(health))
        .route("/auth/register", post(auth_register))
        .route("/nodes", get(list_nodes).post(create_node))
        .route("/nodes/{node}", get(get_node))
        .route(
            "/nodes/{node}/identities",
            axum::routing::put(bind_identity).delete(unbind_identity),
        )
        .route("/identities", get(resolve_identity))
        .route("/nodes/{node}/inbox", get(inbox))
        .route("/nodes/{node}/sse", get(node_events))
        .route("/messages", get(list_messages))
        .route("/spaces", get(list_spaces).post(create_space))
        .route("/spaces/{space}", get(get_space))
        .route(
            "/spaces/{space}/messages",
            get(read_messages).post(send_message),
        )
        .route("/spaces/{space}/sse", get(space_events))
        .route(
            "/spaces/{space}/messages/{message}/sse",
            get(message_events),
        )
        .route_service("/mcp", mcp::service(bridge.clone()))
        .fallback(|| async { IoaError::NotFound("not found".into()) })
        .method_not_allowed_fallback(|| async {
            (
                StatusCode::METHOD_NOT_ALLOWED,
                Json(ErrorResponse {
                    detail: "method not allowed".into(),
                }),
            )
        })
        .layer(middleware::from_fn_with_state(bridge.clone(), authenticate))
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(bridge)
}

/// Resolves the caller, or refuses the request as the reference does.
async fn authenticate(
    State(bridge): State<IoaBridge>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().trim_end_matches('/');
    if path == "/health" || path == "/ready" || path.starts_with("/auth") {
        return next.run(request).await;
    }
    let post = request.method() == Method::POST;
    let gate = if (path == "/spaces" || path == "/nodes") && post {
        Gate::Key
    } else if path == "/mcp" || (post && is_messages(path)) {
        Gate::TokenOrKey
    } else {
        Gate::Token
    };
    match caller(&bridge, request.headers(), gate) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refusal) => refusal.into_response(),
    }
}

/// Whether `path` is `/spaces/{id}/messages`.
fn is_messages(path: &str) -> bool {
    path.strip_prefix("/spaces/")
        .and_then(|rest| rest.strip_suffix("/messages"))
        .is_some_and(|id| !id.is_empty() && !id.contains('/'))
}

/// The credentials a path takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// The access key, with a bearer token or `X-Node-ID` naming the caller.
    Key,
    /// A bearer token, or else the access key with `X-Node-ID`.
    TokenOrKey,
    /// A bearer token.
    Token,
}

fn caller(bridge: &IoaBridge, headers: &HeaderMap, gate: Gate) -> Answer<Caller> {
    let text = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|v| !v.is_empty())
    };
    let named = text(header::HeaderName::from_static("x-node-id"));
    let authorization = headers
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    let key = text(header::HeaderName::from_static("x-access-key"));
    let by_token = |token: &str| {
        token_caller(bridge, token, named).map(|node| Caller {
            node: Some(node),
            by_key: false,
        })
    };
    // The access key may act as any node, so it names its caller freely.
    let by_key = || Caller {
        node: named.map(str::to_owned),
        by_key: true,
    };
    let check_key = |key: &str| {
        if key == bridge.config().access_key {
            Ok(())
        } else {
            Err(IoaError::Forbidden("invalid access key".into()))
        }
    };
    match gate {
        Gate::Key => {
            let Some(key) = key else {
                return Err(IoaError::Unauthorized("access key required".into()));
            };
            check_key(key)?;
            let Some(authorization) = authorization else {
                return Ok(by_key());
            };
            let Some(token) = authorization.strip_prefix("Bearer ") else {
                return Err(IoaError::Unauthorized(
                    "invalid authorization header".into(),
                ));
            };
            by_token(token)
        }
        Gate::TokenOrKey if authorization.is_none() && key.is_some() => {
            check_key(key.unwrap_or_default())?;
            Ok(by_key())
        }
        Gate::TokenOrKey | Gate::Token => {
            let Some(token) = authorization.and_then(|a| a.strip_prefix("Bearer ")) else {
                return Err(IoaError::Unauthorized(
                    "authorization token required".into(),
                ));
            };
            by_token(token)
        }
    }
}

fn token_caller(bridge: &IoaBridge, token: &str, named: Option<&str>) -> Answer<String> {
    let node = bridge
        .resolve_token(token)
        .ok_or_else(|| IoaError::Unauthorized("invalid token".into()))?;
    match named {
        Some(other) if other != node => Err(IoaError::Forbidden(format!(
            "X-Node-ID '{other}' is not the node of this token ('{node}'); leave the header out or use {other}'s own token"
        ))),
        _ => Ok(node),
    }
}

/// Path parameters, refused with IOA's JSON error (not axum's plain text)
/// when they do not decode.
struct Segments<T>(T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Segments<T> {
    type Rejection = IoaError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Answer<Self> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Segments(value)),
            Err(PathRejection::FailedToDeserializePathParams(e))
                if matches!(e.kind(), ErrorKind::InvalidUtf8InPathParam { .. }) =>
            {
                Err(IoaError::InvalidInput(
                    "a segment of the path is not UTF-8 once decoded; ids are text: percent-encode their UTF-8 bytes (é is %C3%A9)".into(),
                ))
            }
            Err(rejection) => Err(IoaError::InvalidInput(rejection.body_text())),
        }
    }
}

/// A JSON request body, decoded as strictly as the reference decodes it.
fn body<T: DeserializeOwned>(bridge: &IoaBridge, body: Result<Bytes, BytesRejection>) -> Answer<T> {
    let bytes = raw(bridge, body)?;
    if too_deep(&bytes) {
        return Err(IoaError::InvalidInput(too_deep_error()));
    }
    serde_json::from_slice(&bytes)
        .map_err(|e| IoaError::InvalidInput(format!("invalid request body: {e}")))
}

/// A request body within the bridge's limit.
fn raw(bridge: &IoaBridge, body: Result<Bytes, BytesRejection>) -> Answer<Bytes> {
    body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            IoaError::TooLarge(format!(
                "the request body is over {} bytes, this bridge's limit",
                bridge.config().max_body_bytes
            ))
        } else {
            IoaError::InvalidInput(rejection.body_text())
        }
    })
}

/// Query parameters; the first of a repeated name counts, trimmed.
struct Params(Vec<(String, String)>);

impl Params {
    fn from(query: Result<Query<Vec<(String, String)>>, QueryRejection>) -> Answer<Self> {
        query
            .map(|Query(pairs)| Params(pairs))
            .map_err(|e| IoaError::InvalidInput(e.body_text()))
    }

    fn get(&self, name: &str) -> &str {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map_or("", |(_, v)| v.trim())
    }

    /// A positive integer, when given.
    fn limit(&self) -> Answer<Option<usize>> {
        match self.get("limit") {
            "" => Ok(None),
            raw => match raw.parse::<usize>() {
                Ok(n) if n > 0 => Ok(Some(n)),
                _ => Err(IoaError::InvalidInput(
                    "limit must be greater than 0".into(),
                )),
            },
        }
    }

    /// A boolean as Go's `strconv.ParseBool` reads one, false when absent.
    fn flag(&self, name: &str) -> Answer<bool> {
        match self.get(name) {
            "" => Ok(false),
            "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
            "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
            _ => Err(IoaError::InvalidInput(format!("{name} must be a boolean"))),
        }
    }

    fn read_options(&self) -> Answer<ReadOptions> {
        Ok(ReadOptions {
            message_id: self.get("message_id").to_owned(),
            direction: self.get("direction").to_owned(),
            after: self.get("after").to_owned(),
            limit: self.limit()?,
            all: self.flag("all")?,
        })
    }
}

async fn health(State(bridge): State<IoaBridge>) -> Response {
    match bridge.ready().await {
        Ok(()) => Json(serde_json::json!({"status": "ok"})).into_response(),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(ErrorResponse {
                detail: error.to_string(),
            }),
        )
            .into_response(),
    }
}

async fn auth_register(
    State(bridge): State<IoaBridge>,
    request: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let request: AuthRegister = body(&bridge, request)?;
    let answer = bridge.register(request).await?;
    Ok((StatusCode::CREATED, Json(answer)).into_response())
}

async fn list_nodes(State(bridge): State<IoaBridge>) -> Response {
    Json(bridge.nodes()).into_response()
}

async fn create_node(
    State(bridge): State<IoaBridge>,
    request: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let request: NodeCreate = body(&bridge, request)?;
    let node = bridge.register_node(request).await?;
    Ok((StatusCode::CREATED, Json(node)).into_response())
}

async fn get_node(
    State(bridge): State<IoaBridge>,
    Segments(node): Segments<String>,
) -> Answer<Response> {
    Ok(Json(bridge.node(&node)?).into_response())
}

async fn resolve_identity(
    State(bridge): State<IoaBridge>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Answer<Response> {
    let params = Params::from(query)?;
    let node = bridge.resolve_identity(params.get("namespace"), params.get("subject"))?;
    Ok(Json(node).into_response())
}

async fn bind_identity(
    State(bridge): State<IoaBridge>,
    Segments(node): Segments<String>,
    Extension(caller): Extension<Caller>,
    request: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let binding: IdentityBinding = body(&bridge, request)?;
    let caller = caller.node.unwrap_or_default();
    Ok(Json(bridge.bind_identity(&caller, &node, binding).await?).into_response())
}

async fn unbind_identity(
    State(bridge): State<IoaBridge>,
    Segments(node): Segments<String>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Answer<Response> {
    let params = Params::from(query)?;
    let caller = caller.node.unwrap_or_default();
    let node = bridge
        .unbind_identity(
            &caller,
            &node,
            params.get("namespace"),
            params.get("subject"),
        )
        .await?;
    Ok(Json(node).into_response())
}

async fn inbox(
    State(bridge): State<IoaBridge>,
    Segments(node): Segments<String>,
    Extension(caller): Extension<Caller>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Answer<Response> {
    let options = Params::from(query)?.read_options()?;
    let caller = caller.node.unwrap_or_default();
    let inbox = bridge.inbox(&caller, &node, &options.after, options.limit)?;
    Ok(Json(inbox).into_response())
}

async fn list_messages(
    State(bridge): State<IoaBridge>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Answer<Response> {
    let params = Params::from(query)?;
    let filter = MessageFilter {
        space_id: params.get("space_id").to_owned(),
        message_id: params.get("message_id").to_owned(),
        node_id: params.get("node_id").to_owned(),
        sender: params.get("sender").to_owned(),
        ref_message: params.get("ref_message").to_owned(),
        ref_node: params.get("ref_node").to_owned(),
        after: params.get("after").to_owned(),
        limit: params.limit()?,
    };
    Ok(Json(bridge.list_messages(&filter)?).into_response())
}

async fn list_spaces(State(bridge): State<IoaBridge>) -> Response {
    Json(bridge.spaces()).into_response()
}

async fn create_space(
    State(bridge): State<IoaBridge>,
    Extension(caller): Extension<Caller>,
    request: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let request: SpaceCreate = body(&bridge, request)?;
    Ok(Json(bridge.join(&caller, request).await?).into_response())
}

async fn get_space(
    State(bridge): State<IoaBridge>,
    Segments(space): Segments<String>,
) -> Answer<Response> {
    Ok(Json(bridge.space(&space)?).into_response())
}

async fn send_message(
    State(bridge): State<IoaBridge>,
    Segments(space): Segments<String>,
    Extension(caller): Extension<Caller>,
    request: Result<Bytes, BytesRejection>,
) -> Answer<Response> {
    let bytes = raw(&bridge, request)?;
    let message = bridge.send(&space, &caller, bytes.to_vec()).await?;
    Ok((StatusCode::CREATED, Json(message)).into_response())
}

async fn read_messages(
    State(bridge): State<IoaBridge>,
    Segments(space): Segments<String>,
    Extension(Caller { node: caller, .. }): Extension<Caller>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> Answer<Response> {
    let params = Params::from(query)?;
    let options = params.read_options()?;
    if !params.flag("listen")? {
        return Ok(Json(bridge.read(&space, caller.as_deref(), options)?).into_response());
    }
    let changed = bridge.inner.shared.changed.subscribe();
    let feed = bridge.inner.shared.read(|v| {
        let (found, mode, after) = read_mode(v, &space, caller.as_deref(), &options)?;
        let fresh = after.map_or(found.messages.len(), |a| a + 1);
        space_feed(v, found.id, &space, &headers, mode, fresh)
    })?;
    Ok(events(bridge, feed, changed))
}

async fn space_events(
    State(bridge): State<IoaBridge>,
    Segments(space): Segments<String>,
    headers: HeaderMap,
) -> Answer<Response> {
    let changed = bridge.inner.shared.changed.subscribe();
    let feed = bridge.inner.shared.read(|v| {
        let found = v
            .space(&space)
            .ok_or_else(|| IoaError::NotFound(format!("Space '{space}' not found")))?;
        space_feed(
            v,
            found.id,
            &space,
            &headers,
            Mode::All,
            found.messages.len(),
        )
    })?;
    Ok(events(bridge, feed, changed))
}

async fn message_events(
    State(bridge): State<IoaBridge>,
    Segments((space, message)): Segments<(String, String)>,
    headers: HeaderMap,
) -> Answer<Response> {
    let changed = bridge.inner.shared.changed.subscribe();
    let options = ReadOptions {
        message_id: message,
        ..ReadOptions::default()
    };
    let feed = bridge.inner.shared.read(|v| {
        let (found, mode, _) = read_mode(v, &space, None, &options)?;
        space_feed(v, found.id, &space, &headers, mode, found.messages.len())
    })?;
    Ok(events(bridge, feed, changed))
}

async fn node_events(
    State(bridge): State<IoaBridge>,
    Segments(node): Segments<String>,
    Extension(caller): Extension<Caller>,
    headers: HeaderMap,
) -> Answer<Response> {
    bridge.node(&node)?;
    own_node(
        caller.node.as_deref().unwrap_or_default(),
        &node,
        READ_INBOX,
    )?;
    let changed = bridge.inner.shared.changed.subscribe();
    let next = bridge.inner.shared.read(|v| match last_event_id(&headers) {
        Some(last) => v.arrival_of(last).map(|i| i + 1).ok_or_else(|| {
            IoaError::InvalidInput(format!(
                "Last-Event-ID '{last}' is no message this bridge has; reconnect without it to get what comes next"
            ))
        }),
        None => Ok(v.arrived()),
    })?;
    Ok(events(bridge, Feed::Node { node, next }, changed))
}

fn last_event_id(headers: &HeaderMap) -> Option<&str> {
    headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}

/// Where a stream of `space` resumes after the message `last`.
/// A feed of space `space` read in `mode`: after `Last-Event-ID` when the
/// client reconnects with one, else from index `fresh`.
fn space_feed(
    v: &View,
    space: ConversationId,
    space_id: &str,
    headers: &HeaderMap,
    mode: Mode,
    fresh: usize,
) -> Answer<Feed> {
    let next = match last_event_id(headers) {
        Some(last) => resume_in(v, space, space_id, last)?,
        None => fresh,
    };
    Ok(Feed::Space { space, mode, next })
}

fn resume_in(v: &View, space: ConversationId, space_id: &str, last: &str) -> Answer<usize> {
    v.space_of(&space)
        .and_then(|s| v.index_in(s, last))
        .map(|i| i + 1)
        .ok_or_else(|| {
            IoaError::InvalidInput(format!(
                "Last-Event-ID '{last}' is not a message of space '{space_id}'; reconnect without it to get what comes next"
            ))
        })
}

/// What an event stream follows, and where it is.
enum Feed {
    /// A space's messages in log order, from index `next`, as read in `mode`.
    Space {
        space: ConversationId,
        mode: Mode,
        next: usize,
    },
    /// Messages naming `node` in `refs.nodes`, in any space, in the order
    /// the bridge took them in, from `next`.
    Node { node: String, next: usize },
}

impl Feed {
    /// What is new for this stream, moving it past everything there now.
    fn take(&mut self, v: &View) -> Vec<Arc<StoredMessage>> {
        match self {
            Feed::Space { space, mode, next } => {
                let Some(space) = v.space_of(space) else {
                    return Vec::new();
                };
                let new = v.select(space, mode, *next);
                *next = space.messages.len();
                new.into_iter().map(|(_, m)| m).collect()
            }
            Feed::Node { node, next } => {
                let (new, upto) = v.arrived_since(*next);
                *next = upto;
                new.into_iter()
                    .filter(|m| m.refs.nodes.iter().any(|n| n == node))
                    .collect()
            }
        }
    }
}

/// An SSE response: `event: message`, `id: <message id>`, `data: <Message
/// JSON>` per message, and a `: keepalive` comment when idle.
fn events(bridge: IoaBridge, feed: Feed, changed: tokio::sync::watch::Receiver<u64>) -> Response {
    let keepalive = KeepAlive::new()
        .interval(bridge.config().keepalive)
        .text("keepalive");
    let mut response = Sse::new(stream(bridge, feed, changed))
        .keep_alive(keepalive)
        .into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

fn stream(
    bridge: IoaBridge,
    feed: Feed,
    changed: tokio::sync::watch::Receiver<u64>,
) -> impl Stream<Item = Result<Event, Infallible>> {
    let state = (bridge, feed, changed, VecDeque::<Arc<StoredMessage>>::new());
    futures_util::stream::unfold(
        state,
        |(bridge, mut feed, mut changed, mut queue)| async move {
            loop {
                if let Some(message) = queue.pop_front() {
                    let event = event(&message);
                    return Some((Ok(event), (bridge, feed, changed, queue)));
                }
                let new = bridge.inner.shared.read(|v| feed.take(v));
                if new.is_empty() {
                    tokio::select! {
                        seen = changed.changed() => seen.ok()?,
                        () = bridge.inner.closing.cancelled() => return None,
                    }
                }
                queue.extend(new);
            }
        },
    )
}

fn event(message: &StoredMessage) -> Event {
    let out = message_out(message);
    let data = serde_json::to_string(&out).unwrap_or_default();
    Event::default().event("message").id(out.id).data(data)
}
