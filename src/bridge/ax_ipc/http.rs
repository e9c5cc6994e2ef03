//! The HTTP transport: `POST /internal/ipc`, one call per request, the same
//! pipeline as the socket.
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
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::call::AxIpcBridge;
use crate::bridge::token::Tokens;

/// The path calls are posted to.
pub const IPC_PATH: &str = "/internal/ipc";

/// The largest request body: 1 MiB, as the AX host takes.
pub const HTTP_BODY_LIMIT: usize = 1_048_576;

#[derive(Clone)]
struct Shared {
    bridge: Arc<AxIpcBridge>,
    tokens: Arc<Tokens>,
}

/// The router serving [`IPC_PATH`] for `bridge`, accepting `tokens`.
pub fn router(bridge: Arc<AxIpcBridge>, tokens: Tokens) -> Router {
    Router::new().route(IPC_PATH, post(ipc)).with_state(Shared {
        bridge,
        tokens: Arc::new(tokens),
    })
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
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let now_secs = shared.bridge.clock().now_micros() / 1_000_000;
    if !token.is_some_and(|t| shared.tokens.accepts(t, now_secs)) {
        return json_response(StatusCode::UNAUTHORIZED, json!({"error": "invalid token"}));
    }
    let bytes = match axum::body::to_bytes(body, HTTP_BODY_LIMIT).await {
        Ok(bytes) => bytes,
        Err(error) => {
            let over = std::error::Error::source(&error)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            return if over {
                json_response(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    json!({"error": format!("request body over {HTTP_BODY_LIMIT} bytes (1 MiB), the most one call over HTTP may carry")}),
                )
            } else {
                json_response(
                    StatusCode::BAD_REQUEST,
                    json!({"error": format!("the request body could not be read: {error}")}),
                )
            };
        }
    };
    let answer = shared.bridge.handle(&bytes).await;
    json_response(StatusCode::OK, Value::Object(answer))
}

fn json_response(status: StatusCode, body: Value) -> Response {
    (status, axum::Json(body)).into_response()
}
