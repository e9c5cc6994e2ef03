//! The processes of an `agdx worker --exec` command never outlive their
//! purpose: they are gone after the handler limit stops the command, after
//! the worker is killed with SIGKILL, after a second stop signal and after
//! the shutdown grace, even when the command ignores SIGTERM and SIGINT.
//! A command stopped that way stays uncommitted: the next worker handles it.
//!
//! A cancelled command gets SIGTERM, then SIGKILL after the cancel grace,
//! and is answered `cancelled`; a worker killed between a cancel and its
//! answer leaves the answer to the next worker, which does not run the
//! command again.
//!
//! The command records its shell's process id and that of a `sleep` it
//! starts, so the test can look for both in /proc. On the embedded log: the
//! process handling is the same on every backend.

use crate::support;

use std::path::Path;
use std::process::Stdio;

use agdx::wire::{DeadLetterReason, ErrorCode, Kind, TaskState};
use agdx::{AskError, CommandRequest, ReplyEvent, ReplyWatch, Requester};
use support::eventually;
use support::fabric::{ANSWER, Fabric, agent_id, embedded_fabric, lines_of, terminate};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Child;

/// The agent of these tests.
const AGENT: &str = "stubborn";

/// A command that ignores SIGTERM and SIGINT and waits for a long sleep,
/// after writing its shell's and the sleep's process ids to `pids`.
fn stubborn_command(pids: &Path) -> String {
    let pids = pids.display();
    format!("echo $$ >> '{pids}'; trap '' TERM INT; sleep 3600 & echo $! >> '{pids}'; wait")
}

/// Whether process `pid` is still running (a zombie has ended).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// The shell's and the sleep's process ids, once the command wrote both.
async fn command_processes(pids: &Path) -> Vec<u32> {
    let found = eventually("the command to start its processes", || async {
        let lines = lines_of(pids);
        (lines.len() >= 2).then_some(lines)
    })
    .await;
    let found: Vec<u32> = found
        .iter()
        .map(|line| line.parse().expect("a process id"))
        .collect();
    assert!(
        found.iter().all(|&pid| running(pid)),
        "the command's processes run"
    );
    found
}

/// Waits until none of `pids` runs any more.
async fn all_gone(pids: &[u32], after: &str) {
    let what = format!("the command's processes {pids:?} to be gone after {after}");
    eventually(&what, || async {
        pids.iter().all(|&pid| !running(pid)).then_some(())
    })
    .await;
}

/// Sends signal `signal` (`TERM`, `KILL`) to process `pid`.
fn signal(pid: u32, signal: &str) {
    let sent = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{signal} {pid}");
}

/// A worker process with `args`, its stderr read line by line.
struct WorkerProcess {
    child: Child,
    lines: tokio::sync::mpsc::UnboundedReceiver<String>,
    said: Vec<String>,
}

impl WorkerProcess {
    fn start(fabric: &Fabric, args: &[&str]) -> WorkerProcess {
        let mut child = fabric
            .agdx()
            .arg("worker")
            .args(["--agent", AGENT])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start an agdx worker");
        let stderr = child.stderr.take().expect("the worker's stderr");
        let (send, lines) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut reader = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let _ = send.send(line);
            }
        });
        WorkerProcess {
            child,
            lines,
            said: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("a running worker")
    }

    /// Waits for a line of stderr containing `text`.
    async fn says(&mut self, text: &str) {
        let waited = tokio::time::timeout(support::PATIENCE, async {
            while let Some(line) = self.lines.recv().await {
                self.said.push(line.clone());
                if line.contains(text) {
                    return;
                }
            }
        })
        .await;
        assert!(
            waited.is_ok() && self.said.last().is_some_and(|l| l.contains(text)),
            "the worker did not say {text:?}; it said:\n{}",
            self.said.join("\n")
        );
    }

    /// Waits for the worker to exit; its exit code and everything it said.
    async fn exits(mut self) -> (i32, String) {
        let status = tokio::time::timeout(support::PATIENCE, self.child.wait())
            .await
            .expect("the worker exits")
            .expect("wait for the worker");
        while let Some(line) = self.lines.recv().await {
            self.said.push(line);
        }
        (status.code().unwrap_or(-1), self.said.join("\n"))
    }
}

/// Sends one command to the agent; the requester (which reads the
/// replies) and the command's watch.
async fn send(fabric: &Fabric) -> (Requester, ReplyWatch) {
    let requester = fabric.requester("asker");
    let watch = requester
        .send(CommandRequest::new("work", b"again".to_vec()).to(agent_id(AGENT)))
        .await
        .expect("send the command");
    (requester, watch)
}

