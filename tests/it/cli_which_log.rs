//! The command line says which log it uses: the commands that only read
//! refuse a log path where there is none (naming it, and how to create
//! one) instead of creating an empty log; `ask` names the log it waits on
//! and how to start a worker there, the trap being a worker started in
//! another directory; `demo` writes into no log but one named by --log on
//! its own command line; `init` keeps an existing partition count and
//! refuses to pretend it changed one; `examples` speaks of examples.

use crate::support;

use std::path::Path;
use std::process::Stdio;

use support::PATIENCE;

/// `agdx ARGS` in `cwd`, with `env` set (and no AGDX_* from outside):
/// exit code, stdout, stderr.
fn agdx_in(cwd: &Path, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_agdx"));
    command
        .args(args)
        .current_dir(cwd)
        .env("TMPDIR", cwd)
        .env_remove("AGDX_LOG")
        .env_remove("AGDX_STREAM")
        .env_remove("AGDX_KEYS")
        .stdin(Stdio::null());
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("run agdx");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn agdx(cwd: &Path, args: &[&str]) -> (i32, String, String) {
    agdx_in(cwd, &[], args)
}

/// `agdx [--log LOG] ask --to echo --operation hello --timeout TIMEOUT hi` in `cwd`.
fn ask_echo(cwd: &Path, log: Option<&str>, timeout: &str) -> (i32, String, String) {
    let mut args: Vec<&str> = log.map_or(Vec::new(), |l| vec!["--log", l]);
    args.extend([
        "ask",
        "--to",
        "echo",
        "--operation",
        "hello",
        "--timeout",
        timeout,
        "hi",
    ]);
    agdx(cwd, &args)
}

fn entries(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .expect("read the directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn read_only_commands_refuse_a_log_that_does_not_exist() {
    let cwd = tempfile::tempdir().expect("a working directory");
    let cwd = cwd.path().canonicalize().expect("an absolute path");
    let conversation = "01J00000000000000000000000";
    let reads: [&[&str]; 5] = [
        &["tail"],
        &["timeline", conversation],
        &["graph", conversation],
        &["dlq", "list"],
        &["agents"],
    ];
    for (log, given, dir) in [
        (
            Some("embedded:nowhere"),
            "embedded:nowhere",
            cwd.join("nowhere"),
        ),
        (None, "embedded:.agdx", cwd.join(".agdx")),
    ] {
        for read in reads {
            let mut args: Vec<&str> = log.map_or(Vec::new(), |l| vec!["--log", l]);
            args.extend_from_slice(read);
            let (code, out, stderr) = agdx(&cwd, &args);
            assert_eq!((code, out.as_str()), (1, ""), "{args:?}: {stderr}");
            let said = format!(
                "agdx: there is no log at {given} ({} holds none); agdx {} reads a log and creates none: name the log your workers use with --log (or AGDX_LOG), or create this one with `agdx --log embedded:{} init`",
                dir.display(),
                read[0],
                dir.display()
            );
            assert_eq!(stderr.trim(), said, "{args:?}");
            assert_eq!(
                entries(&cwd),
                Vec::<String>::new(),
                "{args:?} created nothing"
            );
        }
    }

    // Once the log exists, they read it.
    let (code, _, stderr) = agdx(&cwd, &["--log", "embedded:nowhere", "init"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, out, stderr) = agdx(&cwd, &["--log", "embedded:nowhere", "tail"]);
    assert_eq!((code, out.as_str()), (0, ""), "{stderr}");
    let (code, out, stderr) = agdx(&cwd, &["--log", "embedded:nowhere", "agents"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        out.starts_with("no live agents on embedded:nowhere"),
        "{out}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_names_the_log_it_waits_on_and_how_to_reach_the_worker() {
    let root = tempfile::tempdir().expect("a directory");
    let root = root.path().canonicalize().expect("an absolute path");
    let (here, there) = (root.join("here"), root.join("there"));
    for dir in [&here, &there] {
        std::fs::create_dir(dir).expect("a directory");
    }
    // The worker runs in another directory, on that directory's ./.agdx.
    let mut worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"))
        .args(["worker", "--agent", "echo", "--echo"])
        .current_dir(&there)
        .env_remove("AGDX_LOG")
        .env_remove("AGDX_STREAM")
        .env_remove("AGDX_KEYS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start the worker");
    let theirs = format!("embedded:{}", there.join(".agdx").display());
    support::eventually("the worker's card", || {
        let there = there.clone();
        let theirs = theirs.clone();
        async move {
            let (_, out, _) =
                tokio::task::spawn_blocking(move || agdx(&there, &["--log", &theirs, "agents"]))
                    .await
                    .expect("agents");
            out.lines().any(|l| l.starts_with("echo ")).then_some(())
        }
    })
    .await;

    let (code, _, stderr) = ask_echo(&here, None, "300ms");
    assert_eq!(code, 4, "{stderr}");
    let ours = format!("embedded:{}", here.join(".agdx").display());
    let advice = format!(
        "start one on this log with `agdx --log {ours} worker --agent echo ...` (a worker started without --log uses ./.agdx of its own directory)"
    );
    let mut lines = stderr.lines();
    assert_eq!(
        lines.next(),
        Some(
            format!(
                "agdx: no live worker for agent 'echo' seen on embedded:.agdx — the command waits on the log; {advice}"
            )
            .as_str()
        ),
        "{stderr}"
    );
    // Giving up, the ask cancels its command: a worker started on this
    // log later does not run it.
    assert_eq!(
        lines.next(),
        Some("agdx: cancelled the command, so its handler stops (--no-cancel leaves it running)"),
        "{stderr}"
    );
    let timeout = lines.next().expect("the timeout");
    assert!(
        timeout.contains(" on embedded:.agdx; no worker for 'echo' was seen on this log")
            && timeout.ends_with(&advice),
        "{stderr}"
    );

    // Named by the log the worker uses, the same ask is answered.
    let (code, out, stderr) = ask_echo(&here, Some(&theirs), "20s");
    assert_eq!((code, out.as_str()), (0, "hi\n"), "{stderr}");
    worker.kill().await.expect("stop the worker");
    let _ = tokio::time::timeout(PATIENCE, worker.wait()).await;
}

#[test]
fn the_demo_writes_only_into_a_log_named_on_its_command_line() {
    let cwd = tempfile::tempdir().expect("a working directory");
    let cwd = cwd.path().canonicalize().expect("an absolute path");
    let mine = cwd.join("mine");
    let spec = format!("embedded:{}", mine.display());

    let (code, out, stderr) = agdx_in(&cwd, &[("AGDX_LOG", &spec)], &["demo"]);
    assert_eq!(code, 0, "{stderr}\n{out}");
    assert!(out.contains("nothing left behind"), "{out}");
    assert!(
        !out.contains(&spec),
        "AGDX_LOG is not the demo's log:\n{out}"
    );
    assert_eq!(
        entries(&cwd),
        Vec::<String>::new(),
        "nothing written, nothing left"
    );

    for args in [vec!["--log", &spec, "demo"], vec!["demo", "--log", &spec]] {
        let (code, out, stderr) = agdx(&cwd, &args);
        assert_eq!(code, 0, "{args:?}: {stderr}\n{out}");
        let stays = format!("its records stay on {spec} in stream 'demo-");
        assert!(out.contains(&stays), "{args:?}:\n{out}");
        assert!(!out.contains("nothing left behind"), "{args:?}:\n{out}");
    }
    assert_eq!(entries(&cwd), ["mine"]);
}

#[test]
fn init_keeps_an_existing_partition_count_and_refuses_to_change_it() {
    let cwd = tempfile::tempdir().expect("a working directory");
    let counts = |out: &str| -> Vec<String> {
        out.lines()
            .skip(1)
            .map(|l| {
                let words: Vec<&str> = l.split_whitespace().collect();
                let at = words
                    .iter()
                    .position(|w| *w == "partitions")
                    .expect("a count");
                format!("{} {}", words[at + 1], words[at + 2])
            })
            .collect()
    };
    let (code, out, stderr) = agdx(cwd.path(), &["init", "--partitions", "3"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(counts(&out), vec!["3 (created)"; 5]);

    let (code, out, stderr) = agdx(cwd.path(), &["init"]);
    assert_eq!(
        code, 0,
        "without --partitions the topics keep theirs: {stderr}"
    );
    assert_eq!(counts(&out), vec!["3 (exists)"; 5]);
    let (code, out, stderr) = agdx(cwd.path(), &["init", "--partitions", "3"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(counts(&out), vec!["3 (exists)"; 5]);

    let (code, out, stderr) = agdx(cwd.path(), &["init", "--partitions", "8"]);
    assert_eq!((code, out.as_str()), (1, ""), "{stderr}");
    assert_eq!(
        stderr.trim(),
        "agdx: topic 'agents/agent.commands' already exists with 3 partitions, not 8; ask for 3 partitions or use a new stream name; that is --partitions 3 or --stream NAME"
    );
    let (_, help, _) = agdx(cwd.path(), &["init", "--help"]);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains("a topic that exists with another count is refused")
            && help.contains("Without it, topics that exist keep their count"),
        "{help}"
    );
}

#[test]
fn the_examples_and_help_speak_only_of_the_tool() {
    let cwd = tempfile::tempdir().expect("a working directory");
    let (code, examples, _) = agdx(cwd.path(), &["examples"]);
    assert_eq!(code, 0);
    let header: String = examples.split("\n\n").next().expect("a header").to_owned();
    assert!(header.ends_with("(see example 13 below)."), "{header}");
    let (_, help, _) = agdx(cwd.path(), &["--help"]);
    for text in [&examples, &help] {
        for jargon in ["session", "seed"] {
            assert!(
                !text.to_lowercase().contains(jargon),
                "{jargon} in:\n{text}"
            );
        }
    }
}

#[test]
fn the_help_names_every_log_backend() {
    let cwd = tempfile::tempdir().expect("a working directory");
    let (code, help, _) = agdx(cwd.path(), &["--help"]);
    assert_eq!(code, 0);
    let help = help.split_whitespace().collect::<Vec<_>>().join(" ");
    let (about, _) = help.split_once(" Usage: ").expect("the about line");
    for backend in ["embedded", "Apache Iggy", "Kafka"] {
        assert!(
            about.contains(backend),
            "the description names {backend}: {about}"
        );
    }
    let log = help
        .split_once("--log <LOG>")
        .map(|(_, rest)| rest.split(" --stream ").next().unwrap_or(rest))
        .expect("the --log option");
    for form in [
        "embedded:PATH",
        "iggy://USER:PASSWORD@HOST:PORT",
        "kafka://HOST:PORT",
    ] {
        assert!(log.contains(form), "--log shows {form}: {log}");
    }
}
