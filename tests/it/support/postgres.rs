//! A PostgreSQL server of a test's own: Debian's `postgresql` package
//! (`initdb`, `pg_ctl`, `psql`) on a temporary directory and a free port.
//!
//! The binaries come from `AGDX_TEST_PG_BIN` (a directory), else the newest
//! `/usr/lib/postgresql/*/bin`, else `PATH`. PostgreSQL refuses to run as
//! root, so as root the server runs as the `postgres` user the package
//! creates.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A running PostgreSQL server, stopped when dropped.
pub struct Postgres {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    as_postgres: bool,
    _dir: tempfile::TempDir,
}

impl Postgres {
    /// Starts a fresh server, or says why it cannot.
    pub fn start() -> Result<Self, String> {
        let bin = binaries()?;
        let dir = tempfile::tempdir().map_err(|e| format!("cannot create a directory: {e}"))?;
        let as_postgres = running_as_root();
        if as_postgres {
            let owned = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status();
            if !owned.is_ok_and(|s| s.success()) {
                return Err("running as root, and cannot hand a directory to the `postgres` user (PostgreSQL refuses to run as root)".into());
            }
        }
        let port = super::free_port()?;
        let data = dir.path().join("data");
        let server = Postgres {
            bin,
            data,
            port,
            as_postgres,
            _dir: dir,
        };
        server.run(
            "initdb",
            &[
                "-D",
                &server.data.display().to_string(),
                "-U",
                "postgres",
                "--auth=trust",
                "--no-sync",
            ],
        )?;
        let options = format!(
            "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off",
            server.data.display()
        );
        let log = server.data.join("server.log").display().to_string();
        server.run(
            "pg_ctl",
            &[
                "-D",
                &server.data.display().to_string(),
                "-o",
                &options,
                "-l",
                &log,
                "-w",
                "start",
            ],
        )?;
        Ok(server)
    }

    /// The major version of the server binaries, e.g. 16 for 16.2.
    pub fn major_version(&self) -> Result<u32, String> {
        let output = self.run("postgres", &["--version"])?;
        let text = String::from_utf8_lossy(&output.stdout);
        // "postgres (PostgreSQL) 16.2"
        text.split_whitespace()
            .last()
            .and_then(|version| version.split('.').next())
            .and_then(|major| major.parse().ok())
            .ok_or_else(|| format!("cannot read a version in `postgres --version`: {text}"))
    }

    /// The directory its binaries come from.
    pub fn binaries(&self) -> &Path {
        &self.bin
    }

    /// The connection URL of database `postgres` as user `postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Runs the SQL in `file` (stopping at the first error).
    pub fn load(&self, file: &Path) -> Result<(), String> {
        self.run(
            "psql",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
                "-q",
                "-v",
                "ON_ERROR_STOP=1",
                "-f",
                &file.display().to_string(),
            ],
        )
        .map(drop)
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<Output, String> {
        let path = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(&path);
            command
        } else {
            Command::new(&path)
        };
        let output = command
            .args(args)
            .current_dir("/")
            .output()
            .map_err(|e| format!("cannot run {}: {e}", path.display()))?;
        if !output.status.success() {
            return Err(format!(
                "{} {} failed ({}): {}{}",
                path.display(),
                args.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Ok(output)
    }
}

impl Drop for Postgres {
    fn drop(&mut self) {
        let data = self.data.display().to_string();
        let _ = self.run("pg_ctl", &["-D", &data, "-m", "immediate", "stop"]);
    }
}

/// The directory holding `initdb`, `pg_ctl` and `psql`.
fn binaries() -> Result<PathBuf, String> {
    if let Ok(dir) = std::env::var("AGDX_TEST_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut debian: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file())
        .collect();
    debian.sort_by_key(|bin| {
        bin.parent()
            .and_then(|version| version.file_name())
            .and_then(|name| name.to_str())
            .and_then(|name| name.parse::<u32>().ok())
            .unwrap_or_default()
    });
    if let Some(newest) = debian.pop() {
        return Ok(newest);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
        .ok_or_else(|| "no PostgreSQL: AGDX_TEST_PG_BIN is unset, and neither /usr/lib/postgresql/*/bin nor PATH has initdb and pg_ctl; install Debian's `postgresql` package (`apt-get install -y postgresql`)".to_owned())
}

fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
}
