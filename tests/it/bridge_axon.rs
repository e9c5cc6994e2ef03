//! The AXON bridge end to end, through real QUIC with real mutual TLS, on
//! every backend: AXON requests reach workers on the log and their replies
//! come back; one-way messages become events; exposed agents' commands
//! reach AXON peers and their answers come back.

use crate::support;

use std::time::Duration;

use agdx::bridge::axon::{Expose, Routes};
use agdx::log::LogRecord;
use agdx::wire::{AgentEnvelope, ContentType, ErrorCode, Kind, Metadata, Scalar};
use agdx::worker::{EchoHandler, HandlerError, HandlerReply, handler_fn};
use agdx::{Answer, AskError, CommandRequest};
use serde_json::{Value, json};
use support::axon::{
    TestPeer, bridge_config, bridge_identity, envelope, exchange, one_way, request, start_bridge,
    start_bridge_as,
};
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// Every command and event on `agent.commands`, with its record.
async fn commands(fabric: &Fabric) -> Vec<(LogRecord, AgentEnvelope)> {
    fabric
        .records(&fabric.topology.commands)
        .await
        .into_iter()
        .map(|r| {
            let e = AgentEnvelope::decode_valid(&r.payload).expect("a valid envelope");
            (r, e)
        })
        .collect()
}

fn text<'m>(metadata: &'m Metadata, key: &str) -> Option<&'m str> {
    metadata.get(key).and_then(Scalar::as_str)
}

