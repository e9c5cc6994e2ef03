//! `agdx bridge ioa` through real HTTP: registration and tokens, spaces,
//! threads, trees and DAG merges read in every mode and direction, pages,
//! refusals (other spaces' messages, no token, bad input) with IOA's
//! statuses and `{"detail"}` bodies, a restart that keeps everything, and
//! the causal graph of `agdx graph` equal to what `ioa_read` returns. On
//! every backend.

use crate::support;

use std::process::Command;
use std::sync::Arc;

use agdx::bridge::ioa::{OP_MESSAGE, space_conversation};
use agdx::log::SharedLog;
use agdx::log::embedded::EmbeddedLog;
use agdx::replay::{Direction, GraphStart, META_CAUSES, NodeKey, Replay, causal_graph};
use agdx::wire::{Kind, RecordId};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use support::ioa::{ACCESS_KEY, Bridge, texts};
use support::on_every_backend;

fn ids(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["id"].as_str().expect("an id").to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registration_mints_tokens_and_requests_without_one_are_refused() {
    on_every_backend("ioa-auth", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let anonymous = bridge.anonymous();
        let health = anonymous
            .expect(Method::GET, "/health", None, StatusCode::OK)
            .await;
        assert_eq!(health, json!({"status": "ok"}));

        let refused = anonymous
            .expect(Method::GET, "/spaces", None, StatusCode::UNAUTHORIZED)
            .await;
        assert_eq!(refused, json!({"detail": "authorization token required"}));
        let mut forged = anonymous.clone();
        forged.token = Some("0".repeat(64));
        let refused = forged
            .expect(Method::GET, "/nodes", None, StatusCode::UNAUTHORIZED)
            .await;
        assert_eq!(refused, json!({"detail": "invalid token"}));

        let wrong_key = json!({"name": "mallory", "access_key": "guess"});
        let refused = anonymous
            .expect(
                Method::POST,
                "/auth/register",
                Some(wrong_key),
                StatusCode::FORBIDDEN,
            )
            .await;
        assert_eq!(refused, json!({"detail": "invalid access key"}));
        let nameless = json!({"name": "  ", "access_key": ACCESS_KEY});
        anonymous
            .expect(
                Method::POST,
                "/auth/register",
                Some(nameless),
                StatusCode::UNPROCESSABLE_ENTITY,
            )
            .await;

        let alice = bridge.register("alice").await;
        assert_eq!(
            alice.id, "alice",
            "a node's id is its name, an agent id on the log"
        );
        let node = alice
            .expect(Method::GET, "/nodes/alice", None, StatusCode::OK)
            .await;
        assert_eq!(
            node,
            json!({"id": "alice", "name": "alice", "meta": {"kind": "test"}})
        );
        let again = bridge.register("alice").await;
        assert_ne!(again.token, alice.token, "every registration mints a token");
        for client in [&alice, &again] {
            client
                .expect(Method::GET, "/spaces", None, StatusCode::OK)
                .await;
        }

        let body = Some(json!({"name": "ops", "description": "on call"}));
        let (status, refused) = alice.call(Method::POST, "/spaces", body.clone(), &[]).await;
        assert_eq!(
            (status, refused),
            (
                StatusCode::UNAUTHORIZED,
                json!({"detail": "access key required"})
            )
        );
        let (status, _) = alice
            .call(
                Method::POST,
                "/spaces",
                body.clone(),
                &[("x-access-key", "guess")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        bridge.register("bob").await;
        let (status, refused) = alice
            .call(
                Method::POST,
                "/spaces",
                body.clone(),
                &[("x-access-key", ACCESS_KEY), ("x-node-id", "bob")],
            )
            .await;
        assert_eq!(
            status,
            StatusCode::FORBIDDEN,
            "a token acts as its own node only: {refused}"
        );
        // The access key alone may name the caller, as in the reference.
        let (status, space) = anonymous
            .call(
                Method::POST,
                "/spaces",
                body,
                &[("x-access-key", ACCESS_KEY), ("x-node-id", "bob")],
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{space}");
        assert_eq!(space["nodes"][0]["id"], "bob");
        let unknown = anonymous
            .expect(Method::GET, "/nowhere", None, StatusCode::UNAUTHORIZED)
            .await;
        assert_eq!(unknown["detail"], "authorization token required");
        alice
            .expect(Method::GET, "/nowhere", None, StatusCode::NOT_FOUND)
            .await;
        bridge.stop().await;
    })
    .await;
}

/// A root, a thread below it, a tree beside it and a merge of both, plus a
/// direct message: every read mode and direction over the same graph.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn threads_trees_and_merges_read_in_every_mode_and_direction() {
    on_every_backend("ioa-modes", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let bob = bridge.register("bob").await;
        let info = alice.space("incident", "owner").await;
        let space = info["id"].as_str().expect("an id").to_owned();
        assert_eq!(space, space_conversation("incident").to_string());
        let joined = bob.space("incident", "reviewer").await;
        assert_eq!(joined["id"], info["id"], "spaces are idempotent by name");
        let members: Vec<(&str, &str)> = joined["nodes"]
            .as_array()
            .expect("nodes")
            .iter()
            .map(|n| (n["id"].as_str().unwrap_or(""), n["description"].as_str().unwrap_or("")))
            .collect();
        assert_eq!(members, [("alice", "owner"), ("bob", "reviewer")]);

        let root = alice.say(&space, "root", &[]).await;
        let t1 = bob.say(&space, "t1", &[&root]).await;
        let t2 = alice.say(&space, "t2", &[&t1]).await;
        let c1 = alice.say(&space, "c1", &[&root]).await;
        let c2 = alice.say(&space, "c2", &[&root]).await;
        let merge = bob
            .send(&space, json!({"content": {"text": "merge"}, "refs": {"messages": [t2, c2], "nodes": ["alice"]}}))
            .await;
        assert_eq!(merge["refs"], json!({"messages": [t2, c2], "nodes": ["alice"]}));
        assert_eq!(merge["sender"], "bob");
        assert_eq!(merge["space_id"], space.as_str());
        let merge = merge["id"].as_str().expect("an id").to_owned();
        let direct = alice
            .send(&space, json!({"content": {"text": "direct"}, "refs": {"nodes": ["bob"]}}))
            .await;
        assert_eq!(direct["refs"], json!({"messages": [], "nodes": ["bob"]}));

        let read = |query: String| {
            let alice = alice.clone();
            let space = space.clone();
            async move { texts(&alice.read(&space, &query).await) }
        };
        assert_eq!(read(format!("?message_id={t1}")).await, ["root", "t1", "t2", "merge"]);
        assert_eq!(read(format!("?message_id={merge}&direction=upstream")).await, ["root", "t1", "t2", "c2", "merge"]);
        assert_eq!(read(format!("?message_id={root}&direction=downstream")).await, ["root", "t1", "t2", "c1", "c2", "merge"]);
        assert_eq!(read(format!("?message_id={c2}&direction=downstream")).await, ["c2", "merge"]);
        assert_eq!(read(format!("?message_id={c1}&direction=upstream")).await, ["root", "c1"]);
        assert_eq!(read("?all=true".into()).await, ["root", "t1", "t2", "c1", "c2", "merge", "direct"]);
        // Without a mode: what is addressed to the caller (or broadcast), not its own.
        assert_eq!(texts(&bob.read(&space, "").await), ["root", "direct"]);
        assert_eq!(texts(&alice.read(&space, "").await), ["merge"]);

        let info = alice.expect(Method::GET, &format!("/spaces/{space}"), None, StatusCode::OK).await;
        assert_eq!(info["message_count"], 7);
        let listed = alice.expect(Method::GET, "/spaces", None, StatusCode::OK).await;
        assert_eq!(listed.as_array().map(Vec::len), Some(1));
        let inbox = bob.expect(Method::GET, "/nodes/bob/inbox", None, StatusCode::OK).await;
        assert_eq!(texts(inbox.as_array().expect("an array")), ["root", "direct"]);
        let children = alice
            .expect(Method::GET, &format!("/messages?ref_message={root}&sender=alice"), None, StatusCode::OK)
            .await;
        assert_eq!(texts(children.as_array().expect("an array")), ["c1", "c2"]);
        let to_alice = alice
            .expect(Method::GET, &format!("/messages?space_id={space}&ref_node=alice"), None, StatusCode::OK)
            .await;
        assert_eq!(ids(to_alice.as_array().expect("an array")), [merge]);
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_is_kept_byte_for_byte_and_created_at_is_the_log_time() {
    on_every_backend("ioa-bytes", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let space = alice.space("bytes", "writer").await["id"].as_str().expect("id").to_owned();
        let content = r#"{"zeta": 1,  "alpha": [true, {"n": 1.50}], "text": "h\u00e9"}"#;
        let schema = r#"{"type": "object", "required": ["zeta"]}"#;
        let body = format!(
            r#"{{"content_type": "note", "content": {content}, "meta": {{"kind": "x"}}, "content_schema": {schema}}}"#
        );
        let response = alice
            .http
            .post(format!("{}/spaces/{space}/messages", alice.url))
            .bearer_auth(alice.token.as_deref().unwrap_or_default())
            .body(body.clone())
            .send()
            .await
            .expect("sent");
        assert_eq!(response.status(), StatusCode::CREATED);
        let created = response.text().await.expect("a body");
        assert!(created.contains(content), "the content comes back as sent: {created}");
        let read = alice
            .http
            .get(format!("{}/spaces/{space}/messages?all=true", alice.url))
            .bearer_auth(alice.token.as_deref().unwrap_or_default())
            .send()
            .await
            .expect("read")
            .text()
            .await
            .expect("a body");
        assert!(read.contains(content) && read.contains(schema), "{read}");
        let message: Value = serde_json::from_str(&created).expect("JSON");
        assert_eq!(message["content_type"], "note");
        assert_eq!(message["meta"], json!({"kind": "x"}));

        // On the log: an event of alice in the space's conversation, whose
        // body is the request as sent, stamped at created_at.
        let conversation = space_conversation("bytes");
        let records = Replay::new(subject.log.clone(), &bridge.topology, conversation)
            .read_to_end()
            .await
            .expect("replay");
        let events: Vec<_> = records
            .iter()
            .filter(|r| r.envelope().is_some_and(|e| e.kind == Kind::Event))
            .collect();
        assert_eq!(events.len(), 1);
        let envelope = events[0].envelope().expect("an envelope");
        assert_eq!(envelope.operation.as_deref(), Some(OP_MESSAGE));
        assert_eq!(envelope.source.as_str(), "alice");
        assert_eq!(envelope.body, body.as_bytes(), "the body is the IOA request, byte for byte");
        let at = humantime::parse_rfc3339(message["created_at"].as_str().expect("created_at")).expect("RFC 3339");
        let micros = at.duration_since(std::time::UNIX_EPOCH).expect("after 1970").as_micros();
        assert_eq!(micros, u128::from(events[0].timestamp_micros), "created_at is the log's timestamp");
        let joins = records
            .iter()
            .filter(|r| r.envelope().is_some_and(|e| e.kind == Kind::Status))
            .count();
        assert_eq!(joins, 1, "joining is one status record");
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_go_after_a_cursor_and_take_the_last_without_one() {
    on_every_backend("ioa-pages", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let space = alice.space("pages", "writer").await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let mut sent = Vec::new();
        for n in 1..=5 {
            sent.push(alice.say(&space, &format!("m{n}"), &[]).await);
        }
        let page = |query: String| {
            let alice = alice.clone();
            let space = space.clone();
            async move { texts(&alice.read(&space, &query).await) }
        };
        assert_eq!(page("?all=true&limit=2".into()).await, ["m4", "m5"]);
        assert_eq!(
            page(format!("?all=true&after={}&limit=2", sent[0])).await,
            ["m2", "m3"]
        );
        assert_eq!(
            page(format!("?all=true&after={}&limit=2", sent[2])).await,
            ["m4", "m5"]
        );
        assert_eq!(
            page(format!("?all=true&after={}", sent[4])).await,
            Vec::<String>::new()
        );
        for (query, detail) in [
            ("?limit=0", "limit must be greater than 0".to_owned()),
            ("?limit=two", "limit must be greater than 0".to_owned()),
            ("?all=maybe", "all must be a boolean".to_owned()),
            (
                "?after=01J0000000000000000000000X",
                format!("after: '01J0000000000000000000000X' not found in space '{space}'"),
            ),
        ] {
            let refused = alice
                .expect(
                    Method::GET,
                    &format!("/spaces/{space}/messages{query}"),
                    None,
                    StatusCode::UNPROCESSABLE_ENTITY,
                )
                .await;
            assert_eq!(refused, json!({"detail": detail}), "{query}");
        }
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refs_across_spaces_and_other_bad_input_are_refused_and_nothing_is_written() {
    on_every_backend("ioa-refusals", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let a = alice.space("a", "writer").await["id"].as_str().expect("id").to_owned();
        let b = alice.space("b", "writer").await["id"].as_str().expect("id").to_owned();
        let in_a = alice.say(&a, "in a", &[]).await;
        let path = format!("/spaces/{b}/messages");
        let refusals = [
            (json!({"content": {"x": 1}, "refs": {"messages": [in_a]}}), format!("refs.messages: '{in_a}' not found in space '{b}'")),
            (json!({"content": {"x": 1}, "refs": {"nodes": ["nobody"]}}), "refs.nodes: 'nobody' not found".to_owned()),
            (json!({"content": null}), "content is required".to_owned()),
            (json!({}), "content is required".to_owned()),
            (json!({"content": "text"}), "content must be a JSON object".to_owned()),
        ];
        for (body, detail) in refusals {
            let refused = alice.expect(Method::POST, &path, Some(body.clone()), StatusCode::UNPROCESSABLE_ENTITY).await;
            assert_eq!(refused, json!({"detail": detail}), "{body}");
        }
        for body in [
            json!({"content": {}, "unknown": 1}),
            json!({"content": {}, "content_schema": {"type": 12}}),
            json!({"content": {}, "refs": {"messages": [], "parents": []}}),
        ] {
            let refused = alice.expect(Method::POST, &path, Some(body.clone()), StatusCode::UNPROCESSABLE_ENTITY).await;
            assert!(refused["detail"].is_string(), "{body}: {refused}");
        }
        // Just over the limit: a body far beyond it can be cut off by the
        // server closing the connection before the client reads the 413.
        let huge = json!({"content": {"text": "x".repeat(1 << 20)}});
        let refused = alice.expect(Method::POST, &path, Some(huge), StatusCode::PAYLOAD_TOO_LARGE).await;
        let detail = refused["detail"].as_str().unwrap_or("");
        assert!(detail.contains("over 1048576 bytes") && detail.contains("limit"), "{refused}");
        assert!(!detail.contains("--") && !detail.contains("agdx"), "a peer hears no command line: {refused}");
        let missing = alice
            .expect(Method::POST, "/spaces/01J0000000000000000000000X/messages", Some(json!({"content": {}})), StatusCode::NOT_FOUND)
            .await;
        assert_eq!(missing, json!({"detail": "Space '01J0000000000000000000000X' not found"}));
        let unknown = alice
            .expect(Method::GET, &format!("/spaces/{a}/messages?message_id=01J0000000000000000000000X"), None, StatusCode::NOT_FOUND)
            .await;
        assert_eq!(unknown, json!({"detail": format!("Message '01J0000000000000000000000X' not found in space '{a}'")}));
        let sideways = alice
            .expect(Method::GET, &format!("/spaces/{a}/messages?message_id={in_a}&direction=sideways"), None, StatusCode::UNPROCESSABLE_ENTITY)
            .await;
        assert_eq!(sideways, json!({"detail": "direction must be 'upstream' or 'downstream'"}));
        alice.expect(Method::GET, "/nodes/nobody", None, StatusCode::NOT_FOUND).await;
        let (status, _) = alice
            .call(Method::POST, "/spaces", Some(json!({"name": " ", "description": "x"})), &[("x-access-key", ACCESS_KEY)])
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);

        let counts: Vec<u64> = alice
            .expect(Method::GET, "/spaces", None, StatusCode::OK)
            .await
            .as_array()
            .expect("spaces")
            .iter()
            .map(|s| s["message_count"].as_u64().unwrap_or(99))
            .collect();
        assert_eq!(counts, [1, 0], "nothing refused was written");
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_bridge_serves_every_space_node_token_and_message() {
    on_every_backend("ioa-restart", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let bob = bridge.register("bob").await;
        let space = alice.space("kept", "owner").await["id"].as_str().expect("id").to_owned();
        bob.space("kept", "helper").await;
        let root = alice.say(&space, "root", &[]).await;
        let left = bob.say(&space, "left", &[&root]).await;
        let right = alice.say(&space, "right", &[&root]).await;
        bob.send(&space, json!({"content": {"text": "both"}, "refs": {"messages": [left, right], "nodes": ["alice"]}}))
            .await;
        let before = (
            alice.read(&space, "?all=true").await,
            alice.expect(Method::GET, "/spaces", None, StatusCode::OK).await,
            alice.expect(Method::GET, "/nodes", None, StatusCode::OK).await,
        );
        bridge.stop().await;

        let reopened = (subject.reopen)().await;
        let bridge = Bridge::start(reopened.log.clone(), &subject.stream).await;
        let mut alice = alice.clone();
        alice.url = bridge.url.clone();
        let after = (
            alice.read(&space, "?all=true").await,
            alice.expect(Method::GET, "/spaces", None, StatusCode::OK).await,
            alice.expect(Method::GET, "/nodes", None, StatusCode::OK).await,
        );
        assert_eq!(after, before, "the same messages, spaces and nodes, read back from the log");
        assert_eq!(texts(&alice.read(&space, "").await), ["both"], "alice's old token still works");
        let more = alice.say(&space, "after the restart", &[&root]).await;
        assert_eq!(texts(&alice.read(&space, &format!("?message_id={more}&direction=upstream")).await), ["root", "after the restart"]);
        bridge.stop().await;
    })
    .await;
}

/// The DAG `ioa_read` returns is the causal graph of the records on the
/// log, as `agdx graph` walks it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_causal_graph_of_a_bridged_space_is_the_dag_ioa_read_returns() {
    on_every_backend("ioa-graph", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let space = alice.space("graph", "planner").await["id"]
            .as_str()
            .expect("id")
            .to_owned();
        let root = alice.say(&space, "root", &[]).await;
        let a = alice.say(&space, "a", &[&root]).await;
        let b = alice.say(&space, "b", &[&root]).await;
        let c = alice.say(&space, "c", &[&a]).await;
        let merge = alice.say(&space, "merge", &[&c, &b, &a]).await;
        let after = alice.say(&space, "after", &[&merge]).await;
        let conversation = space_conversation("graph");
        for start in [&root, &a, &b, &merge, &after] {
            for (direction, query) in [
                (Direction::Up, "&direction=upstream"),
                (Direction::Down, "&direction=downstream"),
                (Direction::Both, ""),
            ] {
                let read = alice
                    .read(&space, &format!("?message_id={start}{query}"))
                    .await;
                let id: RecordId = start.parse().expect("a record id");
                let graph = causal_graph(
                    &subject.log,
                    &bridge.topology,
                    GraphStart {
                        node: NodeKey::Record(id),
                        conversation: Some(conversation),
                    },
                    direction,
                )
                .await
                .expect("the causal graph");
                let drawn: Vec<String> = graph.nodes().map(|n| n.key.to_string()).collect();
                assert_eq!(drawn, ids(&read), "from {start} {direction:?}");
                for message in &read {
                    let key = NodeKey::Record(
                        message["id"]
                            .as_str()
                            .expect("id")
                            .parse()
                            .expect("a record id"),
                    );
                    let parents: Vec<String> = graph
                        .parents(&key)
                        .iter()
                        .map(ToString::to_string)
                        .collect();
                    let refs: Vec<String> = message["refs"]["messages"]
                        .as_array()
                        .expect("refs")
                        .iter()
                        .map(|r| r.as_str().unwrap_or("").to_owned())
                        .filter(|r| drawn.contains(r))
                        .collect();
                    assert_eq!(
                        parents, refs,
                        "the parents of {key} from {start} {direction:?}"
                    );
                }
            }
        }
        let graph = causal_graph(
            &subject.log,
            &bridge.topology,
            GraphStart {
                node: NodeKey::Record(merge.parse().expect("id")),
                conversation: None,
            },
            Direction::Up,
        )
        .await
        .expect("found without its conversation too");
        let node = graph
            .node(&NodeKey::Record(merge.parse().expect("id")))
            .expect("the merge");
        let envelope = node.first().envelope().expect("an envelope");
        assert_eq!(
            envelope.cause.map(|c| c.to_string()),
            Some(c.clone()),
            "cause is the first parent"
        );
        let more = envelope
            .metadata
            .as_ref()
            .and_then(|m| m.get(META_CAUSES))
            .and_then(|v| v.as_array())
            .expect("causes");
        let more: Vec<&str> = more.iter().filter_map(|v| v.as_str()).collect();
        assert_eq!(
            more,
            [b.as_str(), a.as_str()],
            "the other parents, in order"
        );
        assert_eq!(
            envelope
                .metadata
                .as_ref()
                .map(|m| m.bridge_hops().collect::<Vec<_>>()),
            Some(vec!["ioa"]),
            "the bridge stamps its hop on what it writes"
        );
        bridge.stop().await;
    })
    .await;
}

/// `agdx graph`, the command, draws a bridged space's merge from the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_graph_draws_a_bridged_merge() {
    let dir = tempfile::tempdir().expect("a directory");
    let path = dir.path().join("log");
    let log: SharedLog = Arc::new(EmbeddedLog::open(&path).expect("the log"));
    let bridge = Bridge::start(log, "agents").await;
    let alice = bridge.register("alice").await;
    let space = alice.space("drawn", "planner").await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    let root = alice.say(&space, "root", &[]).await;
    let a = alice.say(&space, "left", &[&root]).await;
    let b = alice.say(&space, "right", &[&root]).await;
    let merge = alice.say(&space, "merged", &[&a, &b]).await;
    let output = Command::new(env!("CARGO_BIN_EXE_agdx"))
        .args(["graph", &merge, "--up", "--format", "mermaid"])
        .arg("--log")
        .arg(format!("embedded:{}", path.display()))
        .env_remove("AGDX_STREAM")
        .output()
        .expect("run agdx graph");
    let drawn = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let label = |text: &str| {
        drawn
            .lines()
            .find(|l| l.contains(&format!("#quot;text#quot;:#quot;{text}#quot;")))
            .and_then(|l| l.trim().split('[').next())
            .unwrap_or_else(|| panic!("no box for {text} in:\n{drawn}"))
            .to_owned()
    };
    let (root, a, b, merge) = (
        label("root"),
        label("left"),
        label("right"),
        label("merged"),
    );
    for edge in [
        format!("{root} --> {a}"),
        format!("{root} --> {b}"),
        format!("{a} --> {merge}"),
        format!("{b} --> {merge}"),
    ] {
        assert!(
            drawn.lines().any(|l| l.trim() == edge),
            "missing {edge} in:\n{drawn}"
        );
    }
    bridge.stop().await;
}

/// `agdx bridge ioa`, the command: serves on the address it prints, with
/// the access key it is given, an open SSE stream does not keep it from
/// stopping on SIGTERM, and a second run serves what the first wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_command_serves_until_terminated_and_again_after() {
    use tokio::io::AsyncBufReadExt;
    let dir = tempfile::tempdir().expect("a directory");
    let log = format!("embedded:{}", dir.path().join("log").display());
    let mut token = String::new();
    for run in 0..2 {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"))
            .args([
                "--log",
                &log,
                "bridge",
                "ioa",
                "--listen",
                "127.0.0.1:0",
                "--access-key",
                "KEY",
            ])
            .env_remove("AGDX_STREAM")
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start agdx bridge ioa");
        let stdout = child.stdout.take().expect("stdout");
        let mut lines = tokio::io::BufReader::new(stdout).lines();
        let first = lines
            .next_line()
            .await
            .expect("read")
            .expect("a first line");
        let url = first
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {first:?}"))
            .to_owned();
        let http = reqwest::Client::new();
        if run == 0 {
            let answer: Value = http
                .post(format!("{url}/auth/register"))
                .body(r#"{"name":"alice","access_key":"KEY"}"#)
                .send()
                .await
                .expect("register")
                .json()
                .await
                .expect("JSON");
            token = answer["token"].as_str().expect("a token").to_owned();
            let space = http
                .post(format!("{url}/spaces"))
                .header("x-access-key", "KEY")
                .bearer_auth(&token)
                .body(r#"{"name":"cli","description":"tester"}"#)
                .send()
                .await
                .expect("join");
            assert_eq!(space.status(), StatusCode::OK);
        }
        let spaces: Value = http
            .get(format!("{url}/spaces"))
            .bearer_auth(&token)
            .send()
            .await
            .expect("list")
            .json()
            .await
            .expect("JSON");
        assert_eq!(spaces[0]["name"], "cli", "run {run}: {spaces}");
        let space = spaces[0]["id"].as_str().expect("an id").to_owned();
        let stream = http
            .get(format!("{url}/spaces/{space}/sse"))
            .bearer_auth(&token)
            .send()
            .await
            .expect("a stream");
        assert_eq!(stream.status(), StatusCode::OK);
        let pid = child.id().expect("running");
        let killed = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
        let exit = tokio::time::timeout(support::PATIENCE, child.wait())
            .await
            .expect("the bridge stops despite the open stream")
            .expect("wait");
        assert!(exit.success(), "SIGTERM stops it cleanly: {exit}");
        drop(stream);
    }
}

/// IOA's `ioa_space` and `ioa_send` register a new caller: with the
/// access key, `X-Node-ID` may name a node nobody registered yet; a bearer
/// token still acts only as its own node, and a refused write registers
/// nobody.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_caller_named_with_the_access_key_is_registered_when_it_joins_or_sends() {
    on_every_backend("ioa-auto-register", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let alice = bridge.register("alice").await;
        let anonymous = bridge.anonymous();
        let key = ("x-access-key", ACCESS_KEY);
        let node = |name: &str| alice.call(Method::GET, &format!("/nodes/{name}"), None, &[]);
        assert_eq!(node("carol").await.0, StatusCode::NOT_FOUND);

        let join = json!({"name": "auto", "description": "newcomer"});
        let (status, space) = anonymous
            .call(
                Method::POST,
                "/spaces",
                Some(join),
                &[key, ("x-node-id", "carol")],
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{space}");
        assert_eq!(
            space["nodes"],
            json!([{"id": "carol", "name": "carol", "description": "newcomer", "meta": {}}])
        );
        assert_eq!(
            node("carol").await,
            (
                StatusCode::OK,
                json!({"id": "carol", "name": "carol", "meta": {}})
            )
        );
        let space = space["id"].as_str().expect("id").to_owned();
        let messages = format!("/spaces/{space}/messages");

        // Sending registers a new sender too, and needs no join first.
        let hello = json!({"content": {"text": "hello"}});
        let (status, sent) = anonymous
            .call(
                Method::POST,
                &messages,
                Some(hello.clone()),
                &[key, ("x-node-id", "dave")],
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{sent}");
        assert_eq!(sent["sender"], "dave");
        assert_eq!(node("dave").await.0, StatusCode::OK);
        let (status, _) = anonymous
            .call(
                Method::POST,
                &messages,
                Some(hello.clone()),
                &[key, ("x-node-id", "carol")],
            )
            .await;
        assert_eq!(
            status,
            StatusCode::CREATED,
            "a registered node sends with the key as well"
        );

        // What registers nobody: a refused message, a name that is no agent
        // id, a wrong key, no name, no credentials.
        let empty = json!({"content": null});
        let (status, refused) = anonymous
            .call(
                Method::POST,
                &messages,
                Some(empty),
                &[key, ("x-node-id", "erin")],
            )
            .await;
        assert_eq!(
            (status, refused),
            (
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"detail": "content is required"})
            )
        );
        let long: &'static str = "n".repeat(300).leak();
        let (status, refused) = anonymous
            .call(
                Method::POST,
                &messages,
                Some(hello.clone()),
                &[key, ("x-node-id", long)],
            )
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
        assert!(
            refused["detail"]
                .as_str()
                .is_some_and(|d| d.contains("cannot be a node here")),
            "{refused}"
        );
        let (status, _) = anonymous
            .call(
                Method::POST,
                &messages,
                Some(hello.clone()),
                &[("x-access-key", "guess"), ("x-node-id", "erin")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, refused) = anonymous
            .call(Method::POST, &messages, Some(hello.clone()), &[key])
            .await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
        assert!(
            refused["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("caller node identity is required")),
            "{refused}"
        );
        let (status, refused) = anonymous
            .call(
                Method::POST,
                &messages,
                Some(hello.clone()),
                &[("x-node-id", "erin")],
            )
            .await;
        assert_eq!(
            (status, refused),
            (
                StatusCode::UNAUTHORIZED,
                json!({"detail": "authorization token required"})
            )
        );

        // A bearer token acts as its own node only, with the key or without.
        for headers in [
            &[("x-node-id", "erin")][..],
            &[key, ("x-node-id", "erin")][..],
        ] {
            let (status, refused) = alice
                .call(Method::POST, &messages, Some(hello.clone()), headers)
                .await;
            assert_eq!(status, StatusCode::FORBIDDEN, "{refused}");
        }
        let join = json!({"name": "auto", "description": "intruder"});
        let (status, _) = alice
            .call(
                Method::POST,
                "/spaces",
                Some(join),
                &[key, ("x-node-id", "erin")],
            )
            .await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        assert_eq!(
            node("erin").await.0,
            StatusCode::NOT_FOUND,
            "no refused call registered erin"
        );
        let (status, _) = anonymous
            .call(Method::GET, &messages, None, &[key, ("x-node-id", "carol")])
            .await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "reads still take a token");

        // The node is the one `POST /auth/register` makes, and it can get a
        // token there; it is on the log, so a restarted bridge has it.
        let carol = bridge.register("carol").await;
        assert_eq!(carol.id, "carol");
        assert_eq!(
            texts(&carol.read(&space, "").await),
            ["hello"],
            "dave's broadcast, for carol"
        );
        let nodes = alice
            .expect(Method::GET, "/nodes", None, StatusCode::OK)
            .await;
        bridge.stop().await;
        let reopened = (subject.reopen)().await;
        let bridge = Bridge::start(reopened.log.clone(), &subject.stream).await;
        let mut alice = alice.clone();
        alice.url = bridge.url.clone();
        assert_eq!(
            alice
                .expect(Method::GET, "/nodes", None, StatusCode::OK)
                .await,
            nodes
        );
        let ids: Vec<&str> = nodes
            .as_array()
            .expect("nodes")
            .iter()
            .filter_map(|n| n["id"].as_str())
            .collect();
        assert_eq!(ids, ["alice", "carol", "dave"]);
        bridge.stop().await;
    })
    .await;
}

/// IOA's external identity: `(namespace, subject)` names one node, so
/// registering with an identity a node holds answers that node (with a
/// fresh token), whatever name is given; `/identities` resolves it, the
/// node binds, rebinds and unbinds its own, and all of it is read back from
/// the log after a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_binding_answers_the_node_that_holds_it_also_after_a_restart() {
    on_every_backend("ioa-identity", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let anonymous = bridge.anonymous();
        let register = |name: &str, identities: Value| {
            let body = json!({"name": name, "access_key": ACCESS_KEY, "identities": identities});
            anonymous.call(Method::POST, "/auth/register", Some(body), &[])
        };
        let binding = json!({"namespace": "example.system", "subject": "worker-1", "claims": {"profile": {"role": "scanner"}}});
        let (status, first) = register("worker", json!([binding])).await;
        assert_eq!(status, StatusCode::CREATED, "{first}");
        assert_eq!(first["id"], "worker");
        let (status, again) = register("other", json!([{"namespace": " example.system ", "subject": "worker-1"}])).await;
        assert_eq!(status, StatusCode::CREATED, "{again}");
        assert_eq!((&again["id"], &again["name"]), (&json!("worker"), &json!("worker")), "the identity's node, not a new one");
        assert_ne!(again["token"], first["token"], "a fresh token");
        let mut worker = anonymous.clone();
        worker.token = again["token"].as_str().map(str::to_owned);
        assert_eq!(worker.call(Method::GET, "/nodes/other", None, &[]).await.0, StatusCode::NOT_FOUND);
        let shown = worker.expect(Method::GET, "/nodes/worker", None, StatusCode::OK).await;
        assert_eq!(shown["identities"], json!([binding]), "claims kept: naming a held identity changes nothing");

        let resolved = worker
            .expect(Method::GET, "/identities?namespace=example.system&subject=worker-1", None, StatusCode::OK)
            .await;
        assert_eq!(resolved, shown);
        let missing = worker
            .expect(Method::GET, "/identities?namespace=example.system&subject=nobody", None, StatusCode::NOT_FOUND)
            .await;
        assert_eq!(missing["detail"], "no node holds identity 'example.system'/'nobody'");
        worker.expect(Method::GET, "/identities?namespace=example.system", None, StatusCode::UNPROCESSABLE_ENTITY).await;
        anonymous.expect(Method::GET, "/identities?namespace=example.system&subject=worker-1", None, StatusCode::UNAUTHORIZED).await;

        // Bad identities are refused and register nothing.
        let bob = bridge.register("bob").await;
        for (identities, why) in [
            (json!([{"namespace": "", "subject": "x"}]), "identities[0]: identity namespace and subject are required"),
            (json!([{"namespace": "a", "subject": "x"}, {"namespace": "a", "subject": "x"}]), "identities[1]: duplicate identity 'a'/'x'"),
        ] {
            let (status, refused) = register("mallory", identities).await;
            assert_eq!((status, refused), (StatusCode::UNPROCESSABLE_ENTITY, json!({"detail": why})));
        }
        assert_eq!(bob.call(Method::GET, "/nodes/mallory", None, &[]).await.0, StatusCode::NOT_FOUND);

        // A node binds its own identities only, and none another holds.
        let path = "/nodes/worker/identities";
        let rebound = json!({"namespace": "example.system", "subject": "worker-1", "claims": {"version": 2}});
        let (status, _) = bob.call(Method::PUT, path, Some(rebound.clone()), &[]).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "bob cannot change worker's identities");
        let (status, refused) = bob.call(Method::PUT, "/nodes/bob/identities", Some(rebound.clone()), &[]).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{refused}");
        assert!(refused["detail"].as_str().is_some_and(|d| d.contains("is bound to node 'worker'")), "{refused}");
        let node = worker.expect(Method::PUT, path, Some(rebound.clone()), StatusCode::OK).await;
        assert_eq!(node["identities"], json!([rebound]), "new claims");
        let second = json!({"namespace": "example.system", "subject": "worker-2"});
        let node = worker.expect(Method::PUT, path, Some(second), StatusCode::OK).await;
        assert_eq!(node["identities"].as_array().map(Vec::len), Some(2));
        let (status, answer) = register("bob", json!([{"namespace": "example.system", "subject": "worker-1"}, {"namespace": "x", "subject": "bob"}])).await;
        assert_eq!(status, StatusCode::CREATED, "the held identity wins over the name: {answer}");
        assert_eq!(answer["id"], "worker", "and the other identity is bound to worker");
        let (status, answer) = bob
            .call(Method::PUT, "/nodes/bob/identities", Some(json!({"namespace": "y", "subject": "bob"})), &[])
            .await;
        assert_eq!(status, StatusCode::OK, "{answer}");
        let (status, refused) = register("z", json!([{"namespace": "x", "subject": "bob"}, {"namespace": "y", "subject": "bob"}])).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "identities of two nodes: {refused}");
        let unbind = "/nodes/worker/identities?namespace=example.system&subject=worker-2";
        let node = worker.expect(Method::DELETE, unbind, None, StatusCode::OK).await;
        assert_eq!(node["identities"], json!([rebound, {"namespace": "x", "subject": "bob"}]));
        worker.expect(Method::DELETE, unbind, None, StatusCode::NOT_FOUND).await;
        let before = worker.expect(Method::GET, "/nodes", None, StatusCode::OK).await;
        bridge.stop().await;

        // A new bridge on the same log: the same holders, the same claims,
        // and the identity given up is free.
        let reopened = (subject.reopen)().await;
        let bridge = Bridge::start(reopened.log.clone(), &subject.stream).await;
        let mut worker = worker.clone();
        worker.url = bridge.url.clone();
        let mut bob = bob.clone();
        bob.url = bridge.url.clone();
        assert_eq!(worker.expect(Method::GET, "/nodes", None, StatusCode::OK).await, before);
        let body = json!({"name": "third", "access_key": ACCESS_KEY, "identities": [{"namespace": "example.system", "subject": "worker-1"}]});
        let resolved = bridge.anonymous().expect(Method::POST, "/auth/register", Some(body), StatusCode::CREATED).await;
        assert_eq!(resolved["id"], "worker", "the restarted bridge resolves the binding to the same node");
        let node = bob
            .expect(Method::PUT, "/nodes/bob/identities", Some(json!({"namespace": "example.system", "subject": "worker-2"})), StatusCode::OK)
            .await;
        assert_eq!(node["identities"], json!([{"namespace": "example.system", "subject": "worker-2"}, {"namespace": "y", "subject": "bob"}]), "by namespace, then subject");
        bridge.stop().await;
    })
    .await;
}
