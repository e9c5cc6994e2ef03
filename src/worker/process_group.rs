//! The process group of one command run by [`super::ExecHandler`]: every
//! process the command starts dies with the call, and with the worker.
//!
//! Each call gets a process group of its own, led by a small watcher
//! (`sh`) whose stdin is a pipe only this process holds the other end of.
//! The command joins that group. Then:
//!
//! - when the call ends (answered, stopped at the handler limit, or dropped
//!   because the pool was told to stop now), dropping the [`ProcessGroup`]
//!   sends SIGKILL to the whole group: the command, anything it started in
//!   the background, and the watcher;
//! - when the worker process dies, even by SIGKILL, the kernel closes its
//!   end of the pipe, the watcher reads end-of-file and kills its own group.
//!
//! Why a watcher rather than `PR_SET_PDEATHSIG` alone: that signal reaches
//! only the direct child (`sh`), not the processes it starts, and it fires
//! when the *thread* that forked exits, not the process; the thread that
//! spawns a handler is whichever runtime thread polled it, and a runtime
//! may retire threads while their children still run, killing a healthy
//! command. A pipe belongs to the process and is closed only when the
//! process is gone. The watcher stays alive (or, once dead, unreaped) until
//! the group is killed, so the group's id cannot have been reused by then.
//!
//! A group of its own also keeps the terminal's Ctrl-C away from handlers:
//! the worker decides when they stop (see `agdx worker --shutdown-grace`).

use std::io;
use std::process::Stdio;

use tokio::process::{Child, ChildStdin, Command};

/// What the watcher runs: it ignores the signals a terminal or a command
/// sends around (a command may signal its own group), waits for its stdin
/// to close, and then kills its group, itself included.
const WATCHER: &str = "trap '' HUP INT QUIT TERM; read -r _ignored; kill -s KILL 0";

/// A process group that is killed when dropped, and when this process dies.
pub(super) struct ProcessGroup {
    id: libc::pid_t,
    /// Held, never waited for: unreaped, it keeps the group id ours.
    _watcher: Child,
    /// The end of the watcher's stdin; closed when this process dies.
    _lifeline: ChildStdin,
}

impl ProcessGroup {
    /// Starts the watcher, leading a new process group.
    pub(super) fn start() -> io::Result<Self> {
        let mut watcher = Command::new("sh")
            .arg("-c")
            .arg(WATCHER)
            .process_group(0)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let id = watcher
            .id()
            .and_then(|id| libc::pid_t::try_from(id).ok())
            .ok_or_else(|| io::Error::other("the process group's watcher has no process id"))?;
        let lifeline = watcher
            .stdin
            .take()
            .ok_or_else(|| io::Error::other("the process group's watcher has no stdin"))?;
        Ok(Self {
            id,
            _watcher: watcher,
            _lifeline: lifeline,
        })
    }

    /// Asks every process of the group to stop (SIGTERM); the watcher
    /// ignores it and stays until the group is dropped.
    pub(super) fn terminate(&self) {
        self.signal(libc::SIGTERM);
    }

    /// Sends `signal` to the whole group.
    #[allow(unsafe_code, reason = "std cannot signal a process group")]
    fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) takes plain integers and touches no memory of
        // ours. The negative id names the group the watcher leads; the
        // watcher is not reaped before the group is dropped, so the id is
        // still ours.
        let sent = unsafe { libc::kill(-self.id, signal) };
        if sent != 0 {
            let error = io::Error::last_os_error();
            // ESRCH: the group is gone already (someone killed the watcher
            // and everything else ended).
            if error.raw_os_error() != Some(libc::ESRCH) {
                tracing::warn!(%error, group = self.id, signal, "cannot signal the processes of a handler");
            }
        }
    }

    /// Makes `command` start in this group.
    pub(super) fn adopt<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        command.process_group(self.id)
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        self.signal(libc::SIGKILL);
    }
}
