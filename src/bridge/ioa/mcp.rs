//! IOA's three tools (`ioa_space`, `ioa_send`, `ioa_read`) over MCP's
//! streamable HTTP transport at `/mcp`, so an LLM agent that speaks MCP can
//! take part in a space. Each call acts as the node of the bearer token the
//! HTTP request carries or, with the access key, as the node `X-Node-ID`
//! names, which `ioa_space` and `ioa_send` register when it is new (the
//! router's authentication runs first), and
//! answers what the REST API answers, as JSON text; a refusal is a tool
//! error carrying IOA's `detail`.
//!
//! The transport is stateless (no MCP session to keep): every request
//! stands alone, so a restarted bridge goes on serving the same clients.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    JsonObject, ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

use super::model::SpaceCreate;
use super::service::{Caller, ReadOptions};
use super::{IoaBridge, IoaError};

/// The tools, serving one bridge.
#[derive(Clone)]
pub(crate) struct IoaTools {
    bridge: IoaBridge,
}

/// The `/mcp` endpoint.
pub(crate) fn service(bridge: IoaBridge) -> StreamableHttpService<IoaTools, NeverSessionManager> {
    let config = StreamableHttpServerConfig::default()
        .with_legacy_session_mode(false)
        .with_json_response(true)
        .with_max_request_body_bytes(bridge.config().max_body_bytes)
        // The Host check guards unauthenticated local servers against DNS
        // rebinding; every request here carries a bearer token instead, and
        // the bridge may listen on any address.
        .disable_allowed_hosts()
        .with_cancellation_token(bridge.inner.closing.child_token());
    StreamableHttpService::new(
        move || {
            Ok(IoaTools {
                bridge: bridge.clone(),
            })
        },
        Arc::new(NeverSessionManager::default()),
        config,
    )
}

fn schema(value: Value) -> Arc<JsonObject> {
    match value {
        Value::Object(map) => Arc::new(map),
        _ => Arc::new(Map::new()),
    }
}

fn tools() -> Vec<Tool> {
    let strings = json!({"type": "array", "items": {"type": "string"}});
    vec![
        Tool::new(
            "ioa_space",
            "Create or join an IOA message space for collaboration with other nodes. Returns space info with id, name, nodes, message count and the space's root messages.",
            schema(json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "IOA space name"},
                    "description": {"type": "string", "description": "Your role or intent in this space"},
                    "tags": {"type": "array", "items": {"type": "string"}, "description": "Optional labels for ownership, workspace routing, or domain classification"}
                },
                "required": ["name", "description"]
            })),
        ),
        Tool::new(
            "ioa_send",
            "Send a structured IOA message to a space. Use refs.messages and refs.nodes to target context or recipients.",
            schema(json!({
                "type": "object",
                "properties": {
                    "space_id": {"type": "string", "description": "IOA space id"},
                    "content": {"type": "object", "description": "Structured message content"},
                    "refs": {
                        "type": "object",
                        "description": "Optional references: {\"messages\": [\"msg-id\"], \"nodes\": [\"node-id\"]}",
                        "properties": {"messages": strings, "nodes": strings}
                    },
                    "meta": {"type": "object", "description": "Optional metadata for the message (e.g. kind, labels, ttl). Not part of content."},
                    "content_schema": {"type": "object", "description": "Optional JSON Schema describing the content, stored with the message"}
                },
                "required": ["space_id", "content"]
            })),
        ),
        Tool::new(
            "ioa_read",
            "Read IOA messages from a space: a message's related context (upstream, downstream or both), all messages, or by default the messages addressed to you; after cursor and limit page through them.",
            schema(json!({
                "type": "object",
                "properties": {
                    "space_id": {"type": "string", "description": "IOA space id"},
                    "message_id": {"type": "string", "description": "Optional message id to read its ancestor and descendant context"},
                    "direction": {"type": "string", "enum": ["upstream", "downstream"], "description": "With message_id: only ancestors (upstream) or only descendants (downstream)"},
                    "after": {"type": "string", "description": "Optional message id cursor for pagination"},
                    "limit": {"type": "number", "description": "Maximum number of messages to return"},
                    "all": {"type": "boolean", "description": "Read all messages instead of only messages addressed to this node"}
                },
                "required": ["space_id"]
            })),
        ),
    ]
}

