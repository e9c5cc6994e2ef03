//! The AXON bridge against the real AXON daemon, both directions, through
//! the command line: `agdx bridge axon` and `agdx worker` on every backend,
//! `axon daemon` on a temporary state root.
//!
//! Runs when `AGDX_TEST_AXON_BIN` names an `axon` binary built by hand
//! from the public AXON repository (outside this project, like the
//! `iggy-server` of the Iggy suite); without it the test says so and skips.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use agdx::wire::{AgentEnvelope, ContentType};
use serde_json::{Value, json};
use support::axon::{WAIT, agent_id, token_key};
use support::fabric::{Fabric, agent_id as agdx_agent, on_every_fabric};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

fn axon_bin() -> Option<PathBuf> {
    match std::env::var_os("AGDX_TEST_AXON_BIN") {
        Some(path) => Some(PathBuf::from(path)),
        None => {
            use std::io::Write;
            // Written to stderr itself, not through the test's captured
            // output, so the line shows in every run.
            let _ = writeln!(
                std::io::stderr(),
                "axon daemon: skipped: AGDX_TEST_AXON_BIN is unset; set it to an `axon` binary built from the public AXON repository to check the bridge against the real daemon"
            );
            None
        }
    }
}

/// `axon ARGS --state-root ROOT`, run to the end: (exit code, stdout).
async fn axon(bin: &Path, root: &Path, args: &[&str]) -> (i32, String) {
    let output = Command::new(bin)
        .args(args)
        .arg("--state-root")
        .arg(root)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run axon");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
    )
}

/// A UDP port nothing listens on right now.
fn free_udp_port() -> u16 {
    std::net::UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("a free UDP port")
        .port()
}

/// An IPC client of the daemon: newline-delimited JSON on its socket.
struct Ipc {
    lines: tokio::io::Lines<BufReader<tokio::net::unix::OwnedReadHalf>>,
    write: tokio::net::unix::OwnedWriteHalf,
}

impl Ipc {
    async fn connect(socket: &Path) -> Ipc {
        let stream = tokio::net::UnixStream::connect(socket)
            .await
            .expect("connect to the daemon's socket");
        let (read, write) = stream.into_split();
        let mut ipc = Ipc {
            lines: BufReader::new(read).lines(),
            write,
        };
        // An answered command means the daemon has this client registered
        // for inbound events.
        ipc.write
            .write_all(b"{\"cmd\":\"whoami\"}\n")
            .await
            .expect("write");
        let reply = ipc.next().await;
        assert_eq!(reply["ok"], true, "{reply}");
        ipc
    }

    async fn next(&mut self) -> Value {
        let line = tokio::time::timeout(WAIT, self.lines.next_line())
            .await
            .expect("the daemon says something")
            .expect("read")
            .expect("the daemon keeps the socket open");
        serde_json::from_str(&line).expect("a JSON line")
    }

    /// The next inbound event (skipping anything else).
    async fn inbound(&mut self) -> Value {
        loop {
            let line = self.next().await;
            if line["event"] == "inbound" {
                return line;
            }
        }
    }
}

struct Processes(Vec<Child>);

