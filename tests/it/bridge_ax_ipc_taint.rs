//! The taint budget over the bridge's real socket, on every backend: each
//! session's replies are counted, external content (web replies, entries
//! tagged `"trust":"external"`) apart; a sensitive action of a session over
//! the threshold is refused with the AX host's answer and never reaches
//! the log; other actions, other sessions and the exempt identity actions
//! go through.

use crate::support;

use std::path::PathBuf;
use std::sync::Arc;

use agdx::bridge::ax_ipc::{
    ActionSchemas, AxIpcBridge, Gate, HEARTBEAT_EVERY, Routes, TAINT_EXEMPT, TaintBudget,
    TaintProfile, bind, serve_socket, write_defaults,
};
use agdx::envelope_of;
use agdx::worker::{HandlerReply, handler_fn};
use serde_json::{Value, json};
use support::PATIENCE;
use support::ax_ipc::IpcClient;
use support::fabric::{Fabric, Running, on_every_fabric};
use tokio_util::sync::CancellationToken;

/// Schemas for the actions the shipped set lacks, strict as the AX host's.
const EXTRA_SCHEMAS: &[(&str, &str)] = &[
    (
        "scheduler_add_cron",
        r#"{"type":"object","properties":{"action":{"const":"scheduler_add_cron"},"schedule":{"type":"string","maxLength":100},"prompt":{"type":"string","maxLength":10000}},"required":["action","schedule","prompt"],"additionalProperties":false}"#,
    ),
    (
        "identity_write",
        r#"{"type":"object","properties":{"action":{"const":"identity_write"},"file":{"enum":["SOUL.md","IDENTITY.md"]},"content":{"type":"string"},"reason":{"type":"string"},"origin":{"type":"string"}},"required":["action","file","content","reason","origin"],"additionalProperties":false}"#,
    ),
    (
        "identity_propose",
        r#"{"type":"object","properties":{"action":{"const":"identity_propose"},"file":{"enum":["SOUL.md","IDENTITY.md"]},"content":{"type":"string"},"reason":{"type":"string"},"origin":{"type":"string"}},"required":["action","file","content","reason","origin"],"additionalProperties":false}"#,
    ),
    (
        "user_write",
        r#"{"type":"object","properties":{"action":{"const":"user_write"},"userId":{"type":"string"},"content":{"type":"string"},"reason":{"type":"string"},"origin":{"type":"string"}},"required":["action","userId","content","reason","origin"],"additionalProperties":false}"#,
    ),
];

const ENTRY_ID: &str = "0f8fad5b-d9cb-469f-a165-70867728950e";

/// The reply the `tools` agent gives: sizes are asked for in the request
/// (`.../N` urls, `clean-N` scopes), so the test knows every byte counted.
fn reply_for(action: &str, request: &Value) -> Value {
    let size = |text: &str| {
        text.rsplit(['/', '-'])
            .next()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(0)
    };
    match action {
        "web_fetch" => {
            json!({"status": 200, "body": "w".repeat(size(request["url"].as_str().unwrap_or_default()))})
        }
        "web_search" => json!({"results": ["s".repeat(400)]}),
        "memory_list" => {
            json!({"entries": ["c".repeat(size(request["scope"].as_str().unwrap_or_default()))]})
        }
        "memory_read" => json!({"entry": {
            "id": ENTRY_ID,
            "content": "t".repeat(600),
            "taint": {"source": "web_fetch", "trust": "external", "timestamp": "2026-01-01T00:00:00Z"},
        }}),
        "scheduler_add_cron" => json!({"jobId": "job-1"}),
        _ => json!({"applied": true}),
    }
}

fn tools_agent(fabric: &Fabric) -> Running {
    let handler = handler_fn(|request| async move {
        let body: Value = serde_json::from_slice(&request.body).expect("a JSON body");
        let reply = reply_for(request.operation().unwrap_or_default(), &body);
        Ok(HandlerReply::json(reply.to_string()))
    });
    Running::start(fabric.worker("tools").fallback(handler))
}

