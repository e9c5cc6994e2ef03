//! The MCP server: tools from the live agents, calls as commands, and the
//! tool list's changes told to the client.

use agdx_wire::{META_BRIDGE_HOPS, Metadata, Scalar};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, SubscriptionFilter,
    Tool,
};
use rmcp::service::{NotificationContext, RequestContext, SubscriptionContext};
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;

use super::McpBridge;
use super::call::{self, Progress};
use super::tools::command_body;
use crate::bridge::BridgeLoop;
use crate::producer::CommandRequest;
use crate::task_states::TASK_STATES_KEY;

/// The `_meta` key of a call that carries the bridges it already passed
/// (an array of bridge ids), as a program behind an agent passes on its
/// command's `bridge_hops` when it calls back into an MCP bridge.
pub const BRIDGE_HOPS_META: &str = "agdx/bridge_hops";

/// One client's server: every session (or stateless request) gets one.
#[derive(Clone)]
pub(super) struct McpServer {
    pub(super) bridge: McpBridge,
}

impl McpServer {
    /// The refusal of a call that cannot be sent, as a tool error.
    fn refused(text: String) -> CallToolResponse {
        CallToolResult::error(vec![ContentBlock::text(text)]).into()
    }
}

/// The hops a call's `_meta` names; `None` when they are not an array of
/// strings.
fn hops_of(meta: Option<&Value>) -> Option<Vec<Scalar>> {
    match meta {
        None | Some(Value::Null) => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| item.as_str().map(Scalar::from))
            .collect(),
        Some(_) => None,
    }
}

impl ServerHandler for McpServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("agdx-mcp", env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Each tool is an operation of an AGDX agent that is live on the log (agent.operation); the list changes as agents come and go. A call is a command to that agent and its reply is the result; streamed replies and task states arrive as progress.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.bridge.tools().tools()))
    }

    fn get_tool(&self, name: &str) -> Option<Tool> {
        self.bridge.tools().target(name).map(|t| t.tool(name))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tools = self.bridge.tools();
        let Some(target) = tools.target(&request.name).cloned() else {
            let known = tools.names().collect::<Vec<_>>();
            return Ok(Self::refused(format!(
                "no tool '{}': no live agent offers it (live tools: {})",
                request.name,
                if known.is_empty() {
                    "none".into()
                } else {
                    known.join(", ")
                }
            )));
        };
        drop(tools);
        let meta = request.meta.as_ref().map(|m| &m.0.0);
        let hops_meta = meta
            .and_then(|m| m.get(BRIDGE_HOPS_META))
            .or_else(|| context.meta.get(BRIDGE_HOPS_META));
        let Some(hops) = hops_of(hops_meta) else {
            return Ok(Self::refused(format!(
                "_meta \"{BRIDGE_HOPS_META}\" must be an array of bridge ids (strings)"
            )));
        };
        let mut metadata = Metadata::new();
        if !hops.is_empty() {
            metadata.insert(META_BRIDGE_HOPS, hops);
        }
        if let Err(refused) = BridgeLoop::check(&metadata, self.bridge.id()) {
            return Ok(Self::refused(refused.to_string()));
        }
        let (body, content_type) =
            match command_body(target.input, request.arguments.unwrap_or_default()) {
                Ok(body) => body,
                Err(error) => {
                    return Ok(Self::refused(format!("tool '{}': {error}", request.name)));
                }
            };
        let progress = request
            .meta
            .as_ref()
            .and_then(|m| m.get_progress_token())
            .or_else(|| context.meta.get_progress_token())
            .map(|token| Progress::new(token, context.peer.clone()));
        if progress.is_some() {
            // A client that follows progress sees the task states too.
            metadata.insert(TASK_STATES_KEY, true);
        }
        let config = self.bridge.config();
        let command = CommandRequest::new(target.operation.clone(), body)
            .to(target.agent.clone())
            .content_type(content_type)
            .deadline_micros(self.bridge.deadline_micros())
            .metadata(metadata);
        let outcome = call::run(
            self.bridge.requester(),
            command,
            config.timeout,
            progress,
            context.ct.clone(),
        )
        .await;
        Ok(call::result_of(&target, outcome).into())
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        // A session of the handshake era: its list changes go to its peer.
        let mut changes = self.bridge.subscribe();
        let closing = self.bridge.closing();
        let peer = context.peer;
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = closing.cancelled() => return,
                    changed = changes.changed() => if changed.is_err() { return },
                }
                if peer.notify_tool_list_changed().await.is_err() {
                    // The session is gone.
                    return;
                }
            }
        });
    }

    fn accepted_subscription_filter(
        &self,
        requested: &SubscriptionFilter,
    ) -> Option<SubscriptionFilter> {
        let mut accepted = SubscriptionFilter::new();
        accepted.tools_list_changed = requested.tools_list_changed;
        Some(accepted)
    }

    async fn listen(&self, context: SubscriptionContext) -> Result<(), ErrorData> {
        // The stateless era: a `subscriptions/listen` stream per listener.
        let mut changes = self.bridge.subscribe();
        let closing = self.bridge.closing();
        loop {
            tokio::select! {
                () = context.cancelled() => return Ok(()),
                () = closing.cancelled() => return Ok(()),
                changed = changes.changed() => if changed.is_err() { return Ok(()) },
            }
            if context.accepted().tools_list_changed == Some(true)
                && let Err(error) = context.sink().notify_tool_list_changed().await
            {
                tracing::debug!(%error, "a listener is gone");
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hops_are_an_array_of_strings_or_nothing() {
        assert_eq!(hops_of(None), Some(Vec::new()));
        assert_eq!(
            hops_of(Some(&json!(["a", "b"]))),
            Some(vec![Scalar::from("a"), Scalar::from("b")])
        );
        assert_eq!(hops_of(Some(&json!("a"))), None);
        assert_eq!(hops_of(Some(&json!([1]))), None);
    }
}
