//! Connection strings and TCP connections to an Iggy server.

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use iggy::prelude::{
    Client, ClientWrapper, IggyClient, IggyDuration, IggyError, SystemClient, TcpClient,
    TcpClientConfig,
};
use iggy_common::locking::{IggyRwLock, IggyRwLockFn};
use iggy_common::{
    ConnectionString, ConnectionStringUtils, TcpConnectionStringOptions, TransportProtocol,
};
use tokio::task::JoinHandle;

use super::durability::{Durability, split_durability};
use super::errors::{HINT, unreachable};
use crate::log::LogError;

/// Reconnection attempts after a broken connection, unless the connection
/// string sets `reconnection_retries`.
const DEFAULT_RECONNECTION_RETRIES: u32 = 3;

/// Heartbeat interval, unless the connection string sets `heartbeat_interval`.
/// Well under the server's default heartbeat interval (5 s), so a live client
/// is never taken for a hung one when the server verifies heartbeats.
const DEFAULT_HEARTBEAT_INTERVAL: &str = "2s";

/// A parsed `iggy://USER:PASSWORD@HOST:PORT[?options]` connection string.
#[derive(Debug, Clone)]
pub(crate) struct IggyTarget {
    config: Arc<TcpClientConfig>,
    durability: Durability,
    /// How long connecting and signing in may take.
    connect_timeout: Duration,
}

impl IggyTarget {
    /// Parses a connection string. Options are agdx's `durability` (see
    /// [`Durability`]) and those of the Iggy client (`heartbeat_interval`,
    /// `reconnection_retries`, `reconnection_interval`, `reestablish_after`,
    /// `nodelay`, `tls`, `tls_domain`, `tls_ca_file`). Unless set, `nodelay`
    /// is on (requests are small and latency-bound), reconnection gives up
    /// after a few attempts instead of retrying forever, and heartbeats go
    /// every 2 s.
    pub(crate) fn parse(url: &str) -> Result<Self, LogError> {
        let bad = |why: &str| {
            LogError::InvalidInput(format!(
                "invalid Iggy connection string {}: {why}; expected iggy://USER:PASSWORD@HOST:PORT (e.g. iggy://iggy:iggy@127.0.0.1:8090), optionally followed by ?option=value&... (durability, heartbeat_interval, reconnection_retries, reconnection_interval, reestablish_after, nodelay, tls, tls_domain, tls_ca_file)",
                redact(url)
            ))
        };
        let (url, durability) =
            split_durability(url).map_err(|e| LogError::InvalidInput(e.to_string()))?;
        let url = url.as_str();
        match ConnectionStringUtils::parse_protocol(url) {
            Ok(TransportProtocol::Tcp) => {}
            Ok(other) => {
                return Err(bad(&format!(
                    "the {other} transport is not supported, only TCP"
                )));
            }
            Err(_) => return Err(bad("it does not start with iggy://")),
        }
        let parsed = ConnectionString::<TcpConnectionStringOptions>::from_str(url)
            .map_err(|e| bad(&format!("{e}")))?;
        let mut config = TcpClientConfig::from(parsed);
        let options = option_names(url);
        if !options.contains(&"nodelay") {
            config.nodelay = true;
        }
        if !options.contains(&"reconnection_retries") {
            config.reconnection.max_retries = Some(DEFAULT_RECONNECTION_RETRIES);
        }
        if !options.contains(&"heartbeat_interval") {
            config.heartbeat_interval = IggyDuration::from_str(DEFAULT_HEARTBEAT_INTERVAL)
                .map_err(|e| bad(&e.to_string()))?;
        }
        Ok(Self {
            config: Arc::new(config),
            durability,
            connect_timeout: crate::log::DEFAULT_CONNECT_TIMEOUT,
        })
    }

    /// The same target, with connecting and signing in limited to `limit`.
    pub(crate) fn with_connect_timeout(mut self, limit: Duration) -> Self {
        self.connect_timeout = limit;
        self
    }

    /// What an append waits for before it returns.
    pub(crate) fn durability(&self) -> Durability {
        self.durability
    }

    /// `host:port` of the server.
    pub(crate) fn address(&self) -> &str {
        &self.config.server_address
    }

    /// The connection string without credentials, for people.
    pub(crate) fn describe(&self) -> String {
        format!("iggy://{}", self.address())
    }

    /// Opens a new signed-in TCP connection. Each connection is one Iggy
    /// client (one client id on the server, its own consumer group
    /// memberships) and sends heartbeats in the background until shut down.
    /// Fails with [`LogError::Unavailable`] when that takes longer than the
    /// connect timeout, as with a server that accepts connections and never
    /// answers.
    pub(crate) async fn connect(&self) -> Result<Connection, LogError> {
        let tcp = TcpClient::create(self.config.clone())
            .map_err(|e| LogError::InvalidInput(e.to_string()))?;
        let client = IggyClient::create(ClientWrapper::Tcp(tcp), None, None);
        let signed_in =
            match tokio::time::timeout(self.connect_timeout, self.sign_in(&client)).await {
                Ok(signed_in) => signed_in,
                Err(_) => Err(unreachable(
                    &self.describe(),
                    &format!(
                        "connecting and signing in got no answer within {}; {HINT}",
                        humantime::format_duration(self.connect_timeout)
                    ),
                    None,
                )),
            };
        if let Err(e) = signed_in {
            shutdown_in_background(client.client());
            return Err(e);
        }
        let heartbeat = tokio::spawn(heartbeat(
            client.client(),
            self.config.heartbeat_interval.get_duration(),
        ));
        Ok(Connection { client, heartbeat })
    }

