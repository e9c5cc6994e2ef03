//! An A2A agent card built from a live AGDX agent's card: each operation a
//! skill, the bridge's URL for the agent as its JSON-RPC interface.

use serde_json::{Value, json};

use crate::cards::{ANY_OPERATION, LiveAgent};

/// The A2A protocol version this bridge speaks.
pub const PROTOCOL_VERSION: &str = "1.0";

/// The older protocol version also served (its method names and shapes).
pub const LEGACY_VERSION: &str = "0.3";

/// The modes every skill takes and gives: text, JSON, bytes.
const MODES: [&str; 3] = ["text/plain", "application/json", "application/octet-stream"];

/// The URL of `agent`'s A2A endpoint under `base` (no trailing slash).
pub fn agent_url(base: &str, agent: &str) -> String {
    format!("{base}/agents/{agent}/")
}

/// The A2A card of `agent`, served from `base`.
pub fn a2a_card(agent: &LiveAgent, base: &str) -> Value {
    let name = agent.agent.as_str();
    let url = agent_url(base, name);
    let skills: Vec<Value> = agent
        .operations
        .iter()
        .map(|operation| {
            let (id, description) = if operation == ANY_OPERATION {
                (
                    ANY_OPERATION,
                    "any operation: name it as metadata.skill".to_owned(),
                )
            } else {
                (
                    operation.as_str(),
                    format!("the AGDX operation '{operation}' of agent '{name}'"),
                )
            };
            json!({
                "id": id,
                "name": id,
                "description": description,
                "tags": ["agdx"],
                "inputModes": MODES,
                "outputModes": MODES,
            })
        })
        .collect();
    let display = agent.card.name.clone().unwrap_or_else(|| name.to_owned());
    json!({
        "name": display,
        "description": format!(
            "AGDX agent '{name}' on the log ({} live member(s)), through `agdx bridge a2a`; a message names its skill as metadata.skill unless the agent has one",
            agent.members.len()
        ),
        "version": agent.card.version.clone().unwrap_or_else(|| "0".into()),
        "supportedInterfaces": [
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": PROTOCOL_VERSION},
            {"url": url, "protocolBinding": "JSONRPC", "protocolVersion": LEGACY_VERSION},
        ],
        // What a 0.3 client reads instead of the interfaces.
        "url": url,
        "preferredTransport": "JSONRPC",
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {"streaming": true, "pushNotifications": false, "extendedAgentCard": false},
        "defaultInputModes": MODES,
        "defaultOutputModes": MODES,
        "skills": skills,
    })
}

#[cfg(test)]
mod tests {
    use agdx_wire::{AgentCard, AgentId};

    use super::*;

    #[test]
    fn operations_become_skills_and_the_interface_is_the_bridge() {
        let agent = LiveAgent {
            agent: AgentId::new("echo").unwrap(),
            card: AgentCard::default(),
            operations: vec!["echo".into(), ANY_OPERATION.into()],
            members: vec!["m1".into()],
            last_seen_micros: 0,
            expires_micros: 1,
        };
        let card = a2a_card(&agent, "http://h:1");
        assert_eq!(card["name"], "echo");
        assert_eq!(card["skills"][0]["id"], "echo");
        assert_eq!(card["skills"][1]["id"], "*");
        assert_eq!(card["capabilities"]["streaming"], true);
        let interface = &card["supportedInterfaces"][0];
        assert_eq!(interface["url"], "http://h:1/agents/echo/");
        assert_eq!(interface["protocolBinding"], "JSONRPC");
        assert_eq!(interface["protocolVersion"], "1.0");
    }
}
