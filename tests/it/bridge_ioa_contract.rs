//! The REST surface of `agdx bridge ioa` against the IOA reference server's
//! contract, its `openapi.json` (Swagger 2.0), read from the default path
//! `../shared/ioa/openapi.json` relative to the repository root and never
//! copied into the project: every path and method it lists is
//! served, every query parameter and body field it lists is accepted, and
//! every answer has the documented status and shape: no field the contract
//! does not list, every field the reference always writes present, and
//! every listed field served at least once. Errors are `{"detail": ...}`.

use crate::support;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;

use agdx::log::SharedLog;
use agdx::log::embedded::EmbeddedLog;
use reqwest::{Method, StatusCode};
use serde_json::{Map, Value, json};
use support::ioa::{Bridge, Events};

/// Fields the reference leaves out when empty (`omitempty` in its
/// `protocols/models.go`); every other listed field is always written.
const OMITTED_WHEN_EMPTY: &[(&str, &str)] = &[
    ("protocols.Message", "space_id"),
    ("protocols.Message", "content_type"),
    ("protocols.Message", "meta"),
    ("protocols.Message", "content_schema"),
    ("protocols.Node", "description"),
    ("protocols.SpaceInfo", "tags"),
];

fn contract() -> Option<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/ioa/openapi.json");
    match std::fs::read_to_string(&path) {
        Ok(text) => Some(serde_json::from_str(&text).expect("openapi.json is JSON")),
        Err(error) => {
            use std::io::Write;
            let _ = writeln!(
                std::io::stderr(),
                "ioa contract: skipped: cannot read {} ({error}); the IOA reference server's contract (openapi.json) is read from that path and is not part of the project",
                path.display()
            );
            None
        }
    }
}

/// Checks answers against the contract's schemas, remembering which
/// definition fields were served.
struct Shapes {
    definitions: Map<String, Value>,
    served: BTreeSet<(String, String)>,
}

impl Shapes {
    fn check(&mut self, value: &Value, schema: &Value, at: &str) {
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let name = reference.trim_start_matches("#/definitions/").to_owned();
            let definition = self.definitions[&name].clone();
            return self.check_definition(value, &name, &definition, at);
        }
        self.check_definition(value, "", schema, at);
    }

    fn check_definition(&mut self, value: &Value, name: &str, schema: &Value, at: &str) {
        match schema.get("type").and_then(Value::as_str) {
            Some("object") => {
                let object = value
                    .as_object()
                    .unwrap_or_else(|| panic!("{at}: {value} is not an object"));
                if let Some(properties) = schema.get("properties").and_then(Value::as_object) {
                    for (key, field) in object {
                        let property = properties.get(key).unwrap_or_else(|| {
                            panic!("{at}: field '{key}' is not in {name} of the contract")
                        });
                        self.served.insert((name.to_owned(), key.clone()));
                        self.check(field, property, &format!("{at}.{key}"));
                    }
                    for key in properties.keys() {
                        let optional = OMITTED_WHEN_EMPTY.contains(&(name, key.as_str()));
                        assert!(
                            optional || object.contains_key(key),
                            "{at}: {name} without '{key}': {value}"
                        );
                    }
                } else if let Some(values) = schema
                    .get("additionalProperties")
                    .filter(|v| v.get("type").is_some())
                {
                    for (key, field) in object {
                        self.check(field, values, &format!("{at}.{key}"));
                    }
                }
            }
            Some("array") => {
                let items = value
                    .as_array()
                    .unwrap_or_else(|| panic!("{at}: {value} is not an array"));
                for (i, item) in items.iter().enumerate() {
                    self.check(item, &schema["items"], &format!("{at}[{i}]"));
                }
            }
            Some("string") => assert!(value.is_string(), "{at}: {value} is not a string"),
            Some("integer") => assert!(
                value.is_u64() || value.is_i64(),
                "{at}: {value} is not an integer"
            ),
            Some("boolean") => assert!(value.is_boolean(), "{at}: {value} is not a boolean"),
            _ => {}
        }
    }
}

/// One request against the contract.
struct Case {
    method: Method,
    /// The contract's path template.
    template: &'static str,
    /// The concrete path and query.
    path: String,
    body: Option<Value>,
    headers: &'static [(&'static str, &'static str)],
    status: StatusCode,
}

