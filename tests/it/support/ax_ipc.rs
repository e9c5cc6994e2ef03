//! An AX-style IPC client of the tests' own, written from the AX IPC
//! protocol and the AX client's documented behaviour (not from the bridge's
//! code): 4-byte big-endian length frames of UTF-8 JSON; every call gets a
//! `_msgId` (a counter, as text) and the session context fields; answers
//! are matched to calls by `_msgId`, so several calls can wait on one
//! connection; a heartbeat `{"_heartbeat":true,...}` for a call restarts
//! that call's timeout; a call fails "timed out (no heartbeat ...)" when
//! nothing arrives for it in time.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::mpsc;

/// What arrives for one call: heartbeats, then its answer.
type Inbox = mpsc::UnboundedSender<Map<String, Value>>;

/// One connection to an ax-ipc host.
pub struct IpcClient {
    writer: tokio::sync::Mutex<OwnedWriteHalf>,
    pending: Arc<Mutex<HashMap<String, Inbox>>>,
    next_id: AtomicU64,
    context: Map<String, Value>,
    reader: tokio::task::JoinHandle<()>,
}

/// An answer and the heartbeats that came before it.
#[derive(Debug)]
pub struct Answered {
    pub answer: Map<String, Value>,
    pub heartbeats: Vec<Map<String, Value>>,
}

impl Drop for IpcClient {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl IpcClient {
    /// Connects to the socket at `path`.
    pub async fn connect(path: &Path) -> IpcClient {
        let stream = UnixStream::connect(path)
            .await
            .expect("connect to the bridge");
        let (mut reader, writer) = stream.into_split();
        let pending: Arc<Mutex<HashMap<String, Inbox>>> = Arc::default();
        let routes = pending.clone();
        let reader = tokio::spawn(async move {
            loop {
                let Some(frame) = read_frame(&mut reader).await else {
                    // Connection gone: every waiting call hears of it.
                    routes.lock().unwrap().clear();
                    return;
                };
                let message: Map<String, Value> =
                    serde_json::from_slice(&frame).expect("the host answers JSON objects");
                let id = message
                    .get("_msgId")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                let inboxes = routes.lock().unwrap();
                if let Some(inbox) = id.and_then(|id| inboxes.get(&id)) {
                    let _ = inbox.send(message);
                }
            }
        });
        IpcClient {
            writer: tokio::sync::Mutex::new(writer),
            pending,
            next_id: AtomicU64::new(0),
            context: Map::new(),
            reader,
        }
    }

    /// Adds `_sessionId`, `_userId`, ... to every call, as `setContext` does.
    pub fn with_context(mut self, field: &str, value: &str) -> IpcClient {
        self.context.insert(field.into(), Value::from(value));
        self
    }

