//! The LLM proxy over the bridge's real HTTP transport, against a local
//! upstream that records what it receives: the per-turn token is checked,
//! the upstream gets the bridge's credential and never the agent's headers
//! for it, the answer (status, headers, body; streamed as it comes) goes
//! back without the credential.

use crate::support;

use std::sync::{Arc, Mutex};

use agdx::bridge::ax_ipc::{
    ActionSchemas, AxIpcBridge, CredentialHeader, Gate, LlmProxy, Routes, TokenSecret, Tokens,
    router, serve_http,
};
use agdx::{Clock, SystemClock};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use support::PATIENCE;
use support::fabric::embedded_fabric;
use tokio::sync::{Notify, mpsc};
use tokio_util::sync::CancellationToken;

pub(crate) const CREDENTIAL: &str = "sk-ant-bridge-held-credential-0123456789";
const SSE_FIRST: &str = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n";
const SSE_REST: &[&str] = &[
    "event: content_block_delta\ndata: {\"delta\":{\"text\":\"hel\"}}\n\n",
    "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
];
const MESSAGE: &str =
    r#"{"id":"msg_1","type":"message","content":[{"type":"text","text":"hello"}]}"#;

fn secret() -> TokenSecret {
    TokenSecret::from_bytes([9; 32])
}

fn turn_token() -> String {
    secret().mint(SystemClock.now_micros() / 1_000_000 + 600)
}

/// One request the upstream received.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) target: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

/// A provider API on 127.0.0.1 that records every request: a streamed SSE
/// answer for `"stream":true`, 429 on `/v1/limited`, a JSON message
/// otherwise. The SSE answer holds back all but its first event until
/// `release` is notified.
#[derive(Clone)]
pub(crate) struct Upstream {
    pub(crate) url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    release: Arc<Notify>,
}

impl Upstream {
    pub(crate) async fn start() -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = Upstream {
            url: format!("http://{}", listener.local_addr().unwrap()),
            seen: Arc::default(),
            release: Arc::default(),
        };
        let app = axum::Router::new()
            .route("/{*path}", axum::routing::post(Upstream::answer))
            // Takes what the proxy sends, however large: the proxy's limit is under test.
            .layer(axum::extract::DefaultBodyLimit::disable())
            .with_state(upstream.clone());
        tokio::spawn(async move { axum::serve(listener, app).await });
        upstream
    }

    async fn answer(
        State(upstream): State<Upstream>,
        uri: Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Response {
        let target = uri.path_and_query().unwrap().to_string();
        upstream.seen.lock().unwrap().push(Seen {
            target: target.clone(),
            headers,
            body: body.clone(),
        });
        if target == "/v1/limited" {
            let body = json!({"type": "error", "error": {"type": "rate_limit_error"}});
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "7")],
                axum::Json(body),
            )
                .into_response();
        }
        let request: Value = serde_json::from_slice(&body).unwrap_or_default();
        if request["stream"] == json!(true) {
            let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(4);
            let release = upstream.release.clone();
            tokio::spawn(async move {
                tx.send(Ok(Bytes::from_static(SSE_FIRST.as_bytes())))
                    .await
                    .unwrap();
                release.notified().await;
                for event in SSE_REST {
                    tx.send(Ok(Bytes::from_static(event.as_bytes())))
                        .await
                        .unwrap();
                }
            });
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv().await.map(|item| (item, rx))
            });
            return (
                [("content-type", "text/event-stream")],
                Body::from_stream(stream),
            )
                .into_response();
        }
        (
            [
                ("content-type", "application/json"),
                ("request-id", "req_42"),
            ],
            MESSAGE,
        )
            .into_response()
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

/// A bridge serving HTTP on 127.0.0.1 with `proxy` (or none); its base URL.
async fn start_bridge(proxy: Option<LlmProxy>) -> (String, CancellationToken) {
    let fabric = embedded_fabric("ax-ipc-llm-proxy").await;
    let gate = Gate::new(
        "ax-ipc",
        ActionSchemas::defaults().unwrap(),
        Routes::default(),
    );
    let mut bridge = AxIpcBridge::new(fabric.requester("ax-ipc"), gate);
    if let Some(proxy) = proxy {
        bridge = bridge.with_llm_proxy(proxy);
    }
    let tokens = Tokens::default().with_secret(secret());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    let app = router(Arc::new(bridge), tokens);
    let stopping = shutdown.clone();
    tokio::spawn(async move {
        serve_http(listener, app, stopping).await.unwrap();
        drop(fabric);
    });
    (base, shutdown)
}

