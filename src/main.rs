//! The `agdx` command line: wire tools, the log, workers and requests.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    cli::run(args)
}
