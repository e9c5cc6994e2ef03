//! The temporary files of one `--exec` call, and the removal of those a
//! killed worker left behind.
//!
//! Each call gets a directory `agdx-call-*` in the temporary directory
//! holding the report file (`AGDX_REPORT`) and the named pipe for input
//! (`AGDX_INPUT`), removed when the call ends. A worker killed outright
//! (SIGKILL, a crash) cannot remove them. So a call holds a lock on its
//! report file for as long as it lives, which the kernel releases when the
//! process ends however it ends, and the first call of each worker process
//! removes the call directories whose report nobody holds.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Once;
use std::time::Duration;

/// How a call directory's name starts.
const DIR_PREFIX: &str = "agdx-call-";
/// How a report file's name starts.
const REPORT_PREFIX: &str = "report-";
/// A call directory younger than this may belong to a call still setting
/// up (its report created, not yet locked), so a sweep leaves it.
const SETTLE: Duration = Duration::from_secs(60);

/// The files of one call: the report file and the named pipe for input,
/// removed when the call ends.
pub(super) struct CallFiles {
    pub report: tempfile::NamedTempFile,
    pub input: PathBuf,
    _dir: tempfile::TempDir,
}

impl CallFiles {
    #[allow(unsafe_code, reason = "std cannot make a named pipe")]
    pub fn new() -> io::Result<Self> {
        static SWEEP: Once = Once::new();
        SWEEP.call_once(|| {
            let removed = sweep(&std::env::temp_dir(), SETTLE);
            if removed > 0 {
                tracing::info!(
                    removed,
                    "removed the files of calls a killed worker left behind"
                );
            }
        });
        let dir = tempfile::Builder::new().prefix(DIR_PREFIX).tempdir()?;
        let report = tempfile::Builder::new()
            .prefix(REPORT_PREFIX)
            .tempfile_in(dir.path())?;
        if !try_lock(report.as_file())? {
            return Err(io::Error::other("the new report file is locked already"));
        }
        let input = dir.path().join("input");
        let path = std::ffi::CString::new(input.as_os_str().as_encoded_bytes())
            .map_err(io::Error::other)?;
        // SAFETY: `path` is a valid NUL-terminated string for the call.
        if unsafe { libc::mkfifo(path.as_ptr(), 0o600) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Self {
            report,
            input,
            _dir: dir,
        })
    }
}

/// Takes the exclusive lock of `file` without waiting: `false` when another
/// open file holds it. The lock lasts until `file` is closed.
#[allow(unsafe_code, reason = "std's File::try_lock is newer than the MSRV")]
fn try_lock(file: &File) -> io::Result<bool> {
    // SAFETY: the descriptor is valid for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        return Ok(true);
    }
    let error = io::Error::last_os_error();
    if error.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(error)
    }
}

/// Removes the call directories in `tmp`, at least `settle` old and this
/// user's, that no live call holds; returns how many.
fn sweep(tmp: &Path, settle: Duration) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let mut removed = 0;
    for entry in entries.flatten() {
        let dir = entry.path();
        if !entry.file_name().to_string_lossy().starts_with(DIR_PREFIX) || !abandoned(&dir, settle)
        {
            continue;
        }
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => removed += 1,
            Err(error) => {
                tracing::debug!(%error, dir = %dir.display(), "could not remove a call's files left behind");
            }
        }
    }
    removed
}

/// Whether `dir` is a call directory of this user's, at least `settle`
/// old, whose report (if it got one) no open file locks.
#[allow(unsafe_code, reason = "std has no geteuid")]
fn abandoned(dir: &Path, settle: Duration) -> bool {
    // Not followed: a link by that name is not a call's.
    let Ok(meta) = std::fs::symlink_metadata(dir) else {
        return false;
    };
    // SAFETY: geteuid has no preconditions.
    let ours = meta.uid() == unsafe { libc::geteuid() };
    let old = meta
        .modified()
        .ok()
        .and_then(|at| at.elapsed().ok())
        .is_some_and(|age| age >= settle);
    if !meta.is_dir() || !ours || !old {
        return false;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let report = entries.flatten().find(|entry| {
        entry
            .file_name()
            .to_string_lossy()
            .starts_with(REPORT_PREFIX)
    });
    match report {
        // Killed between making the directory and the report.
        None => true,
        Some(report) => File::open(report.path())
            .and_then(|file| try_lock(&file))
            .unwrap_or(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call directory in `tmp` as a worker leaves it; with `held`, the
    /// open report file that keeps its lock (a live call).
    fn call_dir(tmp: &Path, name: &str, held: bool) -> (PathBuf, Option<File>) {
        let dir = tmp.join(name);
        std::fs::create_dir(&dir).expect("call dir");
        let report = File::create(dir.join("report-x")).expect("report");
        let held = held.then(|| {
            assert!(try_lock(&report).expect("lock"));
            report
        });
        (dir, held)
    }

    #[test]
    fn a_sweep_removes_what_no_live_call_holds_and_nothing_else() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let (left, _) = call_dir(tmp.path(), "agdx-call-left", false);
        let (live, lock) = call_dir(tmp.path(), "agdx-call-live", true);
        let unreported = tmp.path().join("agdx-call-bare");
        std::fs::create_dir(&unreported).expect("bare call dir");
        let (other, _) = call_dir(tmp.path(), "someone-else", false);
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).expect("target");
        std::os::unix::fs::symlink(&target, tmp.path().join("agdx-call-link")).expect("link");

        assert_eq!(sweep(tmp.path(), Duration::ZERO), 2);
        assert!(!left.exists() && !unreported.exists());
        assert!(live.exists(), "a live call's files were removed");
        assert!(other.exists() && target.exists());
        // Settling: nothing younger than the settle time goes.
        drop(lock);
        assert_eq!(sweep(tmp.path(), Duration::from_secs(3600)), 0);
        assert!(live.exists());
        assert_eq!(sweep(tmp.path(), Duration::ZERO), 1);
    }

    #[test]
    fn a_call_holds_its_report_until_it_ends() {
        let files = CallFiles::new().expect("call files");
        let dir = files.report.path().parent().expect("dir").to_owned();
        let other = File::open(files.report.path()).expect("open the report");
        assert!(!try_lock(&other).expect("try"), "the report is not held");
        drop(files);
        assert!(!dir.exists(), "the call's directory outlived it");
    }
}
