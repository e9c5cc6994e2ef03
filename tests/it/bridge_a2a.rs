//! `agdx bridge a2a` against the official A2A Python SDK's client (1.x,
//! `pip install a2a-sdk`): cards of the live agents, a message completed
//! with its reply as the artifact, a chunk stream as artifact updates over
//! SSE, `GetTask` from the log (also through a second bridge, the `agdx`
//! binary, started afterwards), `CancelTask` reaching the handler (and a
//! `SubscribeToTask` stream ending canceled), `input-required` round trips
//! (blocking and streamed), an error reply ending `failed`, the SDK's 0.3
//! compatibility transport, and refusals with the spec's error codes.
//! On the embedded log, with in-process worker pools.
//!
//! The client is `tests/it/support/a2a_client.py`, run by the Python that
//! `AGDX_TEST_A2A_PYTHON` names (else `python3`); without the SDK there
//! the tests say so in one line and skip.

use crate::support;

use std::path::PathBuf;
use std::time::Duration;

use agdx::bridge::a2a::{A2aBridge, A2aConfig};
use futures_util::StreamExt;
use serde_json::{Value, json};
use support::agents::{Heeded, booking, heeding, refusing, storyteller};
use support::fabric::{ANSWER, Fabric, Running, embedded_fabric};
use tokio::io::AsyncBufReadExt;

const STORY: &[&str] = &["once ", "upon ", "a ", "time"];

/// The Python with the A2A SDK, or `None` after saying (once a run) why
/// the tests skip.
fn a2a_python() -> Option<PathBuf> {
    static FOUND: std::sync::OnceLock<Option<PathBuf>> = std::sync::OnceLock::new();
    FOUND
        .get_or_init(|| {
            let python = std::env::var_os("AGDX_TEST_A2A_PYTHON")
                .map_or_else(|| PathBuf::from("python3"), PathBuf::from);
            let found = std::process::Command::new(&python)
                .args(["-c", "import a2a.client, a2a.types"])
                .output()
                .is_ok_and(|o| o.status.success());
            if found {
                return Some(python);
            }
            use std::io::Write;
            // Straight to stderr, not the captured output, so every run shows it.
            let _ = writeln!(
                std::io::stderr(),
                "a2a bridge: skipped: {} has no A2A SDK; `pip install a2a-sdk==1.3.0` or set AGDX_TEST_A2A_PYTHON to a python that has it",
                python.display()
            );
            None
        })
        .clone()
}

/// One step of the SDK client script against the bridge at `base`.
async fn client(python: &PathBuf, base: &str, args: &[&str]) -> Value {
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/support/a2a_client.py"
    );
    let output = tokio::process::Command::new(python)
        .arg(script)
        .arg(base)
        .args(args)
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(ANSWER * 3, output)
        .await
        .expect("the A2A client finishes")
        .expect("run the A2A client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "a2a_client.py {args:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.trim()).expect("one JSON object")
}

/// The pools the tests talk to, and what the slow one saw.
struct Pools {
    running: Vec<Running>,
    slow: Heeded,
}

fn pools(fabric: &Fabric) -> Pools {
    let (slow, heeded) = heeding();
    let running = vec![
        Running::start(
            fabric
                .worker("echo")
                .handle("hello", agdx::worker::EchoHandler),
        ),
        Running::start(fabric.worker("story").handle("tell", storyteller(STORY))),
        Running::start(fabric.worker("slow").handle("wait", slow)),
        Running::start(fabric.worker("desk").handle("book", booking(ANSWER))),
        Running::start(fabric.worker("broken").handle("fix", refusing("it broke"))),
    ];
    Pools {
        running,
        slow: heeded,
    }
}

/// A bridge on `fabric`'s log on a free port, once every pool is live: its URL.
async fn bridge(fabric: &Fabric) -> String {
    let config = A2aConfig {
        send_wait: Duration::from_secs(2),
        keepalive: Duration::from_secs(1),
        ..A2aConfig::default()
    };
    let bridge = A2aBridge::open(fabric.log.clone(), fabric.topology.clone(), config)
        .await
        .expect("open the bridge");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a free port");
    let base = format!("http://{}", listener.local_addr().expect("its address"));
    tokio::spawn(bridge.serve(listener, std::future::pending()));
    let agents = format!("{base}/agents");
    support::eventually("the five pools to be live A2A agents", || async {
        let listed: Value = reqwest::get(&agents).await.ok()?.json().await.ok()?;
        (listed["agents"].as_array()?.len() == 5).then_some(())
    })
    .await;
    base
}