fn case(
    method: Method,
    template: &'static str,
    path: String,
    body: Option<Value>,
    status: StatusCode,
) -> Case {
    Case {
        method,
        template,
        path,
        body,
        headers: &[],
        status,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_and_field_of_the_reference_contract_is_served_with_its_shape() {
    let Some(contract) = contract() else { return };
    let dir = tempfile::tempdir().expect("a directory");
    let log: SharedLog = Arc::new(EmbeddedLog::open(&dir.path().join("log")).expect("the log"));
    let bridge = Bridge::start(log, "agents").await;
    let alice = bridge.register("alice").await;
    let bob = bridge.register("bob").await;
    let mut shapes = Shapes {
        definitions: contract["definitions"]
            .as_object()
            .expect("definitions")
            .clone(),
        served: BTreeSet::new(),
    };

    // A node with a description, a space with tags, messages with every field.
    let created = alice
        .call(
            Method::POST,
            "/spaces",
            Some(json!({"name": "contract", "description": "owner", "tags": ["a", "b"]})),
            &[("x-access-key", support::ioa::ACCESS_KEY)],
        )
        .await;
    assert_eq!(created.0, StatusCode::OK);
    let space = created.1["id"].as_str().expect("id").to_owned();
    bob.space("contract", "reviewer").await;
    let root = alice.say(&space, "root", &[]).await;
    let full = json!({
        "content_type": "note",
        "content": {"text": "full"},
        "refs": {"messages": [root], "nodes": ["bob"]},
        "meta": {"kind": "x"},
        "content_schema": {"type": "object"}
    });
    let message = alice.send(&space, full.clone()).await["id"]
        .as_str()
        .expect("id")
        .to_owned();
    // Something in alice's inbox, which only alice reads.
    bob.send(
        &space,
        json!({"content": {"text": "for alice"}, "refs": {"messages": [root], "nodes": ["alice"]}}),
    )
    .await;

    let mut cases = vec![
        case(
            Method::GET,
            "/health",
            "/health".into(),
            None,
            StatusCode::OK,
        ),
        case(Method::GET, "/ready", "/ready".into(), None, StatusCode::OK),
        case(Method::GET, "/nodes", "/nodes".into(), None, StatusCode::OK),
        case(
            Method::POST,
            "/nodes",
            "/nodes".into(),
            Some(json!({"name": "carol", "description": "a tester", "meta": {"team": "qa"}})),
            StatusCode::CREATED,
        ),
        case(
            Method::POST,
            "/nodes",
            "/nodes".into(),
            Some(json!({"name": ""})),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        case(
            Method::GET,
            "/nodes/{nodeID}",
            "/nodes/carol".into(),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/nodes/{nodeID}",
            "/nodes/nobody".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::GET,
            "/nodes/{nodeID}/inbox",
            "/nodes/alice/inbox".into(),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/nodes/{nodeID}/inbox",
            format!("/nodes/alice/inbox?after={root}&limit=5"),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/nodes/{nodeID}/inbox",
            "/nodes/nobody/inbox".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::GET,
            "/nodes/{nodeID}/inbox",
            "/nodes/alice/inbox?limit=0".into(),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        case(
            Method::GET,
            "/messages",
            "/messages".into(),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/messages",
            format!(
                "/messages?space_id={space}&message_id={message}&node_id=bob&sender=alice&ref_message={root}&ref_node=bob&after={root}&limit=3"
            ),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/messages",
            "/messages?node_id=nobody".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::GET,
            "/messages",
            "/messages?limit=-1".into(),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        case(
            Method::GET,
            "/spaces",
            "/spaces".into(),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/spaces/{spaceID}",
            format!("/spaces/{space}"),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/spaces/{spaceID}",
            "/spaces/01J0000000000000000000000X".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::GET,
            "/spaces/{spaceID}/messages",
            format!("/spaces/{space}/messages?all=true"),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/spaces/{spaceID}/messages",
            format!(
                "/spaces/{space}/messages?message_id={message}&direction=upstream&after={root}&limit=2&all=false&listen=false"
            ),
            None,
            StatusCode::OK,
        ),
        case(
            Method::GET,
            "/spaces/{spaceID}/messages",
            "/spaces/01J0000000000000000000000X/messages".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::GET,
            "/spaces/{spaceID}/messages",
            format!("/spaces/{space}/messages?limit=0"),
            None,
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        case(
            Method::POST,
            "/spaces/{spaceID}/messages",
            format!("/spaces/{space}/messages"),
            Some(full.clone()),
            StatusCode::CREATED,
        ),
        case(
            Method::POST,
            "/spaces/{spaceID}/messages",
            "/spaces/01J0000000000000000000000X/messages".into(),
            Some(json!({"content": {}})),
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::POST,
            "/spaces/{spaceID}/messages",
            format!("/spaces/{space}/messages"),
            Some(json!({"content": null})),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        case(
            Method::GET,
            "/spaces/{spaceID}/sse",
            "/spaces/01J0000000000000000000000X/sse".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::GET,
            "/spaces/{spaceID}/messages/{messageID}/sse",
            format!("/spaces/{space}/messages/01J0000000000000000000000X/sse"),
            None,
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::GET,
            "/nodes/{nodeID}/sse",
            "/nodes/nobody/sse".into(),
            None,
            StatusCode::NOT_FOUND,
        ),
        case(
            Method::POST,
            "/spaces",
            "/spaces".into(),
            Some(json!({"name": "contract", "description": "re-joined"})),
            StatusCode::OK,
        ),
        case(
            Method::POST,
            "/spaces",
            "/spaces".into(),
            Some(json!({"name": ""})),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ];
    for case in cases
        .iter_mut()
        .filter(|c| c.method == Method::POST && ["/spaces", "/nodes"].contains(&c.template))
    {
        case.headers = &[("x-access-key", support::ioa::ACCESS_KEY)];
    }

    let paths = contract["paths"].as_object().expect("paths");
    let mut exercised = BTreeSet::new();
    for case in &cases {
        let operation = &paths
            .get(case.template)
            .unwrap_or_else(|| panic!("{} is not in the contract", case.template))
            [case.method.as_str().to_lowercase()];
        assert!(
            operation.is_object(),
            "{} {} is not in the contract",
            case.method,
            case.template
        );
        let (status, answer) = alice
            .call(
                case.method.clone(),
                &case.path,
                case.body.clone(),
                case.headers,
            )
            .await;
        let what = format!("{} {}", case.method, case.path);
        assert_eq!(status, case.status, "{what}: {answer}");
        let response = &operation["responses"][status.as_u16().to_string()];
        assert!(
            response.is_object(),
            "{what}: the contract lists no {status} answer"
        );
        shapes.check(&answer, &response["schema"], &what);
        for parameter in operation["parameters"].as_array().into_iter().flatten() {
            let name = parameter["name"].as_str().unwrap_or("");
            if parameter["in"] == "query" {
                let used = cases.iter().any(|c| {
                    c.template == case.template
                        && c.method == case.method
                        && c.path.contains(&format!("{name}="))
                });
                assert!(
                    used,
                    "{} {}: query parameter {name} is exercised",
                    case.method, case.template
                );
            }
        }
        exercised.insert((
            case.method.as_str().to_lowercase(),
            case.template.to_owned(),
        ));
    }

    // The event streams: one message event each, shaped as a Message.
    let streams = [
        ("/spaces/{spaceID}/sse", format!("/spaces/{space}/sse")),
        (
            "/spaces/{spaceID}/messages/{messageID}/sse",
            format!("/spaces/{space}/messages/{root}/sse"),
        ),
        ("/nodes/{nodeID}/sse", "/nodes/bob/sse".to_owned()),
    ];
    for (template, path) in &streams {
        let mut events = Events::open(&bob, path, None).await;
        alice.send(&space, full.clone()).await;
        let (_, data) = events.next_message().await;
        let schema = json!({"$ref": "#/definitions/protocols.Message"});
        shapes.check(&data, &schema, path);
        let produces = &paths[*template]["get"]["produces"];
        assert_eq!(produces, &json!(["text/event-stream"]), "{template}");
        exercised.insert(("get".to_owned(), (*template).to_owned()));
    }

    let listed: BTreeSet<(String, String)> = paths
        .iter()
        .flat_map(|(path, methods)| {
            methods
                .as_object()
                .into_iter()
                .flatten()
                .map(move |(method, _)| (method.clone(), path.clone()))
        })
        .collect();
    assert_eq!(
        exercised, listed,
        "every path and method of the contract is served"
    );

    // Every field of every answer definition was served at least once.
    for name in [
        "protocols.Message",
        "protocols.Node",
        "protocols.Ref",
        "protocols.SpaceInfo",
        "protocols.ErrorResponse",
    ] {
        for key in shapes.definitions[name]["properties"]
            .as_object()
            .expect("properties")
            .keys()
        {
            assert!(
                shapes.served.contains(&(name.to_owned(), key.clone())),
                "{name}.{key} was never served"
            );
        }
    }
    // And every field of the request definitions was accepted.
    let sent = |name: &str, body: &Value| {
        for key in contract["definitions"][name]["properties"]
            .as_object()
            .expect("properties")
            .keys()
        {
            assert!(
                body.get(key).is_some(),
                "{name}.{key} is not sent by any case"
            );
        }
    };
    sent("protocols.SendMessage", &full);
    sent(
        "protocols.NodeCreate",
        &json!({"name": "carol", "description": "a tester", "meta": {"team": "qa"}}),
    );
    sent(
        "protocols.SpaceCreate",
        &json!({"name": "contract", "description": "owner", "tags": ["a", "b"]}),
    );
    bridge.stop().await;
}
