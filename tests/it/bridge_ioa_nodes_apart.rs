//! `agdx bridge ioa` keeps nodes apart, through real HTTP: no bridge starts
//! with an empty access key, registering a node takes the key, a node's
//! inbox and node stream are its own, JSON nested deeper than ordinary
//! clients parse is refused before it reaches the log (and one written to
//! the log by an agent is not served), and a path that is not UTF-8 gets
//! IOA's JSON error.

use crate::support;

use std::sync::Arc;

use agdx::bridge::ioa::{IoaBridge, IoaConfig, MAX_JSON_DEPTH, OP_MESSAGE, space_conversation};
use agdx::log::SharedLog;
use agdx::log::embedded::EmbeddedLog;
use agdx::wire::{AgentEnvelope, AgentId, ContentType, RecordId};
use agdx::{Outgoing, Producer};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::PATIENCE;
use support::ioa::{ACCESS_KEY, Bridge, Client, Events, texts};

fn embedded() -> (tempfile::TempDir, SharedLog) {
    let dir = tempfile::tempdir().expect("a directory");
    let log: SharedLog = Arc::new(EmbeddedLog::open(&dir.path().join("log")).expect("the log"));
    (dir, log)
}

/// `agdx bridge ioa` with an empty key, given as an option or in
/// `IOA_ACCESS_KEY`: its exit status and stderr.
async fn bridge_command(log: &str, option: Option<&str>, env: Option<&str>) -> (bool, String) {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"));
    command
        .args(["--log", log, "bridge", "ioa", "--listen", "127.0.0.1:0"])
        .env_remove("AGDX_STREAM")
        .env_remove("IOA_ACCESS_KEY")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    if let Some(key) = option {
        command.args(["--access-key", key]);
    }
    if let Some(key) = env {
        command.env("IOA_ACCESS_KEY", key);
    }
    let output = tokio::time::timeout(PATIENCE, command.output())
        .await
        .expect("a bridge with an empty access key does not start serving")
        .expect("run agdx");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_bridge_starts_with_an_empty_access_key() {
    let dir = tempfile::tempdir().expect("a directory");
    let log = format!("embedded:{}", dir.path().join("log").display());
    for (option, env) in [(Some(""), None), (Some("  "), None), (None, Some(""))] {
        let (ok, stderr) = bridge_command(&log, option, env).await;
        assert!(
            !ok,
            "--access-key {option:?} IOA_ACCESS_KEY {env:?}: {stderr}"
        );
        assert!(
            stderr.contains("the access key is empty")
                && stderr.contains("--access-key")
                && stderr.contains("IOA_ACCESS_KEY"),
            "{stderr}"
        );
    }

    let (_dir, log) = embedded();
    let topology = support::ioa::topology(&log, "agents").await;
    for key in ["", " \t"] {
        let refused = IoaBridge::open(log.clone(), topology.clone(), IoaConfig::new(key)).await;
        let error = refused.err().expect("an empty access key is refused");
        assert_eq!(error.status(), 422, "{error}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registering_a_node_takes_the_access_key() {
    let (_dir, log) = embedded();
    let bridge = Bridge::start(log, "agents").await;
    let alice = bridge.register("alice").await;
    let carol = Some(json!({"name": "carol", "description": "squatted"}));

    let (status, refused) = alice.call(Method::POST, "/nodes", carol.clone(), &[]).await;
    assert_eq!(
        (status, refused),
        (
            StatusCode::UNAUTHORIZED,
            json!({"detail": "access key required"})
        ),
        "a bearer token alone registers nobody"
    );
    let (status, refused) = alice
        .call(
            Method::POST,
            "/nodes",
            carol.clone(),
            &[("x-access-key", "guess")],
        )
        .await;
    assert_eq!(
        (status, refused),
        (
            StatusCode::FORBIDDEN,
            json!({"detail": "invalid access key"})
        )
    );
    let (status, _) = bridge
        .anonymous()
        .call(Method::POST, "/nodes", carol.clone(), &[])
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    alice
        .expect(Method::GET, "/nodes/carol", None, StatusCode::NOT_FOUND)
        .await;

    // With the key, as `POST /auth/register` takes it, the node is made.
    let (status, node) = bridge
        .anonymous()
        .call(
            Method::POST,
            "/nodes",
            Some(json!({"name": "carol", "description": "a tester"})),
            &[("x-access-key", ACCESS_KEY)],
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{node}");
    assert_eq!(node["id"], "carol");
    let node = alice
        .expect(Method::GET, "/nodes/carol", None, StatusCode::OK)
        .await;
    assert_eq!(node["description"], "a tester");
    bridge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_inbox_and_node_stream_are_its_own() {
    let (_dir, log) = embedded();
    let bridge = Bridge::start(log, "agents").await;
    let alice = bridge.register("alice").await;
    let bob = bridge.register("bob").await;
    let space = alice.space("ops", "on call").await["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    bob.space("ops", "reviewer").await;
    alice
        .send(
            &space,
            json!({"content": {"text": "for bob only"}, "refs": {"nodes": ["bob"]}}),
        )
        .await;

    let inbox = bob
        .expect(Method::GET, "/nodes/bob/inbox", None, StatusCode::OK)
        .await;
    assert_eq!(texts(inbox.as_array().expect("an array")), ["for bob only"]);

    let refused = alice
        .expect(Method::GET, "/nodes/bob/inbox", None, StatusCode::FORBIDDEN)
        .await;
    assert_eq!(
        refused,
        json!({"detail": "node 'alice' cannot read the inbox of node 'bob'; use bob's own token"})
    );
    let (status, refused) = alice.call(Method::GET, "/nodes/bob/sse", None, &[]).await;
    assert_eq!(
        (status, refused),
        (
            StatusCode::FORBIDDEN,
            json!({"detail": "node 'alice' cannot read the inbox of node 'bob'; use bob's own token"})
        )
    );
    // An unknown node is still not found, whoever asks.
    alice
        .expect(
            Method::GET,
            "/nodes/nobody/inbox",
            None,
            StatusCode::NOT_FOUND,
        )
        .await;

    // Bob's own stream still carries what is addressed to him.
    let mut events = Events::open(&bob, "/nodes/bob/sse", None).await;
    alice
        .send(
            &space,
            json!({"content": {"text": "again"}, "refs": {"nodes": ["bob"]}}),
        )
        .await;
    let (_, data) = events.next_message().await;
    assert_eq!(data["content"]["text"], "again");
    bridge.stop().await;
}

/// `{"content": ...}` whose whole body nests `depth` objects deep.
fn nested_body(depth: usize) -> String {
    let inner = depth - 1;
    format!(
        "{{\"content\":{}{{}}{}}}",
        "{\"a\":".repeat(inner - 1),
        "}".repeat(inner - 1)
    )
}

/// A raw body to a path, with the client's token; status and body text.
async fn post_raw(client: &Client, path: &str, body: String) -> (StatusCode, String) {
    let response = client
        .http
        .post(format!("{}{path}", client.url))
        .bearer_auth(client.token.as_deref().unwrap_or_default())
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the bridge answers");
    let status = response.status();
    (status, response.text().await.expect("a body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_nested_deeper_than_clients_parse_is_refused_and_never_served() {
    let (_dir, log) = embedded();
    let bridge = Bridge::start(log.clone(), "agents").await;
    let alice = bridge.register("alice").await;
    let space = alice.space("deep", "diver").await["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    let messages = format!("/spaces/{space}/messages");

    let (status, answer) = post_raw(&alice, &messages, nested_body(MAX_JSON_DEPTH)).await;
    assert_eq!(status, StatusCode::CREATED, "at the limit: {answer}");
    for depth in [MAX_JSON_DEPTH + 1, 20_000] {
        let (status, answer) = post_raw(&alice, &messages, nested_body(depth)).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{depth}: {answer}"
        );
        let detail: Value = serde_json::from_str(&answer).expect("IOA's error body");
        let detail = detail["detail"].as_str().expect("a detail");
        assert!(
            detail.contains(&format!("more than {MAX_JSON_DEPTH} levels")),
            "{detail}"
        );
    }
    // Node meta too: every JSON body has the same limit.
    let (status, answer) = post_raw(
        &alice,
        "/auth/register",
        format!(
            "{{\"name\":\"deep\",\"access_key\":\"{ACCESS_KEY}\",\"meta\":{}1{}}}",
            "{\"a\":".repeat(MAX_JSON_DEPTH),
            "}".repeat(MAX_JSON_DEPTH)
        ),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");

    // An agent on the log writes such a message itself: it is not served.
    let mallory = AgentId::new("mallory").expect("an agent id");
    let producer = Producer::new(log, bridge.topology.clone(), mallory.clone());
    let envelope = AgentEnvelope::event(
        RecordId::from_u128(ulid::Ulid::new().0),
        space_conversation("deep"),
        mallory,
        nested_body(20_000).into_bytes(),
    )
    .with_operation(OP_MESSAGE);
    producer
        .publish_one(
            &bridge.topology.commands,
            Outgoing::new(envelope, ContentType::Json),
        )
        .await
        .expect("appended");
    let marker = alice.say(&space, "after the deep one", &[]).await;

    // Every read parses as ordinary JSON (the client parses with
    // serde_json's default limits) and holds the one message at the limit.
    let all = alice.read(&space, "?all=true").await;
    assert_eq!(all.len(), 2, "{all:?}");
    assert_eq!(all[1]["id"], marker.as_str());
    let listed = alice
        .expect(Method::GET, "/messages", None, StatusCode::OK)
        .await;
    assert_eq!(listed.as_array().expect("an array").len(), 2);
    bridge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_is_not_utf8_gets_ioas_json_error() {
    let (_dir, log) = embedded();
    let bridge = Bridge::start(log, "agents").await;
    let alice = bridge.register("alice").await;
    let space = alice.space("ops", "on call").await["id"]
        .as_str()
        .expect("an id")
        .to_owned();
    for (method, path) in [
        (Method::GET, "/nodes/%FF".to_owned()),
        (Method::GET, "/nodes/al%FFice/inbox".to_owned()),
        (Method::GET, "/spaces/%C3%28/messages".to_owned()),
        (Method::GET, format!("/spaces/{space}/messages/%FF/sse")),
        (Method::PUT, "/nodes/%FF/identities".to_owned()),
    ] {
        let (status, answer) = alice.call(method.clone(), &path, None, &[]).await;
        assert_eq!(
            status,
            StatusCode::UNPROCESSABLE_ENTITY,
            "{method} {path}: {answer}"
        );
        let detail = answer["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains("not UTF-8") && detail.contains("percent-encode"),
            "{method} {path}: {answer}"
        );
    }
    bridge.stop().await;
}
