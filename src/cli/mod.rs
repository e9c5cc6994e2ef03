//! Command-line interface: argument definitions and dispatch to one module
//! per subcommand.

use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};

mod advice;
mod agents;
mod ask;
mod bench;
mod bridge;
mod cancel;
mod check;
pub mod context;
mod demo;
mod dlq;
mod examples;
mod graph;
mod init;
mod keys;
mod publish;
mod quarantine;
mod send;
mod signing;
mod tail;
mod timeline;
mod turns;
mod view;
mod wire;
mod worker;

use context::{Global, block_on};

/// AGDX: agents and services exchanging typed CBOR envelopes over a durable,
/// partitioned log. Without --log it uses the embedded log in ./.agdx, so
/// nothing needs to be set up: run `agdx examples` to see commands to copy.
#[derive(Debug, Parser)]
#[command(name = "agdx", version, about, long_about = None, propagate_version = true)]
pub struct Cli {
    /// Which log to use: `embedded:PATH` (a local directory, the default),
    /// `iggy://USER:PASSWORD@HOST:PORT` (an Apache Iggy server) or
    /// `kafka://HOST:PORT[,HOST:PORT...]` (a Kafka-protocol cluster).
    #[arg(long, global = true, env = "AGDX_LOG", default_value = agdx::log::DEFAULT_LOG)]
    pub log: String,

    /// The stream that holds the agent topics.
    #[arg(long, global = true, env = "AGDX_STREAM", default_value = agdx::DEFAULT_STREAM)]
    pub stream: String,

    /// How commands reach their agent: `shared` (every command on
    /// agent.commands, read by every pool: what every AGDX implementation
    /// does) or `inbox` (a command to agent X on X's own topic
    /// agent.inbox.X, created on demand; a pool reads its inbox and
    /// agent.commands, so requesters of either kind reach it).
    #[arg(long, global = true, env = "AGDX_TOPOLOGY", value_enum, default_value_t = Routing::Shared)]
    pub topology: Routing,

    /// The key registry (JSON): which key belongs to whom and when it is
    /// valid. Needed to verify signatures and to honour quarantine.
    #[arg(long, global = true, env = "AGDX_KEYS", value_name = "FILE")]
    pub keys: Option<std::path::PathBuf>,

    /// Where claim-checked bodies (over 256 KiB) are kept: `log` (records
    /// on the log itself, which every host reads; the default on Iggy and
    /// Kafka), `dir:PATH` or a path (a local directory; the embedded log's
    /// default is PATH/blobs), or an object store URL: s3://bucket/prefix
    /// (settings from AWS_* variables such as AWS_ENDPOINT_URL),
    /// gs://bucket/prefix, az://container/prefix, file:///path.
    #[arg(long, global = true, env = "AGDX_BLOBS", value_name = "STORE")]
    pub blobs: Option<String>,

    #[command(subcommand)]
    pub command: Command,
}

/// The values of `--topology`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Routing {
    /// Every command on agent.commands.
    Shared,
    /// A command to agent X on X's inbox topic.
    Inbox,
}

