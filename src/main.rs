//! The `agdx` command line: wire tools, the log, workers and requests.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("AGDX_LOG_LEVEL")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    cli::run(cli::Cli::parse())
}