/// Checks that the command was not committed, then that a worker with a
/// quick command answers it.
async fn handled_by_the_next_worker(fabric: &Fabric, watch: &mut ReplyWatch) {
    let partition = watch.sent().partition;
    let committed = fabric
        .log
        .committed_offset(&fabric.topology.commands, AGENT, partition)
        .await
        .expect("read the committed offset");
    assert_eq!(committed, None, "the stopped command was not committed");
    let mut next = WorkerProcess::start(fabric, &["--exec", "cat"]);
    loop {
        match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Status(_) => {}
            ReplyEvent::Response(reply) => {
                assert_eq!(reply.body, &b"again"[..]);
                break;
            }
            other => panic!("expected the response, got {other:?}"),
        }
    }
    terminate(&mut next.child).await;
}

/// A worker with the stubborn command (and `args`) on a fresh embedded
/// log, one command sent to it, and the command's processes running.
struct Stubborn {
    fabric: Fabric,
    worker: WorkerProcess,
    /// Reads the replies while the test runs.
    _requester: Requester,
    watch: ReplyWatch,
    processes: Vec<u32>,
}

impl Stubborn {
    async fn start(test: &str, args: &[&str]) -> Stubborn {
        Self::start_with(test, stubborn_command, args).await
    }

    /// As [`Stubborn::start`], with the command `command` makes of the
    /// file its process ids go to.
    async fn start_with(test: &str, command: fn(&Path) -> String, args: &[&str]) -> Stubborn {
        let fabric = embedded_fabric(test).await;
        let pids = fabric.dir.path().join("pids");
        let command = command(&pids);
        let mut all = vec!["--exec", &command];
        all.extend_from_slice(args);
        let worker = WorkerProcess::start(&fabric, &all);
        let (requester, watch) = send(&fabric).await;
        let processes = command_processes(&pids).await;
        Stubborn {
            fabric,
            worker,
            _requester: requester,
            watch,
            processes,
        }
    }

