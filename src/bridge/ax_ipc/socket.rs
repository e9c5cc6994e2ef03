//! The Unix socket transport: frames in, answers and heartbeats out.
//!
//! Each connection is read as a stream of frames; every frame is a call of
//! its own, answered when its reply comes, so several calls can be in
//! flight on one connection and their answers come back in whatever order
//! the replies do, each carrying its request's `_msgId`. While a call
//! waits, a heartbeat `{"_heartbeat":true,"ts":MS,"_msgId":...}` goes out
//! every interval (15 s unless configured) so the client keeps waiting.
//! A frame that declares more than 10 MB closes the connection. When the
//! client stops sending, the calls in flight are still answered before the
//! connection closes.

use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::call::{AxIpcBridge, heartbeat};
use super::frame::{FrameDecoder, encode_frame};

/// How often a waiting call is told the bridge is still at it: the AX
/// host's 15 s.
pub const HEARTBEAT_EVERY: Duration = Duration::from_secs(15);

/// Why the socket could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// A live process already listens there.
    #[error(
        "{} is in use: another process accepts connections on it; stop that one or give this bridge another socket path",
        path.display()
    )]
    InUse {
        /// The socket path.
        path: PathBuf,
    },
    /// Something that is not a socket is in the way.
    #[error(
        "{} exists and is not a socket; it was left alone: remove it or choose another socket path",
        path.display()
    )]
    NotASocket {
        /// The path.
        path: PathBuf,
    },
    /// The socket could not be created.
    #[error("cannot create the socket {}: {source}", path.display())]
    Io {
        /// The socket path.
        path: PathBuf,
        /// The cause.
        source: io::Error,
    },
}

impl BindError {
    /// Whether trying again later may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            BindError::InUse { .. } => true,
            BindError::NotASocket { .. } => false,
            BindError::Io { .. } => true,
        }
    }
}

/// Creates a Unix socket at `path` that only its owner may connect to
/// (mode 0600). The socket is made in a private directory beside `path`,
/// restricted, then renamed into place, so it is never reachable with
/// looser permissions. A stale socket left by a process that died is
/// replaced; a live one, or anything that is not a socket, is left alone.
pub fn bind(path: &Path) -> Result<std::os::unix::net::UnixListener, BindError> {
    let io = |source| BindError::Io {
        path: path.to_owned(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if !meta.file_type().is_socket() => {
            return Err(BindError::NotASocket {
                path: path.to_owned(),
            });
        }
        Ok(_) => match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => {
                return Err(BindError::InUse {
                    path: path.to_owned(),
                });
            }
            Err(_) => std::fs::remove_file(path).map_err(io)?,
        },
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io(e)),
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let private = tempfile::Builder::new()
        .prefix(".agdx-sock-")
        .tempdir_in(parent)
        .map_err(io)?;
    let staging = private.path().join("s");
    let listener = std::os::unix::net::UnixListener::bind(&staging).map_err(io)?;
    std::fs::set_permissions(&staging, std::fs::Permissions::from_mode(0o600)).map_err(io)?;
    std::fs::rename(&staging, path).map_err(io)?;
    listener.set_nonblocking(true).map_err(io)?;
    Ok(listener)
}

/// Serves `bridge` on `listener` until `shutdown`; then removes the socket
/// file at `path` and drops the open connections.
pub async fn serve_socket(
    bridge: Arc<AxIpcBridge>,
    listener: std::os::unix::net::UnixListener,
    path: PathBuf,
    heartbeat_every: Duration,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let listener = UnixListener::from_std(listener)?;
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(connection(bridge.clone(), stream, heartbeat_every));
                }
                Err(error) => {
                    tracing::warn!(%error, "ax-ipc: accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    let _ = std::fs::remove_file(&path);
    Ok(())
}

async fn connection(bridge: Arc<AxIpcBridge>, stream: UnixStream, heartbeat_every: Duration) {
    let (mut reader, mut writer) = stream.into_split();
    let (out, mut outgoing) = mpsc::unbounded_channel::<Vec<u8>>();
    // Set when the client is gone: a frame (an answer, a heartbeat) could
    // not be written to it.
    let gone = tokio_util::sync::CancellationToken::new();
    let writing = tokio::spawn({
        let gone = gone.clone();
        async move {
            while let Some(frame) = outgoing.recv().await {
                if writer.write_all(&frame).await.is_err() {
                    gone.cancel();
                    break;
                }
            }
        }
    });
    let mut decoder = FrameDecoder::default();
    let mut calls = JoinSet::new();
    let mut buffer = vec![0u8; 64 * 1024];
    'reading: loop {
        let read = tokio::select! {
            read = reader.read(&mut buffer) => read,
            Some(_) = calls.join_next(), if !calls.is_empty() => continue,
        };
        let n = match read {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) => {
                tracing::debug!(%error, "ax-ipc: reading a connection failed");
                break;
            }
        };
        decoder.push(&buffer[..n]);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => {
                    calls.spawn(call(bridge.clone(), frame, out.clone(), heartbeat_every));
                }
                Ok(None) => break,
                Err(too_large) => {
                    tracing::warn!(error = %too_large, "ax-ipc: closing a connection");
                    calls.abort_all();
                    break 'reading;
                }
            }
        }
    }
    // The client sent all it will: answer what is in flight, then close;
    // unless it is gone (it closed the connection, not just its sending
    // side), when the calls in flight are dropped, which cancels their
    // commands.
    loop {
        tokio::select! {
            next = calls.join_next() => if next.is_none() { break },
            () = gone.cancelled() => {
                tracing::debug!(calls = calls.len(), "ax-ipc: the client went away; cancelling its calls");
                calls.shutdown().await;
                break;
            }
        }
    }
    drop(out);
    let _ = writing.await;
}

async fn call(
    bridge: Arc<AxIpcBridge>,
    frame: Bytes,
    out: mpsc::UnboundedSender<Vec<u8>>,
    heartbeat_every: Duration,
) {
    let answer = match bridge.gate().admit(&frame) {
        Err(refused) => {
            tracing::debug!(error = %refused.error, "ax-ipc call refused");
            refused.answer()
        }
        Ok(call) => {
            let msg_id = call.msg_id.clone();
            let answering = bridge.answer(call);
            tokio::pin!(answering);
            let start = tokio::time::Instant::now() + heartbeat_every;
            let mut beats = tokio::time::interval_at(start, heartbeat_every);
            // After a stall, one heartbeat, not a burst of the missed ones.
            beats.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    answer = &mut answering => break answer,
                    _ = beats.tick() => {
                        let beat = heartbeat(msg_id.as_ref(), bridge.clock().now_micros());
                        let _ = out.send(frame_of(beat));
                    }
                }
            }
        }
    };
    let _ = out.send(frame_of(answer));
}

fn frame_of(answer: Map<String, Value>) -> Vec<u8> {
    encode_frame(&serde_json::to_vec(&Value::Object(answer)).expect("a JSON map serializes"))
}
