//! One call through the bridge: admitted (parsed, checked and routed, with
//! no I/O) by the [`Gate`], then sent as a command and answered by the
//! [`AxIpcBridge`]. The module docs of `bridge::ax_ipc` describe the
//! mapping.

use std::time::Duration;

use agdx_wire::{AgentId, ContentType, ConversationId, META_BRIDGE_HOPS, Metadata, Scalar};
use serde_json::{Map, Value};

use super::llm_proxy::LlmProxy;
use super::route::Routes;
use super::schema::ActionSchemas;
use super::taint::{TaintBlocked, TaintBudget};
use crate::ask::{Answer, AskError, Requester};
use crate::bridge::{BridgeLoop, clip};
use crate::clock::{SharedClock, system_clock};
use crate::producer::CommandRequest;

/// How long a call waits for its reply unless told otherwise: the AX
/// host's handler timeout, 15 minutes.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(15 * 60);

/// The envelope field that carries the bridges a call already passed.
pub const BRIDGE_HOPS_FIELD: &str = "_bridgeHops";

/// Context fields the AX client adds to a request, taken out before the
/// schema check, with the metadata key each one goes to (`_sessionId`
/// picks the conversation instead).
const CONTEXT_FIELDS: &[(&str, Option<&str>)] = &[
    ("_sessionId", None),
    ("_requestId", Some("ax.request_id")),
    ("_userId", Some("ax.user_id")),
    ("_sessionScope", Some("ax.session_scope")),
];

/// Why a call was refused or got no reply; its text is the AX answer's
/// `error`.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The request is not JSON.
    #[error(
        "Invalid JSON: {0}; send one UTF-8 JSON object per frame, e.g. {{\"action\":\"memory_list\",\"scope\":\"notes\"}}"
    )]
    InvalidJson(serde_json::Error),
    /// No `action`, or one without a schema.
    #[error("Unknown or missing action: {found}; known actions: {known}")]
    UnknownAction {
        /// What was there instead.
        found: String,
        /// The actions with a schema.
        known: String,
    },
    /// The request does not conform to its action's schema.
    #[error("Validation failed for action \"{action}\": {}", .issues.join("; "))]
    Invalid {
        /// The action.
        action: String,
        /// The first problems, `path: message`.
        issues: Vec<String>,
    },
    /// The session's tainted share is over the budget for this action.
    #[error(transparent)]
    TaintBlocked(#[from] TaintBlocked),
    /// The call already passed through this bridge.
    #[error(transparent)]
    Loop(#[from] BridgeLoop),
    /// No route names the action.
    #[error(
        "No handler for action \"{action}\": no route of this bridge matches it (routes: {routes})"
    )]
    NoRoute {
        /// The action.
        action: String,
        /// The routes there are.
        routes: String,
    },
    /// Sending or waiting failed, or the agent answered with an error.
    #[error("action \"{action}\" on agent '{agent}': {source}")]
    Ask {
        /// The action.
        action: String,
        /// The agent it was routed to.
        agent: AgentId,
        /// What went wrong.
        source: Box<AskError>,
    },
    /// The agent's reply is not a JSON object.
    #[error(
        "agent '{agent}' answered action \"{action}\" with {what}; an ax-ipc reply must be a JSON object of reply fields, e.g. {{\"results\":[]}}"
    )]
    NotAnObject {
        /// The action.
        action: String,
        /// The agent.
        agent: AgentId,
        /// What it answered instead.
        what: String,
    },
}

impl CallError {
    /// Whether the same call may succeed if made again.
    pub fn is_retryable(&self) -> bool {
        match self {
            CallError::InvalidJson(_) => false,
            CallError::UnknownAction { .. } => false,
            CallError::Invalid { .. } => false,
            CallError::TaintBlocked(_) => false,
            CallError::Loop(_) => false,
            CallError::NoRoute { .. } => false,
            CallError::Ask { source, .. } => source.is_retryable(),
            CallError::NotAnObject { .. } => false,
        }
    }
}

/// A call the gate refused, and the `_msgId` its answer echoes.
#[derive(Debug)]
pub struct Refused {
    /// The request's `_msgId`, when it had one.
    pub msg_id: Option<Value>,
    /// Why.
    pub error: CallError,
}

