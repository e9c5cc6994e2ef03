//! `agdx bridge axon` as a person runs it: it prints its token, admits the
//! pinned peer that dials it by that token, and refuses bad set-ups with a
//! message that says what to do.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::Stdio;

use agdx::worker::EchoHandler;
use serde_json::json;
use support::axon::{TestPeer, WAIT, agent_id, request, token_key};
use support::fabric::{Fabric, Running, on_every_fabric};
use tokio::io::{AsyncBufReadExt, BufReader};

fn key_file(fabric: &Fabric, mode: u32) -> PathBuf {
    let key = fabric.dir.path().join(format!("bridge-{mode:o}.key"));
    std::fs::write(
        &key,
        format!("{}\n", hex::encode(rand::random::<[u8; 32]>())),
    )
    .unwrap();
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
    key
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_prints_a_token_that_a_pinned_peer_dials() {
    on_every_fabric("axon-cli", |fabric| async move {
        let worker = Running::start(fabric.worker("echo").fallback(EchoHandler));
        let peer = TestPeer::new();
        let peers_file = fabric.dir.path().join("peers");
        std::fs::write(
            &peers_file,
            format!("# the test peer\n{}\n", peer.token("127.0.0.1:9")),
        )
        .unwrap();
        let key = key_file(&fabric, 0o600);
        let mut bridge = fabric
            .agdx()
            .args(["bridge", "axon", "--listen", "127.0.0.1:0", "--key"])
            .arg(&key)
            .arg("--peers-file")
            .arg(&peers_file)
            .args(["--route", "family=echo"])
            .args(["--timeout", "7s"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start agdx bridge axon");
        let said = support::read_all(bridge.stderr.take().unwrap());
        let stdout = bridge.stdout.take().unwrap();
        let token = tokio::time::timeout(WAIT, BufReader::new(stdout).lines().next_line())
            .await
            .expect("a token in time")
            .expect("read")
            .expect("a line");
        let (key_part, addr) = token
            .strip_prefix("axon://")
            .and_then(|t| t.split_once('@'))
            .expect("axon://KEY@HOST:PORT");
        assert!(
            !key_part.contains('='),
            "base64url without padding: {token}"
        );
        let public_key = token_key(&token);
        let connection = peer
            .dial(
                addr.parse().unwrap(),
                &agent_id(&public_key),
                &public_key,
                b"axon/1",
            )
            .await
            .expect("the pinned peer gets in");
        let reply = request(&connection, json!({"domain": "family.news", "n": 1})).await;
        assert_eq!(reply["kind"], "response", "{reply}");
        assert_eq!(reply["payload"], json!({"domain": "family.news", "n": 1}));
        support::fabric::terminate(&mut bridge).await;
        let said = said.await.expect("the bridge's stderr");
        assert!(
            said.contains(
                "within --timeout (7s) gets a `timeout` reply: run `agdx worker --agent AGENT`"
            ),
            "the command line gives the advice its peers do not get: {said}"
        );
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_set_ups_are_refused_with_what_to_do() {
    let fabric = support::fabric::embedded_fabric("axon-cli-refusals").await;
    let private = key_file(&fabric, 0o600);
    let exposed = key_file(&fabric, 0o644);
    let private = private.to_str().unwrap();
    let unknown = "remote=ed25519.00112233445566778899aabbccddeeff";
    let cases: [(&[&str], &str); 5] = [
        (&["--key", exposed.to_str().unwrap()], "chmod 600"),
        (
            &["--key", private, "--expose", unknown],
            "is not pinned; pin its token, axon://KEY@HOST:PORT (pinned: none); that is --peer",
        ),
        (&["--key", private, "--peer", "axon://abc"], "no `@`"),
        (&["--key", private, "--route", "=echo"], "--default-agent"),
        (
            &["--key", private, "--expose", "remote=bob"],
            "not an AXON agent id: one is `ed25519.` followed by 32 hex characters; `axon identity --json` shows",
        ),
    ];
    for (args, expected) in cases {
        let mut all = vec!["bridge", "axon", "--listen", "127.0.0.1:0"];
        all.extend_from_slice(args);
        let (code, _, stderr) = fabric.run_agdx(&all).await;
        assert_ne!(code, 0, "{args:?} is refused");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}
