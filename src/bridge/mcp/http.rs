//! The streamable HTTP transport at `/mcp`, behind a bearer token.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;

use super::McpBridge;
use super::server::McpServer;
use crate::bridge::token::Tokens;

/// The path the MCP endpoint is served at.
pub const MCP_PATH: &str = "/mcp";

#[derive(Clone)]
struct Gate {
    bridge: McpBridge,
    tokens: Arc<Tokens>,
}

/// The router serving [`MCP_PATH`] for `bridge`: every request must carry
/// `Authorization: Bearer TOKEN` that `tokens` accepts, or is answered 401
/// before MCP sees it.
pub(super) fn router(bridge: McpBridge, tokens: Tokens) -> Router {
    let config = StreamableHttpServerConfig::default()
        .with_max_request_body_bytes(bridge.config().max_body_bytes)
        // The Host check guards unauthenticated local servers against DNS
        // rebinding; every request here carries a bearer token instead, and
        // the bridge may listen on any address.
        .disable_allowed_hosts()
        .with_cancellation_token(bridge.closing().child_token());
    let serving = bridge.clone();
    let service = StreamableHttpService::new(
        move || {
            Ok(McpServer {
                bridge: serving.clone(),
            })
        },
        Arc::new(LocalSessionManager::default()),
        config,
    );
    let gate = Gate {
        bridge,
        tokens: Arc::new(tokens),
    };
    Router::new()
        .route_service(MCP_PATH, service)
        .layer(axum::middleware::from_fn_with_state(gate, authorize))
}

async fn authorize(State(gate): State<Gate>, request: Request, next: Next) -> Response {
    let token = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let now_secs = gate.bridge.now_micros() / 1_000_000;
    if token.is_some_and(|t| gate.tokens.accepts(t, now_secs)) {
        return next.run(request).await;
    }
    let error = if token.is_some() {
        "invalid token: the bearer token is not one this bridge accepts, or it expired"
    } else {
        "missing token: send Authorization: Bearer TOKEN"
    };
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        axum::Json(json!({"error": error})),
    )
        .into_response()
}
