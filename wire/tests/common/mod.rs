//! Shared test code: where the peer corpus and our fixtures live.

#![allow(dead_code)]

use std::io::Write;
use std::path::PathBuf;

/// The reference corpus directory: `AGDX_PEER_FIXTURES`, else the default,
/// `../shared/peer-fixtures` relative to the repository root. `None` (after
/// printing one line saying where it looked) when absent.
pub fn peer_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("AGDX_PEER_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/peer-fixtures"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        // Straight to stderr: the harness would hide a println! of a passing test.
        let _ = writeln!(
            std::io::stderr(),
            "peer fixtures not found at {} (set AGDX_PEER_FIXTURES); skipping the peer checks",
            dir.display()
        );
        None
    }
}

/// Our own golden corpus, `<workspace>/fixtures`.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

pub fn read(dir: &std::path::Path, name: &str) -> Vec<u8> {
    std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("reading {name}: {e}"))
}
