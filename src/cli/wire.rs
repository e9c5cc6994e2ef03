//! `agdx wire`: check, decode and encode wire payloads.

use std::process::ExitCode;

use clap::Subcommand;

#[derive(Debug, Subcommand)]
pub enum WireCommand {}

pub fn run(cmd: WireCommand) -> ExitCode {
    match cmd {}
}
