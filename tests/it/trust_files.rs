//! Files that hold secrets or decide trust, as the command line uses them:
//! a token secret or token list its group or others can read mints no
//! token and starts no HTTP bridge (as a signing key file is refused), and
//! a key registry anyone may write is refused by every command that reads
//! it. Once the file is private again, the same command works.

use crate::support;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Stdio;

use support::PATIENCE;
use tokio::io::{AsyncBufReadExt, BufReader};

fn agdx(dir: &Path) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"));
    command
        .arg("--log")
        .arg(format!("embedded:{}", dir.join("log").display()))
        .current_dir(dir)
        .env_remove("AGDX_LOG")
        .env_remove("AGDX_STREAM")
        .env_remove("AGDX_KEYS")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs to the end (a bridge that starts serving fails the test); exit
/// code, stdout, stderr.
async fn run(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let output = tokio::time::timeout(PATIENCE, agdx(dir).args(args).output())
        .await
        .unwrap_or_else(|_| panic!("agdx {args:?} did not end"))
        .expect("run agdx");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_secrets_and_token_lists_others_can_read_are_refused() {
    let dir = tempfile::tempdir().expect("a directory");
    let secret = dir.path().join("ipc.secret");
    let secret_text = secret.display().to_string();
    let (code, _, stderr) = run(
        dir.path(),
        &["bridge", "ax-ipc", "token", "--secret", &secret_text],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");

    chmod(&secret, 0o644);
    let exposed = format!(
        "agdx: {secret_text} is accessible to others (mode 0644); a token secret or token list must be readable by its owner only: run `chmod 600 {secret_text}`"
    );
    let (code, stdout, stderr) = run(
        dir.path(),
        &["bridge", "ax-ipc", "token", "--secret", &secret_text],
    )
    .await;
    assert_eq!(
        (code, stdout.as_str()),
        (1, ""),
        "no token minted: {stderr}"
    );
    assert_eq!(stderr.trim(), exposed);
    let serve = |flag: &'static str, file: String| {
        let dir = dir.path().to_owned();
        async move {
            let args = [
                "bridge",
                "ax-ipc",
                "--http",
                "127.0.0.1:0",
                flag,
                &file,
                "--route",
                "memory_*=memory",
            ];
            run(&dir, &args).await
        }
    };
    let (code, _, stderr) = serve("--token-secret", secret_text.clone()).await;
    assert_eq!((code, stderr.trim()), (1, exposed.as_str()));

    let list = dir.path().join("tokens");
    let list_text = list.display().to_string();
    std::fs::write(&list, "turn-token\n").expect("write the token list");
    chmod(&list, 0o640);
    let (code, _, stderr) = serve("--tokens", list_text.clone()).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains(&format!("{list_text} is accessible to others (mode 0640)")),
        "{stderr}"
    );

    // Private again, the bridge serves and checks tokens over HTTP.
    chmod(&list, 0o600);
    let mut bridge = agdx(dir.path())
        .args(["bridge", "ax-ipc", "--http", "127.0.0.1:0", "--tokens"])
        .arg(&list)
        .args(["--route", "memory_*=memory"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the bridge");
    let mut lines = BufReader::new(bridge.stdout.take().expect("stdout")).lines();
    let url = loop {
        let line = tokio::time::timeout(PATIENCE, lines.next_line())
            .await
            .expect("the bridge says where it listens")
            .expect("read")
            .expect("a line");
        if let Some(url) = line.strip_prefix("http ") {
            break url.to_owned();
        }
    };
    let refused = reqwest::Client::new()
        .post(&url)
        .bearer_auth("not-listed")
        .body(r#"{"action":"memory_list","scope":"notes"}"#)
        .send()
        .await
        .expect("the bridge answers");
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    bridge.kill().await.expect("stop the bridge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_registry_anyone_may_write_is_refused() {
    let dir = tempfile::tempdir().expect("a directory");
    let registry = dir.path().join("keys.json");
    let registry_text = registry.display().to_string();
    let (code, _, stderr) = run(
        dir.path(),
        &[
            "keys",
            "generate",
            "--principal",
            "ops",
            "--kind",
            "operator",
            "--registry",
            &registry_text,
            "--out",
            "ops.key",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");

    chmod(&registry, 0o666);
    let refused = format!(
        "agdx: key registry {registry_text} can be changed by anyone (mode 0666), and it decides which keys are trusted: run `chmod o-w {registry_text}`"
    );
    for args in [
        vec!["keys", "list", "--registry", &registry_text],
        vec!["--keys", &registry_text, "tail", "--verify"],
        vec!["--keys", &registry_text, "quarantine", "--list"],
        vec![
            "keys",
            "generate",
            "--principal",
            "eve",
            "--kind",
            "operator",
            "--registry",
            &registry_text,
            "--out",
            "eve.key",
        ],
    ] {
        let (code, _, stderr) = run(dir.path(), &args).await;
        assert_eq!((code, stderr.trim()), (1, refused.as_str()), "{args:?}");
    }
    assert!(!dir.path().join("eve.key").exists(), "nothing enrolled");

    // Writable by its group only, it is trusted configuration as before.
    chmod(&registry, 0o664);
    let (code, listed, stderr) =
        run(dir.path(), &["keys", "list", "--registry", &registry_text]).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(listed.contains("ops"), "{listed}");
}