/// A string argument; `None` when absent or null.
fn text(args: &JsonObject, name: &str) -> Result<Option<String>, IoaError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(IoaError::InvalidInput(format!(
            "argument \"{name}\" must be a string"
        ))),
    }
}

fn required(args: &JsonObject, name: &str) -> Result<String, IoaError> {
    text(args, name)?
        .ok_or_else(|| IoaError::InvalidInput(format!("required argument \"{name}\" not found")))
}

impl IoaTools {
    async fn call(
        &self,
        name: &str,
        args: JsonObject,
        caller: &Caller,
    ) -> Result<String, IoaError> {
        let bridge = &self.bridge;
        let answer = match name {
            "ioa_space" => {
                let tags = match args.get("tags") {
                    None | Some(Value::Null) => Vec::new(),
                    Some(tags) => serde_json::from_value(tags.clone()).map_err(|_| {
                        IoaError::InvalidInput(
                            "argument \"tags\" must be an array of strings".into(),
                        )
                    })?,
                };
                let body = SpaceCreate {
                    name: required(&args, "name")?,
                    description: required(&args, "description")?,
                    tags,
                };
                serde_json::to_string_pretty(&bridge.join_with_roots(caller, body).await?)
            }
            "ioa_send" => {
                let space = required(&args, "space_id")?;
                if !args.get("content").is_some_and(Value::is_object) {
                    return Err(IoaError::InvalidInput(
                        "content is required and must be a JSON object".into(),
                    ));
                }
                // The message's JSON, in the caller's own key order.
                let message: Map<String, Value> = ["content", "refs", "meta", "content_schema"]
                    .into_iter()
                    .filter_map(|key| {
                        args.get(key)
                            .filter(|v| !v.is_null())
                            .map(|v| (key.to_owned(), v.clone()))
                    })
                    .collect();
                let body = serde_json::to_vec(&message).unwrap_or_default();
                serde_json::to_string_pretty(&bridge.send(&space, caller, body).await?)
            }
            "ioa_read" => {
                let limit = match args.get("limit") {
                    None | Some(Value::Null) => None,
                    Some(n) => match n.as_f64() {
                        Some(n) if n >= 1.0 => Some(n as usize),
                        Some(0.0) => None,
                        _ => {
                            return Err(IoaError::InvalidInput(
                                "limit must be greater than 0".into(),
                            ));
                        }
                    },
                };
                let options = ReadOptions {
                    message_id: text(&args, "message_id")?.unwrap_or_default(),
                    direction: text(&args, "direction")?.unwrap_or_default(),
                    after: text(&args, "after")?.unwrap_or_default(),
                    limit,
                    all: args.get("all").and_then(Value::as_bool).unwrap_or(false),
                };
                let space = required(&args, "space_id")?;
                serde_json::to_string_pretty(&bridge.read(
                    &space,
                    caller.node.as_deref(),
                    options,
                )?)
            }
            other => {
                return Err(IoaError::NotFound(format!(
                    "no tool '{other}'; the tools are ioa_space, ioa_send and ioa_read"
                )));
            }
        };
        Ok(answer.unwrap_or_default())
    }
}

impl ServerHandler for IoaTools {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("agdx-ioa", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "IOA spaces over an AGDX log: ioa_space to join a space, ioa_send to write a message (refs.messages for its context, refs.nodes for its recipients), ioa_read to read.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let caller = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Caller>())
            .cloned()
            .unwrap_or_default();
        let args = request.arguments.unwrap_or_default();
        let result = match self.call(&request.name, args, &caller).await {
            Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
            Err(error) => CallToolResult::error(vec![ContentBlock::text(error.to_string())]),
        };
        Ok(result.into())
    }
}
