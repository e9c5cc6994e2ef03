//! The ax-ipc bridge over real HTTP (`POST /internal/ipc`), on every
//! backend: a bearer token (fixed, or minted with a secret) is required
//! before anything else; the call goes through the same pipeline as the
//! socket; the body is capped at 1 MiB.

use crate::support;

use agdx::bridge::ax_ipc::{TokenSecret, Tokens};
use agdx::worker::EchoHandler;
use agdx::{Clock, SystemClock};
use serde_json::{Value, json};
use support::ax_ipc::{BridgeSetup, RunningBridge};
use support::fabric::{Fabric, Running, on_every_fabric};

const TOKEN: &str = "turn-token-123";

fn secret() -> TokenSecret {
    TokenSecret::from_bytes([42; 32])
}

async fn start(fabric: &Fabric) -> RunningBridge {
    let tokens = Tokens::default().with_fixed(TOKEN).with_secret(secret());
    let setup = BridgeSetup {
        http: Some(tokens),
        ..BridgeSetup::default()
    };
    RunningBridge::start(fabric, setup).await
}

async fn post(url: &str, token: Option<&str>, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.expect("the bridge answers HTTP");
    let status = response.status().as_u16();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    assert_eq!(content_type.as_deref(), Some("application/json"));
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_with_a_valid_token_goes_through_the_same_pipeline() {
    on_every_fabric("ax-ipc-http", |fabric| async move {
        let agent = Running::start(fabric.worker("memory").fallback(EchoHandler));
        let bridge = start(&fabric).await;
        let url = bridge.url.clone().unwrap();

        let (status, answer) = post(
            &url,
            Some(TOKEN),
            r#"{"action":"memory_list","scope":"notes","_sessionId":"s1","_msgId":"h1"}"#,
        )
        .await;
        assert_eq!(status, 200);
        // The echo agent answers with the command's body: the request as validated.
        assert_eq!(
            answer.to_string(),
            r#"{"ok":true,"action":"memory_list","scope":"notes","_msgId":"h1"}"#
        );

        let (status, answer) = post(
            &url,
            Some(TOKEN),
            r#"{"action":"memory_list","scope":"notes","evil":1}"#,
        )
        .await;
        assert_eq!(status, 200);
        assert_eq!(answer["ok"], json!(false));
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .starts_with("Validation failed for action \"memory_list\"")
        );
        let (_, answer) = post(&url, Some(TOKEN), "nope").await;
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .starts_with("Invalid JSON")
        );

        let now = SystemClock.now_micros() / 1_000_000;
        let minted = secret().mint(now + 600);
        let (status, answer) = post(
            &url,
            Some(&minted),
            r#"{"action":"memory_list","scope":"minted"}"#,
        )
        .await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["scope"], json!("minted"));
        assert_eq!(fabric.records(&fabric.topology.commands).await.len(), 2);
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_valid_token_it_is_401_and_nothing_reaches_the_log() {
    on_every_fabric("ax-ipc-http-401", |fabric| async move {
        let bridge = start(&fabric).await;
        let url = bridge.url.clone().unwrap();
        let body = r#"{"action":"memory_list","scope":"notes"}"#;
        let now = SystemClock.now_micros() / 1_000_000;
        let expired = secret().mint(now - 1);
        let foreign = TokenSecret::from_bytes([1; 32]).mint(now + 600);
        for token in [
            None,
            Some("wrong-token"),
            Some(expired.as_str()),
            Some(foreign.as_str()),
        ] {
            let (status, answer) = post(&url, token, body).await;
            assert_eq!(status, 401, "{token:?}");
            assert_eq!(answer, json!({"error": "invalid token"}), "{token:?}");
        }
        assert!(fabric.records(&fabric.topology.commands).await.is_empty());
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_one_mib_is_413() {
    on_every_fabric("ax-ipc-http-413", |fabric| async move {
        let bridge = start(&fabric).await;
        let url = bridge.url.clone().unwrap();
        let mut body = br#"{"action":"memory_write","scope":"a","content":""#.to_vec();
        body.resize(1_048_576 + 1, b'x');
        let (status, answer) = post(&url, Some(TOKEN), body).await;
        assert_eq!(status, 413);
        assert!(
            answer["error"].as_str().unwrap().contains("1 MiB"),
            "{answer}"
        );
        assert!(fabric.records(&fabric.topology.commands).await.is_empty());
        bridge.stop().await;
    })
    .await;
}