    /// Checks that the worker exits 1 saying it left the command
    /// uncommitted, that the command's processes are gone, and that the
    /// next worker handles the command.
    async fn abandoned_by_the_worker(self, after: &str) {
        let Stubborn {
            fabric,
            worker,
            mut watch,
            processes,
            ..
        } = self;
        let (code, said) = worker.exits().await;
        assert_eq!(code, 1, "a worker that stopped its handlers fails: {said}");
        assert!(said.contains("left uncommitted"), "{said}");
        all_gone(&processes, after).await;
        handled_by_the_next_worker(&fabric, &mut watch).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handler_limit_kills_every_process_of_the_command() {
    let mut stubborn = Stubborn::start("exec-limit", &["--handler-limit", "1s"]).await;
    all_gone(&stubborn.processes, "the handler limit").await;
    let dead = eventually("the dead letter", || async {
        stubborn.fabric.dead_letters().await.pop()
    })
    .await;
    assert_eq!(dead.reason, DeadLetterReason::Rejected);
    assert!(
        dead.detail
            .as_deref()
            .is_some_and(|d| d.contains("ran longer than its limit")),
        "{:?}",
        dead.detail
    );
    terminate(&mut stubborn.worker.child).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_processes_of_a_command_die_with_a_killed_worker() {
    let mut stubborn = Stubborn::start("exec-kill", &[]).await;
    signal(stubborn.worker.pid(), "KILL");
    stubborn.worker.child.wait().await.expect("reap the worker");
    all_gone(&stubborn.processes, "the worker was killed").await;
    handled_by_the_next_worker(&stubborn.fabric, &mut stubborn.watch).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_signal_stops_a_handler_that_ignores_the_first() {
    let mut stubborn = Stubborn::start("exec-second-signal", &[]).await;
    signal(stubborn.worker.pid(), "TERM");
    stubborn
        .worker
        .says("stopping: finishing the records in hand")
        .await;
    assert!(
        stubborn.processes.iter().all(|&pid| running(pid)),
        "the first signal lets the command run on"
    );
    signal(stubborn.worker.pid(), "TERM");
    stubborn.abandoned_by_the_worker("the second signal").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shutdown_grace_stops_a_handler_that_ignores_the_signal() {
    let stubborn = Stubborn::start("exec-grace", &["--shutdown-grace", "1s"]).await;
    signal(stubborn.worker.pid(), "TERM");
    stubborn.abandoned_by_the_worker("the shutdown grace").await;
}

/// A command that, on SIGTERM, notes it in `term` beside `pids` and exits.
fn heeding_command(pids: &Path) -> String {
    let (pids, term) = (pids.display(), pids.with_file_name("term"));
    let term = term.display();
    format!(
        "echo $$ >> '{pids}'; trap 'echo term >> \"{term}\"; exit 0' TERM; sleep 3600 & echo $! >> '{pids}'; wait"
    )
}

/// A command that, on SIGTERM, notes it in `term` beside `pids` and then
/// sleeps on: it is stopped only by SIGKILL.
fn lingering_command(pids: &Path) -> String {
    let (pids, term) = (pids.display(), pids.with_file_name("term"));
    let term = term.display();
    format!(
        "echo $$ >> '{pids}'; trap 'echo term >> \"{term}\"; sleep 3600' TERM; sleep 3600 & echo $! >> '{pids}'; wait"
    )
}

/// The task states `watch` reports up to its terminal event, which must be
/// an `error` `cancelled`.
async fn answered_cancelled(watch: &mut ReplyWatch) -> Vec<TaskState> {
    let mut states = Vec::new();
    loop {
        match watch.next(ANSWER).await {
            Ok(ReplyEvent::Status(status)) => states.extend(status.envelope.task_state),
            Ok(ReplyEvent::Error(error)) | Err(AskError::Remote(error)) => {
                assert_eq!(error.code, ErrorCode::Cancelled, "{error:?}");
                return states;
            }
            other => panic!("expected the cancelled answer, got {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_gets_sigterm_and_is_answered_cancelled() {
    let mut stubborn = Stubborn::start_with(
        "exec-cancel-term",
        heeding_command,
        &["--cancel-grace", "1h"],
    )
    .await;
    stubborn.watch.cancel().await.expect("cancel the command");
    let states = answered_cancelled(&mut stubborn.watch).await;
    assert!(states.contains(&TaskState::Canceled), "{states:?}");
    // Answered long before the hour of grace: the command heeded SIGTERM.
    assert_eq!(lines_of(&stubborn.fabric.dir.path().join("term")), ["term"]);
    all_gone(&stubborn.processes, "the cancel").await;
    terminate(&mut stubborn.worker.child).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_command_that_ignores_sigterm_is_killed_after_the_grace() {
    let mut stubborn = Stubborn::start("exec-cancel-kill", &["--cancel-grace", "1s"]).await;
    stubborn.watch.cancel().await.expect("cancel the command");
    answered_cancelled(&mut stubborn.watch).await;
    all_gone(&stubborn.processes, "the cancel grace").await;
    terminate(&mut stubborn.worker.child).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_between_a_cancel_and_its_answer_leaves_the_answer_to_the_next() {
    let mut stubborn = Stubborn::start_with(
        "exec-cancel-crash",
        lingering_command,
        &["--cancel-grace", "1h"],
    )
    .await;
    stubborn.watch.cancel().await.expect("cancel the command");
    // The command got SIGTERM: the worker saw the cancel and waits out the
    // grace, its answer not yet published. Killed now.
    let term = stubborn.fabric.dir.path().join("term");
    eventually("the command to get SIGTERM", || async {
        (!lines_of(&term).is_empty()).then_some(())
    })
    .await;
    signal(stubborn.worker.pid(), "KILL");
    stubborn.worker.child.wait().await.expect("reap the worker");
    all_gone(&stubborn.processes, "the worker was killed").await;

    // The next worker finds the command uncommitted and its cancel behind
    // it: it answers `cancelled` without running the command again.
    let ran = stubborn.fabric.dir.path().join("ran");
    let command = format!("echo ran >> '{}'; cat", ran.display());
    let mut next = WorkerProcess::start(&stubborn.fabric, &["--exec", &command]);
    answered_cancelled(&mut stubborn.watch).await;
    let partition = stubborn.watch.sent().partition;
    let commands = &stubborn.fabric.topology.commands;
    eventually("the cancelled command to be committed", || async {
        let committed = stubborn
            .fabric
            .log
            .committed_offset(commands, AGENT, partition)
            .await
            .expect("read the committed offset");
        committed.is_some().then_some(())
    })
    .await;
    assert!(lines_of(&ran).is_empty(), "the cancelled command ran again");
    // One answer: the killed worker published none.
    let correlation = stubborn.watch.sent().correlation;
    let errors = stubborn
        .fabric
        .responses()
        .await
        .into_iter()
        .filter(|e| e.kind == Kind::Error && e.correlation == correlation)
        .count();
    assert_eq!(errors, 1, "the command was answered once");
    terminate(&mut next.child).await;
}
