//! The tools: one per operation of a live agent, from its card, and how a
//! tool's arguments become the command's body.

use std::collections::BTreeMap;
use std::sync::Arc;

use agdx_wire::{AgentId, ContentRef, ContentType};
use rmcp::model::{JsonObject, Tool};
use serde_json::{Value, json};

use crate::cards::{ANY_OPERATION, LiveAgent};

/// The longest tool name MCP clients take (the spec's limit).
const MAX_TOOL_NAME: usize = 128;

/// The argument of a tool whose operation takes raw bytes.
pub const TEXT_ARGUMENT: &str = "text";

/// What an operation's command body is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// The arguments object, as JSON (content type `json`): the card names
    /// `json`, a schema id, any codec, or nothing.
    Json,
    /// The `text` argument's UTF-8 bytes (content type `raw`).
    Text,
}

/// One tool: the agent and operation it calls.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolTarget {
    /// The agent the command goes to.
    pub agent: AgentId,
    /// The command's operation.
    pub operation: String,
    /// How the arguments become the body.
    pub input: Input,
    /// The schema id the card names for the input, when it names one.
    pub schema_id: Option<String>,
    /// The tool's description.
    pub description: String,
}

impl ToolTarget {
    /// The tool as MCP lists it.
    pub fn tool(&self, name: &str) -> Tool {
        let mut schema = match self.input {
            Input::Json => json!({"type": "object"}),
            Input::Text => json!({
                "type": "object",
                "properties": {TEXT_ARGUMENT: {"type": "string", "description": "The command's body, as text"}},
                "required": [TEXT_ARGUMENT]
            }),
        };
        if let (Some(id), Value::Object(map)) = (&self.schema_id, &mut schema) {
            // The card names the schema but does not carry it: say which.
            map.insert("description".into(), format!("AGDX schema {id}").into());
        }
        let Value::Object(schema) = schema else {
            unreachable!("built as an object above")
        };
        Tool::new(name.to_owned(), self.description.clone(), Arc::new(schema))
    }
}

/// The tools of the live agents, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolSet {
    targets: BTreeMap<String, ToolTarget>,
}

impl ToolSet {
    /// One tool per operation of each live agent but `bridge` itself (it
    /// would call itself). An agent's fallback (`*`) is no tool, having no
    /// name, and neither is an operation whose card names an input codec a
    /// tool's JSON arguments cannot be (CBOR, MessagePack, ...).
    pub fn from_live(agents: &[LiveAgent], bridge: &AgentId) -> Self {
        let mut targets = BTreeMap::new();
        for live in agents.iter().filter(|live| &live.agent != bridge) {
            for operation in &live.operations {
                if operation == ANY_OPERATION {
                    continue;
                }
                let declared = live
                    .card
                    .capabilities
                    .iter()
                    .find(|c| &c.skill_id == operation)
                    .and_then(|c| c.input.clone());
                let (input, schema_id) = match declared {
                    None => (Input::Json, None),
                    Some(ContentRef::Schema(id)) => (Input::Json, Some(id)),
                    Some(ContentRef::ContentType(ContentType::Json | ContentType::Any)) => {
                        (Input::Json, None)
                    }
                    Some(ContentRef::ContentType(ContentType::Raw)) => (Input::Text, None),
                    Some(ContentRef::ContentType(_)) => continue,
                };
                let name = tool_name(&live.agent, operation);
                if targets.contains_key(&name) {
                    tracing::debug!(tool = %name, agent = %live.agent, operation, "two operations give the same tool name; the first is listed");
                    continue;
                }
                let description = describe(live, operation, input);
                targets.insert(
                    name,
                    ToolTarget {
                        agent: live.agent.clone(),
                        operation: operation.clone(),
                        input,
                        schema_id,
                        description,
                    },
                );
            }
        }
        Self { targets }
    }

    /// The tools, by name.
    pub fn tools(&self) -> Vec<Tool> {
        self.targets
            .iter()
            .map(|(name, target)| target.tool(name))
            .collect()
    }

    /// The tool named `name`.
    pub fn target(&self, name: &str) -> Option<&ToolTarget> {
        self.targets.get(name)
    }

    /// How many tools there are.
    pub fn len(&self) -> usize {
        self.targets.len()
    }

    /// Whether there is no tool.
    pub fn is_empty(&self) -> bool {
        self.targets.is_empty()
    }

    /// The tool names, for a refusal that lists them.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.targets.keys().map(String::as_str)
    }
}