/// A session's account as the AX host keeps it: a token per four
/// characters of each reply, rounded up.
#[derive(Default)]
struct Tally {
    total: u64,
    tainted: u64,
}

impl Tally {
    fn add(&mut self, reply: &Value, tainted: bool) {
        let tokens = (reply.to_string().len() as u64).div_ceil(4);
        self.total += tokens;
        if tainted {
            self.tainted += tokens;
        }
    }

    /// Makes a call that must succeed and counts its reply.
    async fn ok(&mut self, client: &IpcClient, request: Value, tainted: bool) -> Value {
        let reply = ok(client, request).await;
        self.add(&reply, tainted);
        reply
    }

    fn ratio(&self) -> f64 {
        self.tainted as f64 / self.total as f64
    }
}

struct TaintBridge {
    socket: PathBuf,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<std::io::Result<()>>,
}

impl TaintBridge {
    async fn start(fabric: &Fabric, budget: TaintBudget) -> TaintBridge {
        let schemas = fabric.dir.path().join("schemas");
        write_defaults(&schemas).expect("write the shipped schemas");
        for (action, schema) in EXTRA_SCHEMAS {
            std::fs::write(schemas.join(format!("{action}.json")), schema).unwrap();
        }
        let schemas = ActionSchemas::load_dir(&schemas).expect("the schemas load");
        let routes = Routes::new(vec!["*=tools".parse().unwrap()]);
        let gate = Gate::new("ax-ipc", schemas, routes).with_taint(budget);
        let bridge = Arc::new(AxIpcBridge::new(fabric.requester("ax-ipc"), gate));
        let socket = fabric.dir.path().join("taint.sock");
        let listener = bind(&socket).expect("bind the bridge socket");
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(serve_socket(
            bridge,
            listener,
            socket.clone(),
            HEARTBEAT_EVERY,
            shutdown.clone(),
        ));
        TaintBridge {
            socket,
            shutdown,
            task,
        }
    }

    async fn session(&self, id: &str) -> IpcClient {
        IpcClient::connect(&self.socket)
            .await
            .with_context("_sessionId", id)
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap().expect("served cleanly");
    }
}

/// Calls `request` and returns its answer without `_msgId`.
async fn call(client: &IpcClient, request: Value) -> Value {
    let mut answer = client
        .call(request, PATIENCE)
        .await
        .expect("an answer")
        .answer;
    answer.remove("_msgId");
    Value::Object(answer)
}

/// Calls `request`, which must succeed, and returns the reply it carried.
async fn ok(client: &IpcClient, request: Value) -> Value {
    let answer = call(client, request.clone()).await;
    let action = request["action"].as_str().unwrap();
    let reply = reply_for(action, &request);
    let mut expected = json!({"ok": true});
    expected
        .as_object_mut()
        .unwrap()
        .extend(reply.as_object().unwrap().clone());
    assert_eq!(answer, expected, "{action}");
    reply
}

fn cron() -> Value {
    json!({"action": "scheduler_add_cron", "schedule": "0 9 * * *", "prompt": "post the digest"})
}

fn blocked(action: &str, ratio: f64, threshold: &str) -> Value {
    json!({
        "ok": false,
        "taintBlocked": true,
        "error": format!(
            "Session taint ratio {:.1}% exceeds threshold {threshold}. Action \"{action}\" requires user confirmation.",
            ratio * 100.0
        ),
    })
}

