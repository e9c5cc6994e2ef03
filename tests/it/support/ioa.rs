//! An IOA bridge on a test log, and an HTTP client that talks to it the way
//! IOA clients do: JSON over real HTTP, bearer tokens, Server-Sent Events
//! read off the wire.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use agdx::bridge::ioa::{IoaBridge, IoaConfig};
use agdx::log::SharedLog;
use agdx::{Topology, TopologyConfig};
use futures_util::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The access key the test bridges use.
pub const ACCESS_KEY: &str = "test-access-key";

/// How often an idle test stream gets a keep-alive comment.
pub const KEEPALIVE: Duration = Duration::from_millis(300);

/// A bridge serving on a free loopback port.
pub struct Bridge {
    pub url: String,
    pub topology: Topology,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<std::io::Result<()>>>,
}

/// The agent topics in `stream`, created when missing. (Each topic is
/// ensured in turn: `TopologyConfig::ensure` goes through an async closure,
/// whose future the compiler cannot prove `Send` inside a spawned check.)
pub async fn topology(log: &SharedLog, stream: &str) -> Topology {
    let names = TopologyConfig::new(stream);
    let mut topics = Vec::new();
    for name in names.topic_names() {
        let topic = log
            .ensure_topic(stream, name, names.partitions)
            .await
            .expect("the agent topics");
        topics.push(topic);
    }
    let [commands, responses, registry, dlq, snapshots] =
        <[_; 5]>::try_from(topics).expect("five topics");
    Topology {
        commands,
        responses,
        registry,
        dlq,
        snapshots,
        inboxes: Default::default(),
    }
}

/// A boxed future: what the helpers below return, so that a test's async
/// block holds no future borrowing its arguments (which trips the
/// compiler's `Send` check of `on_every_backend`'s checks).
pub type Boxed<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl Bridge {
    /// Opens the topology in `stream` and starts a bridge over it.
    pub fn start(log: SharedLog, stream: &str) -> Boxed<Bridge> {
        Self::start_with(log, stream, IoaConfig::new(ACCESS_KEY).keepalive(KEEPALIVE))
    }

    pub fn start_with(log: SharedLog, stream: &str, config: IoaConfig) -> Boxed<Bridge> {
        let stream = stream.to_owned();
        Box::pin(async move {
            let topology = topology(&log, &stream).await;
            let bridge = IoaBridge::open(log, topology.clone(), config)
                .await
                .expect("the bridge opens");
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
            listener.set_nonblocking(true).expect("non-blocking");
            let listener = tokio::net::TcpListener::from_std(listener).expect("a listener");
            let url = format!("http://{}", listener.local_addr().expect("an address"));
            let (stop, stopped) = oneshot::channel();
            let task = tokio::spawn(bridge.serve(listener, async {
                let _ = stopped.await;
            }));
            Bridge {
                url,
                topology,
                stop: Some(stop),
                task: Some(task),
            }
        })
    }

    /// Shuts the bridge down and waits until it has stopped.
    pub async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            tokio::time::timeout(Duration::from_secs(20), task)
                .await
                .expect("the bridge stops within 20 s")
                .expect("the server task")
                .expect("the server ends cleanly");
        }
    }

    /// A client without credentials.
    pub fn anonymous(&self) -> Client {
        Client {
            http: reqwest::Client::new(),
            url: self.url.clone(),
            token: None,
            id: String::new(),
        }
    }

    /// Registers `name` with the access key and returns its client.
    pub fn register(&self, name: &str) -> Boxed<Client> {
        let anonymous = self.anonymous();
        let call = anonymous.call(
            Method::POST,
            "/auth/register",
            Some(json!({"name": name, "access_key": ACCESS_KEY, "meta": {"kind": "test"}})),
            &[],
        );
        let name = name.to_owned();
        Box::pin(async move {
            let (status, body) = call.await;
            assert_eq!(status, StatusCode::CREATED, "register {name}: {body}");
            Client {
                token: Some(body["token"].as_str().expect("a token").to_owned()),
                id: body["id"].as_str().expect("an id").to_owned(),
                ..anonymous
            }
        })
    }
}

/// An IOA client: one node's token.
#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub url: String,
    pub token: Option<String>,
    pub id: String,
}

