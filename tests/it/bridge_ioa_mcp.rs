//! IOA's three tools over MCP's streamable HTTP transport at `/mcp`, used
//! by a real MCP client (rmcp) with a node's bearer token: join a space,
//! write a thread and a merge, read in every mode; refusals come back as
//! tool errors with IOA's detail, and `/mcp` without a token is refused.
//! With the access key instead, `X-Node-ID` names the agent, which its first
//! `ioa_space` or `ioa_send` registers.

use crate::support;

use reqwest::{Method, StatusCode};
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, CallToolResult};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Map, Value, json};
use support::ioa::{ACCESS_KEY, Bridge, Client, texts};
use support::on_every_backend;

type Mcp = RunningService<RoleClient, ()>;

fn connect(client: &Client) -> support::ioa::Boxed<Mcp> {
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", client.url))
        .auth_header(client.token.clone().unwrap_or_default());
    Box::pin(async move {
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("an MCP session")
    })
}

/// An MCP session with the access key, as the node `node` names.
fn connect_with_key(bridge: &Bridge, node: &'static str) -> support::ioa::Boxed<Mcp> {
    let headers = [("x-access-key", ACCESS_KEY), ("x-node-id", node)]
        .into_iter()
        .map(|(name, value)| {
            (
                reqwest::header::HeaderName::from_static(name),
                reqwest::header::HeaderValue::from_static(value),
            )
        })
        .collect();
    let config = StreamableHttpClientTransportConfig::with_uri(format!("{}/mcp", bridge.url))
        .custom_headers(headers);
    Box::pin(async move {
        ().serve(StreamableHttpClientTransport::from_config(config))
            .await
            .expect("an MCP session")
    })
}