async fn operations(fabric: &Fabric) -> Vec<String> {
    fabric
        .records(&fabric.topology.commands)
        .await
        .iter()
        .map(|r| envelope_of(r).unwrap().operation.unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_over_the_budget_is_refused_sensitive_actions_with_axs_answer() {
    on_every_fabric("ax-ipc-taint", |fabric| async move {
        let agent = tools_agent(&fabric);
        let bridge =
            TaintBridge::start(&fabric, TaintBudget::for_profile(TaintProfile::Balanced)).await;
        let s1 = bridge.session("s1").await;
        let mut tally = Tally::default();

        // Nothing counted yet, then clean content: the sensitive action passes.
        tally.ok(&s1, cron(), false).await;
        tally
            .ok(
                &s1,
                json!({"action": "memory_list", "scope": "clean-800"}),
                false,
            )
            .await;
        tally.ok(&s1, cron(), false).await;
        // Some external content, still under 30%.
        tally
            .ok(
                &s1,
                json!({"action": "web_fetch", "url": "https://example.com/100"}),
                true,
            )
            .await;
        assert!(tally.ratio() < 0.30, "{}", tally.ratio());
        tally.ok(&s1, cron(), false).await;
        // Over 30%: refused with the AX host's answer.
        tally
            .ok(
                &s1,
                json!({"action": "web_fetch", "url": "https://example.com/1200"}),
                true,
            )
            .await;
        assert!(tally.ratio() > 0.30, "{}", tally.ratio());
        assert_eq!(
            call(&s1, cron()).await,
            blocked("scheduler_add_cron", tally.ratio(), "30%")
        );
        // Only sensitive actions are refused; other sessions have their own account.
        ok(&s1, json!({"action": "memory_list", "scope": "clean-10"})).await;
        let s2 = bridge.session("s2").await;
        ok(&s2, cron()).await;

        let crons = operations(&fabric)
            .await
            .iter()
            .filter(|o| *o == "scheduler_add_cron")
            .count();
        assert_eq!(crons, 4, "the refused call never reached the log");
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_identity_actions_are_never_refused_even_when_made_sensitive() {
    on_every_fabric("ax-ipc-taint-exempt", |fabric| async move {
        let agent = tools_agent(&fabric);
        let sensitive = TAINT_EXEMPT.iter().map(|a| (*a).to_owned());
        let budget = TaintBudget::new(0.0)
            .unwrap()
            .with_sensitive(sensitive.chain(["scheduler_add_cron".to_owned()]));
        let bridge = TaintBridge::start(&fabric, budget).await;
        let s1 = bridge.session("s1").await;
        ok(&s1, json!({"action": "web_search", "query": "rust"})).await;
        assert_eq!(call(&s1, cron()).await, blocked("scheduler_add_cron", 1.0, "0%"));
        let write = |action: &str| {
            let mut request = json!({"action": action, "content": "be brief", "reason": "asked", "origin": "user_request"});
            let fields = request.as_object_mut().unwrap();
            if action == "user_write" {
                fields.insert("userId".into(), json!("alice"));
            } else {
                fields.insert("file".into(), json!("SOUL.md"));
            }
            request
        };
        for action in TAINT_EXEMPT {
            ok(&s1, write(action)).await;
        }
        let ops = operations(&fabric).await;
        for action in TAINT_EXEMPT {
            assert!(ops.iter().any(|o| o == action), "{action} reached the log: {ops:?}");
        }
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_tagged_external_count_as_tainted_in_any_reply() {
    on_every_fabric("ax-ipc-taint-tagged", |fabric| async move {
        let agent = tools_agent(&fabric);
        let budget = TaintBudget::for_profile(TaintProfile::Balanced);
        let bridge = TaintBridge::start(&fabric, budget).await;
        let s3 = bridge.session("s3").await;
        let mut tally = Tally::default();
        tally
            .ok(
                &s3,
                json!({"action": "memory_list", "scope": "clean-400"}),
                false,
            )
            .await;
        let read = ok(&s3, json!({"action": "memory_read", "id": ENTRY_ID})).await;
        // The tagged entry is tainted, the envelope around it clean.
        let entry = &read["entry"];
        let around = read.to_string().len() - entry.to_string().len();
        tally.add(entry, true);
        tally.total += (around as u64).div_ceil(4);
        assert_eq!(
            call(&s3, cron()).await,
            blocked("scheduler_add_cron", tally.ratio(), "30%")
        );
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}
