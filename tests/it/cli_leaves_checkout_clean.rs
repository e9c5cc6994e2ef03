//! Running `agdx` inside a git checkout of this project leaves nothing
//! untracked behind: what the CLI creates by default (the embedded log in
//! `.agdx/`, and for a remote log the processed-key store in
//! `.agdx-state/` and claim-checked bodies in `.agdx-blobs/`) is ignored by
//! the project's `.gitignore`, also in a subdirectory. On every backend.

use crate::support;

use std::path::Path;
use std::process::Stdio;

use support::fabric::{PARTITIONS, fabrics, terminate};
use tokio::io::AsyncWriteExt;

/// Runs git in `dir`, returning its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let output = std::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run git");
    assert!(
        output.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// A git repository holding this project's `.gitignore`, committed.
fn checkout() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("a temporary directory");
    git(dir.path(), &["init", "-q"]);
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join(".gitignore"),
        dir.path().join(".gitignore"),
    )
    .expect("copy the project's .gitignore");
    git(dir.path(), &["add", ".gitignore"]);
    git(
        dir.path(),
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.org",
            "commit",
            "-q",
            "-m",
            "ignore",
        ],
    );
    dir
}

#[test]
fn the_paths_the_cli_creates_by_default_are_ignored_anywhere_in_the_checkout() {
    let repo = checkout();
    for path in [
        ".agdx/log.sqlite3",
        ".agdx-state/processed-keys.sqlite3",
        ".agdx-blobs/0123",
    ] {
        for at in [path.to_owned(), format!("sub/dir/{path}")] {
            git(repo.path(), &["check-ignore", "-q", "--no-index", &at]);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_and_an_ask_in_a_subdirectory_leave_nothing_untracked() {
    for fabric in fabrics("clean-checkout").await {
        let repo = checkout();
        let cwd = repo.path().join("sub");
        std::fs::create_dir(&cwd).expect("a subdirectory");
        // The embedded log at its default place; Iggy as the fabric's.
        let log = match fabric.backend {
            "embedded" => agdx::log::DEFAULT_LOG.to_owned(),
            _ => fabric.spec.clone(),
        };
        let agdx = |args: &[&str]| {
            let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"));
            command
                .args(["--log", &log, "--stream", &fabric.stream])
                .args(args)
                .env_remove("AGDX_LOG")
                .env_remove("AGDX_STREAM")
                .current_dir(&cwd)
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .kill_on_drop(true);
            command
        };
        let partitions = PARTITIONS.to_string();
        let init = agdx(&["init", "--partitions", &partitions])
            .output()
            .await
            .expect("agdx init");
        assert!(
            init.status.success(),
            "{}",
            String::from_utf8_lossy(&init.stderr)
        );
        let mut worker = agdx(&["worker", "--agent", "echo", "--echo"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("agdx worker");
        // A body over the claim-check threshold, so blobs are written too.
        let body = vec![b'x'; agdx::DEFAULT_CLAIM_CHECK_THRESHOLD + 1];
        let mut ask = agdx(&[
            "ask",
            "--to",
            "echo",
            "--operation",
            "big",
            "--timeout",
            "20s",
        ])
        .stdin(Stdio::piped())
        .spawn()
        .expect("agdx ask");
        let mut stdin = ask.stdin.take().expect("ask's stdin");
        stdin.write_all(&body).await.expect("write the body");
        drop(stdin);
        let asked = ask.wait_with_output().await.expect("wait for agdx ask");
        assert!(
            asked.status.success(),
            "{}",
            String::from_utf8_lossy(&asked.stderr)
        );
        assert_eq!(asked.stdout.len(), body.len() + 1, "the echo and a newline");
        terminate(&mut worker).await;

        let created: Vec<String> = std::fs::read_dir(&cwd)
            .expect("read the subdirectory")
            .map(|entry| {
                entry
                    .expect("an entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert!(!created.is_empty(), "agdx created its files here");
        let untracked = git(
            repo.path(),
            &["status", "--porcelain", "--untracked-files=all"],
        );
        assert_eq!(
            untracked, "",
            "{} backend: agdx left {created:?}, untracked: {untracked}",
            fabric.backend
        );
    }
}
