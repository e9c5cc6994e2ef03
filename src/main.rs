//! The `agdx` command line: wire tools, the log, workers and requests.

// Unsafe code only where a dependency leaves no other way, each block
// allowed where it is, with its SAFETY comment.
#![deny(unsafe_code)]

use std::process::ExitCode;

use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, reload};

mod cli;

// The fabric allocates and frees many small buffers per record (envelopes,
// headers, batches); glibc's allocator spent a third of a publishing
// process's time on them, mimalloc a fraction of that.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    cap_malloc_arenas();
    let directives = std::env::var("AGDX_LOG_LEVEL")
        .ok()
        .filter(|d| EnvFilter::try_new(d).is_ok())
        // The Iggy client logs each failed or cancelled request at error
        // level, also when it closes; every failure that matters reaches the
        // user as the command's own error, so by default its log is off
        // (`AGDX_LOG_LEVEL=iggy=debug` shows it).
        .unwrap_or_else(|| "warn,iggy=off".to_owned());
    let (filter, handle) = reload::Layer::new(EnvFilter::new(&directives));
    tracing_subscriber::registry()
        .with(filter)
        .with(tracing_subscriber::fmt::layer().with_writer(std::io::stderr))
        .init();
    // Once a command's work is done, the runtime cancels what the Iggy
    // client still has in flight (a background poll, a socket being shut),
    // and the client reports each cancelled task as an error: noise, not news.
    cli::context::on_finish(move || {
        let _ = handle.reload(EnvFilter::new(format!("{directives},iggy=off")));
    });
    cli::parse_and_run()
}

/// Caps glibc's malloc arenas at two, unless `MALLOC_ARENA_MAX` says
/// otherwise. SQLite allocates with the C library's `malloc`, not the Rust
/// allocator above, and glibc gives each thread that does an arena of its
/// own, keeping what SQLite frees there: the embedded log runs SQLite on
/// Tokio's blocking threads, which Tokio starts as load comes.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn cap_malloc_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_none() {
        // SAFETY: `mallopt` only sets a parameter of the allocator; this
        // runs first in `main`, before any other thread exists.
        #[allow(unsafe_code)]
        unsafe {
            libc::mallopt(libc::M_ARENA_MAX, 2);
        }
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn cap_malloc_arenas() {}