impl Refused {
    /// The AX answer: `{"ok":false,"error":...,"_msgId":...}`.
    pub fn answer(&self) -> Map<String, Value> {
        failure(&self.error, self.msg_id.as_ref())
    }
}

/// An admitted call: checked, routed, ready to send.
#[derive(Debug, Clone)]
pub struct Call {
    /// The request's `_msgId`, echoed on every answer.
    pub msg_id: Option<Value>,
    /// The action (the command's operation).
    pub action: String,
    /// The agent it is routed to.
    pub agent: AgentId,
    /// The validated request, context fields taken out (the command's body).
    pub request: Map<String, Value>,
    /// The conversation `_sessionId` maps to; `None` for a new one.
    pub conversation: Option<ConversationId>,
    /// The `_sessionId` its taint is accounted to (empty: the account of
    /// calls without one).
    pub session: String,
    /// `bridge_hops` and the context fields' metadata.
    pub metadata: Metadata,
}

/// Admits calls: parse, envelope, strict schema, taint budget, loop guard,
/// route. No I/O.
#[derive(Debug)]
pub struct Gate {
    schemas: ActionSchemas,
    routes: Routes,
    bridge_id: String,
    taint: Option<TaintBudget>,
}

impl Gate {
    /// A gate for the bridge `bridge_id` with these schemas and routes.
    pub fn new(bridge_id: impl Into<String>, schemas: ActionSchemas, routes: Routes) -> Self {
        Self {
            schemas,
            routes,
            bridge_id: bridge_id.into(),
            taint: None,
        }
    }

    /// Refuses sensitive actions of sessions over `budget`, and counts each
    /// answered call's reply into it.
    pub fn with_taint(mut self, budget: TaintBudget) -> Self {
        self.taint = Some(budget);
        self
    }

    /// The bridge id stamped into `bridge_hops`.
    pub fn bridge_id(&self) -> &str {
        &self.bridge_id
    }

    /// The known actions.
    pub fn schemas(&self) -> &ActionSchemas {
        &self.schemas
    }

    /// The routes.
    pub fn routes(&self) -> &Routes {
        &self.routes
    }

    /// Runs the checks on one raw request, in the AX host's order.
    pub fn admit(&self, raw: &[u8]) -> Result<Call, Box<Refused>> {
        let parsed: Value = serde_json::from_slice(raw).map_err(|e| {
            Box::new(Refused {
                msg_id: None,
                error: CallError::InvalidJson(e),
            })
        })?;
        let msg_id = parsed.get("_msgId").cloned();
        let refuse = |error| {
            Box::new(Refused {
                msg_id: msg_id.clone(),
                error,
            })
        };
        let unknown = |found: String| CallError::UnknownAction {
            found,
            known: self.schemas.actions().collect::<Vec<_>>().join(", "),
        };
        let Value::Object(mut request) = parsed else {
            return Err(refuse(unknown(format!(
                "the request is {}, not a JSON object",
                kind_of(&parsed)
            ))));
        };
        let action = match request.get("action") {
            Some(Value::String(action)) if self.schemas.knows(action) => action.clone(),
            Some(Value::String(action)) => {
                return Err(refuse(unknown(format!(
                    "{:?} has no schema",
                    clip(action, 100)
                ))));
            }
            Some(other) => {
                return Err(refuse(unknown(format!(
                    "\"action\" is {}, not a string",
                    kind_of(other)
                ))));
            }
            None => return Err(refuse(unknown("the request has no \"action\"".into()))),
        };

        request.remove("_msgId");
        let mut metadata = Metadata::new();
        let mut conversation = None;
        let mut session = String::new();
        for (field, key) in CONTEXT_FIELDS {
            // Like the AX host: taken out whatever it is, used when it is text.
            let Some(Value::String(value)) = request.remove(*field) else {
                continue;
            };
            match key {
                Some(key) => {
                    metadata.insert(*key, value);
                }
                None if !value.is_empty() => {
                    conversation = Some(session_conversation(&value));
                    session = value;
                }
                None => {}
            }
        }
        let hops = request.remove(BRIDGE_HOPS_FIELD);

        let request = Value::Object(request);
        self.schemas.check(&action, &request).map_err(|issues| {
            refuse(CallError::Invalid {
                action: action.clone(),
                issues,
            })
        })?;
        let Value::Object(request) = request else {
            unreachable!("checked to be an object above")
        };
        // Step 3.5 of the AX host: after the schema, before the dispatch.
        if let Some(budget) = &self.taint {
            budget
                .check(&session, &action)
                .map_err(|blocked| refuse(blocked.into()))?;
        }

        let hops = hops_of(hops).ok_or_else(|| {
            refuse(CallError::Invalid {
                action: action.clone(),
                issues: vec![format!(
                    "{BRIDGE_HOPS_FIELD}: must be an array of bridge ids (strings)"
                )],
            })
        })?;
        if !hops.is_empty() {
            metadata.insert(META_BRIDGE_HOPS, hops);
        }
        BridgeLoop::check(&metadata, &self.bridge_id).map_err(|l| refuse(l.into()))?;
        metadata.push_bridge_hop(&self.bridge_id);

        let agent = self.routes.agent_for(&action).cloned().ok_or_else(|| {
            refuse(CallError::NoRoute {
                action: action.clone(),
                routes: if self.routes.is_empty() {
                    "none".into()
                } else {
                    self.routes.to_string()
                },
            })
        })?;
        Ok(Call {
            msg_id,
            action,
            agent,
            request,
            conversation,
            session,
            metadata,
        })
    }
}

