//! What the AXON bridge refuses, and how: each bad input gets its
//! documented answer and nothing reaches the log.
//!
//! | input | answer |
//! | --- | --- |
//! | malformed JSON, not an envelope, over 64 KiB | stream closed without a reply; the connection goes on |
//! | unknown kind on a bidirectional stream | `error` `unhandled` |
//! | request with a nil / non-v4 id or a non-object payload | `error` `invalid_envelope` |
//! | request on a unidirectional stream | dropped |
//! | unknown peer key, SNI naming another agent, no `axon/1` | handshake refused |
//! | pinned peer presenting another key (bridge dialling) | not dialled: error reply on the log |
//! | a record already carrying this bridge's id | dead-lettered `rejected`, error reply, nothing sent |

use crate::support;

use std::time::Duration;

use agdx::bridge::axon::{Expose, MAX_MESSAGE_SIZE, Routes};
use agdx::wire::{ContentType, DeadLetterReason, ErrorCode, META_BRIDGE_HOPS, Metadata, Scalar};
use agdx::worker::EchoHandler;
use agdx::{AskError, CommandRequest};
use serde_json::{Value, json};
use support::axon::{
    TestPeer, agent_id as axon_id, bridge_config, bridge_identity, envelope, exchange, one_way,
    refused, request, start_bridge, start_bridge_as,
};
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// Commands and events on `agent.commands` (a request that timed out adds
/// its cancel, a status, which is not counted).
async fn commands_on_the_log(fabric: &Fabric) -> usize {
    fabric
        .records(&fabric.topology.commands)
        .await
        .iter()
        .filter(|r| agdx::envelope_of(r).is_ok_and(|e| e.kind != agdx::wire::Kind::Status))
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_oversize_messages_are_dropped_and_the_connection_goes_on() {
    on_every_fabric("axon-malformed", |fabric| async move {
        let worker = Running::start(fabric.worker("echo").fallback(EchoHandler));
        let peer = TestPeer::new();
        let mut config = bridge_config(&fabric, &[&peer]);
        config.routes = Routes::new(vec![], Some(agent_id("echo")));
        let bridge = start_bridge(&fabric, config).await;
        let connection = peer.dial_bridge(bridge.addr, &bridge.public_key).await;

        let id = uuid::Uuid::new_v4();
        let filler = "x".repeat(MAX_MESSAGE_SIZE);
        let oversize = json!({"id": id, "kind": "request", "payload": {"f": filler}}).to_string();
        let cases: Vec<(&str, Vec<u8>)> = vec![
            ("not JSON", b"hello, bridge".to_vec()),
            (
                "no payload",
                json!({"id": id, "kind": "request"})
                    .to_string()
                    .into_bytes(),
            ),
            (
                "a bad ref",
                json!({"id": id, "kind": "request", "payload": {}, "ref": "x"})
                    .to_string()
                    .into_bytes(),
            ),
            (
                "a field twice",
                format!(r#"{{"id":"{id}","id":"{id}","kind":"request","payload":{{}}}}"#)
                    .into_bytes(),
            ),
            ("over 64 KiB", oversize.into_bytes()),
        ];
        for (what, bytes) in cases {
            // The bridge either finishes the stream with nothing or stops
            // reading it; either way there is no reply.
            let reply = exchange(&connection, &bytes).await.unwrap_or_default();
            assert!(
                reply.is_empty(),
                "{what}: no reply, got {}",
                String::from_utf8_lossy(&reply)
            );
        }
        let reply = request(&connection, json!({"message": "still here"})).await;
        assert_eq!(reply["kind"], "response", "the connection goes on: {reply}");
        assert_eq!(
            commands_on_the_log(&fabric).await,
            1,
            "only the good request reached the log"
        );
        bridge.stop().await;
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_kinds_and_invalid_requests_get_the_reference_s_errors() {
    on_every_fabric("axon-invalid", |fabric| async move {
        let peer = TestPeer::new();
        let mut config = bridge_config(&fabric, &[&peer]);
        config.routes = Routes::new(vec![], Some(agent_id("echo")));
        let bridge = start_bridge(&fabric, config).await;
        let connection = peer.dial_bridge(bridge.addr, &bridge.public_key).await;
        let reply_to = |bytes: Vec<u8>| {
            let connection = connection.clone();
            async move {
                let reply = exchange(&connection, &bytes).await.expect("a reply");
                serde_json::from_slice::<Value>(&reply).expect("a JSON reply")
            }
        };

        let (id, bytes) = envelope("negotiate", json!({"offer": 2}));
        let reply = reply_to(bytes).await;
        assert_eq!((&reply["kind"], &reply["ref"]), (&json!("error"), &json!(id)));
        assert_eq!(reply["payload"]["code"], "unhandled");
        let message = reply["payload"]["message"].as_str().unwrap();
        assert!(message.contains("unknown message kind"), "{message}");

        for (what, wire) in [
            ("a nil id", json!({"id": uuid::Uuid::nil(), "kind": "request", "payload": {}})),
            ("a version-1 id", json!({"id": "7d0b4a1e-5c2f-1b7e-9a3d-1f2e3d4c5b6a", "kind": "request", "payload": {}})),
            ("a list payload", json!({"id": uuid::Uuid::new_v4(), "kind": "request", "payload": [1]})),
        ] {
            let reply = reply_to(wire.to_string().into_bytes()).await;
            assert_eq!(reply["kind"], "error", "{what}");
            assert_eq!(reply["payload"]["code"], "invalid_envelope", "{what}");
            assert_eq!(reply["ref"], wire["id"], "{what}");
        }

        // A request on a one-way stream is dropped; a message after it gets through.
        let (_, stray) = envelope("request", json!({"message": "answer me"}));
        one_way(&connection, &stray).await;
        let (_, message) = envelope("message", json!({"message": "barrier"}));
        one_way(&connection, &message).await;
        support::eventually("the barrier message on the log", || async {
            (commands_on_the_log(&fabric).await > 0).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(commands_on_the_log(&fabric).await, 1, "only the message reached the log");
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_keys_other_agents_names_and_other_protocols_are_refused_in_the_handshake() {
    let fabric = support::fabric::embedded_fabric("axon-handshake").await;
    let pinned = TestPeer::new();
    let mut config = bridge_config(&fabric, &[&pinned]);
    config.routes = Routes::new(vec![], Some(agent_id("echo")));
    config.timeout = Duration::from_secs(1);
    let bridge = start_bridge(&fabric, config).await;
    let bridge_sni = axon_id(&bridge.public_key);

    let stranger = TestPeer::new();
    let dialled = stranger
        .dial(bridge.addr, &bridge_sni, &bridge.public_key, b"axon/1")
        .await;
    assert!(refused(dialled).await, "an unpinned key is refused");

    let other = TestPeer::new();
    for sni in [other.id.as_str(), "localhost"] {
        let dialled = pinned
            .dial(bridge.addr, sni, &bridge.public_key, b"axon/1")
            .await;
        assert!(
            refused(dialled).await,
            "SNI {sni} does not name the bridge: refused"
        );
    }
    let dialled = pinned
        .dial(bridge.addr, &bridge_sni, &bridge.public_key, b"h3")
        .await;
    assert!(
        refused(dialled).await,
        "a peer without ALPN axon/1 is refused"
    );

    // The pinned peer, asking for the bridge by its id, gets in.
    let connection = pinned.dial_bridge(bridge.addr, &bridge.public_key).await;
    let reply = request(&connection, json!({"domain": "x"})).await;
    assert_eq!(
        reply["kind"], "error",
        "in, though nobody answers in time: {reply}"
    );
    assert_eq!(
        commands_on_the_log(&fabric).await,
        1,
        "only the admitted peer's request"
    );
    bridge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_does_not_talk_to_a_peer_presenting_another_key() {
    let fabric = support::fabric::embedded_fabric("axon-impostor").await;
    let identity = bridge_identity();
    let expected = TestPeer::new();
    let impostor = TestPeer::new();
    let mut served = impostor.serve(&identity.public_key(), |_| {
        ("response", json!({"hijacked": true}))
    });
    let mut config = bridge_config(&fabric, &[]);
    // The token pins the expected peer's key at the impostor's address.
    config.peers = vec![expected.token(&served.addr.to_string()).parse().unwrap()];
    config.expose = vec![format!("remote={}", expected.id).parse::<Expose>().unwrap()];
    let bridge = start_bridge_as(&fabric, identity, config).await;

    let request = CommandRequest::new("lookup", br#"{"q":1}"#.to_vec())
        .to(agent_id("remote"))
        .content_type(ContentType::Json);
    match fabric.requester("asker").ask(request, ANSWER).await {
        Err(AskError::Remote(error)) => {
            assert_eq!(error.code, ErrorCode::Internal);
            let message = error.message.unwrap();
            assert!(message.contains(&expected.id), "{message}");
        }
        other => panic!("expected an error reply, got {other:?}"),
    }
    assert!(
        served.nothing_within(Duration::from_millis(300)).await,
        "the impostor got nothing"
    );
    assert_eq!(
        served.names.lock().unwrap().first(),
        Some(&expected.id),
        "the bridge asked for the expected peer by its id"
    );
    bridge.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_already_passed_the_bridge_is_dead_lettered_and_not_sent_again() {
    on_every_fabric("axon-loop", |fabric| async move {
        let identity = bridge_identity();
        let remote = TestPeer::new();
        let mut served = remote.serve(&identity.public_key(), |_| {
            ("response", json!({"ok": true}))
        });
        let sender = TestPeer::new();
        let mut config = bridge_config(&fabric, &[&sender]);
        config
            .peers
            .push(remote.token(&served.addr.to_string()).parse().unwrap());
        config.expose = vec![format!("remote={}", remote.id).parse::<Expose>().unwrap()];
        // AXON requests for "loop" go to the exposed agent, that is, back
        // out through this bridge.
        config.routes = Routes::new(vec!["loop=remote".parse().unwrap()], None);
        let bridge = start_bridge_as(&fabric, identity, config).await;

        // A command carrying the bridge's id, as if it had come through it.
        let hop = Metadata::new().with(
            META_BRIDGE_HOPS,
            Scalar::Array(vec![Scalar::Text(bridge.bridge_id.clone())]),
        );
        let command = CommandRequest::new("lookup", br#"{"q":1}"#.to_vec())
            .to(agent_id("remote"))
            .content_type(ContentType::Json)
            .metadata(hop);
        match fabric.requester("asker").ask(command, ANSWER).await {
            Err(AskError::Remote(error)) => {
                assert_eq!(error.code, ErrorCode::InvalidRequest);
                assert!(error.message.unwrap().contains("would loop"));
            }
            other => panic!("expected an error reply, got {other:?}"),
        }

        // The same loop made by an AXON request routed to the exposed agent.
        let connection = sender.dial_bridge(bridge.addr, &bridge.public_key).await;
        let reply = request(&connection, json!({"domain": "loop.x"})).await;
        assert_eq!(reply["kind"], "error", "{reply}");
        assert_eq!(reply["payload"]["code"], "invalid_request");
        assert!(
            reply["payload"]["message"]
                .as_str()
                .unwrap()
                .contains("would loop")
        );

        assert!(
            served.nothing_within(Duration::from_millis(300)).await,
            "nothing went out"
        );
        let dead = fabric.dead_letters().await;
        assert_eq!(dead.len(), 2);
        assert!(dead.iter().all(|d| d.reason == DeadLetterReason::Rejected));
        bridge.stop().await;
    })
    .await;
}
