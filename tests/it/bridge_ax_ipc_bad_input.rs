//! Bad input at the ax-ipc bridge, through its real socket: each kind gets
//! its documented answer (or, for an oversize frame, a closed connection),
//! and none of it reaches the log. A call that comes back to the bridge
//! through an agent it reached is refused as a loop.

use crate::support;

use std::os::unix::fs::PermissionsExt;

use agdx::bridge::ax_ipc::{BindError, bind};
use agdx::worker::{HandlerError, HandlerReply, handler_fn};
use serde_json::{Value, json};
use support::PATIENCE;
use support::ax_ipc::{BridgeSetup, IpcClient, RunningBridge, one_raw_call, read_frame};
use support::fabric::{Running, on_every_fabric};
use tokio::io::AsyncWriteExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_bad_call_gets_its_documented_answer_and_nothing_reaches_the_log() {
    on_every_fabric("ax-ipc-bad", |fabric| async move {
        let bridge = RunningBridge::start(&fabric, BridgeSetup::default()).await;
        // (request, how the error starts, the _msgId echoed)
        let cases: &[(&[u8], &str, Option<Value>)] = &[
            (b"not json", "Invalid JSON", None),
            (b"{\"action\":\"memory_list\",", "Invalid JSON", None),
            (b"\xff\xfe{}", "Invalid JSON", None),
            (b"[1,2]", "Unknown or missing action", None),
            (
                br#"{"scope":"a","_msgId":"m1"}"#,
                "Unknown or missing action",
                Some(json!("m1")),
            ),
            (
                br#"{"action":"evil","_msgId":"m2"}"#,
                "Unknown or missing action",
                Some(json!("m2")),
            ),
            (
                br#"{"action":7,"_msgId":"m3"}"#,
                "Unknown or missing action",
                Some(json!("m3")),
            ),
            (
                br#"{"action":"memory_list","scope":"a","evil":"injected","_msgId":"m4"}"#,
                "Validation failed for action \"memory_list\"",
                Some(json!("m4")),
            ),
            (
                br#"{"action":"memory_list","scope":"a","limit":"ten","_msgId":"m5"}"#,
                "Validation failed for action \"memory_list\"",
                Some(json!("m5")),
            ),
            (
                br#"{"action":"memory_query","scope":"a","query":"x\u0000y","_msgId":"m6"}"#,
                "Validation failed for action \"memory_query\"",
                Some(json!("m6")),
            ),
            (
                br#"{"action":"memory_list","_msgId":"m7"}"#,
                "Validation failed for action \"memory_list\"",
                Some(json!("m7")),
            ),
            (
                br#"{"action":"web_search","query":"rust","_msgId":"m8"}"#,
                "No handler for action \"web_search\"",
                Some(json!("m8")),
            ),
            (
                br#"{"action":"memory_list","scope":"a","_bridgeHops":["axon","ax-ipc"],"_msgId":"m9"}"#,
                "bridge loop",
                Some(json!("m9")),
            ),
        ];
        for (request, starts, msg_id) in cases {
            let shown = String::from_utf8_lossy(request);
            let answer = one_raw_call(&bridge.socket, request).await;
            assert_eq!(answer["ok"], json!(false), "{shown}: {answer}");
            let error = answer["error"].as_str().expect("an error text");
            assert!(error.starts_with(starts), "{shown}: {error}");
            assert!(!error.contains("--"), "a peer hears no command line: {error}");
            assert_eq!(answer.get("_msgId"), msg_id.as_ref(), "{shown}");
        }
        // What the problems were, said so a person can fix them.
        let undeclared = one_raw_call(
            &bridge.socket,
            br#"{"action":"memory_list","scope":"a","evil":"injected"}"#,
        )
        .await;
        assert!(undeclared["error"].as_str().unwrap().contains("'evil' was unexpected"));
        let wrong_type =
            one_raw_call(&bridge.socket, br#"{"action":"memory_list","scope":"a","limit":"ten"}"#)
                .await;
        assert!(
            wrong_type["error"].as_str().unwrap().contains("/limit"),
            "{wrong_type}"
        );
        let unknown = one_raw_call(&bridge.socket, br#"{"action":"evil"}"#).await;
        assert!(unknown["error"].as_str().unwrap().contains("memory_write"));

        assert!(
            fabric.records(&fabric.topology.commands).await.is_empty(),
            "a refused call writes nothing"
        );
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversize_frame_closes_its_connection_and_others_go_on() {
    on_every_fabric("ax-ipc-oversize", |fabric| async move {
        let bridge = RunningBridge::start(&fabric, BridgeSetup::default()).await;
        let bystander = IpcClient::connect(&bridge.socket).await;

        // 10 MB exactly is still a frame (answered: the content is over the
        // schema's limit); one byte more closes the connection unanswered.
        let mut big = br#"{"action":"memory_write","scope":"a","content":""#.to_vec();
        big.resize(10_000_000 - 2, b'x');
        big.extend_from_slice(b"\"}");
        assert_eq!(big.len(), 10_000_000);
        let answer = one_raw_call(&bridge.socket, &big).await;
        assert!(
            answer["error"]
                .as_str()
                .unwrap()
                .starts_with("Validation failed for action \"memory_write\""),
            "{}",
            &answer.to_string()[..200.min(answer.to_string().len())]
        );

        let mut stream = tokio::net::UnixStream::connect(&bridge.socket)
            .await
            .unwrap();
        stream
            .write_all(&10_000_001u32.to_be_bytes())
            .await
            .unwrap();
        let closed = tokio::time::timeout(PATIENCE, read_frame(&mut stream))
            .await
            .expect("the bridge acts at once");
        assert_eq!(closed, None, "closed without an answer");

        let answer = bystander
            .call(json!({"action": "web_search", "query": "x"}), PATIENCE)
            .await
            .expect("another connection is unaffected")
            .answer;
        assert!(answer["error"].as_str().unwrap().starts_with("No handler"));
        assert!(fabric.records(&fabric.topology.commands).await.is_empty());
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_comes_back_through_an_agent_is_refused_as_a_loop() {
    on_every_fabric("ax-ipc-loop", |fabric| async move {
        let socket = fabric.dir.path().join("ax-ipc.sock");
        // The memory agent is itself an AX client of the same bridge: it
        // passes on the hops of the command it handles, as it should.
        let looping = handler_fn(move |request| {
            let socket = socket.clone();
            async move {
                let hops: Vec<String> = request
                    .envelope
                    .metadata
                    .iter()
                    .flat_map(|m| m.bridge_hops().map(str::to_owned))
                    .collect();
                let client = IpcClient::connect(&socket).await;
                let inner = client
                    .call(
                        json!({"action": "memory_query", "scope": "again", "_bridgeHops": hops}),
                        PATIENCE,
                    )
                    .await
                    .map_err(HandlerError::retryable)?;
                Ok(HandlerReply::json(Value::Object(inner.answer).to_string()))
            }
        });
        let agent = Running::start(fabric.worker("memory").fallback(looping));
        let bridge = RunningBridge::start(&fabric, BridgeSetup::default()).await;
        let client = IpcClient::connect(&bridge.socket).await;
        let answer = client
            .call(json!({"action": "memory_list", "scope": "a"}), PATIENCE)
            .await
            .expect("an answer")
            .answer;
        assert_eq!(answer["ok"], json!(false), "{answer:?}");
        let error = answer["error"].as_str().unwrap();
        assert!(error.starts_with("bridge loop"), "{error}");
        assert!(error.contains("'ax-ipc'"), "{error}");
        let commands = fabric.records(&fabric.topology.commands).await;
        assert_eq!(commands.len(), 1, "only the first call reached the log");
        bridge.stop().await;
        agent.stop().await;
    })
    .await;
}

#[test]
fn the_socket_is_private_and_only_a_stale_one_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ax.sock");
    let live = bind(&path).expect("bind");
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "only the owner may connect");
    assert!(matches!(bind(&path), Err(BindError::InUse { .. })));
    drop(live);
    // Its listener is gone, the file is not: a stale socket is replaced.
    // A process this test binary forks for another test holds a copy of
    // every open descriptor until it execs, so the socket may accept for
    // a moment after the drop; wait (bounded) until nothing does.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::os::unix::net::UnixStream::connect(&path).is_ok() {
        assert!(
            std::time::Instant::now() < deadline,
            "the dropped socket still accepts"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(path.exists());
    let again = bind(&path).expect("a stale socket is replaced");
    std::os::unix::net::UnixStream::connect(&path).expect("the new socket accepts");
    drop(again);

    let file = dir.path().join("notes.txt");
    std::fs::write(&file, "keep me").unwrap();
    let refused = bind(&file).unwrap_err();
    assert!(matches!(refused, BindError::NotASocket { .. }), "{refused}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
    assert!(
        std::fs::read_dir(dir.path()).unwrap().all(|e| !e
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".agdx-sock")),
        "no staging directory is left behind"
    );
}
