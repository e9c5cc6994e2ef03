//! `agdx bridge ax-ipc` as people run it, on every backend: an AX-style
//! client's call (4-byte frames, `_msgId`) and an HTTP call with a minted
//! token reach an `agdx worker` process and come back.

use crate::support;

use std::process::Stdio;

use serde_json::json;
use support::PATIENCE;
use support::ax_ipc::IpcClient;
use support::fabric::{embedded_fabric, on_every_fabric, terminate};
use tokio::io::{AsyncBufReadExt, BufReader};

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
        let mut bridge = fabric
            .agdx()
            .args(["bridge", "ax-ipc", "--socket"])
            .arg(&socket)
            .args(["--http", "127.0.0.1:0", "--token-secret", secret])
            .args(["--route", "memory_*=memory"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start agdx bridge ax-ipc");
        let said = support::read_all(bridge.stderr.take().unwrap());
        let mut lines = BufReader::new(bridge.stdout.take().unwrap()).lines();
        let mut url = None;
        while url.is_none() {
            let line = tokio::time::timeout(PATIENCE, lines.next_line())
                .await
                .expect("the bridge says where it listens")
                .unwrap()
                .expect("a line");
            url = line.strip_prefix("http ").map(str::to_owned);
        }
        let url = url.unwrap();

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

        terminate(&mut bridge).await;
        assert!(
            !socket.exists(),
            "the bridge removes its socket when it stops"
        );
        let said = said.await.expect("the bridge's stderr");
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
