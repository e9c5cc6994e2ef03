//! `agdx context`: a conversation's turns, assembled for a prompt.

use clap::Args;

use agdx::replay::{ContextPolicy, ConversationContext, Role, Turn};
use agdx::wire::{ConversationId, RecordId};

use super::context::{Failure, Global};

/// Prints a conversation's turns as a prompt would take them: commands and
/// events (user), responses and whole chunk streams (assistant), roles from
/// the `role` metadata key where a record sets one. The options compose:
/// --branch first, then --role, --last, and --budget (tokens counted as
/// bytes / 4) keeping the newest turns that fit. The reading starts from
/// the conversation's latest context snapshot (`--save` writes one) and
/// reads only what follows it.
#[derive(Debug, Args)]
pub struct ContextArgs {
    /// The conversation (26-character id, as `agdx send` prints it).
    pub conversation: ConversationId,

    /// Only the last N turns.
    #[arg(long, value_name = "N")]
    pub last: Option<usize>,

    /// Only the newest turns within this many tokens (bytes / 4).
    #[arg(long, value_name = "TOKENS")]
    pub budget: Option<usize>,

    /// Only turns of this role (user, assistant, tool, system); repeat for more.
    #[arg(long = "role", value_name = "ROLE", value_parser = parse_role)]
    pub roles: Vec<Role>,

    /// Only this record and its ancestors by cause (and the streams answering them).
    #[arg(long, value_name = "RECORD")]
    pub branch: Option<RecordId>,

    /// One JSON object per turn instead of text.
    #[arg(long)]
    pub json: bool,

    /// Then save a context snapshot, so the next reading starts after it
    /// (it keeps the newest 1,000 turns, within 512 KiB of bodies).
    #[arg(long)]
    pub save: bool,

    /// Read the conversation from its first record, not from its latest
    /// context snapshot.
    #[arg(long)]
    pub from_start: bool,
}

fn parse_role(text: &str) -> Result<Role, String> {
    Role::from_name(text).ok_or_else(|| {
        format!("{text:?} is no role; the roles are user, assistant, tool and system")
    })
}

pub async fn run(global: &Global, args: ContextArgs) -> Result<(), Failure> {
    let (log, topology) = global.read_topology("agdx context").await?;
    let mut policy = ContextPolicy::default();
    if let Some(last) = args.last {
        policy = policy.last(last);
    }
    if let Some(budget) = args.budget {
        policy = policy.budget(budget);
    }
    if !args.roles.is_empty() {
        policy = policy.roles(args.roles.iter().copied());
    }
    if let Some(record) = args.branch {
        policy = policy.branch_of(record);
    }
    let mut context = if args.from_start {
        ConversationContext::from_start(log.clone(), &topology, args.conversation)
    } else {
        ConversationContext::resume(log.clone(), &topology, args.conversation).await?
    };
    context.catch_up().await?;
    let turns = context.turns(&policy);
    for turn in &turns {
        if args.json {
            println!("{}", serde_json::to_string(&json_of(turn))?);
        } else {
            println!("{}", text_of(turn));
        }
    }
    if args.save {
        match context.save().await? {
            Some(_) => eprintln!(
                "agdx: saved a context snapshot of conversation {}; the next reading starts after it",
                args.conversation
            ),
            None => eprintln!(
                "agdx: nothing of conversation {} was read, so no context snapshot was saved",
                args.conversation
            ),
        }
    }
    if turns.is_empty() {
        eprintln!(
            "agdx: conversation {} has no turns {}on {} (stream '{}')",
            args.conversation,
            if args.last.is_some()
                || args.budget.is_some()
                || !args.roles.is_empty()
                || args.branch.is_some()
            {
                "that the options keep "
            } else {
                ""
            },
            log.describe(),
            global.stream
        );
    }
    Ok(())
}

fn text_of(turn: &Turn) -> String {
    let body = String::from_utf8_lossy(&turn.body);
    let body = body.trim_end().replace('\n', "\n    ");
    format!("{} ({}): {body}", turn.role.as_str(), turn.source)
}

fn json_of(turn: &Turn) -> serde_json::Value {
    serde_json::json!({
        "role": turn.role.as_str(),
        "source": turn.source.as_str(),
        "kind": turn.kind.as_str(),
        "record": turn.record.map(|r| r.to_string()),
        "cause": turn.cause.map(|r| r.to_string()),
        "partition": turn.position.partition,
        "offset": turn.position.offset,
        "timestamp_micros": turn.timestamp_micros,
        "operation": turn.operation,
        "content_type": turn.content_type.name(),
        "tokens": turn.tokens,
        "body": String::from_utf8_lossy(&turn.body),
    })
}
