//! `agdx bridge mcp` against the official MCP Python SDK's client
//! (`pip install mcp`), both the protocol version it negotiates today
//! (2026-07-28, stateless) and the handshake era it still speaks
//! (`mode="legacy"`, a session): workers on the embedded log, the bridge
//! as a process on a free port, the client (tests/it/support/mcp_client.py)
//! listing tools and seeing a new agent appear, calling them (a JSON object
//! answer as structured content, text, an error reply as a tool error with
//! the AGDX code), receiving a chunk stream as progress and cancelling a
//! slow call, which cancels the command on the log; a loop and an unknown
//! tool are refused as tool errors. A request without the bearer token, or
//! with a wrong one, is refused with 401.
//!
//! The client is the Python found by `AGDX_TEST_MCP_PYTHON`, else
//! `python3` when it can `import mcp`; without one the test says so on one
//! line and skips (CI installs it: .ci/run).

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use agdx::wire::ErrorCode;
use agdx::worker::{HandlerError, HandlerReply, handler_fn};
use reqwest::StatusCode;
use serde_json::{Value, json};
use support::agents::{heeding, storyteller};
use support::fabric::{Fabric, Running, embedded_fabric};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const TOKEN: &str = "mcp-test-token";

/// How long one step of the client may take.
const STEP: Duration = Duration::from_secs(60);

