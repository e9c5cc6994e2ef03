//! What a peer wrote never reaches a terminal raw: an operation, body,
//! error message, dead-letter detail and metadata holding escape sequences
//! (set the title, clear the screen, ring the bell) are shown escaped by
//! every view for people (`timeline`, `graph` in each format, `dlq list`,
//! `dlq show`, `agents`, error messages), while the JSON output
//! (`tail`, `timeline --json`, `dlq show`'s original) keeps them exact.
//! Agent ids (source, target) cannot hold control characters at all.

use crate::support;

use serde_json::Value;
use support::fabric::{embedded_fabric, terminate};

/// Sets the terminal's title, then rings the bell.
const TITLE: &str = "\u{1b}]0;pwned\u{7}";
/// Clears the screen.
const CLEAR: &str = "\u{1b}[2J";

/// How `TITLE` and `CLEAR` look once escaped.
const TITLE_SHOWN: &str = "\\x1b]0;pwned\\x07";
const CLEAR_SHOWN: &str = "\\x1b[2J";

fn operation() -> String {
    format!("op{TITLE}")
}

/// No control character but the line breaks between lines.
fn assert_printable(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(raw.is_empty(), "{what} printed {raw:?} raw:\n{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_view_for_people_escapes_what_peers_wrote_and_json_stays_exact() {
    let fabric = embedded_fabric("terminal-safety").await;
    // A worker whose operation name and failure message hold escapes: its
    // card (agents), its error reply and its dead letter carry them.
    let failing = format!("printf 'boom{}{}' >&2; exit 75", "\\033[2J", "\\007");
    let mut worker = fabric.spawn_worker_process(&[
        "--agent",
        "evil",
        "--exec",
        &failing,
        "--operation",
        &operation(),
        "--max-attempts",
        "1",
    ]);
    let (code, sent, stderr) = fabric
        .run_agdx(&[
            "send",
            "--to",
            "evil",
            "--operation",
            &operation(),
            &format!("body{CLEAR}red{TITLE}"),
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let field = |name: &str| {
        sent.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .expect("a field of send's line")
            .to_owned()
    };
    let (record, conversation) = (field("record="), field("conversation="));
    let dead = support::eventually("the command to be dead-lettered", || async {
        let (_, out, _) = fabric.run_agdx(&["dlq", "list"]).await;
        out.lines()
            .nth(1)
            .and_then(|l| l.split_whitespace().next())
            .map(str::to_owned)
    })
    .await;

    // Metadata holding escapes, on a record in the same conversation.
    let (_, tail, stderr) = fabric
        .run_agdx(&[
            "tail",
            "--topic",
            "agent.commands",
            "--conversation",
            &conversation,
        ])
        .await;
    let mut command: Value =
        serde_json::from_str(tail.lines().next().expect("the command")).expect(&stderr);
    let object = command.as_object_mut().expect("an object");
    for placed in ["topic", "partition", "offset", "timestamp"] {
        object.remove(placed);
    }
    object.insert("record".into(), ulid::Ulid::new().to_string().into());
    object.insert(
        "metadata".into(),
        serde_json::json!({ "note": format!("meta{CLEAR}") }),
    );
    let encoded = encode(&fabric, &command).await;
    let file = fabric.dir.path().join("with-metadata.cbor");
    std::fs::write(&file, encoded).expect("write the envelope");
    let (code, _, stderr) = fabric
        .run_agdx(&[
            "publish",
            "--topic",
            "agent.commands",
            &file.display().to_string(),
        ])
        .await;
    assert_eq!(code, 0, "{stderr}");

    // Agent ids hold no control characters: the wire refuses them.
    let mut forged = command.clone();
    forged["source"] = format!("ev{TITLE}il").into();
    let (code, _, stderr) = encode_status(&fabric, &forged).await;
    assert_eq!(code, 1, "an agent id with a control character: {stderr}");
    assert_printable("wire encode's refusal", &stderr);

    let views: Vec<(&str, Vec<String>)> = vec![
        ("timeline", vec!["timeline".into(), conversation.clone()]),
        ("graph", vec!["graph".into(), record.clone()]),
        (
            "graph dot",
            vec![
                "graph".into(),
                record.clone(),
                "--format".into(),
                "dot".into(),
            ],
        ),
        (
            "graph mermaid",
            vec![
                "graph".into(),
                record.clone(),
                "--format".into(),
                "mermaid".into(),
            ],
        ),
        ("dlq list", vec!["dlq".into(), "list".into()]),
        ("dlq show", vec!["dlq".into(), "show".into(), dead.clone()]),
        ("agents", vec!["agents".into()]),
    ];
    for (name, args) in &views {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, stderr) = fabric.run_agdx(&args).await;
        assert_eq!(code, 0, "{name}: {stderr}");
        assert_printable(name, &out);
        assert_printable(name, &stderr);
        // `dlq show` names it in the original's exact JSON, below; DOT
        // escapes the backslashes of a label once more.
        let named = match *name {
            "dlq show" => continue,
            "graph dot" => format!("op{}", TITLE_SHOWN.replace('\\', "\\\\")),
            _ => format!("op{TITLE_SHOWN}"),
        };
        assert!(out.contains(&named), "{name} names the operation:\n{out}");
    }
    let (_, timeline, _) = fabric.run_agdx(&["timeline", &conversation]).await;
    for shown in [
        format!("\"body{CLEAR_SHOWN}red{TITLE_SHOWN}\""),
        format!("boom{CLEAR_SHOWN}\\x07"),
    ] {
        assert!(
            timeline.contains(&shown),
            "the timeline shows {shown}:\n{timeline}"
        );
    }
    let (_, shown, _) = fabric.run_agdx(&["dlq", "show", &dead]).await;
    assert!(
        shown.contains(&format!("boom{CLEAR_SHOWN}\\x07")),
        "the detail, escaped:\n{shown}"
    );
    assert!(
        shown.contains(r#""operation": "op\u001b]0;pwned\u0007""#),
        "the original, as exact JSON:\n{shown}"
    );

    // An error reply's message in `ask`'s error line.
    let (code, _, stderr) = fabric
        .run_agdx(&[
            "ask",
            "--to",
            "evil",
            "--operation",
            &operation(),
            "--timeout",
            "20s",
            "x",
        ])
        .await;
    assert_eq!(code, 3, "{stderr}");
    assert_printable("ask", &stderr);
    assert!(
        stderr.contains(&format!("boom{CLEAR_SHOWN}\\x07")),
        "{stderr}"
    );

    // JSON output keeps every character exact.
    for args in [
        vec!["tail", "--conversation", &conversation],
        vec!["timeline", &conversation, "--json"],
    ] {
        let (code, out, stderr) = fabric.run_agdx(&args).await;
        assert_eq!(code, 0, "{stderr}");
        assert_printable("JSON", &out);
        let lines: Vec<Value> = out
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        assert!(
            lines.iter().any(|l| l["operation"] == operation().as_str()),
            "{args:?}: {out}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l["metadata"]["note"] == format!("meta{CLEAR}").as_str()),
            "{args:?}: {out}"
        );
    }
    terminate(&mut worker).await;
}

/// `agdx wire encode` of `json`: exit code, stdout bytes, stderr.
async fn encode_status(fabric: &support::fabric::Fabric, json: &Value) -> (i32, Vec<u8>, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = fabric
        .agdx()
        .args(["wire", "encode"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run agdx wire encode");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin
        .write_all(json.to_string().as_bytes())
        .await
        .expect("write the JSON");
    drop(stdin);
    let output = child.wait_with_output().await.expect("wait");
    (
        output.status.code().unwrap_or(-1),
        output.stdout,
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

async fn encode(fabric: &support::fabric::Fabric, json: &Value) -> Vec<u8> {
    let (code, bytes, stderr) = encode_status(fabric, json).await;
    assert_eq!(code, 0, "{stderr}");
    bytes
}
