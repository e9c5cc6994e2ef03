//! An S3-protocol server for the tests: `s3s-fs` serving a temporary
//! directory on a free loopback port, started per test.
//!
//! The binary comes from `AGDX_TEST_S3S_FS`, else `s3s-fs` on PATH
//! (`cargo install --locked s3s-fs --version 0.14.1 --features binary`);
//! without it a test says `s3: skipped: ...` once and goes on.

use std::path::PathBuf;
use std::process::Stdio;

use super::{PATIENCE, free_port};

/// The credentials the server is started with.
const ACCESS_KEY: &str = "agdx-test";
const SECRET_KEY: &str = "agdx-test-secret";
/// The bucket every server starts with.
pub const BUCKET: &str = "agdx-blobs";

/// A running `s3s-fs`, stopped when dropped.
pub struct S3Server {
    /// `http://127.0.0.1:PORT`.
    pub endpoint: String,
    _child: tokio::process::Child,
    root: tempfile::TempDir,
}

/// Says once that the S3 tests were skipped, and why.
pub fn say_skipped(reason: &str) {
    super::say_skipped_once("s3", reason);
}

fn binary() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("AGDX_TEST_S3S_FS") {
        let path = PathBuf::from(path);
        return match path.is_file() {
            true => Ok(path),
            false => Err(format!("AGDX_TEST_S3S_FS={} is not a file", path.display())),
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("s3s-fs"))
        .find(|path| path.is_file())
        .ok_or_else(|| {
            "no s3s-fs: set AGDX_TEST_S3S_FS or put s3s-fs on PATH (cargo install --locked s3s-fs --version 0.14.1 --features binary)".to_owned()
        })
}

/// A server from [`s3_server`], or `None` once the skip is said.
pub async fn s3_server_or_skip() -> Option<S3Server> {
    s3_server()
        .await
        .inspect_err(|reason| say_skipped(reason))
        .ok()
}

/// Starts a server with an empty bucket [`BUCKET`], or says why not.
pub async fn s3_server() -> Result<S3Server, String> {
    let binary = binary()?;
    let root = tempfile::tempdir().map_err(|e| format!("cannot make a directory: {e}"))?;
    // s3s-fs keeps a bucket as a directory of its root.
    std::fs::create_dir(root.path().join(BUCKET)).map_err(|e| e.to_string())?;
    let port = free_port()?;
    let child = tokio::process::Command::new(&binary)
        .args(["--host", "127.0.0.1", "--port", &port.to_string()])
        .args(["--access-key", ACCESS_KEY, "--secret-key", SECRET_KEY])
        .arg(root.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", binary.display()))?;
    let started = tokio::time::Instant::now();
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if started.elapsed() > PATIENCE {
            return Err(format!(
                "{} did not listen on port {port}",
                binary.display()
            ));
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(S3Server {
        endpoint: format!("http://127.0.0.1:{port}"),
        _child: child,
        root,
    })
}

impl S3Server {
    /// The directory the server keeps its buckets in.
    pub fn root(&self) -> &std::path::Path {
        self.root.path()
    }

    /// The store URL of `prefix` in the bucket.
    pub fn url(&self, prefix: &str) -> String {
        format!("s3://{BUCKET}/{prefix}")
    }

    /// The environment that points an S3 client (a child `agdx`) here.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ENDPOINT_URL", self.endpoint.clone()),
            ("AWS_ALLOW_HTTP", "true".into()),
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()),
            ("AWS_REGION", "us-east-1".into()),
        ]
    }

    /// The same settings as `object_store` options, for a store opened in
    /// this process (whose environment the tests leave alone).
    pub fn options(&self) -> Vec<(String, String)> {
        self.env()
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect()
    }
}