/// The conversation of an AX session: the same `_sessionId` always gives
/// the same conversation (and so the same partition, in order).
pub fn session_conversation(session: &str) -> ConversationId {
    let mut key = b"ax-ipc session\0".to_vec();
    key.extend_from_slice(session.as_bytes());
    ConversationId::from_u128(xxhash_rust::xxh3::xxh3_128(&key))
}

/// The bridge: admits calls and answers them through agents on the log.
pub struct AxIpcBridge {
    gate: Gate,
    requester: Requester,
    timeout: Duration,
    clock: SharedClock,
    llm_proxy: Option<LlmProxy>,
}

impl AxIpcBridge {
    /// A bridge asking through `requester` (its producer's source is who the
    /// commands come from) and admitting with `gate`.
    pub fn new(requester: Requester, gate: Gate) -> Self {
        Self {
            gate,
            requester,
            timeout: DEFAULT_TIMEOUT,
            clock: system_clock(),
            llm_proxy: None,
        }
    }

    /// Waits up to `timeout` for each reply (also each command's deadline).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Uses `clock` for deadlines and heartbeat timestamps.
    pub fn with_clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Serves the LLM proxy (`POST /internal/llm-proxy/*`) on the HTTP
    /// transport through `proxy`.
    pub fn with_llm_proxy(mut self, proxy: LlmProxy) -> Self {
        self.llm_proxy = Some(proxy);
        self
    }

    /// The LLM proxy, when there is one.
    pub fn llm_proxy(&self) -> Option<&LlmProxy> {
        self.llm_proxy.as_ref()
    }

    /// The gate.
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// The clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Admits and answers one raw request.
    pub async fn handle(&self, raw: &[u8]) -> Map<String, Value> {
        match self.gate.admit(raw) {
            Ok(call) => self.answer(call).await,
            Err(refused) => {
                tracing::debug!(error = %refused.error, "ax-ipc call refused");
                refused.answer()
            }
        }
    }

    /// Sends an admitted call and maps its reply to the AX answer.
    pub async fn answer(&self, call: Call) -> Map<String, Value> {
        let msg_id = call.msg_id.clone();
        let (session, action) = (call.session.clone(), call.action.clone());
        match self.ask(call).await {
            Ok(fields) => {
                if let Some(budget) = &self.gate.taint {
                    budget.record_reply(&session, &action, &fields);
                }
                success(fields, msg_id.as_ref())
            }
            Err(error) => {
                tracing::debug!(%error, "ax-ipc call failed");
                failure(&error, msg_id.as_ref())
            }
        }
    }