/// A Python that has the MCP SDK, or `None` after saying why on stderr
/// (once a run).
fn python() -> Option<PathBuf> {
    let (python, how) = match std::env::var_os("AGDX_TEST_MCP_PYTHON") {
        Some(python) => (PathBuf::from(python), "AGDX_TEST_MCP_PYTHON"),
        None => (PathBuf::from("python3"), "python3 on PATH"),
    };
    let has_sdk = std::process::Command::new(&python)
        .args(["-c", "import mcp, mcp.client.streamable_http"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if has_sdk {
        return Some(python);
    }
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(|| {
        use std::io::Write;
        // Written to stderr itself, not through the test's captured output,
        // so the line shows in every run.
        let _ = writeln!(
            std::io::stderr(),
            "mcp client: skipped: {} ({how}) cannot import the MCP SDK; `pip install mcp` (CI does, see .ci/run) or set AGDX_TEST_MCP_PYTHON to a python that has it",
            python.display()
        );
    });
    None
}

/// `agdx bridge mcp` on a free port, accepting [`TOKEN`].
struct Bridge {
    _child: Child,
    url: String,
}

impl Bridge {
    async fn start(fabric: &Fabric) -> Bridge {
        let tokens = fabric.dir.path().join("mcp.tokens");
        std::fs::write(&tokens, format!("# the test's client\n{TOKEN}\n")).unwrap();
        std::fs::set_permissions(&tokens, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut child = fabric
            .agdx()
            .args([
                "bridge",
                "mcp",
                "--listen",
                "127.0.0.1:0",
                "--refresh",
                "200ms",
            ])
            .arg("--tokens")
            .arg(&tokens)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start agdx bridge mcp");
        let stdout = child.stdout.take().expect("the bridge's stdout");
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(STEP, lines.next_line())
            .await
            .expect("the bridge starts in time")
            .expect("read the bridge's stdout")
            .expect("the bridge prints its address");
        let url = line
            .split_whitespace()
            .find(|w| w.starts_with("http://"))
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_owned();
        Bridge { _child: child, url }
    }
}

/// The Python client, one JSON command and answer per line.
struct Client {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    protocol: String,
}

impl Client {
    /// A client of the bridge at `url`, in `mode` (`auto` or `legacy`).
    async fn start(python: &Path, url: &str, mode: &str) -> Client {
        Self::start_with(python, &[url, TOKEN, mode]).await
    }

    /// A client that starts `agdx ... bridge mcp --stdio` itself.
    async fn start_stdio(python: &Path, fabric: &Fabric) -> Client {
        let cwd = fabric.dir.path().to_str().expect("a UTF-8 path");
        let args = [
            "stdio",
            cwd,
            "auto",
            "--",
            env!("CARGO_BIN_EXE_agdx"),
            "--log",
            &fabric.spec,
            "--stream",
            &fabric.stream,
            "bridge",
            "mcp",
            "--stdio",
            "--refresh",
            "200ms",
        ];
        Self::start_with(python, &args).await
    }

    async fn start_with(python: &Path, args: &[&str]) -> Client {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/support/mcp_client.py");
        let mut child = tokio::process::Command::new(python)
            .arg(script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start the MCP client");
        let stdin = child.stdin.take().expect("the client's stdin");
        let lines = BufReader::new(child.stdout.take().expect("the client's stdout")).lines();
        let mut client = Client {
            _child: child,
            stdin,
            lines,
            protocol: String::new(),
        };
        let hello = client.answer().await;
        client.protocol = hello["connected"]
            .as_str()
            .unwrap_or_else(|| panic!("the client did not connect: {hello}"))
            .to_owned();
        client
    }

    async fn answer(&mut self) -> Value {
        let line = tokio::time::timeout(STEP, self.lines.next_line())
            .await
            .expect("the client answers in time")
            .expect("read the client")
            .expect("the client answers (it printed nothing: did it die?)");
        let answer: Value = serde_json::from_str(&line).expect("a JSON line");
        assert!(answer.get("error").is_none(), "the client failed: {answer}");
        answer
    }

    async fn ask(&mut self, command: Value) -> Value {
        let mut line = command.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .expect("write to the client");
        self.answer().await
    }

    /// Lists the tools until `wanted` are all there (cards take a moment).
    async fn until_listed(&mut self, wanted: &[&str]) {
        let deadline = tokio::time::Instant::now() + support::PATIENCE;
        loop {
            let names = self.tool_names().await;
            if wanted.iter().all(|w| names.iter().any(|n| n == w)) {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "tools {wanted:?} never all listed; listed: {names:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn tool_names(&mut self) -> Vec<String> {
        let listed = self.ask(json!({"op": "list"})).await;
        listed["tools"]
            .as_array()
            .expect("tools")
            .iter()
            .map(|t| t["name"].as_str().expect("a name").to_owned())
            .collect()
    }
}

/// Adds `a` and `b` of a JSON body: `{"sum": N}`.
fn sum() -> impl agdx::worker::Handler {
    handler_fn(|request| async move {
        let args: Value = serde_json::from_slice(&request.body)
            .map_err(|e| HandlerError::fatal(e.to_string()))?;
        let sum = args["a"].as_i64().unwrap_or(0) + args["b"].as_i64().unwrap_or(0);
        Ok(HandlerReply::json(json!({ "sum": sum }).to_string()))
    })
}

/// The agents the tools call: `calc` (a JSON object and a text answer),
/// `fails` (an error reply), `story` (a chunk stream) and `slow` (waits to
/// be cancelled).
async fn start_agents(fabric: &Fabric) -> (Vec<Running>, support::agents::Heeded) {
    let words = handler_fn(|_| async move { Ok(HandlerReply::raw("plain words")) });
    let fail = handler_fn(|_| async move {
        Err(HandlerError::fatal("no such operand").with_code(ErrorCode::Unsupported))
    });
    let (slow, heeded) = heeding();
    let running = vec![
        Running::start(
            fabric
                .worker("calc")
                .handle("add", sum())
                .handle("words", words),
        ),
        Running::start(fabric.worker("fails").handle("fail", fail)),
        Running::start(
            fabric
                .worker("story")
                .handle("tell", storyteller(&["once ", "upon ", "a ", "time"])),
        ),
        Running::start(fabric.worker("slow").handle("wait", slow)),
    ];
    (running, heeded)
}

/// Everything a client does, in `mode`; `late` is the agent started while
/// it watches the tool list.
async fn exercise(
    python: &Path,
    fabric: &Fabric,
    bridge: &Bridge,
    mode: &str,
    late: &str,
    heeded: &support::agents::Heeded,
) -> Running {
    let mut client = Client::start(python, &bridge.url, mode).await;
    if mode == "legacy" {
        assert_eq!(
            client.protocol, "2025-11-25",
            "the newest handshake version"
        );
    } else {
        assert_eq!(
            client.protocol, "2026-07-28",
            "what the SDK negotiates today"
        );
    }

    // The live agents' operations, and a new one as it starts.
    let wanted = [
        "calc.add",
        "calc.words",
        "fails.fail",
        "slow.wait",
        "story.tell",
    ];
    client.until_listed(&wanted).await;
    let listed = client.ask(json!({"op": "list"})).await;
    let add = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "calc.add")
        .unwrap()
        .clone();
    assert_eq!(add["inputSchema"]["type"], "object", "{add}");
    assert!(
        add["description"]
            .as_str()
            .unwrap()
            .contains("'add' of the AGDX agent 'calc'"),
        "{add}"
    );
    assert_eq!(client.ask(json!({"op": "watch"})).await["watching"], true);
    let greeter = Running::start(
        fabric
            .worker(late)
            .handle("greet", agdx::worker::EchoHandler),
    );
    let changed = client.ask(json!({"op": "changed", "timeout": 30})).await;
    assert_eq!(
        changed["changed"], true,
        "tools/list_changed when '{late}' started"
    );
    let names = client.tool_names().await;
    assert!(names.contains(&format!("{late}.greet")), "{names:?}");

    // A JSON object answer is structured content; other answers are text.
    let sum = client
        .ask(json!({"op": "call", "name": "calc.add", "args": {"a": 2, "b": 40}}))
        .await;
    assert_eq!(sum["isError"], false, "{sum}");
    assert_eq!(sum["structuredContent"], json!({"sum": 42}), "{sum}");
    let text = client
        .ask(json!({"op": "call", "name": "calc.words", "args": {}}))
        .await;
    assert_eq!(text["content"][0]["text"], "plain words", "{text}");
    assert!(text.get("structuredContent").is_none(), "{text}");

    // An error reply is a tool error with the AGDX code.
    let failed = client
        .ask(json!({"op": "call", "name": "fails.fail", "args": {}}))
        .await;
    assert_eq!(failed["isError"], true, "{failed}");
    assert_eq!(
        failed["structuredContent"]["code"], "unsupported",
        "{failed}"
    );
    assert!(
        failed["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("with error unsupported: no such operand"),
        "{failed}"
    );

    // Refusals are tool errors: a call that already passed this bridge (a
    // loop), a tool no live agent offers.
    let looped = client
        .ask(json!({"op": "call", "name": "calc.add", "args": {"a": 1},
            "meta": {"agdx/bridge_hops": ["ax-ipc", "mcp"]}}))
        .await;
    assert_eq!(looped["isError"], true, "{looped}");
    let text = looped["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("bridge loop") && text.contains("ax-ipc -> mcp"),
        "{looped}"
    );
    let unknown = client
        .ask(json!({"op": "call", "name": "nobody.here", "args": {}}))
        .await;
    assert_eq!(unknown["isError"], true, "{unknown}");
    assert!(
        unknown["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("no tool 'nobody.here': no live agent offers it (live tools: calc.add,"),
        "{unknown}"
    );

    // A chunk stream arrives as progress, then the whole as the result.
    let story = client
        .ask(json!({"op": "call", "name": "story.tell", "args": {}}))
        .await;
    assert_eq!(story["content"][0]["text"], "once upon a time", "{story}");
    let progress = story["progress"].as_array().expect("progress");
    assert!(
        progress.iter().any(|p| p["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("chunk 0: once"))),
        "{story}"
    );
    let steps: Vec<f64> = progress
        .iter()
        .map(|p| p["progress"].as_f64().unwrap())
        .collect();
    assert!(
        steps.windows(2).all(|w| w[0] < w[1]),
        "progress rises: {steps:?}"
    );

    // Cancelling a call cancels its command: the handler is told.
    let told_before = heeded.started();
    heeded
        .told
        .store(false, std::sync::atomic::Ordering::SeqCst);
    let cancelled = client
        .ask(json!({"op": "cancel", "name": "slow.wait", "args": {}}))
        .await;
    assert_eq!(cancelled["cancelled"], true, "{cancelled}");
    assert!(
        cancelled["progress"][0]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("task ")),
        "the worker's task state came as progress first: {cancelled}"
    );
    support::eventually("the slow handler is told its command was cancelled", || {
        let told = heeded.told() && heeded.started() > told_before;
        async move { told.then_some(()) }
    })
    .await;
    greeter
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_client_lists_calls_streams_and_cancels() {
    let Some(python) = python() else {
        return;
    };
    let fabric = embedded_fabric("bridge-mcp").await;
    let (running, heeded) = start_agents(&fabric).await;
    let bridge = Bridge::start(&fabric).await;

    // No token, or a wrong one: 401 before MCP sees the request.
    let http = reqwest::Client::new();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}});
    for token in [None, Some("wrong")] {
        let mut request = http
            .post(&bridge.url)
            .header("accept", "application/json, text/event-stream")
            .json(&initialize);
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("the bridge answers");
        assert_eq!(
            response.status(),
            StatusCode::UNAUTHORIZED,
            "token {token:?}"
        );
        let body: Value = response.json().await.expect("a JSON refusal");
        assert!(body["error"].as_str().unwrap().contains("token"), "{body}");
    }

    let modern = exercise(&python, &fabric, &bridge, "auto", "greeter", &heeded).await;
    let legacy = exercise(&python, &fabric, &bridge, "legacy", "welcomer", &heeded).await;
    for worker in running.into_iter().chain([modern, legacy]) {
        worker.stop().await;
    }
}

/// The same bridge, started by the client itself on stdio: its commands
/// carry the bridge in `bridge_hops`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_client_starts_the_bridge_on_stdio() {
    let Some(python) = python() else {
        return;
    };
    let fabric = embedded_fabric("bridge-mcp-stdio").await;
    let calc = Running::start(fabric.worker("calc").handle("add", sum()));
    let mut client = Client::start_stdio(&python, &fabric).await;
    client.until_listed(&["calc.add"]).await;
    let sum = client
        .ask(json!({"op": "call", "name": "calc.add", "args": {"a": 1, "b": 2}}))
        .await;
    assert_eq!(sum["structuredContent"], json!({"sum": 3}), "{sum}");
    // The command on the log: the arguments as its JSON body, the bridge in
    // its hops.
    let commands = fabric.records(&fabric.topology.commands).await;
    let command = commands
        .iter()
        .filter_map(|r| agdx::wire::AgentEnvelope::decode_valid(&r.payload).ok())
        .find(|e| e.operation.as_deref() == Some("add"))
        .expect("the call's command");
    assert_eq!(command.body, &br#"{"a":1,"b":2}"#[..]);
    let hops: Vec<&str> = command
        .metadata
        .iter()
        .flat_map(|m| m.bridge_hops())
        .collect();
    assert_eq!(hops, ["mcp"]);
    drop(client);
    calc.stop().await;
}
