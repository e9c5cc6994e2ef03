//! A TCP balancer: one loopback address in front of several servers.
//!
//! Each connection it accepts goes to the next server in turn that accepts
//! a connection, and its bytes are copied both ways until either side
//! closes. A server that is down is skipped; the connections it carried end
//! with it, and their clients reconnect through the balancer to another.
//!
//! Tansu brokers that share one store are such a tier: they all announce
//! the same broker id, so a Kafka client can only tell them apart by the
//! address they advertise, and it follows that address from one metadata
//! answer to the next. Advertising the balancer's address instead gives
//! the client one stable broker, the way a stateless tier is put behind a
//! load balancer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running balancer; dropping it stops accepting connections.
pub struct Balancer {
    /// `127.0.0.1:PORT`, the address clients connect to.
    pub address: String,
    accepting: JoinHandle<()>,
}

impl Balancer {
    /// Listens on `port` of loopback and spreads connections over `servers`
    /// (`HOST:PORT` each).
    pub async fn start(port: u16, servers: Vec<String>) -> Result<Self, String> {
        let address = format!("127.0.0.1:{port}");
        let listener = TcpListener::bind(&address)
            .await
            .map_err(|e| format!("the balancer cannot listen on {address}: {e}"))?;
        let servers = Arc::new(servers);
        let next = Arc::new(AtomicUsize::new(0));
        let accepting = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (servers, next) = (servers.clone(), next.clone());
                tokio::spawn(async move {
                    let start = next.fetch_add(1, Ordering::Relaxed);
                    if let Some(mut server) = connect_any(&servers, start).await {
                        let mut client = client;
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Ok(Balancer { address, accepting })
    }
}

impl Drop for Balancer {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

/// The first of `servers`, from `start` on and round, that accepts a connection.
async fn connect_any(servers: &[String], start: usize) -> Option<TcpStream> {
    for k in 0..servers.len() {
        let server = &servers[(start + k) % servers.len()];
        if let Ok(stream) = TcpStream::connect(server).await {
            return Some(stream);
        }
    }
    None
}