    /// Opens `client`'s connection and signs in.
    async fn sign_in(&self, client: &IggyClient) -> Result<(), LogError> {
        // A plain connect first: a refused or unroutable address is reported
        // as such, not as whatever the client's retries end with.
        if let Err(e) = tokio::net::TcpStream::connect(self.address()).await {
            return Err(unreachable(
                &self.describe(),
                &format!("{e}; {HINT}"),
                Some(e.into()),
            ));
        }
        // The inner client's connect, not `IggyClient::connect`: that one
        // starts a heartbeat task nobody can stop, which reports an error
        // for every ping after the connection is closed.
        client
            .client()
            .read()
            .await
            .connect()
            .await
            .map_err(|e| match e {
                IggyError::InvalidCredentials
                | IggyError::Unauthenticated
                | IggyError::Unauthorized
                | IggyError::InvalidPersonalAccessToken => LogError::AccessDenied {
                    target: self.describe(),
                    reason: format!(
                        "signing in failed ({e}); check the user and password in the connection string (iggy://USER:PASSWORD@HOST:PORT)"
                    ),
                    source: Some(e.into()),
                },
                other => unreachable(
                    &self.describe(),
                    &format!("{other}; {HINT}"),
                    Some(other.into()),
                ),
            })
    }
}

/// One signed-in TCP connection. Dropping it closes the connection (in the
/// background, on the current Tokio runtime), which also ends any consumer
/// group membership it holds.
pub(crate) struct Connection {
    client: IggyClient,
    heartbeat: JoinHandle<()>,
}

impl Connection {
    /// The Iggy client of this connection.
    pub(crate) fn client(&self) -> &IggyClient {
        &self.client
    }

    /// Closes the connection now.
    pub(crate) async fn close(&self) {
        self.heartbeat.abort();
        // Closing an already closed connection is not an error worth reporting.
        let _ = self.client.shutdown().await;
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.heartbeat.abort();
        shutdown_in_background(self.client.client());
    }
}

/// Pings the server every `interval` so that it keeps the connection (and
/// its group memberships) while nothing else is sent. A failed ping is no
/// news: the next request reports a broken connection with its context.
async fn heartbeat(client: IggyRwLock<ClientWrapper>, interval: Duration) {
    loop {
        tokio::time::sleep(interval).await;
        match client.read().await.ping().await {
            Ok(()) => {}
            Err(IggyError::ClientShutdown) => return,
            Err(error) => tracing::debug!(%error, "an Iggy heartbeat failed"),
        }
    }
}

/// Shuts a client down without waiting: closes the socket.
fn shutdown_in_background(inner: IggyRwLock<ClientWrapper>) {
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        runtime.spawn(async move {
            let _ = inner.read().await.shutdown().await;
        });
    }
}

/// The names of the `?name=value&...` options of a connection string.
fn option_names(url: &str) -> Vec<&str> {
    url.split_once('?')
        .map(|(_, query)| {
            query
                .split('&')
                .filter_map(|kv| kv.split('=').next())
                .collect()
        })
        .unwrap_or_default()
}

/// The connection string with any password or token replaced by `***`.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(at)) if at > scheme.len() + 3 => {
            let credentials = &rest[..at - scheme.len() - 3];
            let host = &url[at..];
            match credentials.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***{host}"),
                None => format!("{scheme}://***{host}"),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_plain_connection_string() {
        let target = IggyTarget::parse("iggy://iggy:secret@127.0.0.1:8090").unwrap();
        assert_eq!(target.address(), "127.0.0.1:8090");
        assert_eq!(target.describe(), "iggy://127.0.0.1:8090");
        assert!(target.config.nodelay);
        assert_eq!(
            target.config.reconnection.max_retries,
            Some(DEFAULT_RECONNECTION_RETRIES)
        );
        assert_eq!(target.durability(), Durability::Fsync);
    }

    #[test]
    fn takes_the_durability_among_the_client_options() {
        let target =
            IggyTarget::parse("iggy://iggy:secret@localhost:8090?nodelay=false&durability=server")
                .unwrap();
        assert_eq!(target.durability(), Durability::Server);
        assert!(!target.config.nodelay);
        let err = IggyTarget::parse("iggy://iggy:secret@localhost:8090?durability=eventually")
            .unwrap_err()
            .to_string();
        assert!(err.contains("durability=fsync"), "{err}");
    }

    #[test]
    fn keeps_explicit_options() {
        let target = IggyTarget::parse(
            "iggy://iggy:secret@localhost:8090?nodelay=false&reconnection_retries=unlimited",
        )
        .unwrap();
        assert!(!target.config.nodelay);
        assert_eq!(target.config.reconnection.max_retries, None);
    }

    #[test]
    fn rejects_other_transports_and_hides_the_password() {
        let err = IggyTarget::parse("iggy+quic://iggy:secret@127.0.0.1:8080")
            .unwrap_err()
            .to_string();
        assert!(err.contains("only TCP"), "{err}");
        assert!(!err.contains("secret"), "{err}");
        let err = IggyTarget::parse("iggy://iggy:secret@127.0.0.1")
            .unwrap_err()
            .to_string();
        assert!(err.contains("iggy://iggy:***@127.0.0.1"), "{err}");
    }
}
