//! Command-line interface: argument definitions and dispatch to one module
//! per subcommand.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod wire;

/// AGDX: agents and services exchanging typed CBOR envelopes over a durable,
/// partitioned log. Without --log it uses the embedded log in ./.agdx.
#[derive(Debug, Parser)]
#[command(name = "agdx", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Which log to use: `embedded:PATH` (a local directory, the default) or
    /// `iggy://USER:PASSWORD@HOST:PORT` (an Apache Iggy server).
    #[arg(long, global = true, env = "AGDX_LOG", default_value = "embedded:.agdx")]
    pub log: String,

    /// The stream that holds the agent topics.
    #[arg(long, global = true, env = "AGDX_STREAM", default_value = "agents")]
    pub stream: String,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check, decode and encode AGDX wire payloads (envelopes and capsules).
    #[command(subcommand)]
    Wire(wire::WireCommand),
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> ExitCode {
    match cli.command {
        Command::Wire(cmd) => wire::run(cmd),
    }
}