async fn proxied(upstream: &Upstream, header: CredentialHeader) -> (String, CancellationToken) {
    let proxy = LlmProxy::new(&upstream.url, CREDENTIAL, header).expect("a valid proxy");
    start_bridge(Some(proxy)).await
}

/// Posts `body` to `base` + `tail` as an AX agent's SDK would, `key` (its
/// turn token, or none) in `x-api-key`.
async fn post(
    base: &str,
    tail: &str,
    key: Option<&str>,
    body: impl Into<reqwest::Body>,
) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(format!("{base}/internal/llm-proxy{tail}"))
        .body(body);
    if let Some(key) = key {
        request = request.header("x-api-key", key);
    }
    request.send().await.expect("the bridge answers")
}

/// Every header value and the body of `response`, as text, to search for
/// what must not be there.
fn everything_in(headers: &HeaderMap, body: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(body).into_owned();
    for (name, value) in headers {
        text.push_str(&format!(
            "\n{name}: {}",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_reaches_the_upstream_with_the_bridges_credential_alone() {
    let upstream = Upstream::start().await;
    let (base, shutdown) = proxied(&upstream, CredentialHeader::ApiKey).await;
    let token = turn_token();
    let body = r#"{"model":"claude-sonnet-4","max_tokens":64,"messages":[{"role":"user","content":"hi"}]}"#;
    let response = reqwest::Client::new()
        .post(format!("{base}/internal/llm-proxy/v1/messages?beta=true"))
        .header("x-api-key", &token)
        .header("authorization", "Bearer sk-agent-own-key")
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", "prompt-caching-2024-07-31")
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the bridge answers");
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["request-id"], "req_42");
    let headers = response.headers().clone();
    let answer = response.bytes().await.unwrap();
    assert_eq!(answer, MESSAGE.as_bytes(), "the upstream's body, as it was");
    assert!(!everything_in(&headers, &answer).contains(CREDENTIAL));

    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    let seen = &seen[0];
    assert_eq!(seen.target, "/v1/messages?beta=true");
    assert_eq!(seen.body, body.as_bytes());
    assert_eq!(seen.headers["x-api-key"], CREDENTIAL);
    assert_eq!(seen.headers.get_all("x-api-key").iter().count(), 1);
    assert!(
        seen.headers.get("authorization").is_none(),
        "the agent's own key is dropped"
    );
    assert_eq!(seen.headers["anthropic-version"], "2023-06-01");
    assert_eq!(seen.headers["anthropic-beta"], "prompt-caching-2024-07-31");
    assert_eq!(seen.headers["content-type"], "application/json");
    let at_upstream = everything_in(&seen.headers, &seen.body);
    assert!(
        !at_upstream.contains(&token),
        "the turn token stays with the bridge"
    );
    assert!(!at_upstream.contains("sk-agent-own-key"));
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bearer_credential_goes_in_authorization() {
    let upstream = Upstream::start().await;
    let (base, shutdown) = proxied(&upstream, CredentialHeader::Bearer).await;
    let token = turn_token();
    // An OpenAI-style client sends its key, here the turn token, as a bearer token.
    let response = reqwest::Client::new()
        .post(format!("{base}/internal/llm-proxy/v1/chat/completions"))
        .bearer_auth(&token)
        .body(r#"{"model":"gpt","messages":[]}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let seen = upstream.seen();
    assert_eq!(seen[0].target, "/v1/chat/completions");
    assert_eq!(
        seen[0].headers["authorization"],
        format!("Bearer {CREDENTIAL}").as_str()
    );
    assert!(seen[0].headers.get("x-api-key").is_none());
    assert!(!everything_in(&seen[0].headers, &seen[0].body).contains(&token));
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_answer_is_passed_on_as_it_comes() {
    let upstream = Upstream::start().await;
    let (base, shutdown) = proxied(&upstream, CredentialHeader::ApiKey).await;
    let mut response = post(
        &base,
        "/v1/messages",
        Some(&turn_token()),
        r#"{"model":"claude-sonnet-4","stream":true,"messages":[]}"#,
    )
    .await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(response.headers()["content-type"], "text/event-stream");
    // The first event arrives while the upstream still holds the rest back.
    let first = tokio::time::timeout(PATIENCE, response.chunk())
        .await
        .expect("the first event before the answer ends")
        .unwrap()
        .expect("a chunk");
    assert_eq!(first, SSE_FIRST.as_bytes());
    upstream.release.notify_one();
    let mut rest = Vec::new();
    while let Some(chunk) = response.chunk().await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert_eq!(rest, SSE_REST.concat().as_bytes());
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_valid_turn_token_it_is_401_and_nothing_is_forwarded() {
    let upstream = Upstream::start().await;
    let (base, shutdown) = proxied(&upstream, CredentialHeader::ApiKey).await;
    let now = SystemClock.now_micros() / 1_000_000;
    let expired = secret().mint(now - 1);
    let foreign = TokenSecret::from_bytes([1; 32]).mint(now + 600);
    for token in [
        None,
        Some("wrong"),
        Some(expired.as_str()),
        Some(foreign.as_str()),
    ] {
        let response = post(&base, "/v1/messages", token, "{}").await;
        assert_eq!(response.status().as_u16(), 401, "{token:?}");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer, json!({"error": "invalid token"}), "{token:?}");
    }
    assert!(upstream.seen().is_empty());
    shutdown.cancel();

    // A bridge without a proxy serves no such route.
    let (base, shutdown) = start_bridge(None).await;
    let response = post(&base, "/v1/messages", Some(&turn_token()), "{}").await;
    assert_eq!(response.status().as_u16(), 404);
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_errors_pass_through_and_no_upstream_is_502() {
    let upstream = Upstream::start().await;
    let (base, shutdown) = proxied(&upstream, CredentialHeader::ApiKey).await;
    let response = post(&base, "/v1/limited", Some(&turn_token()), "{}").await;
    assert_eq!(response.status().as_u16(), 429);
    assert_eq!(response.headers()["retry-after"], "7");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["error"]["type"], "rate_limit_error");
    shutdown.cancel();

    // A port nothing listens on.
    let closed = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let proxy = LlmProxy::new(&url, CREDENTIAL, CredentialHeader::ApiKey).unwrap();
    let (base, shutdown) = start_bridge(Some(proxy)).await;
    let response = post(&base, "/v1/messages", Some(&turn_token()), "{}").await;
    assert_eq!(response.status().as_u16(), 502);
    let answer: Value = response.json().await.unwrap();
    let error = answer["error"].as_str().unwrap();
    assert!(error.starts_with("LLM proxy request failed"), "{error}");
    assert!(!error.contains(CREDENTIAL), "{error}");
    shutdown.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_up_to_ten_mib_are_forwarded_and_larger_are_413() {
    let upstream = Upstream::start().await;
    let (base, shutdown) = proxied(&upstream, CredentialHeader::ApiKey).await;
    let token = turn_token();
    let mut large = br#"{"messages":[],"padding":""#.to_vec();
    large.resize(10_485_760 - 2, b'x');
    large.extend_from_slice(br#""}"#);
    let response = post(&base, "/v1/messages", Some(&token), large.clone()).await;
    assert_eq!(response.status().as_u16(), 200);
    assert_eq!(upstream.seen()[0].body, large, "the whole body, unchanged");

    large.push(b' ');
    let response = post(&base, "/v1/messages", Some(&token), large).await;
    assert_eq!(response.status().as_u16(), 413);
    let answer: Value = response.json().await.unwrap();
    assert!(
        answer["error"].as_str().unwrap().contains("10 MiB"),
        "{answer}"
    );
    assert_eq!(upstream.seen().len(), 1, "nothing more was forwarded");
    shutdown.cancel();
}