fn hops(e: &AgentEnvelope) -> Vec<&str> {
    e.metadata.iter().flat_map(|m| m.bridge_hops()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_axon_request_reaches_a_worker_and_its_reply_comes_back_byte_for_byte() {
    on_every_fabric("axon-request", |fabric| async move {
        let worker = Running::start(fabric.worker("echo").fallback(EchoHandler));
        let peer = TestPeer::new();
        let mut config = bridge_config(&fabric, &[&peer]);
        config.routes = Routes::new(vec![], Some(agent_id("echo")));
        let bridge = start_bridge(&fabric, config).await;
        let connection = peer.dial_bridge(bridge.addr, &bridge.public_key).await;

        let mut ids = Vec::new();
        for payload in [
            r#"{ "message" : "hi",  "n": 1.50 }"#,
            r#"{"message":"again"}"#,
        ] {
            let id = uuid::Uuid::new_v4().to_string();
            let wire = format!(r#"{{"id":"{id}","kind":"request","payload":{payload}}}"#);
            let reply = exchange(&connection, wire.as_bytes())
                .await
                .expect("a reply");
            let reply_text = String::from_utf8(reply).expect("UTF-8");
            assert!(
                reply_text.contains(&format!(r#""payload":{payload}"#)),
                "the echoed payload comes back byte for byte: {reply_text}"
            );
            let reply: Value = serde_json::from_str(&reply_text).unwrap();
            assert_eq!(reply["kind"], "response");
            assert_eq!(reply["ref"], json!(id));
            ids.push((id, payload));
        }

        let commands = commands(&fabric).await;
        assert_eq!(commands.len(), 2, "one command per request");
        for ((record, command), (id, payload)) in commands.iter().zip(&ids) {
            assert_eq!(command.kind, Kind::Command);
            assert_eq!(command.operation.as_deref(), Some("axon.request"));
            assert_eq!(command.target, Some(agent_id("echo")));
            assert_eq!(command.source, agent_id("axon-bridge"));
            assert_eq!(
                command.body,
                payload.as_bytes(),
                "the body is the payload, unchanged"
            );
            assert_eq!(agdx::content_type_of(record), ContentType::Json);
            assert!(
                command.deadline_micros.is_some(),
                "the bridge's wait is the deadline"
            );
            assert_eq!(hops(command), [bridge.bridge_id.as_str()]);
            let metadata = command.metadata.as_ref().unwrap();
            assert_eq!(text(metadata, "axon.from"), Some(peer.id.as_str()));
            assert_eq!(text(metadata, "axon.id"), Some(id.as_str()));
        }
        assert_eq!(
            commands[0].1.conversation, commands[1].1.conversation,
            "one peer's requests share a conversation, so they stay in order"
        );
        bridge.stop().await;
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_go_to_the_longest_matching_domain_route_and_unrouted_ones_are_unhandled() {
    on_every_fabric("axon-routes", |fabric| async move {
        let answer_as = |name: &'static str| {
            handler_fn(move |request| async move {
                let op = request.operation().unwrap_or_default().to_owned();
                Ok(HandlerReply::json(
                    json!({"agent": name, "op": op}).to_string(),
                ))
            })
        };
        let home = Running::start(fabric.worker("home").fallback(answer_as("home")));
        let cal = Running::start(fabric.worker("cal").fallback(answer_as("cal")));
        let peer = TestPeer::new();
        let mut config = bridge_config(&fabric, &[&peer]);
        config.routes = Routes::new(
            vec![
                "family=home".parse().unwrap(),
                "family.calendar=cal".parse().unwrap(),
            ],
            None,
        );
        let bridge = start_bridge(&fabric, config).await;
        let connection = peer.dial_bridge(bridge.addr, &bridge.public_key).await;

        for (domain, agent) in [
            ("family.school", "home"),
            ("family.calendar.today", "cal"),
            ("family", "home"),
        ] {
            let reply = request(&connection, json!({"domain": domain, "q": 1})).await;
            assert_eq!(reply["kind"], "response", "{reply}");
            assert_eq!(reply["payload"], json!({"agent": agent, "op": domain}));
        }
        let before = commands(&fabric).await.len();
        for payload in [json!({"domain": "work.x"}), json!({"message": "no domain"})] {
            let reply = request(&connection, payload).await;
            assert_eq!(reply["kind"], "error");
            assert_eq!(reply["payload"]["code"], "unhandled");
            assert_eq!(reply["payload"]["retryable"], false);
            let message = reply["payload"]["message"].as_str().unwrap();
            assert!(
                message.contains("family.* → home")
                    && message.contains("family.calendar.* → cal")
                    && message.contains("no default agent"),
                "the error lists the routes: {message}"
            );
        }
        assert_eq!(
            commands(&fabric).await.len(),
            before,
            "unrouted requests write nothing"
        );
        bridge.stop().await;
        home.stop().await;
        cal.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_errors_timeouts_and_non_json_replies_become_axon_errors() {
    on_every_fabric("axon-errors", |fabric| async move {
        let strict = Running::start(fabric.worker("strict").handle("known", EchoHandler));
        let flaky = Running::start(fabric.worker("flaky").fallback(handler_fn(|_| async {
            Err(HandlerError::retryable("the database is down"))
        })));
        let plain = Running::start(
            fabric
                .worker("plain")
                .fallback(handler_fn(|_| async { Ok(HandlerReply::raw("just text")) })),
        );
        let peer = TestPeer::new();
        let mut config = bridge_config(&fabric, &[&peer]);
        config.timeout = Duration::from_secs(1);
        config.routes = Routes::new(
            [
                "other=strict",
                "flaky=flaky",
                "plain=plain",
                "nobody=nobody",
            ]
            .iter()
            .map(|r| r.parse().unwrap())
            .collect(),
            None,
        );
        let bridge = start_bridge(&fabric, config).await;
        let connection = peer.dial_bridge(bridge.addr, &bridge.public_key).await;

        let error = |reply: &Value| {
            assert_eq!(reply["kind"], "error", "{reply}");
            let p = &reply["payload"];
            (
                p["code"].as_str().unwrap().to_owned(),
                p["message"].as_str().unwrap().to_owned(),
                p["retryable"].as_bool().unwrap(),
            )
        };
        // The bridge gives up after a second; until a pool has its
        // partitions (a Kafka group takes longer), that is a timeout.
        let answered = |domain: &'static str| {
            let connection = &connection;
            eventually(
                "a pool to answer within the bridge's timeout",
                move || async move {
                    let reply = request(connection, json!({ "domain": domain })).await;
                    (reply["payload"]["code"] != "timeout").then_some(reply)
                },
            )
        };
        let (code, message, retryable) = error(&answered("other").await);
        assert_eq!(code, "unsupported");
        assert!(
            message.contains("no handler for operation 'other'"),
            "{message}"
        );
        assert!(!retryable);

        let (code, message, retryable) = error(&answered("flaky").await);
        assert_eq!((code.as_str(), retryable), ("internal", true));
        assert!(message.contains("the database is down"), "{message}");

        let (code, message, _) = error(&answered("plain").await);
        assert_eq!(code, "internal");
        assert!(message.contains("not a JSON object"), "{message}");

        let (code, message, retryable) =
            error(&request(&connection, json!({"domain": "nobody"})).await);
        assert_eq!((code.as_str(), retryable), ("timeout", true));
        assert!(
            message.contains("no reply from agent 'nobody' within "),
            "{message}"
        );
        assert!(message.contains(" ms"), "{message}");
        assert!(
            !message.contains("--") && !message.contains("agdx"),
            "a peer hears no command line: {message}"
        );

        bridge.stop().await;
        strict.stop().await;
        flaky.stop().await;
        plain.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_way_messages_become_events_on_the_log() {
    on_every_fabric("axon-events", |fabric| async move {
        let peer = TestPeer::new();
        let mut config = bridge_config(&fabric, &[&peer]);
        config.routes = Routes::new(vec!["family=home".parse().unwrap()], None);
        let bridge = start_bridge(&fabric, config).await;
        let connection = peer.dial_bridge(bridge.addr, &bridge.public_key).await;

        let (routed_id, routed) = envelope(
            "message",
            json!({"domain": "family.news", "text": "dinner at 7"}),
        );
        one_way(&connection, &routed).await;
        let (future_id, future) = envelope("negotiate", json!({"offer": 2}));
        one_way(&connection, &future).await;
        // A message on a bidirectional stream is taken, and not answered.
        let (bidi_id, bidi) = envelope("message", json!({"text": "both ways"}));
        let reply = exchange(&connection, &bidi)
            .await
            .expect("the stream finishes");
        assert!(reply.is_empty(), "no reply to a message");

        let events = eventually("three events on the log", || async {
            let found = commands(&fabric).await;
            (found.len() == 3).then_some(found)
        })
        .await;
        let by_id = |id: &str| {
            events
                .iter()
                .map(|(_, e)| e)
                .find(|e| text(e.metadata.as_ref().unwrap(), "axon.id") == Some(id))
                .unwrap_or_else(|| panic!("no event for message {id}"))
        };
        let e = by_id(&routed_id);
        assert_eq!(e.kind, Kind::Event);
        assert_eq!(e.operation.as_deref(), Some("family.news"));
        assert_eq!(e.target, Some(agent_id("home")), "routed like a request");
        assert_eq!(
            e.body,
            &br#"{"domain":"family.news","text":"dinner at 7"}"#[..]
        );
        assert_eq!(
            text(e.metadata.as_ref().unwrap(), "axon.kind"),
            Some("message")
        );
        assert_eq!(hops(e), [bridge.bridge_id.as_str()]);
        let e = by_id(&future_id);
        assert_eq!(e.operation.as_deref(), Some("axon.unknown"));
        assert_eq!(e.target, None);
        let e = by_id(&bidi_id);
        assert_eq!(e.operation.as_deref(), Some("axon.message"));
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exposed_agent_s_commands_reach_its_axon_peer_and_the_answers_come_back() {
    on_every_fabric("axon-expose", |fabric| async move {
        let identity = bridge_identity();
        let remote = TestPeer::new();
        let mut served = remote.serve(&identity.public_key(), |request| {
            let payload = &request["payload"];
            if payload["fail"] == json!(true) {
                (
                    "error",
                    json!({"code": "unhandled", "message": "no handler here", "retryable": false}),
                )
            } else {
                (
                    "response",
                    json!({"answer": payload["q"].as_i64().unwrap_or(0) + 1}),
                )
            }
        });
        let mut config = bridge_config(&fabric, &[]);
        config.peers = vec![remote.token(&served.addr.to_string()).parse().unwrap()];
        config.expose = vec![format!("remote={}", remote.id).parse::<Expose>().unwrap()];
        let bridge = start_bridge_as(&fabric, identity, config).await;
        let requester = fabric.requester("asker");
        let ask = |body: &'static str| {
            CommandRequest::new("lookup", body.as_bytes().to_vec())
                .to(agent_id("remote"))
                .content_type(ContentType::Json)
        };

        let answer = requester
            .ask(ask(r#"{"q": 1}"#), ANSWER)
            .await
            .expect("an answer");
        let Answer::Response(reply) = answer else {
            panic!("a response")
        };
        assert_eq!(reply.body, &br#"{"answer":2}"#[..]);
        assert_eq!(reply.content_type, ContentType::Json);
        assert_eq!(reply.envelope.source, agent_id("remote"));
        assert_eq!(
            hops(&reply.envelope),
            [bridge.bridge_id.as_str()],
            "replies carry the hop"
        );
        let (stream, request) = served.next().await;
        assert_eq!((stream, &request["kind"]), ("bidi", &json!("request")));
        assert_eq!(request["payload"], json!({"q": 1}));
        assert!(request.get("ref").is_none(), "a request has no ref");
        assert_eq!(
            *served.names.lock().unwrap(),
            [remote.id.as_str()],
            "SNI = the peer's id"
        );

        match requester.ask(ask(r#"{"fail": true}"#), ANSWER).await {
            Err(AskError::Remote(error)) => {
                assert_eq!(
                    error.code,
                    ErrorCode::Unsupported,
                    "unhandled is unsupported"
                );
                let message = error.message.unwrap();
                assert!(
                    message.contains("answered error 'unhandled': no handler here"),
                    "{message}"
                );
            }
            other => panic!("expected an error reply, got {other:?}"),
        }
        served.next().await;

        for body in ["[1, 2]", "not json"] {
            match requester.ask(ask(body), ANSWER).await {
                Err(AskError::Remote(error)) => {
                    assert_eq!(error.code, ErrorCode::InvalidRequest);
                    let message = error.message.unwrap();
                    assert!(
                        message.contains("invalid_input") && message.contains("JSON object"),
                        "{message}"
                    );
                }
                other => panic!("expected an error reply, got {other:?}"),
            }
        }
        assert!(
            served.nothing_within(Duration::from_millis(300)).await,
            "refused bodies are not sent"
        );

        // An event to the exposed agent becomes a one-way message.
        requester
            .producer()
            .publish_one(
                &fabric.topology.commands,
                agdx::Outgoing::new(
                    AgentEnvelope::event(
                        agdx::new_record_id(),
                        agdx::new_conversation_id(),
                        agent_id("asker"),
                        br#"{"state":"ready"}"#.to_vec(),
                    )
                    .with_target(agent_id("remote")),
                    ContentType::Json,
                ),
            )
            .await
            .expect("publish an event");
        let (stream, message) = served.next().await;
        assert_eq!((stream, &message["kind"]), ("uni", &json!("message")));
        assert_eq!(message["payload"], json!({"state": "ready"}));

        let dead = fabric.dead_letters().await;
        assert_eq!(dead.len(), 3, "the error answer and the two refused bodies");
        assert!(
            dead.iter()
                .all(|d| d.reason == agdx::wire::DeadLetterReason::Rejected)
        );
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_stream_is_stopped_cancels_its_command() {
    on_every_fabric("axon-cancel", |fabric| async move {
        let (handler, heeded) = support::agents::heeding();
        let worker = fabric.worker("slow").fallback(handler);
        let stats = worker.stats();
        let worker = Running::start(worker);
        let peer = TestPeer::new();
        let mut config = bridge_config(&fabric, &[&peer]);
        config.routes = Routes::new(vec![], Some(agent_id("slow")));
        let bridge = start_bridge(&fabric, config).await;
        let connection = peer.dial_bridge(bridge.addr, &bridge.public_key).await;

        let (_, bytes) = envelope("request", json!({"message": "think"}));
        let (mut send, mut recv) = connection.open_bi().await.expect("a stream");
        send.write_all(&bytes).await.expect("write the request");
        send.finish().expect("finish the request");
        eventually("the request's handler to start", || async {
            (heeded.started() == 1).then_some(())
        })
        .await;
        // The requester stops waiting: it stops reading the reply stream.
        recv.stop(0u32.into()).expect("stop the stream");
        eventually("the request's command to be cancelled", || async {
            (stats.cancelled.load(std::sync::atomic::Ordering::Relaxed) == 1).then_some(())
        })
        .await;
        assert!(heeded.told(), "the handler was told to stop");
        bridge.stop().await;
        worker.stop().await;
    })
    .await;
}