impl Client {
    /// Any request; the status and the JSON body (`Null` when there is none).
    pub fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        headers: &[(&'static str, &'static str)],
    ) -> Boxed<(StatusCode, Value)> {
        let mut request = self.http.request(method, format!("{}{path}", self.url));
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        Box::pin(async move {
            let response = request.send().await.expect("the bridge answers");
            let status = response.status();
            let text = response.text().await.expect("a body");
            let value = if text.is_empty() {
                Value::Null
            } else {
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
            };
            (status, value)
        })
    }

    /// A request that must answer `want`; its body.
    pub fn expect(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        want: StatusCode,
    ) -> Boxed<Value> {
        let what = format!("{method} {path}");
        let call = self.call(method, path, body, &[]);
        Box::pin(async move {
            let (status, value) = call.await;
            assert_eq!(status, want, "{what}: {value}");
            value
        })
    }

    /// Creates or joins a space (with the access key, as IOA clients do).
    pub fn space(&self, name: &str, description: &str) -> Boxed<Value> {
        let call = self.call(
            Method::POST,
            "/spaces",
            Some(json!({"name": name, "description": description})),
            &[("x-access-key", ACCESS_KEY)],
        );
        let name = name.to_owned();
        Box::pin(async move {
            let (status, body) = call.await;
            assert_eq!(status, StatusCode::OK, "join {name}: {body}");
            body
        })
    }

    /// Sends a message; the created message.
    pub fn send(&self, space: &str, message: Value) -> Boxed<Value> {
        self.expect(
            Method::POST,
            &format!("/spaces/{space}/messages"),
            Some(message),
            StatusCode::CREATED,
        )
    }

    /// Sends `{"text": text}` referring to `parents`; the message id.
    pub fn say(&self, space: &str, text: &str, parents: &[&str]) -> Boxed<String> {
        let sent = self.send(
            space,
            json!({"content": {"text": text}, "refs": {"messages": parents}}),
        );
        Box::pin(async move { sent.await["id"].as_str().expect("an id").to_owned() })
    }

    /// Reads a space with a query string (`""` for none).
    pub fn read(&self, space: &str, query: &str) -> Boxed<Vec<Value>> {
        let read = self.expect(
            Method::GET,
            &format!("/spaces/{space}/messages{query}"),
            None,
            StatusCode::OK,
        );
        Box::pin(async move { read.await.as_array().expect("an array").clone() })
    }
}

/// The `text` of each message's content.
pub fn texts(messages: &[Value]) -> Vec<String> {
    messages
        .iter()
        .map(|m| m["content"]["text"].as_str().unwrap_or("?").to_owned())
        .collect()
}

/// One frame of an event stream.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// `event: message` with its `id:` and the parsed `data:`.
    Message { id: String, data: Value },
    /// A comment line (`: keepalive`).
    Comment(String),
}

/// An open event stream, read frame by frame off the wire.
pub struct Events {
    body: std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buffer: String,
}

impl Events {
    /// Opens `path` as an event stream; `last_event_id` resumes it.
    pub fn open(client: &Client, path: &str, last_event_id: Option<&str>) -> Boxed<Events> {
        let mut request = client
            .http
            .get(format!("{}{path}", client.url))
            .header("accept", "text/event-stream");
        if let Some(token) = &client.token {
            request = request.bearer_auth(token);
        }
        if let Some(id) = last_event_id {
            request = request.header("last-event-id", id);
        }
        let path = path.to_owned();
        Box::pin(async move {
            let response = request.send().await.expect("the stream opens");
            assert_eq!(response.status(), StatusCode::OK, "GET {path}");
            let kind = response.headers()["content-type"].to_str().unwrap_or("");
            assert!(kind.starts_with("text/event-stream"), "content type {kind}");
            Events {
                body: Box::pin(response.bytes_stream()),
                buffer: String::new(),
            }
        })
    }

    /// The next frame, or `None` when nothing comes within `wait` (or the
    /// stream ended).
    pub async fn next_within(&mut self, wait: Duration) -> Option<Frame> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            if let Some(end) = self.buffer.find("\n\n") {
                let raw: String = self.buffer.drain(..end + 2).collect();
                return Some(parse_frame(&raw));
            }
            let chunk = tokio::time::timeout_at(deadline, self.body.next())
                .await
                .ok()??;
            let chunk = chunk.expect("the stream reads");
            self.buffer
                .push_str(std::str::from_utf8(&chunk).expect("UTF-8"));
        }
    }

    /// The next message (skipping keep-alive comments), within 10 s.
    pub async fn next_message(&mut self) -> (String, Value) {
        loop {
            match self.next_within(Duration::from_secs(10)).await {
                Some(Frame::Message { id, data }) => return (id, data),
                Some(Frame::Comment(_)) => continue,
                None => panic!("no message came on the stream within 10 s"),
            }
        }
    }

    /// The ids of the next `n` messages.
    pub async fn ids(&mut self, n: usize) -> Vec<String> {
        let mut ids = Vec::new();
        for _ in 0..n {
            ids.push(self.next_message().await.0);
        }
        ids
    }

    /// Asserts that no message comes for `wait` (comments may).
    pub async fn expect_quiet(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        while let Some(left) = deadline.checked_duration_since(tokio::time::Instant::now()) {
            match self.next_within(left).await {
                Some(Frame::Message { data, .. }) => panic!("unexpected message {data}"),
                Some(Frame::Comment(_)) => continue,
                None => return,
            }
        }
    }
}

fn parse_frame(raw: &str) -> Frame {
    let mut event = None;
    let mut id = String::new();
    let mut data = Vec::new();
    for line in raw.lines() {
        if let Some(comment) = line.strip_prefix(':') {
            return Frame::Comment(comment.trim().to_owned());
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "id" => id = value.to_owned(),
            "data" => data.push(value.to_owned()),
            _ => {}
        }
    }
    assert_eq!(event.as_deref(), Some("message"), "frame {raw:?}");
    let data = serde_json::from_str(&data.join("\n")).expect("data is a JSON message");
    Frame::Message { id, data }
}
