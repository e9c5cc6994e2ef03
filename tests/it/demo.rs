//! `agdx demo`: one command shows the runtime working end to end on a
//! throwaway embedded log, exits 0 and leaves nothing behind, unless
//! `--keep DIR`, whose log the other commands can read.

use std::process::Command;

fn agdx(cwd: &std::path::Path, tmp: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_agdx"))
        .args(args)
        .current_dir(cwd)
        .env("TMPDIR", tmp)
        .env_remove("AGDX_LOG")
        .env_remove("AGDX_STREAM")
        .output()
        .expect("run agdx");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn the_demo_shows_everything_and_leaves_nothing_behind() {
    let cwd = tempfile::tempdir().expect("a working directory");
    let tmp = tempfile::tempdir().expect("a temporary directory");
    let (code, out, stderr) = agdx(cwd.path(), tmp.path(), &["demo"]);
    assert_eq!(code, 0, "{stderr}\n{out}");
    for expected in [
        "   ← hi",
        "   ← [Once ] [upon ] [a ] [time.]",
        "   ← plan ready: train booked, story told",
        "   ← error invalid_request: the ledger is closed for the night",
        "   ← (first) charged 42 EUR (handler run #1)",
        "   ← (again) charged 42 EUR (handler run #1)",
        "── timeline of conversation ",
        "chunks ×4 chat",
        "── causal graph below the plan command",
        "├─ command hello · planner → echo",
        "── dead letter",
        "rejected  after 1 attempt(s)",
        "── live agents",
        "nothing left behind",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    let agents: Vec<&str> = out
        .split("── live agents")
        .nth(1)
        .expect("the agents")
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    for agent in ["echo", "ledger", "payments", "planner", "story"] {
        assert!(agents.contains(&agent), "{agent} is live: {out}");
    }
    let left = |dir: &std::path::Path| std::fs::read_dir(dir).expect("read").count();
    assert_eq!(left(cwd.path()), 0, "nothing in the working directory");
    assert_eq!(left(tmp.path()), 0, "the temporary log is gone");
}

#[test]
fn a_kept_demo_log_can_be_replayed() {
    let cwd = tempfile::tempdir().expect("a working directory");
    let kept = cwd.path().join("kept");
    let kept_text = kept.display().to_string();
    let (code, out, stderr) = agdx(cwd.path(), cwd.path(), &["demo", "--keep", &kept_text]);
    assert_eq!(code, 0, "{stderr}");
    let conversation = out
        .lines()
        .find_map(|l| l.strip_prefix("── timeline of conversation "))
        .and_then(|l| l.split_whitespace().next())
        .expect("the conversation")
        .to_owned();
    let log = format!("embedded:{kept_text}");
    let (code, timeline, stderr) = agdx(
        cwd.path(),
        cwd.path(),
        &["--log", &log, "timeline", &conversation],
    );
    assert_eq!(code, 0, "{stderr}");
    assert!(
        timeline.contains("command plan") && timeline.contains("dead letter rejected"),
        "{timeline}"
    );
    let (code, list, _) = agdx(cwd.path(), cwd.path(), &["--log", &log, "dlq", "list"]);
    assert_eq!(code, 0);
    assert!(list.contains("ledger") && list.contains("post"), "{list}");
    let (_, agents, _) = agdx(cwd.path(), cwd.path(), &["--log", &log, "agents"]);
    assert!(
        agents.starts_with("no live agents"),
        "the demo's workers left when it ended: {agents}"
    );
}
