//! `agdx bridge ax-ipc` as people run it, on every backend: an AX-style
//! client's call (4-byte frames, `_msgId`) and an HTTP call with a minted
//! token reach an `agdx worker` process and come back.

use crate::support;

use std::process::Stdio;

use serde_json::json;
use support::PATIENCE;
use support::ax_ipc::IpcClient;
use support::fabric::{Fabric, embedded_fabric, on_every_fabric, terminate};
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// A running `agdx bridge ax-ipc --socket SOCKET --http 127.0.0.1:0
/// --token-secret SECRET --route 'memory_*=memory' EXTRA...`.
struct BridgeProcess {
    child: Child,
    said: tokio::task::JoinHandle<String>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl BridgeProcess {
    fn spawn(
        fabric: &Fabric,
        socket: &std::path::Path,
        secret: &str,
        extra: &[&str],
        env: &[(&str, &str)],
    ) -> BridgeProcess {
        let mut child = fabric
            .agdx()
            .args(["bridge", "ax-ipc", "--socket"])
            .arg(socket)
            .args(["--http", "127.0.0.1:0", "--token-secret", secret])
            .args(["--route", "memory_*=memory"])
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start agdx bridge ax-ipc");
        let said = support::read_all(child.stderr.take().unwrap());
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        BridgeProcess { child, said, lines }
    }

    /// The rest of the first stdout line starting with `prefix`.
    async fn says(&mut self, prefix: &str) -> String {
        loop {
            let line = tokio::time::timeout(PATIENCE, self.lines.next_line())
                .await
                .expect("the bridge says where it listens")
                .unwrap()
                .expect("a line");
            if let Some(rest) = line.strip_prefix(prefix) {
                return rest.to_owned();
            }
        }
    }

    /// Stops it; what it said on stderr.
    async fn stop(mut self) -> String {
        terminate(&mut self.child).await;
        self.said.await.expect("the bridge's stderr")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ax_client_reaches_an_agdx_worker_through_the_bridge_process() {
    on_every_fabric("ax-ipc-cli", |fabric| async move {
        let mut worker = fabric.spawn_worker_process(&["--agent", "memory", "--echo"]);
        let secret = fabric.dir.path().join("ipc-secret");
        let secret = secret.to_str().unwrap();
        let (code, token, stderr) = fabric
            .run_agdx(&[
                "bridge", "ax-ipc", "token", "--secret", secret, "--ttl", "10m",
            ])
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("created the token secret"), "{stderr}");
        let token = token.trim().to_owned();
        assert!(token.starts_with("axipc1."), "{token}");

        let socket = fabric.dir.path().join("ax.sock");
        let mut bridge = BridgeProcess::spawn(&fabric, &socket, secret, &[], &[]);
        let url = bridge.says("http ").await;

        let client = IpcClient::connect(&socket)
            .await
            .with_context("_sessionId", "s1");
        let answer = client
            .call(json!({"action": "memory_list", "scope": "notes"}), PATIENCE)
            .await
            .expect("an answer")
            .answer;
        assert_eq!(
            serde_json::Value::Object(answer).to_string(),
            r#"{"ok":true,"action":"memory_list","scope":"notes","_msgId":"1"}"#
        );

        let response = reqwest::Client::new()
            .post(&url)
            .bearer_auth(&token)
            .body(r#"{"action":"memory_query","scope":"web"}"#)
            .send()
            .await
            .expect("the bridge answers HTTP");
        assert_eq!(response.status().as_u16(), 200);
        let answer: serde_json::Value = response.json().await.unwrap();
        assert_eq!(
            answer,
            json!({"ok": true, "action": "memory_query", "scope": "web"})
        );

        let said = bridge.stop().await;
        assert!(
            !socket.exists(),
            "the bridge removes its socket when it stops"
        );
        assert!(
            said.contains("no route matches is answered \"No handler\": add --route ACTION=AGENT"),
            "the command line gives the advice callers do not get: {said}"
        );
        terminate(&mut worker).await;
    })
    .await;
}

#[tokio::test]
async fn http_without_tokens_is_refused_with_what_to_add() {
    let fabric = embedded_fabric("ax-ipc-cli-tokens").await;
    let (code, _, stderr) = fabric
        .run_agdx(&[
            "bridge",
            "ax-ipc",
            "--http",
            "127.0.0.1:0",
            "--route",
            "memory_*=memory",
        ])
        .await;
    assert_eq!(code, 1);
    assert!(stderr.contains("--token-secret"), "{stderr}");
    let (code, _, stderr) = fabric
        .run_agdx(&[
            "bridge", "ax-ipc", "--socket", "x.sock", "--route", "memory",
        ])
        .await;
    assert_eq!(code, 2, "a usage error");
    assert!(stderr.contains("ACTION=AGENT"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_taint_and_llm_proxy_flags_configure_the_bridge_process() {
    use crate::bridge_ax_ipc_llm_proxy::{CREDENTIAL, Upstream};
    let fabric = embedded_fabric("ax-ipc-cli-taint-llm").await;
    let mut worker = fabric.spawn_worker_process(&["--agent", "memory", "--echo"]);
    let upstream = Upstream::start().await;
    let secret = fabric.dir.path().join("ipc-secret");
    let secret = secret.to_str().unwrap();
    let (code, token, stderr) = fabric
        .run_agdx(&["bridge", "ax-ipc", "token", "--secret", secret])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let token = token.trim().to_owned();

    let socket = fabric.dir.path().join("ax.sock");
    let extra = [
        "--taint-threshold",
        "0.3",
        "--taint-sensitive",
        "memory_write",
        "--taint-source",
        "memory_list",
        "--llm-credential-env",
        "AGDX_TEST_LLM_CREDENTIAL",
        "--llm-upstream",
        &upstream.url,
    ];
    let env = [("AGDX_TEST_LLM_CREDENTIAL", CREDENTIAL)];
    let mut bridge = BridgeProcess::spawn(&fabric, &socket, secret, &extra, &env);
    let proxy = bridge.says("llm-proxy ").await;

    // memory_list replies count as external: memory_write is then refused.
    let client = IpcClient::connect(&socket)
        .await
        .with_context("_sessionId", "s1");
    let listed = client
        .call(json!({"action": "memory_list", "scope": "inbox"}), PATIENCE)
        .await
        .unwrap()
        .answer;
    assert_eq!(listed["ok"], json!(true));
    let write = json!({"action": "memory_write", "scope": "notes", "content": "x"});
    let refused = client.call(write, PATIENCE).await.unwrap().answer;
    assert_eq!(refused["taintBlocked"], json!(true), "{refused:?}");
    assert!(
        refused["error"]
            .as_str()
            .unwrap()
            .starts_with("Session taint ratio 100.0% exceeds threshold 30%."),
        "{refused:?}"
    );

    let response = reqwest::Client::new()
        .post(format!("{proxy}/v1/messages"))
        .header("x-api-key", &token)
        .body("{}")
        .send()
        .await
        .expect("the proxy answers");
    assert_eq!(response.status().as_u16(), 200);
    let seen = upstream.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].headers["x-api-key"], CREDENTIAL);

    let said = bridge.stop().await;
    assert!(
        said.contains("taint budget 30%: refusing memory_write"),
        "{said}"
    );
    assert!(!said.contains(CREDENTIAL), "{said}");
    terminate(&mut worker).await;
}

#[tokio::test]
async fn llm_and_taint_flags_say_what_they_need() {
    let fabric = embedded_fabric("ax-ipc-cli-llm-flags").await;
    let secret = fabric.dir.path().join("ipc-secret");
    let secret = secret.to_str().unwrap();
    fabric
        .run_agdx(&["bridge", "ax-ipc", "token", "--secret", secret])
        .await;
    let serve = [
        "bridge",
        "ax-ipc",
        "--route",
        "memory_*=memory",
        "--http",
        "127.0.0.1:0",
    ];
    let unset = "AGDX_TEST_LLM_CREDENTIAL_UNSET";
    let mut args = serve.to_vec();
    args.extend(["--token-secret", secret, "--llm-credential-env", unset]);
    let (code, _, stderr) = fabric.run_agdx(&args).await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains(&format!("the environment variable {unset} is not set")),
        "{stderr}"
    );
    let mut args = serve.to_vec();
    args.extend([
        "--token-secret",
        secret,
        "--llm-upstream",
        "http://127.0.0.1:9",
    ]);
    let (code, _, stderr) = fabric.run_agdx(&args).await;
    assert_eq!(code, 2, "a usage error: {stderr}");
    assert!(stderr.contains("--llm-credential-env"), "{stderr}");
    let mut args = serve.to_vec();
    args.extend([
        "--token-secret",
        secret,
        "--taint-sensitive",
        "memory_write",
    ]);
    let (code, _, stderr) = fabric.run_agdx(&args).await;
    assert_eq!(code, 2, "a usage error: {stderr}");
    let mut args = serve.to_vec();
    args.extend(["--token-secret", secret, "--taint-profile", "lax"]);
    let (code, _, stderr) = fabric.run_agdx(&args).await;
    assert_eq!(code, 2, "a usage error: {stderr}");
    assert!(stderr.contains("paranoid"), "{stderr}");
}