/// The tool of `operation` on `agent`: `agent.operation`, each character
/// MCP does not allow in a name (`A-Z a-z 0-9 _ - .`) as `_`, at most 128
/// characters.
pub fn tool_name(agent: &AgentId, operation: &str) -> String {
    format!("{agent}.{operation}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .take(MAX_TOOL_NAME)
        .collect()
}

fn describe(live: &LiveAgent, operation: &str, input: Input) -> String {
    let name = live.card.name.as_deref().unwrap_or(live.agent.as_str());
    let version = live
        .card
        .version
        .as_deref()
        .map(|v| format!(" {v}"))
        .unwrap_or_default();
    let members = live.members.len();
    let takes = match input {
        Input::Json => "the arguments object is the command's JSON body",
        Input::Text => "the text argument is the command's body",
    };
    format!(
        "Operation '{operation}' of the AGDX agent '{name}'{version} ({members} live member{}); {takes}.",
        if members == 1 { "" } else { "s" }
    )
}

/// Why a tool's arguments make no command body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "argument \"{TEXT_ARGUMENT}\" is required and must be a string: the operation takes raw text"
)]
pub struct NoText;

/// The command body and its content type for `arguments`.
pub fn command_body(input: Input, arguments: JsonObject) -> Result<(Vec<u8>, ContentType), NoText> {
    match input {
        Input::Json => Ok((
            serde_json::to_vec(&arguments).unwrap_or_default(),
            ContentType::Json,
        )),
        Input::Text => match arguments.get(TEXT_ARGUMENT) {
            Some(Value::String(text)) => Ok((text.as_bytes().to_vec(), ContentType::Raw)),
            _ => Err(NoText),
        },
    }
}

#[cfg(test)]
mod tests {
    use agdx_wire::{AgentCard, CapabilityDescriptor};

    use super::*;

    fn live(agent: &str, capabilities: Vec<CapabilityDescriptor>) -> LiveAgent {
        let operations = capabilities.iter().map(|c| c.skill_id.clone()).collect();
        LiveAgent {
            agent: AgentId::new(agent).unwrap(),
            card: AgentCard {
                name: Some(agent.into()),
                version: Some("1.2".into()),
                capabilities,
                ttl_micros: None,
            },
            operations,
            members: vec!["m1".into()],
            last_seen_micros: 0,
            expires_micros: 1,
        }
    }

    #[test]
    fn each_named_operation_of_a_live_agent_is_a_tool_but_the_bridges_own() {
        let agents = [
            live(
                "calc",
                vec![
                    CapabilityDescriptor::new("add")
                        .with_input(ContentRef::Schema("calc/add-v1".into())),
                    CapabilityDescriptor::new("shout")
                        .with_input(ContentRef::ContentType(ContentType::Raw)),
                    CapabilityDescriptor::new("pack")
                        .with_input(ContentRef::ContentType(ContentType::Cbor)),
                    CapabilityDescriptor::new(ANY_OPERATION),
                ],
            ),
            live("mcp", vec![CapabilityDescriptor::new("loop")]),
        ];
        let set = ToolSet::from_live(&agents, &AgentId::new("mcp").unwrap());
        assert_eq!(set.names().collect::<Vec<_>>(), ["calc.add", "calc.shout"]);
        let tools = set.tools();
        let add = serde_json::to_value(&tools[0]).unwrap();
        assert_eq!(add["inputSchema"]["type"], "object");
        assert_eq!(add["inputSchema"]["description"], "AGDX schema calc/add-v1");
        assert!(
            add["description"]
                .as_str()
                .unwrap()
                .contains("'add' of the AGDX agent 'calc' 1.2 (1 live member)"),
            "{add}"
        );
        let shout = serde_json::to_value(&tools[1]).unwrap();
        assert_eq!(shout["inputSchema"]["required"], json!(["text"]));
        assert_eq!(set.target("calc.shout").unwrap().input, Input::Text);
    }

    #[test]
    fn names_keep_to_the_characters_mcp_allows() {
        let agent = AgentId::new("team/summ arizer").unwrap();
        assert_eq!(tool_name(&agent, "do:it"), "team_summ_arizer.do_it");
        let long = "x".repeat(300);
        assert_eq!(tool_name(&agent, &long).len(), MAX_TOOL_NAME);
    }

    #[test]
    fn arguments_become_a_json_body_or_the_text() {
        let args: JsonObject = serde_json::from_str(r#"{"a":1,"text":"hi"}"#).unwrap();
        let (body, ct) = command_body(Input::Json, args.clone()).unwrap();
        assert_eq!(
            (body.as_slice(), ct),
            (&br#"{"a":1,"text":"hi"}"#[..], ContentType::Json)
        );
        let (body, ct) = command_body(Input::Text, args).unwrap();
        assert_eq!((body.as_slice(), ct), (&b"hi"[..], ContentType::Raw));
        assert_eq!(command_body(Input::Text, JsonObject::new()), Err(NoText));
    }
}