    /// Sends `request` and waits for its answer, the timeout restarting on
    /// each heartbeat for it. `Err` says why no answer came.
    pub async fn call(&self, request: Value, timeout: Duration) -> Result<Answered, String> {
        let id = (self.next_id.fetch_add(1, Ordering::Relaxed) + 1).to_string();
        let Value::Object(mut request) = request else {
            panic!("a call is a JSON object");
        };
        request.insert("_msgId".into(), Value::from(id.clone()));
        for (field, value) in &self.context {
            request.insert(field.clone(), value.clone());
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        self.pending.lock().unwrap().insert(id.clone(), tx);
        self.send_raw(&serde_json::to_vec(&request).unwrap()).await;
        let mut heartbeats = Vec::new();
        let outcome = loop {
            match tokio::time::timeout(timeout, rx.recv()).await {
                Err(_) => break Err(format!("IPC call timed out (no heartbeat for {timeout:?})")),
                Ok(None) => break Err("IPC connection lost".to_owned()),
                Ok(Some(message)) if message.get("_heartbeat") == Some(&json!(true)) => {
                    heartbeats.push(message);
                }
                Ok(Some(answer)) => break Ok(Answered { answer, heartbeats }),
            }
        };
        self.pending.lock().unwrap().remove(&id);
        outcome
    }

    /// Writes one frame with `payload` as is.
    pub async fn send_raw(&self, payload: &[u8]) {
        let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
        frame.extend_from_slice(payload);
        self.writer
            .lock()
            .await
            .write_all(&frame)
            .await
            .expect("write a frame");
    }
}

/// Reads one frame; `None` when the connection ends.
pub async fn read_frame(reader: &mut (impl AsyncReadExt + Unpin)) -> Option<Vec<u8>> {
    let mut prefix = [0u8; 4];
    reader.read_exact(&mut prefix).await.ok()?;
    let mut payload = vec![0u8; u32::from_be_bytes(prefix) as usize];
    reader.read_exact(&mut payload).await.ok()?;
    Some(payload)
}

/// Sends one raw frame on a fresh connection and reads the single answer.
pub async fn one_raw_call(path: &Path, payload: &[u8]) -> Value {
    let mut stream = UnixStream::connect(path)
        .await
        .expect("connect to the bridge");
    let mut frame = (payload.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(payload);
    stream.write_all(&frame).await.expect("write a frame");
    let answer = tokio::time::timeout(super::PATIENCE, read_frame(&mut stream))
        .await
        .expect("an answer in time")
        .expect("an answer before the connection closes");
    serde_json::from_slice(&answer).expect("a JSON answer")
}

/// How a test's bridge is set up.
pub struct BridgeSetup {
    pub id: &'static str,
    pub routes: Vec<&'static str>,
    pub heartbeat: Duration,
    pub timeout: Duration,
    /// Serve HTTP too, accepting these tokens.
    pub http: Option<agdx::bridge::ax_ipc::Tokens>,
}

impl Default for BridgeSetup {
    fn default() -> Self {
        BridgeSetup {
            id: "ax-ipc",
            routes: vec!["memory_*=memory"],
            heartbeat: Duration::from_secs(15),
            timeout: super::PATIENCE,
            http: None,
        }
    }
}

/// A bridge serving a fabric in this process: a socket, maybe HTTP.
pub struct RunningBridge {
    pub socket: std::path::PathBuf,
    /// `http://ADDR/internal/ipc`, when HTTP is served.
    pub url: Option<String>,
    shutdown: tokio_util::sync::CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<std::io::Result<()>>>,
}

impl RunningBridge {
    /// Starts a bridge asking as `ax-ipc` on `fabric`.
    pub async fn start(fabric: &super::fabric::Fabric, setup: BridgeSetup) -> RunningBridge {
        use agdx::bridge::ax_ipc::{ActionSchemas, AxIpcBridge, Gate, Routes, bind, router};
        let routes = Routes::new(setup.routes.iter().map(|r| r.parse().unwrap()).collect());
        let gate = Gate::new(setup.id, ActionSchemas::defaults().unwrap(), routes);
        let requester = fabric.requester("ax-ipc");
        let bridge =
            std::sync::Arc::new(AxIpcBridge::new(requester, gate).with_timeout(setup.timeout));
        let socket = fabric.dir.path().join(format!("{}.sock", setup.id));
        let listener = bind(&socket).expect("bind the bridge socket");
        let shutdown = tokio_util::sync::CancellationToken::new();
        let mut tasks = vec![tokio::spawn(agdx::bridge::ax_ipc::serve_socket(
            bridge.clone(),
            listener,
            socket.clone(),
            setup.heartbeat,
            shutdown.clone(),
        ))];
        let mut url = None;
        if let Some(tokens) = setup.http {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            url = Some(format!(
                "http://{}/internal/ipc",
                listener.local_addr().unwrap()
            ));
            tasks.push(tokio::spawn(agdx::bridge::ax_ipc::serve_http(
                listener,
                router(bridge, tokens),
                shutdown.clone(),
            )));
        }
        RunningBridge {
            socket,
            url,
            shutdown,
            tasks,
        }
    }

    /// Stops it; the socket file is gone after.
    pub async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            task.await.expect("a bridge task").expect("served cleanly");
        }
        assert!(!self.socket.exists(), "the socket file is removed on stop");
    }
}
