//! The command-line contract outside scripts rely on: `agdx worker --exec`
//! and its environment and exit codes, `agdx ask` exit codes and messages,
//! `agdx send` output and `agdx tail` JSON lines. On every backend.

use crate::support;

use support::fabric::{Fabric, on_every_fabric, terminate};

async fn ask(fabric: &Fabric, operation: &str, body: &str) -> (i32, String, String) {
    fabric
        .run_agdx(&[
            "ask",
            "--to",
            "tool",
            "--operation",
            operation,
            "--timeout",
            "20s",
            body,
        ])
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_workers_and_ask_speak_the_documented_contract() {
    on_every_fabric("cli", |fabric| async move {
        // The handler script branches on the operation; it shows what it was given.
        let script = r#"case "$AGDX_OPERATION" in
  env) printf '%s|%s|%s|%s|%s|%s|' "$AGDX_OPERATION" "$AGDX_SOURCE" "${#AGDX_CONVERSATION}" "${#AGDX_CORRELATION}" "${#AGDX_RECORD}" "$AGDX_IDEMPOTENCY_KEY"; cat ;;
  fail) echo "the input is not a date" >&2; exit 2 ;;
  busy) echo "attempt $AGDX_ATTEMPT: busy" >&2; exit 75 ;;
esac"#;
        let mut worker = fabric.spawn_worker_process(&[
            "--agent", "tool", "--exec", script,
            "--operation", "env", "--operation", "fail", "--operation", "busy",
            "--max-attempts", "2", "--retry-delay", "10ms",
            "--state-dir", &fabric.dir.path().join("state").display().to_string(),
        ]);

        let (code, stdout, stderr) = fabric
            .run_agdx(&["ask", "--to", "tool", "--operation", "env", "--as", "script", "--idempotency-key", "k1", "--timeout", "20s", "payload"])
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout, "env|script|26|26|26|k1|payload\n");

        let (code, stdout, stderr) = ask(&fabric, "fail", "tomorrow-ish").await;
        assert_eq!((code, stdout.as_str()), (3, ""), "an error reply exits 3");
        assert_eq!(stderr.trim(), "agdx: error tool_failure: the input is not a date");

        let (code, _, stderr) = ask(&fabric, "busy", "x").await;
        assert_eq!(code, 3);
        assert_eq!(stderr.trim(), "agdx: error internal: attempt 2: busy", "exit 75 was retried once, then answered");

        let (code, _, stderr) = ask(&fabric, "translate", "x").await;
        assert_eq!(code, 3);
        assert_eq!(
            stderr.trim(),
            "agdx: error unsupported: no handler for operation 'translate' on agent 'tool'; it handles: busy, env, fail"
        );

        let (code, stdout, stderr) = fabric.run_agdx(&["ask", "--to", "nobody", "--operation", "x", "--timeout", "3s", "x"]).await;
        assert_eq!((code, stdout.as_str()), (4, ""), "no reply in time exits 4");
        assert!(stderr.contains("no reply from nobody to operation 'x'"), "{stderr}");

        let (code, stdout, _) = fabric.run_agdx(&["send", "--to", "tool", "--operation", "env", "later"]).await;
        assert_eq!(code, 0);
        let fields: Vec<&str> = stdout.split_whitespace().collect();
        assert!(fields[0].starts_with("record=") && fields[0].len() == "record=".len() + 26, "{stdout}");
        assert!(fields[1].starts_with("correlation="), "{stdout}");
        let conversation = fields[2].strip_prefix("conversation=").expect("the conversation").to_owned();
        support::eventually("the sent command to be answered", || async {
            fabric.responses().await.iter().any(|e| e.conversation.to_string() == conversation).then_some(())
        })
        .await;
        terminate(&mut worker).await;

        // tail: one JSON line per record, decoded, with where it sits.
        let (code, stdout, stderr) = fabric.run_agdx(&["tail", "--conversation", &conversation]).await;
        assert_eq!(code, 0, "{stderr}");
        let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
        assert_eq!(lines.len(), 2, "the command and its response: {stdout}");
        assert_eq!(lines[0]["topic"], "agent.commands");
        assert_eq!(lines[0]["kind"], "command");
        assert_eq!(lines[0]["body"], "later");
        assert_eq!(lines[1]["topic"], "agent.responses");
        assert_eq!(lines[1]["kind"], "response");
        assert_eq!(lines[1]["body"], "env|cli|26|26|26||later");
        for line in &lines {
            assert_eq!(line["conversation"], conversation.as_str());
            assert!(line["offset"].is_u64() && line["partition"].is_u64() && line["timestamp"].is_string());
        }
        let (_, dlq, _) = fabric.run_agdx(&["tail", "--topic", "agent.dlq"]).await;
        let reasons: Vec<String> = dlq
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("a JSON line")["dead_letter"]["reason"].to_string())
            .collect();
        assert_eq!(reasons.len(), 2, "{dlq}");
        assert!(reasons.contains(&"\"rejected\"".to_owned()) && reasons.contains(&"\"retry_exhausted\"".to_owned()), "{reasons:?}");
    })
    .await;
}

#[test]
fn examples_show_the_first_session_to_copy() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_agdx"))
        .arg("examples")
        .output()
        .expect("run agdx examples");
    assert!(output.status.success());
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(text.contains("agdx worker --agent echo --echo"));
    assert!(text.contains("agdx ask --to echo --operation hello \"hi\""));
    for command in [
        "agdx demo",
        "agdx timeline",
        "agdx graph",
        "agdx dlq redrive",
        "agdx agents --watch",
        "--metrics",
        "agdx bridge ioa",
        "agdx bridge mcp --listen",
        "--stream-output lines",
        "AGDX_REPORT",
        "agdx cancel",
        "--follow",
        "agdx context",
    ] {
        assert!(text.contains(command), "agdx examples shows {command}");
    }
    assert!(
        text.contains("--log kafka://127.0.0.1:19092,"),
        "the examples show a Kafka cluster too"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_worker_answers_bodies_larger_than_a_pipe_buffer() {
    on_every_fabric("cli-large", |fabric| async move {
        let mut worker = fabric.spawn_worker_process(&["--agent", "copier", "--exec", "cat"]);
        // 200 KB: larger than a pipe's buffer, smaller than the claim-check threshold.
        let body: String = (0..200_000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let (code, stdout, stderr) = fabric
            .run_agdx_with_input(
                &[
                    "ask",
                    "--to",
                    "copier",
                    "--operation",
                    "copy",
                    "--timeout",
                    "20s",
                ],
                body.as_bytes(),
            )
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout.trim_end(), body);
        terminate(&mut worker).await;
    })
    .await;
}
