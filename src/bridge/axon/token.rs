//! `axon://` peer tokens: a public key and an address in one copyable line,
//! `axon://<public key, base64url without padding>@<host:port>`, as
//! `axon identity` prints and `axon connect` reads them.
//!
//! A peers file holds one token per line; blank lines and lines starting
//! with `#` are skipped.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use super::identity::{AxonId, PUBLIC_KEY_LEN};

const SCHEME: &str = "axon://";

/// A peer to pin: its public key (and so its agent id) and where it listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerToken {
    public_key: [u8; PUBLIC_KEY_LEN],
    id: AxonId,
    addr: String,
}

impl PeerToken {
    /// The token of `public_key` listening at `addr` (`host:port`).
    pub fn new(public_key: [u8; PUBLIC_KEY_LEN], addr: &str) -> Result<Self, TokenError> {
        check_addr(addr)?;
        Ok(Self {
            id: AxonId::of(&public_key),
            public_key,
            addr: addr.trim().to_owned(),
        })
    }

    /// The peer's public key.
    pub fn public_key(&self) -> &[u8; PUBLIC_KEY_LEN] {
        &self.public_key
    }

    /// The peer's agent id, derived from the key.
    pub fn id(&self) -> &AxonId {
        &self.id
    }

    /// Where the peer listens, `host:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }
}

impl fmt::Display for PeerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{SCHEME}{}@{}",
            URL_SAFE_NO_PAD.encode(self.public_key),
            self.addr
        )
    }
}

/// Why text is not a peer token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// It does not start with `axon://`.
    #[error("a peer token starts with `axon://` (as `axon identity` prints it)")]
    Scheme,
    /// No `@` between the key and the address.
    #[error("a peer token is `axon://KEY@HOST:PORT`; this one has no `@` after the key")]
    NoAt,
    /// The key is not base64url or not 32 bytes.
    #[error(
        "the key of a peer token is a 32-byte Ed25519 public key in base64url without padding; {0}"
    )]
    Key(String),
    /// The address is not `host:port`.
    #[error("the address of a peer token is HOST:PORT or IP:PORT; {0}")]
    Addr(String),
}

impl TokenError {
    /// Whether trying again may succeed (never: the text is wrong).
    pub fn is_retryable(&self) -> bool {
        match self {
            TokenError::Scheme => false,
            TokenError::NoAt => false,
            TokenError::Key(_) => false,
            TokenError::Addr(_) => false,
        }
    }
}

impl FromStr for PeerToken {
    type Err = TokenError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let rest = text.trim().strip_prefix(SCHEME).ok_or(TokenError::Scheme)?;
        let (key, addr) = rest.split_once('@').ok_or(TokenError::NoAt)?;
        if key.is_empty() {
            return Err(TokenError::Key("it is empty".into()));
        }
        let bytes = URL_SAFE_NO_PAD
            .decode(key)
            .map_err(|e| TokenError::Key(format!("this is not base64url: {e}")))?;
        let public_key: [u8; PUBLIC_KEY_LEN] = bytes
            .as_slice()
            .try_into()
            .map_err(|_| TokenError::Key(format!("this one is {} bytes", bytes.len())))?;
        Self::new(public_key, addr)
    }
}

fn check_addr(addr: &str) -> Result<(), TokenError> {
    let addr = addr.trim();
    if addr.is_empty() {
        return Err(TokenError::Addr("it is empty".into()));
    }
    if addr.parse::<std::net::SocketAddr>().is_ok() {
        return Ok(());
    }
    let (host, port) = addr
        .rsplit_once(':')
        .ok_or_else(|| TokenError::Addr(format!("{addr:?} has no port")))?;
    if host.is_empty() {
        return Err(TokenError::Addr(format!("{addr:?} has no host")));
    }
    port.parse::<u16>()
        .map_err(|_| TokenError::Addr(format!("{port:?} is not a port number")))?;
    Ok(())
}

/// A peers file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum PeersFileError {
    /// The file could not be read.
    #[error("peers file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: std::io::Error,
    },
    /// A line is not a token.
    #[error("peers file {}, line {line}: {source}", path.display())]
    Token {
        /// The file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
        /// What is wrong with it.
        source: TokenError,
    },
}

impl PeersFileError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            PeersFileError::Io { source, .. } => source.kind() == std::io::ErrorKind::Interrupted,
            PeersFileError::Token { .. } => false,
        }
    }
}

/// Reads a peers file: one token per line, `#` comments and blank lines skipped.
pub fn read_peers_file(path: &Path) -> Result<Vec<PeerToken>, PeersFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| PeersFileError::Io {
        path: path.to_owned(),
        source,
    })?;
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty() && !line.trim_start().starts_with('#'))
        .map(|(index, line)| {
            line.parse().map_err(|source| PeersFileError::Token {
                path: path.to_owned(),
                line: index + 1,
                source,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_round_trips_and_names_the_key_s_agent_id() {
        let token = PeerToken::new([9; 32], "127.0.0.1:7100").unwrap();
        let text = token.to_string();
        assert!(text.starts_with("axon://CQkJ"), "{text}");
        assert!(!text.contains('='), "no padding: {text}");
        let back: PeerToken = text.parse().unwrap();
        assert_eq!(back, token);
        assert_eq!(back.id(), &AxonId::of(&[9; 32]));
        let named: PeerToken = text.replace("127.0.0.1", "localhost").parse().unwrap();
        assert_eq!(named.addr(), "localhost:7100");
    }

    #[test]
    fn malformed_tokens_say_what_is_wrong() {
        let key = URL_SAFE_NO_PAD.encode([9; 32]);
        let cases = [
            ("http://x@y:1".to_owned(), "starts with"),
            (format!("axon://{key}"), "no `@`"),
            ("axon://@h:1".to_owned(), "empty"),
            ("axon://!!!@h:1".to_owned(), "not base64url"),
            (format!("axon://{key}=@h:1"), "not base64url"),
            (
                format!("axon://{}@h:1", URL_SAFE_NO_PAD.encode([1; 31])),
                "31 bytes",
            ),
            (format!("axon://{key}@h"), "no port"),
            (format!("axon://{key}@:7"), "no host"),
            (format!("axon://{key}@h:99999"), "not a port"),
        ];
        for (text, expected) in cases {
            let error = text.parse::<PeerToken>().unwrap_err().to_string();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn a_peers_file_skips_comments_and_names_the_bad_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("peers");
        let token = PeerToken::new([3; 32], "h:1").unwrap();
        std::fs::write(&path, format!("# pinned\n\n{token}\n  # more\n")).unwrap();
        assert_eq!(read_peers_file(&path).unwrap(), vec![token.clone()]);
        std::fs::write(&path, format!("{token}\nnot a token\n")).unwrap();
        let error = read_peers_file(&path).unwrap_err().to_string();
        assert!(error.contains("line 2"), "{error}");
    }
}