    async fn ask(&self, call: Call) -> Result<Map<String, Value>, CallError> {
        let Call {
            action,
            agent,
            request,
            conversation,
            metadata,
            ..
        } = call;
        let body = serde_json::to_vec(&request).expect("a JSON map serializes");
        let deadline = self
            .clock
            .now_micros()
            .saturating_add(u64::try_from(self.timeout.as_micros()).unwrap_or(u64::MAX));
        let mut command = CommandRequest::new(action.clone(), body)
            .to(agent.clone())
            .content_type(ContentType::Json)
            .deadline_micros(deadline)
            .metadata(metadata);
        if let Some(conversation) = conversation {
            command = command.conversation(conversation);
        }
        let failed = |source| CallError::Ask {
            action: action.clone(),
            agent: agent.clone(),
            source: Box::new(source),
        };
        let body = match self.requester.ask(command, self.timeout).await {
            Ok(Answer::Response(reply)) => reply.body.to_vec(),
            Ok(Answer::Streamed { body, .. }) => body,
            Err(error) => return Err(failed(error)),
        };
        match serde_json::from_slice::<Value>(&body) {
            Ok(Value::Object(fields)) => Ok(fields),
            Ok(other) => Err(CallError::NotAnObject {
                action,
                agent,
                what: kind_of(&other).into(),
            }),
            Err(_) => Err(CallError::NotAnObject {
                action,
                agent,
                what: format!("{} bytes that are not JSON", body.len()),
            }),
        }
    }
}

/// `{"ok":true, ...fields}`: the reply's own `ok` stays as it is (a handler
/// answering `"ok":false` is not overruled); its `_msgId` and `_heartbeat`,
/// which belong to the framing, give way to the bridge's.
fn success(fields: Map<String, Value>, msg_id: Option<&Value>) -> Map<String, Value> {
    let mut answer = Map::new();
    answer.insert("ok".into(), Value::Bool(true));
    for (key, value) in fields {
        if key != "_msgId" && key != "_heartbeat" {
            answer.insert(key, value);
        }
    }
    with_msg_id(answer, msg_id)
}

fn failure(error: &CallError, msg_id: Option<&Value>) -> Map<String, Value> {
    let mut answer = Map::new();
    answer.insert("ok".into(), Value::Bool(false));
    if matches!(error, CallError::TaintBlocked(_)) {
        // The AX host's marker, so a client can tell this refusal apart.
        answer.insert("taintBlocked".into(), Value::Bool(true));
    }
    answer.insert("error".into(), Value::String(error.to_string()));
    with_msg_id(answer, msg_id)
}

fn with_msg_id(mut answer: Map<String, Value>, msg_id: Option<&Value>) -> Map<String, Value> {
    if let Some(id) = msg_id {
        answer.insert("_msgId".into(), id.clone());
    }
    answer
}

/// The heartbeat sent while a call waits: `{"_heartbeat":true,"ts":MS,"_msgId":...}`.
pub fn heartbeat(msg_id: Option<&Value>, now_micros: u64) -> Map<String, Value> {
    let mut beat = Map::new();
    beat.insert("_heartbeat".into(), Value::Bool(true));
    beat.insert("ts".into(), Value::from(now_micros / 1000));
    with_msg_id(beat, msg_id)
}