/// The SDK's Python, the fabric, its pools and a bridge's URL; `None`
/// (after one line saying so) without the SDK.
async fn setup(test: &str) -> Option<(PathBuf, Fabric, Pools, String)> {
    let python = a2a_python()?;
    let fabric = embedded_fabric(test).await;
    let pools = pools(&fabric);
    let base = bridge(&fabric).await;
    Some((python, fabric, pools, base))
}

async fn stop(pools: Pools) {
    for running in pools.running {
        running.stop().await;
    }
}

/// A raw JSON-RPC call to `agent`: (HTTP status, body).
async fn raw(base: &str, agent: &str, body: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}/agents/{agent}/"))
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .expect("post");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_reads_cards_sends_and_reads_the_task_back_from_the_log() {
    let Some((python, fabric, pools, base)) = setup("a2a-send").await else {
        return;
    };

    let listed = client(&python, &base, &["agents"]).await;
    let cards = listed["cards"].as_array().expect("cards");
    let names: Vec<&str> = cards.iter().filter_map(|c| c["agent"].as_str()).collect();
    assert_eq!(
        names,
        ["broken", "desk", "echo", "slow", "story"],
        "{listed}"
    );
    let echo = &cards[2];
    assert_eq!(
        echo["skills"],
        json!(["hello"]),
        "operations are the skills"
    );
    assert_eq!(
        (echo["streaming"].as_bool(), echo["push"].as_bool()),
        (Some(true), Some(false))
    );
    assert_eq!(
        echo["interfaces"][0],
        json!([format!("{base}/agents/echo/"), "JSONRPC", "1.0"])
    );
    assert_eq!(listed["missing_card_status"], 404);

    let sent = client(&python, &base, &["send", "echo", "hi there"]).await;
    assert_eq!(sent["state"], "TASK_STATE_COMPLETED", "{sent}");
    assert_eq!(
        sent["artifacts"],
        json!([{"id": "reply", "text": "hi there"}])
    );
    let task = sent["id"].as_str().expect("a task id");
    let (conversation, _) = task.split_once('.').expect("conversation.correlation");
    assert_eq!(
        sent["context_id"], conversation,
        "the context is the conversation"
    );

    // The command carries the bridge's hop.
    let commands = fabric.records(&fabric.topology.commands).await;
    let command = commands
        .iter()
        .filter_map(|r| agdx::wire::AgentEnvelope::decode(&r.payload).ok())
        .find(|e| e.conversation.to_string() == conversation)
        .expect("the command on the log");
    let hops: Vec<&str> = command
        .metadata
        .as_ref()
        .expect("metadata")
        .bridge_hops()
        .collect();
    assert_eq!(hops, ["a2a"]);

    let got = client(&python, &base, &["get", "echo", task]).await;
    assert_eq!(
        (got["id"].as_str(), got["state"].as_str()),
        (Some(task), Some("TASK_STATE_COMPLETED"))
    );
    assert_eq!(got["artifacts"], sent["artifacts"]);

    // The SDK's 0.3 compatibility transport (message/send, message/stream,
    // tasks/get) is served too.
    let legacy = client(&python, &base, &["legacy", "echo", "old hello"]).await;
    let reply = json!([{"id": "reply", "text": "old hello"}]);
    assert_eq!(legacy["sent"]["state"], "TASK_STATE_COMPLETED", "{legacy}");
    assert_eq!(legacy["sent"]["artifacts"], reply);
    let states = legacy["streamed"]["states"].as_array().expect("states");
    assert_eq!(
        states.first(),
        Some(&json!("TASK_STATE_SUBMITTED")),
        "{legacy}"
    );
    assert_eq!(states.last(), Some(&json!("TASK_STATE_COMPLETED")));
    assert_eq!(legacy["streamed"]["pieces"], json!(["old hello"]));
    assert_eq!(legacy["got"]["artifacts"], reply);

    // A second bridge, the binary, started afterwards, reads the task from the log.
    let mut second = fabric
        .agdx()
        .args(["bridge", "a2a", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("start agdx bridge a2a");
    let mut lines = tokio::io::BufReader::new(second.stdout.take().expect("stdout")).lines();
    let banner = tokio::time::timeout(ANSWER, lines.next_line())
        .await
        .expect("the banner in time")
        .expect("read stdout")
        .expect("a banner");
    let url = banner
        .split_whitespace()
        .find_map(|w| w.strip_suffix("/agents"))
        .expect("the bridge's URL")
        .to_owned();
    let again = client(&python, &url, &["get", "echo", task]).await;
    assert_eq!(again["state"], "TASK_STATE_COMPLETED", "{again}");
    assert_eq!(again["artifacts"], sent["artifacts"]);
    second.kill().await.expect("stop the second bridge");
    stop(pools).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_stream_arrives_as_artifact_updates_over_sse() {
    let Some((python, _fabric, pools, base)) = setup("a2a-stream").await else {
        return;
    };

    let streamed = client(&python, &base, &["stream", "story", "go"]).await;
    let events = streamed["events"].as_array().expect("events");
    assert_eq!(
        events[0]["task"]["state"], "TASK_STATE_SUBMITTED",
        "{streamed}"
    );
    let states: Vec<&str> = events.iter().filter_map(|e| e["status"].as_str()).collect();
    assert!(states.contains(&"TASK_STATE_WORKING"), "{states:?}");
    assert!(
        !states.contains(&"TASK_STATE_SUBMITTED"),
        "never back: {states:?}"
    );
    assert_eq!(states.last(), Some(&"TASK_STATE_COMPLETED"));
    let pieces: Vec<&Value> = events
        .iter()
        .filter(|e| e.get("artifact").is_some())
        .collect();
    assert!(
        pieces.len() >= 2,
        "chunks come as several updates: {streamed}"
    );
    let text: String = pieces
        .iter()
        .filter_map(|p| p["artifact"].as_str())
        .collect();
    assert_eq!(text, STORY.concat());
    assert_eq!(pieces[0]["append"], false);
    assert!(pieces[1..].iter().all(|p| p["append"] == true));
    assert_eq!(pieces.last().expect("a piece")["last"], true);
    assert!(
        pieces[..pieces.len() - 1]
            .iter()
            .all(|p| p["last"] == false)
    );

    let task = events[0]["task"]["id"].as_str().expect("a task id");
    let got = client(&python, &base, &["get", "story", task]).await;
    assert_eq!(got["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        got["artifacts"],
        json!([{"id": "reply", "text": STORY.concat()}])
    );
    stop(pools).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_reaches_the_handler_and_input_required_round_trips() {
    let Some((python, _fabric, pools, base)) = setup("a2a-cancel").await else {
        return;
    };

    // The bridge answers a blocking send after its send wait (2 s here).
    let slow = client(&python, &base, &["send", "slow", "take your time"]).await;
    assert_eq!(slow["state"], "TASK_STATE_WORKING", "{slow}");
    let task = slow["id"].as_str().expect("a task id");
    // A subscriber to the running task sees it end canceled.
    let subscribe = json!({"jsonrpc": "2.0", "id": 7, "method": "SubscribeToTask",
        "params": {"id": task}});
    let response = reqwest::Client::new()
        .post(format!("{base}/agents/slow/"))
        .body(subscribe.to_string())
        .send()
        .await
        .expect("subscribe");
    let mut body = response.bytes_stream();
    let first = tokio::time::timeout(ANSWER, body.next())
        .await
        .expect("the task in time")
        .expect("an event")
        .expect("read");
    assert!(
        String::from_utf8_lossy(&first).contains("TASK_STATE_WORKING"),
        "the task as it stands first"
    );
    let canceled = client(&python, &base, &["cancel", "slow", task]).await;
    assert_eq!(canceled["state"], "TASK_STATE_CANCELED", "{canceled}");
    support::eventually("the handler to see the cancel", || async {
        pools.slow.told().then_some(())
    })
    .await;
    let mut rest = Vec::new();
    while let Some(chunk) = tokio::time::timeout(ANSWER, body.next())
        .await
        .expect("the stream ends")
    {
        rest.extend_from_slice(&chunk.expect("read"));
    }
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("TASK_STATE_CANCELED"), "{rest}");
    let again = client(&python, &base, &["cancel", "slow", task]).await;
    assert_eq!(again["error"], "TaskNotCancelableError", "{again}");
    let got = client(&python, &base, &["get", "slow", task]).await;
    assert_eq!(got["state"], "TASK_STATE_CANCELED");

    let booked = client(&python, &base, &["input", "desk", "a room", "monday"]).await;
    assert_eq!(
        booked["asked"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "{booked}"
    );
    assert_eq!(booked["asked"]["status_text"], "which day?");
    assert_eq!(
        booked["answered"]["id"], booked["asked"]["id"],
        "the same task"
    );
    assert_eq!(booked["answered"]["state"], "TASK_STATE_COMPLETED");
    assert_eq!(
        booked["answered"]["artifacts"],
        json!([{"id": "reply", "text": "booked for monday"}])
    );
    // Streamed: the first stream ends at the prompt, the answer's goes on
    // with the same task.
    let streamed = client(
        &python,
        &base,
        &["input_stream", "desk", "a room", "friday"],
    )
    .await;
    let task = streamed["task"].as_str().expect("a task id");
    let asked = streamed["asked"].as_array().expect("asked");
    assert_eq!(
        asked.last(),
        Some(&json!(["TASK_STATE_INPUT_REQUIRED", "which day?"])),
        "{streamed}"
    );
    assert_eq!(
        streamed["answered"],
        json!([
            ["TASK_STATE_WORKING", task],
            ["artifact", "booked for friday"],
            ["TASK_STATE_COMPLETED", task]
        ])
    );
    stop(pools).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_end_tasks_failed_and_refusals_carry_the_spec_codes() {
    let Some((python, _fabric, pools, base)) = setup("a2a-refusals").await else {
        return;
    };

    let failed = client(&python, &base, &["send", "broken", "please"]).await;
    assert_eq!(failed["state"], "TASK_STATE_FAILED", "{failed}");
    assert!(
        failed["status_text"]
            .as_str()
            .is_some_and(|t| t.contains("it broke"))
    );

    let unknown = format!(
        "{}.{}",
        agdx::new_conversation_id(),
        agdx::new_correlation_id()
    );
    let missing = client(&python, &base, &["get", "echo", &unknown]).await;
    assert_eq!(missing["error"], "TaskNotFoundError", "{missing}");
    let garbage = client(&python, &base, &["cancel", "echo", "not-a-task"]).await;
    assert_eq!(garbage["error"], "TaskNotFoundError", "{garbage}");
    // A task is found only under its own agent.
    let sent = client(&python, &base, &["send", "echo", "mine"]).await;
    let elsewhere = client(
        &python,
        &base,
        &["get", "story", sent["id"].as_str().expect("id")],
    )
    .await;
    assert_eq!(elsewhere["error"], "TaskNotFoundError");

    let code = |reply: &Value| reply["error"]["code"].as_i64();
    let ended = json!({"jsonrpc": "2.0", "id": 5, "method": "SubscribeToTask",
        "params": {"id": sent["id"]}});
    let (_, resubscribed) = raw(&base, "echo", &ended.to_string()).await;
    assert_eq!(
        code(&resubscribed),
        Some(-32004),
        "an ended task: {resubscribed}"
    );
    let (_, bad) = raw(&base, "echo", "{not json").await;
    assert_eq!(code(&bad), Some(-32700));
    let (_, unnamed) = raw(&base, "echo", r#"{"id":1,"params":{}}"#).await;
    assert_eq!(code(&unnamed), Some(-32600));
    let (_, nothing) = raw(
        &base,
        "echo",
        r#"{"jsonrpc":"2.0","id":1,"method":"Dance"}"#,
    )
    .await;
    assert_eq!(code(&nothing), Some(-32601));
    assert_eq!(nothing["id"], 1);
    let push =
        r#"{"jsonrpc":"2.0","id":2,"method":"CreateTaskPushNotificationConfig","params":{}}"#;
    assert_eq!(code(&raw(&base, "echo", push).await.1), Some(-32003));
    let listing = r#"{"jsonrpc":"2.0","id":3,"method":"ListTasks","params":{}}"#;
    assert_eq!(code(&raw(&base, "echo", listing).await.1), Some(-32004));
    let send = |metadata: Value| {
        json!({"jsonrpc": "2.0", "id": 4, "method": "SendMessage", "params": {"message": {
            "messageId": "m", "role": "ROLE_USER", "parts": [{"text": "x"}], "metadata": metadata}}})
        .to_string()
    };
    let (_, looped) = raw(&base, "echo", &send(json!({"bridge_hops": ["ioa", "a2a"]}))).await;
    assert_eq!(code(&looped), Some(-32600), "the loop guard: {looped}");
    assert!(
        looped["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("ioa -> a2a"))
    );
    let (_, no_skill) = raw(&base, "echo", &send(json!({"skill": "juggle"}))).await;
    assert_eq!(code(&no_skill), Some(-32602));
    let (status, nobody) = raw(&base, "nobody", &send(json!({}))).await;
    assert_eq!((status, code(&nobody)), (404, Some(-32601)));
    stop(pools).await;
}
