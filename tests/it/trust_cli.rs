//! The trust commands as a person uses them: `agdx keys`, `agdx wire
//! sign|verify`, and the walk-through of docs/trust.md (a verifying worker,
//! signed asks, quarantine and its lift, `tail --verify`, `ask --verify`).
//! On every backend.

use crate::support;

use std::os::unix::fs::PermissionsExt;

use agdx::trust::{KeyRegistry, Signer};
use agdx::wire::{AgentEnvelope, ContentType, Kind};
use support::eventually;
use support::fabric::{Fabric, on_every_fabric, terminate};
use support::trust::append_raw;

/// The id and public key `agdx keys show` prints for a key file.
async fn show(fabric: &Fabric, keyfile: &str) -> (String, String) {
    let (code, stdout, stderr) = fabric.run_agdx(&["keys", "show", keyfile]).await;
    assert_eq!(code, 0, "{stderr}");
    let fields: Vec<&str> = stdout.split_whitespace().collect();
    let id = fields[0]
        .strip_prefix("key_id=")
        .expect("key_id=")
        .to_owned();
    let public = fields[1]
        .strip_prefix("public_key=")
        .expect("public_key=")
        .to_owned();
    (id, public)
}

async fn generate(fabric: &Fabric, principal: &str, kind: &str, extra: &[&str]) -> String {
    let dir = fabric.dir.path();
    let out = dir.join(format!("{principal}.key")).display().to_string();
    let registry = dir.join("keys.json").display().to_string();
    let mut args = vec![
        "keys",
        "generate",
        "--principal",
        principal,
        "--kind",
        kind,
        "--registry",
        &registry,
        "--out",
        &out,
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) = fabric.run_agdx(&args).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.starts_with("key "), "{stdout}");
    assert!(
        stdout.contains(&format!("for {kind} '{principal}'")),
        "{stdout}"
    );
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_generated_listed_shown_revoked_and_used_by_wire_sign_and_verify() {
    let fabric = support::fabric::embedded_fabric("keys-cli").await;
    let dir = fabric.dir.path();
    let registry = dir.join("keys.json").display().to_string();
    let planner = generate(&fabric, "planner", "agent", &["--valid-for", "90d"]).await;
    let ops = generate(&fabric, "ops", "operator", &[]).await;

    // Secret key files are the owner's alone; the registry lists both.
    let mode = std::fs::metadata(&planner).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let (planner_id, planner_public) = show(&fabric, &planner).await;
    let (ops_id, _) = show(&fabric, &ops).await;
    let (code, stdout, _) = fabric
        .run_agdx(&["keys", "list", "--registry", &registry])
        .await;
    assert_eq!(code, 0);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(
        lines[0].starts_with(&format!("{planner_id}  agent     valid    planner")),
        "{stdout}"
    );
    assert!(
        lines[0].contains(" until 20"),
        "a 90-day key has an end: {stdout}"
    );
    assert!(
        lines[1].starts_with(&format!("{ops_id}  operator  valid    ops")),
        "{stdout}"
    );
    assert!(lines[1].ends_with("until never"), "{stdout}");
    let loaded = KeyRegistry::load(std::path::Path::new(&registry)).unwrap();
    assert_eq!(
        loaded
            .get(&planner_id.parse().unwrap())
            .unwrap()
            .public_key
            .to_string(),
        planner_public
    );

    // An existing key file is never overwritten.
    let (code, _, stderr) = fabric
        .run_agdx(&[
            "keys",
            "generate",
            "--principal",
            "x",
            "--kind",
            "agent",
            "--registry",
            &registry,
            "--out",
            &planner,
        ])
        .await;
    assert_eq!(code, 1);
    assert!(stderr.contains("is never overwritten"), "{stderr}");

    // Sign a fixture as the planner; verify with the registry and with the public key.
    let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/fixtures/envelope_command.bin");
    let signed = dir.join("signed.bin");
    let output = fabric
        .agdx()
        .args([
            "wire",
            "sign",
            "--key",
            &planner,
            "--bind-content-type",
            "raw",
            "--bind-agent-version",
            "1",
            fixture,
        ])
        .output()
        .await
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(&signed, &output.stdout).unwrap();
    let envelope = AgentEnvelope::decode_valid(&output.stdout).unwrap();
    let context = envelope.signature.as_ref().unwrap().context.unwrap();
    assert_eq!(
        (context.content_type, context.agent_version),
        (Some(ContentType::Raw), Some(1))
    );
    let signed_arg = signed.display().to_string();

    let mut tampered = envelope.clone();
    tampered.body = b"incident 43".to_vec().into();
    let tampered_path = dir.join("tampered.bin");
    std::fs::write(&tampered_path, tampered.encode()).unwrap();
    let tampered_arg = tampered_path.display().to_string();

    let (code, stdout, _) = fabric
        .run_agdx(&["--keys", &registry, "wire", "verify", &signed_arg])
        .await;
    assert_eq!(
        (code, stdout.trim()),
        (
            0,
            format!("ok {signed_arg} key_id={planner_id} principal=planner").as_str()
        )
    );
    let (code, stdout, _) = fabric
        .run_agdx(&[
            "--keys",
            &registry,
            "wire",
            "verify",
            &signed_arg,
            &tampered_arg,
        ])
        .await;
    assert_eq!(code, 1, "exit 0 only when all verified");
    assert_eq!(
        stdout.lines().nth(1),
        Some(format!("rejected {tampered_arg}: the signature does not verify with key {planner_id} of 'planner' (the record was changed after signing, or signed with another key)").as_str())
    );
    let (code, stdout, _) = fabric
        .run_agdx(&[
            "wire",
            "verify",
            "--public-key",
            &planner_public,
            &signed_arg,
        ])
        .await;
    assert_eq!(
        (code, stdout.trim()),
        (
            0,
            format!("ok {signed_arg} key_id={planner_id} principal=planner (claimed)").as_str()
        )
    );
    let (code, stdout, _) = fabric
        .run_agdx(&[
            "wire",
            "verify",
            "--public-key",
            &planner_public,
            "--principal",
            "ops",
            &signed_arg,
        ])
        .await;
    assert_eq!(code, 1);
    assert!(
        stdout.contains("but the record claims source 'planner'"),
        "{stdout}"
    );

    // Revoked: records judged after the revocation no longer verify.
    let (code, stdout, _) = fabric
        .run_agdx(&[
            "keys",
            "revoke",
            &planner_id,
            "--registry",
            &registry,
            "--at",
            "2020-01-01T00:00:00Z",
        ])
        .await;
    assert_eq!(code, 0);
    assert_eq!(
        stdout.trim(),
        format!(
            "revoked key {planner_id} of 'planner' from 2020-01-01T00:00:00Z on: records that landed before still verify, later ones do not"
        )
    );
    // The list for programs: each key's registry entry and its status now.
    let (code, stdout, stderr) = fabric
        .run_agdx(&["keys", "list", "--registry", &registry, "--json"])
        .await;
    assert_eq!(code, 0, "{stderr}");
    let keys = support::json_lines(&stdout);
    let summary: Vec<(&str, &str, &str, &str)> = keys
        .iter()
        .map(|key| {
            let field = |name: &str| key[name].as_str().unwrap_or("-");
            (
                field("key_id"),
                field("principal"),
                field("kind"),
                field("status"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (planner_id.as_str(), "planner", "agent", "revoked"),
            (ops_id.as_str(), "ops", "operator", "valid"),
        ],
        "{stdout}"
    );
    assert_eq!(keys[0]["revoked_at"], "2020-01-01T00:00:00Z", "{stdout}");
    assert_eq!(
        keys[0]["public_key"].as_str(),
        Some(planner_public.as_str())
    );
    let (code, stdout, _) = fabric
        .run_agdx(&["--keys", &registry, "wire", "verify", &signed_arg])
        .await;
    assert_eq!(code, 1);
    assert!(
        stdout.contains(&format!(
            "key {planner_id} of 'planner' was revoked at 2020-01-01T00:00:00Z"
        )),
        "{stdout}"
    );
    let (code, _, _) = fabric
        .run_agdx(&[
            "--keys",
            &registry,
            "wire",
            "verify",
            "--at",
            "2019-12-31T23:59:59Z",
            &signed_arg,
        ])
        .await;
    assert_eq!(code, 1, "not yet valid before it was generated");

    // A key file others can read is refused, with the fix.
    std::fs::set_permissions(&ops, std::fs::Permissions::from_mode(0o644)).unwrap();
    let (code, _, stderr) = fabric.run_agdx(&["keys", "show", &ops]).await;
    assert_eq!(code, 1);
    assert_eq!(
        stderr.trim(),
        format!(
            "agdx: secret key file {ops} is accessible to others (mode 0644); a secret key must be readable by its owner only: run `chmod 600 {ops}`"
        )
    );
}

/// The lines a child writes on stderr, collected as they come (and passed
/// on to this test's stderr).
fn said_by(child: &mut tokio::process::Child) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use tokio::io::AsyncBufReadExt;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut reader = tokio::io::BufReader::new(child.stderr.take().expect("piped stderr")).lines();
    let collected = lines.clone();
    tokio::spawn(async move {
        while let Ok(Some(line)) = reader.next_line().await {
            eprintln!("{line}");
            collected.lock().unwrap().push(line);
        }
    });
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trust_walkthrough_works_on_the_command_line() {
    on_every_fabric("trust-cli", |fabric| async move {
        let registry = fabric.dir.path().join("keys.json").display().to_string();
        let ops = generate(&fabric, "ops", "operator", &[]).await;
        let echo = generate(&fabric, "echo", "agent", &["--valid-for", "90d"]).await;
        let alice = generate(&fabric, "alice", "agent", &[]).await;
        let keyed = |args: &[&str]| {
            let mut all = vec!["--keys".to_owned(), registry.clone()];
            all.extend(args.iter().map(|a| (*a).to_owned()));
            all
        };
        let run = |args: Vec<String>| {
            let fabric = fabric.clone();
            async move {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                fabric.run_agdx(&args).await
            }
        };
        let state = fabric.dir.path().join("state").display().to_string();
        let mut worker = fabric
            .agdx()
            .args(keyed(&["worker", "--agent", "echo", "--echo", "--verify", "--key", &echo, "--state-dir", &state]))
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let said = said_by(&mut worker);
        let ask = |body: &str| keyed(&["ask", "--to", "echo", "--operation", "hello", "--key", &alice, "--verify", "--timeout", "20s", body]);

        let (code, stdout, stderr) = run(ask("hi")).await;
        assert_eq!((code, stdout.as_str()), (0, "hi\n"), "{stderr}");

        let (code, _, stderr) = run(keyed(&["ask", "--to", "echo", "--operation", "hello", "--timeout", "20s", "unsigned"])).await;
        assert_eq!(
            (code, stderr.trim()),
            (3, "agdx: error unauthorized: agent 'echo' accepts only commands signed by an enrolled key: the record is unsigned; sign it with an enrolled key; that is --key KEYFILE")
        );

        // Quarantine: asks fail at once with exit 3, the pool stops taking work.
        let (code, stdout, stderr) = run(keyed(&["quarantine", "echo", "--key", &ops, "--reason", "leaking secrets"])).await;
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.starts_with("quarantined 'echo': record="), "{stdout}");
        let (code, stdout, stderr) = run(ask("refused")).await;
        assert_eq!((code, stdout.as_str()), (3, ""), "{stderr}");
        assert!(stderr.starts_with("agdx: error quarantined: agent 'echo' is quarantined by 'ops' since "), "{stderr}");
        assert!(stderr.trim_end().ends_with("(leaking secrets)"), "{stderr}");
        let (code, stdout, _) = run(keyed(&["quarantine", "--list"])).await;
        assert_eq!(code, 0);
        assert!(stdout.starts_with("echo quarantined by 'ops' since "), "{stdout}");
        let (code, stdout, stderr) = run(keyed(&["quarantine", "--list", "--json"])).await;
        assert_eq!(code, 0, "{stderr}");
        let states = support::json_lines(&stdout);
        assert_eq!(states.len(), 1, "{stdout}");
        assert_eq!(
            (&states[0]["agent"], &states[0]["quarantined"], &states[0]["by"], &states[0]["reason"]),
            (&serde_json::json!("echo"), &serde_json::json!(true), &serde_json::json!("ops"), &serde_json::json!("leaking secrets")),
            "{stdout}"
        );
        // An agent key cannot sign a control fact.
        let (code, _, stderr) = run(keyed(&["unquarantine", "echo", "--key", &alice])).await;
        assert_eq!(code, 1);
        assert!(stderr.contains("is an agent key; control facts count only when an operator key signs them"), "{stderr}");

        // The pool pauses; a command that goes around the check (no
        // registry) waits in the log.
        eventually("the worker to pause", || async {
            said.lock().unwrap().iter().any(|l| l.contains("this pool takes no new work")).then_some(())
        })
        .await;
        let (code, stdout, stderr) = run(vec![
            "send".into(), "--to".into(), "echo".into(), "--operation".into(), "hello".into(),
            "--key".into(), alice.clone(), "--as".into(), "alice".into(), "waits".into(),
        ])
        .await;
        assert_eq!(code, 0, "{stderr}");
        let correlation = stdout.split_whitespace().nth(1).unwrap().strip_prefix("correlation=").unwrap().to_owned();
        let answered = || async {
            fabric.responses().await.iter().any(|e| e.kind == Kind::Response && e.correlation.is_some_and(|c| c.to_string() == correlation))
        };
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        assert!(!answered().await, "a quarantined pool takes no new work");

        let (code, stdout, stderr) = run(keyed(&["unquarantine", "echo", "--key", &ops])).await;
        assert_eq!(code, 0, "{stderr}");
        assert!(stdout.starts_with("lifted the quarantine of 'echo': record="), "{stdout}");
        eventually("the waiting command to be answered", || async { answered().await.then_some(()) }).await;
        let (code, stdout, stderr) = run(ask("back")).await;
        assert_eq!((code, stdout.as_str()), (0, "back\n"), "{stderr}");
        terminate(&mut worker).await;

        // tail --verify: signed replies verify, the unsigned command does not.
        let (code, stdout, stderr) = run(keyed(&["tail", "--verify"])).await;
        assert_eq!(code, 0, "{stderr}");
        let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
        let unsigned = lines.iter().find(|l| l["kind"] == "command" && l["body"] == "unsigned").expect("the unsigned command");
        assert_eq!(unsigned["verified"], false);
        assert_eq!(unsigned["signer"], serde_json::Value::Null);
        assert_eq!(unsigned["unverified"], "the record is unsigned; sign it with an enrolled key");
        let reply = lines.iter().find(|l| l["kind"] == "response" && l["body"] == "back").expect("the reply");
        assert_eq!(reply["verified"], true);
        assert_eq!(reply["signer"]["principal"], "echo");
        assert_eq!(reply["signer"]["kind"], "agent");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_verify_ignores_a_forged_reply_and_says_how_many() {
    on_every_fabric("ask-verify-cli", |fabric| async move {
        let registry = fabric.dir.path().join("keys.json").display().to_string();
        let alice = generate(&fabric, "alice", "agent", &[]).await;
        let ghost = generate(&fabric, "ghost", "agent", &[]).await;
        let ghost = Signer::from_key_file(std::path::Path::new(&ghost)).unwrap();
        let ask = fabric
            .agdx()
            .args(["--keys", &registry, "ask", "--to", "ghost", "--operation", "boo", "--key", &alice, "--verify", "--timeout", "20s", "anyone?"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let command = eventually("the command on the log", || async {
            fabric.records(&fabric.topology.commands).await.into_iter().find(|r| {
                AgentEnvelope::decode(&r.payload).is_ok_and(|e| e.body == b"anyone?"[..])
            })
        })
        .await;
        let envelope = agdx::envelope_of(&command).unwrap();
        let to = agdx::ReplyTo::for_command(&envelope, Some(command.position)).unwrap();
        let reply = |body: &str| {
            fabric.producer("ghost").response_envelope(&to, body.as_bytes().to_vec(), ContentType::Raw).envelope
        };
        append_raw(&fabric, &fabric.topology.responses, &reply("forged"), ContentType::Raw).await;
        append_raw(&fabric, &fabric.topology.responses, &ghost.sign(reply("boo"), None), ContentType::Raw).await;
        let output = ask.wait_with_output().await.unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(0), "{stderr}");
        assert_eq!(String::from_utf8_lossy(&output.stdout), "boo\n");
        // No worker serves `ghost`, so ask says so first; then the count.
        assert_eq!(
            stderr.lines().last(),
            Some("agdx: ignored 1 reply that did not verify (unsigned, forged, or not signed by the agent asked)"),
            "{stderr}"
        );
    })
    .await;
}
