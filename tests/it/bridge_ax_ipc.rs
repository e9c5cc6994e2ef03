//! The ax-ipc bridge over its real Unix socket, on every backend: an AX
//! client's calls reach the agent routed for the action and come back as
//! `{"ok":true, ...}`; concurrent calls on one connection are matched by
//! `_msgId`; heartbeats keep a slow call alive; errors, a handler's own
//! `ok:false`, odd replies and timeouts each get their documented answer.

use crate::support;

use std::time::{Duration, Instant};

use agdx::bridge::ax_ipc::session_conversation;
use agdx::wire::{ContentType, ErrorCode, Scalar};
use agdx::worker::{HandlerError, HandlerReply, handler_fn};
use agdx::{content_type_of, envelope_of};
use serde_json::{Value, json};
use support::PATIENCE;
use support::ax_ipc::{BridgeSetup, IpcClient, RunningBridge};
use support::fabric::{Fabric, Running, agent_id, on_every_fabric};

/// The `memory` agent of these tests: each action shows one kind of answer.
fn memory_agent(fabric: &Fabric) -> Running {
    let handler = handler_fn(|request| async move {
        let body: Value = serde_json::from_slice(&request.body).expect("a JSON body");
        let scope = body["scope"].as_str().unwrap_or_default().to_owned();
        match request.operation().unwrap_or_default() {
            "memory_list" => Ok(HandlerReply::json(json!({"entries": [scope]}).to_string())),
            "memory_query" => {
                // scope "slow-N": answer after N ms.
                let ms = scope.strip_prefix("slow-").and_then(|n| n.parse().ok());
                tokio::time::sleep(Duration::from_millis(ms.unwrap_or(0))).await;
                Ok(HandlerReply::json(json!({"results": [scope]}).to_string()))
            }
            "memory_delete" => Ok(HandlerReply::json(
                json!({"ok": false, "error": "entry is locked"}).to_string(),
            )),
            "memory_read" => Err(HandlerError::fatal("no entry with that id in this scope")
                .with_code(ErrorCode::InvalidRequest)),
            _ => Ok(HandlerReply::json("[1,2]")),
        }
    });
    Running::start(fabric.worker("memory").fallback(handler))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ax_call_reaches_the_routed_agent_and_comes_back_ok() {
    on_every_fabric("ax-ipc-call", |fabric| async move {
        let agent = memory_agent(&fabric);
        let bridge = RunningBridge::start(&fabric, BridgeSetup::default()).await;
        let client = IpcClient::connect(&bridge.socket)
            .await
            .with_context("_sessionId", "session-1")
            .with_context("_userId", "alice")
            .with_context("_requestId", "req-9")
            .with_context("_sessionScope", "dm");
        let before = agdx::Clock::now_micros(&agdx::SystemClock);
        for n in 1..=2 {
            let answered = client
                .call(json!({"action": "memory_list", "scope": "notes"}), PATIENCE)
                .await
                .expect("an answer");
            assert_eq!(
                Value::Object(answered.answer).to_string(),
                format!(r#"{{"ok":true,"entries":["notes"],"_msgId":"{n}"}}"#)
            );
        }

        // On the log: two commands, one conversation, the AX context mapped.
        let commands = fabric.records(&fabric.topology.commands).await;
        assert_eq!(commands.len(), 2);
        for record in &commands {
            let command = envelope_of(record).expect("a valid command");
            assert_eq!(command.operation.as_deref(), Some("memory_list"));
            assert_eq!(command.source, agent_id("ax-ipc"));
            assert_eq!(command.target, Some(agent_id("memory")));
            assert_eq!(content_type_of(record), ContentType::Json);
            assert_eq!(
                command.body,
                &br#"{"action":"memory_list","scope":"notes"}"#[..]
            );
            assert_eq!(command.conversation, session_conversation("session-1"));
            let deadline = command.deadline_micros.expect("a deadline");
            assert!(deadline >= before + PATIENCE.as_micros() as u64);
            let metadata = command.metadata.expect("metadata");
            let text = |key| metadata.get(key).and_then(Scalar::as_str);
            assert_eq!(text("ax.user_id"), Some("alice"));
            assert_eq!(text("ax.request_id"), Some("req-9"));
            assert_eq!(text("ax.session_scope"), Some("dm"));
            assert_eq!(
                metadata.bridge_hops().collect::<Vec<_>>(),
                ["ax-ipc"],
                "every record the bridge writes carries its hop"
            );
        }
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_on_one_connection_each_get_their_own_answer() {
    on_every_fabric("ax-ipc-concurrent", |fabric| async move {
        let agent = memory_agent(&fabric);
        let bridge = RunningBridge::start(&fabric, BridgeSetup::default()).await;
        // Sessions in different partitions, so the worker runs them at once
        // and the replies come back in the reverse order of the calls.
        let commands = &fabric.topology.commands;
        let mut sessions: Vec<String> = Vec::new();
        for n in 0.. {
            let session = format!("session-{n}");
            let partition = agdx::routing::partition_of(commands, session_conversation(&session));
            let taken = sessions.iter().any(|s| {
                agdx::routing::partition_of(commands, session_conversation(s)) == partition
            });
            if !taken {
                sessions.push(session);
            }
            if sessions.len() == 3 {
                break;
            }
        }
        let client = IpcClient::connect(&bridge.socket).await;
        let call = |scope: &str, session: &str| {
            let request = json!({"action": "memory_query", "scope": scope, "_sessionId": session});
            let client = &client;
            async move {
                let answered = client.call(request, PATIENCE).await.expect("an answer");
                (answered.answer, Instant::now())
            }
        };
        let ((a, a_at), (b, b_at), (c, c_at)) = tokio::join!(
            call("slow-1500", &sessions[0]),
            call("slow-700", &sessions[1]),
            call("slow-0", &sessions[2]),
        );
        assert_eq!(a["results"], json!(["slow-1500"]));
        assert_eq!(b["results"], json!(["slow-700"]));
        assert_eq!(c["results"], json!(["slow-0"]));
        let ids: Vec<&Value> = [&a, &b, &c].iter().map(|x| &x["_msgId"]).collect();
        assert_eq!(ids, [&json!("1"), &json!("2"), &json!("3")]);
        assert!(
            c_at < b_at && b_at < a_at,
            "answers came back as the replies did, not in call order"
        );
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeats_keep_a_slow_call_alive_and_stop_with_the_answer() {
    on_every_fabric("ax-ipc-heartbeat", |fabric| async move {
        let agent = memory_agent(&fabric);
        let setup = BridgeSetup {
            heartbeat: Duration::from_millis(100),
            ..BridgeSetup::default()
        };
        let bridge = RunningBridge::start(&fabric, setup).await;
        let client = IpcClient::connect(&bridge.socket).await;
        // Warm up so the slow call's time is the handler's, not set-up.
        client
            .call(
                json!({"action": "memory_query", "scope": "slow-0"}),
                PATIENCE,
            )
            .await
            .expect("an answer");
        // A client timeout of 400 ms, a handler taking 1.2 s: heartbeats
        // every 100 ms keep the call waiting.
        let answered = client
            .call(
                json!({"action": "memory_query", "scope": "slow-1200"}),
                Duration::from_millis(400),
            )
            .await
            .expect("heartbeats kept the call alive");
        assert_eq!(answered.answer["ok"], json!(true));
        assert!(
            answered.heartbeats.len() >= 5,
            "a heartbeat every 100 ms: {:?}",
            answered.heartbeats
        );
        let now_ms = agdx::Clock::now_micros(&agdx::SystemClock) / 1000;
        for beat in &answered.heartbeats {
            assert_eq!(beat["_msgId"], json!("2"), "heartbeats name their call");
            let ts = beat["ts"].as_u64().expect("ts in ms");
            assert!(ts <= now_ms && ts + 60_000 > now_ms, "ts is now, in ms");
            assert_eq!(beat.len(), 3, "just _heartbeat, ts, _msgId: {beat:?}");
        }
        bridge.stop().await;

        // Heartbeats at the AX host's 15 s: the same call times out at the
        // client, as an AX client's would.
        let bridge = RunningBridge::start(&fabric, BridgeSetup::default()).await;
        let client = IpcClient::connect(&bridge.socket).await;
        let error = client
            .call(
                json!({"action": "memory_query", "scope": "slow-1200"}),
                Duration::from_millis(400),
            )
            .await
            .expect_err("no heartbeat within the client's timeout");
        assert!(error.contains("no heartbeat"), "{error}");
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_keep_a_handlers_ok_false_and_explain_errors() {
    on_every_fabric("ax-ipc-answers", |fabric| async move {
        let agent = memory_agent(&fabric);
        let bridge = RunningBridge::start(&fabric, BridgeSetup::default()).await;
        let client = IpcClient::connect(&bridge.socket).await;
        let id = "0123abcd-0000-4000-8000-000000000000";

        let locked = client
            .call(json!({"action": "memory_delete", "id": id}), PATIENCE)
            .await
            .expect("an answer")
            .answer;
        assert_eq!(
            Value::Object(locked).to_string(),
            r#"{"ok":false,"error":"entry is locked","_msgId":"1"}"#,
            "a handler's ok:false is not overwritten"
        );

        let failed = client
            .call(json!({"action": "memory_read", "id": id}), PATIENCE)
            .await
            .expect("an answer")
            .answer;
        assert_eq!(failed["ok"], json!(false));
        let error = failed["error"].as_str().unwrap();
        for part in [
            "memory_read",
            "'memory'",
            "invalid_request",
            "no entry with that id",
        ] {
            assert!(error.contains(part), "{part:?} in {error}");
        }

        let odd = client
            .call(
                json!({"action": "memory_write", "scope": "a", "content": "x"}),
                PATIENCE,
            )
            .await
            .expect("an answer")
            .answer;
        assert_eq!(odd["ok"], json!(false));
        assert!(
            odd["error"]
                .as_str()
                .unwrap()
                .contains("an ax-ipc reply must be a JSON object"),
            "{odd:?}"
        );
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reply_in_time_answers_a_timeout_naming_the_missing_worker() {
    on_every_fabric("ax-ipc-timeout", |fabric| async move {
        let setup = BridgeSetup {
            routes: vec!["memory_*=nobody"],
            timeout: Duration::from_millis(800),
            ..BridgeSetup::default()
        };
        let bridge = RunningBridge::start(&fabric, setup).await;
        let client = IpcClient::connect(&bridge.socket).await;
        let answer = client
            .call(json!({"action": "memory_list", "scope": "a"}), PATIENCE)
            .await
            .expect("the bridge answers when its timeout passes")
            .answer;
        assert_eq!(answer["ok"], json!(false));
        let error = answer["error"].as_str().unwrap();
        assert!(error.contains("no reply from nobody"), "{error}");
        assert!(error.contains("no worker for 'nobody' was seen"), "{error}");
        // The command carries the same deadline, so a worker that starts
        // later dead-letters it instead of acting after the caller gave up.
        let commands = fabric.records(&fabric.topology.commands).await;
        let command = envelope_of(&commands[0]).unwrap();
        let stamped = command.deadline_micros.expect("a deadline");
        let now = agdx::Clock::now_micros(&agdx::SystemClock);
        assert!(stamped < now, "the deadline has passed: {stamped} vs {now}");
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_caller_that_disconnects_cancels_its_call() {
    on_every_fabric("ax-ipc-disconnect", |fabric| async move {
        let (handler, heeded) = support::agents::heeding();
        let worker = fabric.worker("memory").fallback(handler);
        let stats = worker.stats();
        let agent = Running::start(worker);
        let setup = BridgeSetup {
            heartbeat: Duration::from_millis(100),
            ..BridgeSetup::default()
        };
        let bridge = RunningBridge::start(&fabric, setup).await;
        let client = IpcClient::connect(&bridge.socket).await;
        client
            .send_raw(
                &serde_json::to_vec(
                    &json!({"action": "memory_query", "scope": "s", "_msgId": "1"}),
                )
                .unwrap(),
            )
            .await;
        support::eventually("the call's handler to start", || async {
            (heeded.started() == 1).then_some(())
        })
        .await;
        // The AX caller goes away mid-call.
        drop(client);
        support::eventually("the call's command to be cancelled", || async {
            (stats.cancelled.load(std::sync::atomic::Ordering::Relaxed) == 1).then_some(())
        })
        .await;
        assert!(heeded.told(), "the handler was told to stop");
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}