impl From<Routing> for agdx::CommandRouting {
    fn from(routing: Routing) -> Self {
        match routing {
            Routing::Shared => agdx::CommandRouting::Shared,
            Routing::Inbox => agdx::CommandRouting::Inbox,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// See it all work in one command: a worker pool in this process on a throwaway log.
    Demo(demo::DemoArgs),
    /// Send a command to an agent and print its reply (exit 3 on an error reply or a quarantined agent, 4 on timeout).
    Ask(ask::AskArgs),
    /// Publish commands without waiting for replies.
    Send(send::SendArgs),
    /// Cancel a command that has no answer yet, or every such command of a conversation.
    Cancel(cancel::CancelArgs),
    /// Run a worker that answers an agent's commands.
    Worker(worker::WorkerArgs),
    /// Print records as JSON lines (all agent topics, or one; optionally one conversation; --follow to keep going).
    Tail(tail::TailArgs),
    /// The agents with a live worker (fresh agent cards): operations, members, last seen (or --json).
    Agents(agents::AgentsArgs),
    /// One conversation's records in log order, for people (or --json).
    Timeline(timeline::TimelineArgs),
    /// A conversation's turns for a prompt: last N, a token budget, roles, one record's branch (or --json).
    Context(turns::ContextArgs),
    /// The causal graph around a record: ancestors, descendants or both (text, dot, mermaid).
    Graph(graph::GraphArgs),
    /// Verify the log end to end and name what is damaged (exit 5 when something is).
    Check(check::CheckArgs),
    /// List, show and redrive dead letters.
    #[command(subcommand)]
    Dlq(dlq::DlqCommand),
    /// Create the stream and agent topics (idempotent) and show them.
    Init(init::InitArgs),
    /// Measure the log, round trips and worker throughput.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Bridge agents that speak another protocol to agents on the log.
    #[command(subcommand)]
    Bridge(bridge::BridgeCommand),
    /// Print annotated examples to copy, shell by shell.
    Examples,
    /// Check, decode, encode, sign and verify AGDX wire payloads (envelopes and capsules).
    ///
    /// The JSON form (printed by `decode`, read by `encode`): ids are their
    /// 26-character text, log positions stream/topic/partition/offset,
    /// dictionaries their names (a number for an unknown code). Bytes are
    /// written as each field's schema says, so `decode | encode` gives back
    /// the same bytes: a signature's `key_id` and `bytes` and a BodyRef's
    /// `sha256` are always lowercase hex; opaque content (an envelope's
    /// `body`, a dead letter's `payload`, a snapshot's `state`) is a string
    /// when it is UTF-8 text (tabs and line breaks allowed, no other control
    /// characters) and {"hex": "..."} otherwise. An error envelope's body
    /// and a dead letter's payload are shown decoded when they decode and
    /// re-encode to the same bytes.
    #[command(subcommand)]
    Wire(wire::WireCommand),
    /// Generate, list, revoke and show signing keys (the key registry).
    #[command(subcommand)]
    Keys(keys::KeysCommand),
    /// Quarantine an agent (an operator-signed control fact), or --list who is.
    Quarantine(quarantine::QuarantineArgs),
    /// Lift an agent's quarantine (an operator-signed control fact).
    Unquarantine(quarantine::UnquarantineArgs),
    /// Append pre-encoded envelopes verbatim (validated first) to a topic.
    Publish(publish::PublishArgs),
}

/// Parses the process's command line, runs it and returns the exit code.
pub fn parse_and_run() -> ExitCode {
    let matches = Cli::command().get_matches();
    let log_given = matches.value_source("log") == Some(ValueSource::CommandLine);
    match Cli::from_arg_matches(&matches) {
        Ok(cli) => run(cli, log_given),
        Err(error) => error.exit(),
    }
}

/// Runs the parsed command line and returns the process exit code;
/// `log_given` says whether --log was on the command line itself (not
/// `AGDX_LOG`, not the default).
pub fn run(cli: Cli, log_given: bool) -> ExitCode {
    let global = Global {
        log: cli.log,
        log_given,
        stream: cli.stream,
        routing: cli.topology.into(),
        keys: cli.keys,
        blobs: cli.blobs,
        connect_limit: agdx::log::DEFAULT_CONNECT_TIMEOUT,
    };
    match cli.command {
        Command::Demo(args) => block_on(demo::run(&global, args)),
        Command::Ask(args) => block_on(ask::run(&global, args)),
        Command::Send(args) => block_on(send::run(&global, args)),
        Command::Cancel(args) => block_on(cancel::run(&global, args)),
        Command::Worker(args) => block_on(worker::run(&global, args)),
        Command::Tail(args) => block_on(tail::run(&global, args)),
        Command::Agents(args) => block_on(agents::run(&global, args)),
        Command::Timeline(args) => block_on(timeline::run(&global, args)),
        Command::Graph(args) => block_on(graph::run(&global, args)),
        Command::Context(args) => block_on(turns::run(&global, args)),
        Command::Check(args) => block_on(check::run(&global, args)),
        Command::Dlq(command) => block_on(dlq::run(&global, command)),
        Command::Init(args) => block_on(init::run(&global, args)),
        Command::Bench(command) => block_on(bench::run(&global, command)),
        Command::Bridge(command) => block_on(bridge::run(&global, command)),
        Command::Examples => {
            examples::run();
            ExitCode::SUCCESS
        }
        Command::Wire(cmd) => wire::run(cmd, &global),
        Command::Keys(cmd) => context::finish(keys::run(cmd)),
        Command::Quarantine(args) => block_on(quarantine::run(&global, args)),
        Command::Unquarantine(args) => block_on(quarantine::lift(&global, args)),
        Command::Publish(args) => block_on(publish::run(&global, args)),
    }
}
