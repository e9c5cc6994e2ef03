//! `agdx graph`: the causal graph around one record.

use clap::{Args, ValueEnum};

use agdx::replay::{Direction, GraphStart, NodeKey, ReplayError, causal_graph};
use agdx::wire::ConversationId;

use super::check::{skipped_failure, warn_skipped_in};
use super::context::{Failure, Global};
use super::view::{graph_dot, graph_mermaid, graph_text};

/// How to draw the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// An indented tree for the terminal.
    Text,
    /// Graphviz DOT (`| dot -Tsvg > graph.svg`).
    Dot,
    /// A Mermaid flowchart (paste into a ```mermaid block).
    Mermaid,
}

/// Draws the records linked to one record by `cause`: its ancestors
/// (--up), its descendants (--down), or both (the default). Threads, trees
/// and merges come out as they are on the log; the chunks of one stream are
/// drawn as one box. Records that cannot be read (damaged) are skipped and
/// named on stderr, and the exit status is 5.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// A record id (26 characters) or a position stream/topic/partition/offset.
    #[arg(value_name = "RECORD")]
    pub record: NodeKey,

    /// Only the ancestors (upstream).
    #[arg(long, conflicts_with = "down")]
    pub up: bool,

    /// Only the descendants (downstream).
    #[arg(long)]
    pub down: bool,

    /// The record's conversation: only its partitions are searched for the
    /// record id (otherwise every partition of the agent topics is).
    #[arg(long, value_name = "ID")]
    pub conversation: Option<ConversationId>,

    /// How to draw it.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
}

pub async fn run(global: &Global, args: GraphArgs) -> Result<(), Failure> {
    let (log, topology) = global.read_topology("agdx graph").await?;
    let direction = match (args.up, args.down) {
        (true, _) => Direction::Up,
        (_, true) => Direction::Down,
        _ => Direction::Both,
    };
    // What to look at when the start is not found.
    let where_to_look = match (&args.record, &args.conversation) {
        (NodeKey::Position(_), _) => "`agdx tail` prints the positions",
        (NodeKey::Record(_), Some(_)) => "`agdx timeline CONVERSATION` lists its records",
        (NodeKey::Record(_), None) => "that is --stream and --log",
    };
    let start = GraphStart {
        node: args.record,
        conversation: args.conversation,
    };
    let graph = causal_graph(&log, &topology, start, direction)
        .await
        .map_err(|error| match error {
            ReplayError::NotFound(_) => Failure::new(format!("{error}; {where_to_look}")),
            other => other.into(),
        })?;
    let drawn = match args.format {
        Format::Text => graph_text(&graph),
        Format::Dot => graph_dot(&graph),
        Format::Mermaid => graph_mermaid(&graph),
    };
    print!("{drawn}");
    for damage in graph.damaged() {
        warn_skipped_in(&topology, damage);
    }
    if !graph.damaged().is_empty() {
        return Err(skipped_failure(graph.damaged().len()));
    }
    Ok(())
}
