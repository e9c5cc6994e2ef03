//! The HTTP transport: `POST /internal/ipc`, one call per request, the same
//! pipeline as the socket; and, when the bridge has one, the LLM proxy
//! (`POST /internal/llm-proxy/*`, see [`LlmProxy`]), which takes the same
//! tokens, in `x-api-key` (where the AX agent's SDK puts its key) or as a
//! bearer token, and reads bodies up to 10 MiB.
//!
//! The bearer token is checked first (`Authorization: Bearer TOKEN`; see
//! [`Tokens`]): a missing or wrong one gets 401 `{"error":"invalid
//! token"}` before the body is read. The body is at most 1 MiB (413
//! otherwise). The answer is 200 with the same JSON the socket would
//! frame, `_msgId` echoed when the request had one. HTTP has no heartbeats:
//! the call answers when the reply comes or the bridge's timeout passes.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::call::AxIpcBridge;
use super::llm_proxy::{LLM_BODY_LIMIT, LLM_PROXY_PATH, LlmProxy, error};
use crate::bridge::token::Tokens;
use crate::clock::SharedClock;

/// The path calls are posted to.
pub const IPC_PATH: &str = "/internal/ipc";

/// The largest request body: 1 MiB, as the AX host takes.
pub const HTTP_BODY_LIMIT: usize = 1_048_576;

#[derive(Clone)]
struct Shared {
    bridge: Arc<AxIpcBridge>,
    tokens: Arc<Tokens>,
}

#[derive(Clone)]
struct ProxyShared {
    proxy: LlmProxy,
    tokens: Arc<Tokens>,
    clock: SharedClock,
}

/// The router serving [`IPC_PATH`] for `bridge`, and the LLM proxy under
/// `/internal/llm-proxy/` when the bridge has one, accepting `tokens`.
pub fn router(bridge: Arc<AxIpcBridge>, tokens: Tokens) -> Router {
    let tokens = Arc::new(tokens);
    let proxied = bridge.llm_proxy().cloned().map(|proxy| {
        Router::new()
            .route(&format!("{LLM_PROXY_PATH}/{{*path}}"), post(llm_proxy))
            .with_state(ProxyShared {
                proxy,
                tokens: tokens.clone(),
                clock: bridge.clock().clone(),
            })
    });
    let ipc = Router::new()
        .route(IPC_PATH, post(ipc))
        .with_state(Shared { bridge, tokens });
    match proxied {
        Some(proxied) => ipc.merge(proxied),
        None => ipc,
    }
}

/// Serves `router` on `listener` until `shutdown`.
pub async fn serve_http(
    listener: tokio::net::TcpListener,
    router: Router,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    axum::serve(listener, router)
        .with_graceful_shutdown(shutdown.cancelled_owned())
        .await
}

async fn ipc(State(shared): State<Shared>, headers: HeaderMap, body: Body) -> Response {
    let token = bearer(&headers);
    if !accepted(&shared.tokens, shared.bridge.clock(), token) {
        return invalid_token();
    }
    let bytes = match read_body(body, HTTP_BODY_LIMIT, "one call over HTTP").await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    let answer = shared.bridge.handle(&bytes).await;
    json_response(StatusCode::OK, Value::Object(answer))
}

async fn llm_proxy(
    State(shared): State<ProxyShared>,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // AX's agent sends its turn token as its API key (`x-api-key`);
    // OpenAI-style clients send theirs as a bearer token.
    let token = headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .or_else(|| bearer(&headers));
    if !accepted(&shared.tokens, &shared.clock, token) {
        return invalid_token();
    }
    let bytes = match read_body(body, LLM_BODY_LIMIT, "one LLM request").await {
        Ok(bytes) => bytes,
        Err(refused) => return refused,
    };
    let target = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let tail = target.strip_prefix(LLM_PROXY_PATH).unwrap_or(target);
    shared.proxy.forward(tail, &headers, bytes).await
}

/// The token of `Authorization: Bearer TOKEN`.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
}

fn accepted(tokens: &Tokens, clock: &SharedClock, token: Option<&str>) -> bool {
    let now_secs = clock.now_micros() / 1_000_000;
    token.is_some_and(|t| tokens.accepts(t, now_secs))
}

fn invalid_token() -> Response {
    json_response(StatusCode::UNAUTHORIZED, json!({"error": "invalid token"}))
}

/// The whole body, or the 413 (over `limit`, the most `what` may carry) or
/// 400 to answer instead.
async fn read_body(body: Body, limit: usize, what: &str) -> Result<Bytes, Response> {
    axum::body::to_bytes(body, limit).await.map_err(|failure| {
        let over = std::error::Error::source(&failure)
            .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
        if over {
            error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "request body over {limit} bytes ({} MiB), the most {what} may carry",
                    limit / 1_048_576
                ),
            )
        } else {
            error(
                StatusCode::BAD_REQUEST,
                format!("the request body could not be read: {failure}"),
            )
        }
    })
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}