/// Calls a tool; its text parsed as JSON, or the error text.
fn call(
    mcp: &Mcp,
    tool: &'static str,
    arguments: Value,
) -> support::ioa::Boxed<Result<Value, String>> {
    let arguments: Map<String, Value> = match arguments {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let peer = mcp.peer().clone();
    Box::pin(async move {
        let request = CallToolRequestParams::new(tool).with_arguments(arguments);
        let result: CallToolResult = peer.call_tool(request).await.expect("the tool answers");
        let content = serde_json::to_value(&result.content).expect("JSON");
        let text = content[0]["text"]
            .as_str()
            .expect("a text result")
            .to_owned();
        if result.is_error == Some(true) {
            Err(text)
        } else {
            Ok(serde_json::from_str(&text).expect("the result is JSON"))
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_mcp_agent_joins_writes_and_reads_with_the_three_tools() {
    on_every_backend("ioa-mcp", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let agent = bridge.register("llm-agent").await;
        let human = bridge.register("human").await;
        let mcp = connect(&agent).await;
        let mut tools: Vec<String> = mcp
            .list_all_tools()
            .await
            .expect("the tools")
            .into_iter()
            .map(|t| t.name.to_string())
            .collect();
        tools.sort();
        assert_eq!(tools, ["ioa_read", "ioa_send", "ioa_space"]);

        let space = human.space("triage", "on call").await["id"].as_str().expect("id").to_owned();
        let welcome = human.say(&space, "welcome", &[]).await;
        let joined = call(&mcp, "ioa_space", json!({"name": "triage", "description": "summarizer", "tags": ["ops"]}))
            .await
            .expect("joined");
        assert_eq!(joined["id"], space.as_str());
        assert_eq!(joined["tags"], json!(["ops"]));
        assert_eq!(texts(joined["start_messages"].as_array().expect("roots")), ["welcome"]);
        let members: Vec<&str> = joined["nodes"].as_array().expect("nodes").iter().filter_map(|n| n["id"].as_str()).collect();
        assert_eq!(members, ["human", "llm-agent"]);

        let reply = call(&mcp, "ioa_send", json!({"space_id": space, "content": {"text": "on it", "z": 1, "a": 2}, "refs": {"messages": [welcome], "nodes": ["human"]}}))
            .await
            .expect("sent");
        assert_eq!(reply["sender"], "llm-agent");
        let reply = reply["id"].as_str().expect("id").to_owned();
        let other = human.say(&space, "other", &[&welcome]).await;
        let merged = call(&mcp, "ioa_send", json!({"space_id": space, "content": {"text": "summary"}, "refs": {"messages": [reply, other]}, "meta": {"kind": "summary"}}))
            .await
            .expect("sent");
        assert_eq!(merged["meta"], json!({"kind": "summary"}));
        let merged = merged["id"].as_str().expect("id").to_owned();

        // The REST API sees the same messages, content in the sender's key order.
        let read = human.read(&space, &format!("?message_id={reply}&direction=downstream")).await;
        assert_eq!(texts(&read), ["on it", "summary"]);
        let raw = serde_json::to_string(&read[0]["content"]).expect("JSON");
        assert_eq!(raw, r#"{"text":"on it","z":1,"a":2}"#);

        let read = |arguments: Value| {
            let call = call(&mcp, "ioa_read", arguments);
            async move { texts(call.await.expect("read").as_array().expect("an array")) }
        };
        assert_eq!(read(json!({"space_id": space, "message_id": merged, "direction": "upstream"})).await, ["welcome", "on it", "other", "summary"]);
        assert_eq!(read(json!({"space_id": space, "all": true, "limit": 2})).await, ["other", "summary"]);
        assert_eq!(read(json!({"space_id": space})).await, ["welcome"], "addressed to the agent: the broadcast");
        let for_human = human.read(&space, "").await;
        assert_eq!(texts(&for_human), ["on it"]);

        let refused = call(&mcp, "ioa_send", json!({"space_id": space, "content": {"x": 1}, "refs": {"messages": ["01J0000000000000000000000X"]}})).await;
        assert_eq!(refused, Err(format!("refs.messages: '01J0000000000000000000000X' not found in space '{space}'")));
        let refused = call(&mcp, "ioa_read", json!({"space_id": "01J0000000000000000000000X"})).await;
        assert_eq!(refused, Err("Space '01J0000000000000000000000X' not found".to_owned()));
        let refused = call(&mcp, "ioa_send", json!({"space_id": space, "content": "text"})).await;
        assert_eq!(refused, Err("content is required and must be a JSON object".to_owned()));
        mcp.cancel().await.expect("closed");

        let mut anonymous = bridge.anonymous();
        anonymous.token = None;
        let (status, refused) = anonymous
            .call(Method::POST, "/mcp", Some(json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})), &[])
            .await;
        assert_eq!((status, refused), (StatusCode::UNAUTHORIZED, json!({"detail": "authorization token required"})));
        bridge.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_named_with_the_access_key_is_registered_by_its_first_write() {
    on_every_backend("ioa-mcp-auto", |subject| async move {
        let bridge = Bridge::start(subject.log.clone(), &subject.stream).await;
        let human = bridge.register("human").await;
        let space = human.space("intake", "on call").await["id"].as_str().expect("id").to_owned();
        let node = |name: &str| human.call(Method::GET, &format!("/nodes/{name}"), None, &[]);

        let joiner = connect_with_key(&bridge, "mcp-joiner").await;
        let refused = call(&joiner, "ioa_read", json!({"space_id": space})).await;
        assert_eq!(refused, Err("caller node 'mcp-joiner' not found".to_owned()), "reading registers nobody");
        assert_eq!(node("mcp-joiner").await.0, StatusCode::NOT_FOUND);
        let joined = call(&joiner, "ioa_space", json!({"name": "intake", "description": "triager"})).await.expect("joined");
        let members: Vec<&str> = joined["nodes"].as_array().expect("nodes").iter().filter_map(|n| n["id"].as_str()).collect();
        assert_eq!(members, ["human", "mcp-joiner"]);
        assert_eq!(node("mcp-joiner").await, (StatusCode::OK, json!({"id": "mcp-joiner", "name": "mcp-joiner", "meta": {}})));
        assert_eq!(call(&joiner, "ioa_read", json!({"space_id": space})).await, Ok(json!([])));
        joiner.cancel().await.expect("closed");

        let sender = connect_with_key(&bridge, "mcp-sender").await;
        let sent = call(&sender, "ioa_send", json!({"space_id": space, "content": {"text": "first words"}, "refs": {"nodes": ["human"]}}))
            .await
            .expect("sent");
        assert_eq!(sent["sender"], "mcp-sender");
        assert_eq!(node("mcp-sender").await.0, StatusCode::OK);
        assert_eq!(texts(&human.read(&space, "").await), ["first words"]);
        sender.cancel().await.expect("closed");

        // A token on /mcp still acts only as its own node; a wrong key is refused.
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"});
        let (status, _) = human.call(Method::POST, "/mcp", Some(request.clone()), &[("x-node-id", "mcp-other")]).await;
        assert_eq!(status, StatusCode::FORBIDDEN);
        let (status, refused) = bridge
            .anonymous()
            .call(Method::POST, "/mcp", Some(request), &[("x-access-key", "guess"), ("x-node-id", "mcp-other")])
            .await;
        assert_eq!((status, refused), (StatusCode::FORBIDDEN, json!({"detail": "invalid access key"})));
        bridge.stop().await;
    })
    .await;
}