impl Drop for Processes {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.start_kill();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_axon_daemon_reaches_an_agdx_worker_and_agdx_reaches_the_daemon() {
    let Some(bin) = axon_bin() else { return };
    on_every_fabric("axon-daemon", move |fabric| {
        let bin = bin.clone();
        async move { both_directions(&bin, &fabric).await }
    })
    .await;
}

async fn both_directions(bin: &Path, fabric: &Fabric) {
    let root = fabric.dir.path().join("axon-root");
    std::fs::create_dir(&root).unwrap();
    std::fs::set_permissions(&root, std::fs::Permissions::from_mode(0o700)).unwrap();
    let port = free_udp_port();
    let addr = format!("127.0.0.1:{port}");
    let (code, identity) = axon(bin, &root, &["identity", "--json", "--addr", &addr]).await;
    assert_eq!(code, 0, "axon identity: {identity}");
    let identity: Value = serde_json::from_str(&identity).expect("identity JSON");
    let daemon_token = identity["uri"]
        .as_str()
        .expect("the daemon's token")
        .to_owned();
    let daemon_id = identity["agent_id"]
        .as_str()
        .expect("its agent id")
        .to_owned();

    let key = fabric.dir.path().join("bridge.key");
    std::fs::write(&key, hex::encode(rand::random::<[u8; 32]>())).unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();

    let mut processes = Processes(Vec::new());
    processes
        .0
        .push(fabric.spawn_worker_process(&["--agent", "echo", "--echo"]));
    let mut bridge = fabric
        .agdx()
        .args([
            "bridge",
            "axon",
            "--listen",
            "127.0.0.1:0",
            "--default-agent",
            "echo",
        ])
        .args(["--timeout", "10s", "--key"])
        .arg(&key)
        .args([
            "--peer",
            &daemon_token,
            "--expose",
            &format!("remote={daemon_id}"),
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start agdx bridge axon");
    let stdout = bridge.stdout.take().expect("the bridge's stdout");
    processes.0.push(bridge);
    let token = tokio::time::timeout(WAIT, BufReader::new(stdout).lines().next_line())
        .await
        .expect("the bridge prints its token")
        .expect("read")
        .expect("a line");
    assert!(token.starts_with("axon://"), "{token}");
    let bridge_id = agent_id(&token_key(&token));

    let (code, out) = axon(bin, &root, &["connect", &token]).await;
    assert_eq!(code, 0, "axon connect takes the bridge's token: {out}");
    processes.0.push(
        Command::new(bin)
            .args([
                "daemon",
                "--port",
                &port.to_string(),
                "--disable-mdns",
                "-q",
            ])
            .arg("--state-root")
            .arg(&root)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start axon daemon"),
    );
    let socket = root.join("axon.sock");
    support::eventually("the daemon's socket", || async {
        socket.exists().then_some(())
    })
    .await;

    // AXON → agdx: `axon request` reaches the echo worker and comes back.
    let (code, out) = axon(bin, &root, &["request", &bridge_id, "hello from axon"]).await;
    assert_eq!(code, 0, "axon request: {out}");
    let reply: Value = serde_json::from_str(&out).expect("axon request prints JSON");
    assert_eq!(reply["ok"], true, "{reply}");
    assert_eq!(reply["response"]["kind"], "response", "{reply}");
    assert_eq!(
        reply["response"]["payload"],
        json!({"message": "hello from axon"})
    );
    let command = fabric
        .records(&fabric.topology.commands)
        .await
        .iter()
        .map(|r| AgentEnvelope::decode_valid(&r.payload).unwrap())
        .find(|e| e.operation.as_deref() == Some("axon.request"))
        .expect("the request is a command on the log");
    assert_eq!(command.body, &br#"{"message":"hello from axon"}"#[..]);
    assert_eq!(command.target, Some(agdx_agent("echo")));

    // agdx → AXON: a command to the exposed agent is an AXON request; the
    // daemon has no application handler, so it answers `unhandled`.
    let mut ipc = Ipc::connect(&socket).await;
    let (code, _, stderr) = fabric
        .run_agdx(&[
            "ask",
            "--to",
            "remote",
            "--operation",
            "lookup",
            "--content-type",
            "json",
            "--timeout",
            "20s",
            r#"{"q":1}"#,
        ])
        .await;
    assert_eq!(code, 3, "an error reply: {stderr}");
    assert!(
        stderr.contains("error unsupported") && stderr.contains("answered error 'unhandled'"),
        "{stderr}"
    );
    let inbound = ipc.inbound().await;
    assert_eq!(inbound["from"], json!(bridge_id), "{inbound}");
    assert_eq!(inbound["envelope"]["kind"], "request");
    assert_eq!(inbound["envelope"]["payload"], json!({"q": 1}));

    // An event to the exposed agent is a one-way AXON message.
    fabric
        .producer("asker")
        .publish_one(
            &fabric.topology.commands,
            agdx::Outgoing::new(
                AgentEnvelope::event(
                    agdx::new_record_id(),
                    agdx::new_conversation_id(),
                    agdx_agent("asker"),
                    br#"{"state":"ready"}"#.to_vec(),
                )
                .with_target(agdx_agent("remote")),
                ContentType::Json,
            ),
        )
        .await
        .expect("publish an event");
    let inbound = ipc.inbound().await;
    assert_eq!(inbound["envelope"]["kind"], "message", "{inbound}");
    assert_eq!(inbound["envelope"]["payload"], json!({"state": "ready"}));

    // `axon notify` becomes an event on the log.
    let (code, out) = axon(bin, &root, &["notify", &bridge_id, "fire and forget"]).await;
    assert_eq!(code, 0, "axon notify: {out}");
    support::eventually("the notification as an event on the log", || async {
        fabric
            .records(&fabric.topology.commands)
            .await
            .iter()
            .map(|r| AgentEnvelope::decode_valid(&r.payload).unwrap())
            .find(|e| e.body == br#"{"data":"fire and forget"}"#[..])
            .map(|e| assert_eq!(e.operation.as_deref(), Some("axon.message")))
    })
    .await;
    drop(processes);
}