fn hops_of(value: Option<Value>) -> Option<Vec<Scalar>> {
    match value {
        None => Some(Vec::new()),
        Some(Value::Array(items)) => items
            .into_iter()
            .map(|item| match item {
                Value::String(hop) => Some(Scalar::from(hop)),
                _ => None,
            })
            .collect(),
        Some(_) => None,
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bridge::ax_ipc::route::Route;
    use agdx_wire::Scalar;

    fn metadata_text<'a>(metadata: &'a Metadata, key: &str) -> Option<&'a str> {
        metadata.get(key).and_then(Scalar::as_str)
    }

    fn gate() -> Gate {
        let routes = Routes::new(vec!["memory_*=memory".parse::<Route>().unwrap()]);
        Gate::new("ax-ipc", ActionSchemas::defaults().unwrap(), routes)
    }

    fn refusal(raw: &str) -> (Option<Value>, String) {
        let refused = gate().admit(raw.as_bytes()).unwrap_err();
        (refused.msg_id, refused.error.to_string())
    }

    #[test]
    fn checks_run_in_the_ax_hosts_order() {
        let (id, error) = refusal("not json");
        assert_eq!(id, None);
        assert!(error.starts_with("Invalid JSON"), "{error}");
        let (id, error) = refusal(r#"{"action":"evil","_msgId":"7"}"#);
        assert_eq!(id, Some(Value::from("7")));
        assert!(error.starts_with("Unknown or missing action"), "{error}");
        assert!(
            error.contains("memory_write"),
            "names the known actions: {error}"
        );
        let (_, error) = refusal(r#"[1]"#);
        assert!(error.starts_with("Unknown or missing action"), "{error}");
        let (_, error) = refusal(r#"{"action":"memory_list","scope":"a","evil":1}"#);
        assert!(
            error.starts_with("Validation failed for action \"memory_list\""),
            "{error}"
        );
        let (_, error) = refusal(r#"{"action":"web_search","query":"rust"}"#);
        assert!(
            error.starts_with("No handler for action \"web_search\""),
            "{error}"
        );
        assert!(error.contains("memory_*=memory"), "{error}");
    }

    #[test]
    fn context_fields_are_taken_out_before_the_strict_check_and_mapped() {
        let call = gate()
            .admit(br#"{"action":"memory_list","scope":"a","_msgId":3,"_sessionId":"s1","_userId":"alice","_requestId":"r9","_sessionScope":"dm"}"#)
            .unwrap();
        assert_eq!(call.msg_id, Some(Value::from(3)));
        assert_eq!(call.agent.as_str(), "memory");
        assert_eq!(
            Value::Object(call.request.clone()).to_string(),
            r#"{"action":"memory_list","scope":"a"}"#
        );
        assert_eq!(call.conversation, Some(session_conversation("s1")));
        assert_ne!(session_conversation("s1"), session_conversation("s2"));
        assert_eq!(metadata_text(&call.metadata, "ax.user_id"), Some("alice"));
        assert_eq!(metadata_text(&call.metadata, "ax.request_id"), Some("r9"));
        assert_eq!(
            metadata_text(&call.metadata, "ax.session_scope"),
            Some("dm")
        );
        assert_eq!(call.metadata.bridge_hops().collect::<Vec<_>>(), ["ax-ipc"]);
    }

    #[test]
    fn hops_naming_this_bridge_are_a_loop() {
        let (_, error) =
            refusal(r#"{"action":"memory_list","scope":"a","_bridgeHops":["axon","ax-ipc"]}"#);
        assert!(error.starts_with("bridge loop"), "{error}");
        let (_, error) = refusal(r#"{"action":"memory_list","scope":"a","_bridgeHops":"ax-ipc"}"#);
        assert!(error.contains("_bridgeHops: must be an array"), "{error}");
        let call = gate()
            .admit(br#"{"action":"memory_list","scope":"a","_bridgeHops":["axon"]}"#)
            .unwrap();
        assert_eq!(
            call.metadata.bridge_hops().collect::<Vec<_>>(),
            ["axon", "ax-ipc"]
        );
    }

    #[test]
    fn a_taint_refusal_answers_like_the_ax_host_for_its_session_only() {
        let budget = TaintBudget::new(0.0)
            .unwrap()
            .with_sensitive(["memory_list".to_owned()]);
        budget.record_reply("s1", "web_fetch", &Map::new());
        let gate = gate().with_taint(budget);
        let refused = gate
            .admit(br#"{"action":"memory_list","scope":"a","_sessionId":"s1","_msgId":"9"}"#)
            .unwrap_err();
        assert_eq!(
            Value::Object(refused.answer()).to_string(),
            r#"{"ok":false,"taintBlocked":true,"error":"Session taint ratio 100.0% exceeds threshold 0%. Action \"memory_list\" requires user confirmation.","_msgId":"9"}"#
        );
        let call = gate
            .admit(br#"{"action":"memory_list","scope":"a","_sessionId":"s2"}"#)
            .unwrap();
        assert_eq!(call.session, "s2");
    }

    #[test]
    fn a_handlers_ok_false_is_not_overruled_and_framing_fields_give_way() {
        let fields = serde_json::from_str::<Map<String, Value>>(
            r#"{"ok":false,"error":"quota","_msgId":"forged","_heartbeat":true}"#,
        )
        .unwrap();
        let answer = success(fields, Some(&Value::from("5")));
        assert_eq!(
            Value::Object(answer).to_string(),
            r#"{"ok":false,"error":"quota","_msgId":"5"}"#
        );
        let beat = heartbeat(Some(&Value::from("5")), 1_700_000_000_123_456);
        assert_eq!(
            Value::Object(beat).to_string(),
            r#"{"_heartbeat":true,"ts":1700000000123,"_msgId":"5"}"#
        );
    }
}
