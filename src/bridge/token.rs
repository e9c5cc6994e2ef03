//! Bearer tokens for a bridge's HTTP transport (ax-ipc, MCP).
//!
//! Two kinds, both accepted at once:
//!
//! - **Fixed tokens**, one per line in a file (`--tokens FILE`; blank lines
//!   and lines starting with `#` are skipped). Kept as SHA-256 digests, so
//!   a lookup's timing says nothing about a token's text.
//! - **Minted tokens**, for one turn of an agent: `agdx bridge ax-ipc token
//!   --secret FILE --ttl 10m` prints `axipc1.EXPIRES.NONCE.MAC`, where
//!   EXPIRES is the Unix time (seconds) it stops working, NONCE 16 random
//!   bytes in hex (so no two tokens are alike) and MAC the HMAC-SHA256,
//!   keyed with the secret, of `axipc1.EXPIRES.NONCE`, in hex. A bridge
//!   started with `--token-secret FILE` (the same file) accepts a token
//!   whose MAC checks out and whose time has not come; it keeps no list,
//!   so minting needs no running bridge. The secret file holds 32 random
//!   bytes in hex and is created, mode 0600, by the first `token` command
//!   that names it. Rotating the secret voids every token minted with it.
//!
//! A secret or token file that its group or others can access is refused
//! (as a signing key file is): whoever reads it can mint or use tokens.

use std::collections::HashSet;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::file_mode::{Refused, read_text, shared};

type HmacSha256 = hmac::Hmac<Sha256>;

/// The prefix and version of a minted token unless
/// [`TokenSecret::with_scheme`] names another: the format's first user, the
/// ax-ipc bridge, named it, and its tokens keep working.
pub const DEFAULT_SCHEME: &str = "axipc1";

/// Why a secret or token file could not be used.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file could not be read or written.
    #[error("cannot use {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The secret file does not hold 32 bytes in hex.
    #[error(
        "{} is not a token secret (64 hex digits); remove it and create a new one",
        path.display()
    )]
    BadSecret {
        /// The file.
        path: PathBuf,
    },
    /// The group or others may access the secret or token file.
    #[error(
        "{} is accessible to others (mode {mode:04o}); a token secret or token list must be readable by its owner only: run `chmod 600 {}`",
        path.display(), path.display()
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The token file lists no token.
    #[error("{} lists no token (one per line; # starts a comment)", path.display())]
    NoTokens {
        /// The file.
        path: PathBuf,
    },
}

impl TokenError {
    /// Whether trying again may succeed without anyone changing a file.
    pub fn is_retryable(&self) -> bool {
        match self {
            TokenError::Io { .. } => true,
            TokenError::BadSecret { .. } => false,
            TokenError::Exposed { .. } => false,
            TokenError::NoTokens { .. } => false,
        }
    }
}

/// The key minted tokens are signed with, and the scheme (prefix) its
/// tokens carry.
#[derive(Clone)]
pub struct TokenSecret {
    key: [u8; 32],
    scheme: &'static str,
}

impl std::fmt::Debug for TokenSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TokenSecret(..)")
    }
}

impl TokenSecret {
    /// A secret from its 32 bytes.
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self {
            key: bytes,
            scheme: DEFAULT_SCHEME,
        }
    }

    /// Mints and accepts tokens prefixed `scheme` instead: a bridge with a
    /// scheme of its own refuses another bridge's tokens even when both
    /// were given the same secret file.
    pub fn with_scheme(mut self, scheme: &'static str) -> Self {
        self.scheme = scheme;
        self
    }

    /// Reads the secret in `path`, refusing a file others can access.
    pub fn load(path: &Path) -> Result<Self, TokenError> {
        let text = read_private(path)?;
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(text.trim(), &mut bytes).map_err(|_| TokenError::BadSecret {
            path: path.to_owned(),
        })?;
        Ok(Self::from_bytes(bytes))
    }

    /// Reads the secret in `path`, creating it (mode 0600, 32 random bytes)
    /// when there is none; `true` when it was created.
    pub fn load_or_create(path: &Path) -> Result<(Self, bool), TokenError> {
        let io = |source| TokenError::Io {
            path: path.to_owned(),
            source,
        };
        let bytes: [u8; 32] = rand::random();
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut file) => {
                writeln!(file, "{}", hex::encode(bytes)).map_err(io)?;
                file.sync_all().map_err(io)?;
                Ok((Self::from_bytes(bytes), true))
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                Ok((Self::load(path)?, false))
            }
            Err(e) => Err(io(e)),
        }
    }

    /// A token valid until `expires_secs` (Unix time).
    pub fn mint(&self, expires_secs: u64) -> String {
        let nonce: [u8; 16] = rand::random();
        let claim = format!("{}.{expires_secs}.{}", self.scheme, hex::encode(nonce));
        let mac = self.mac(&claim).finalize().into_bytes();
        format!("{claim}.{}", hex::encode(mac))
    }

    /// A token valid for `ttl` from `now_secs`.
    pub fn mint_for(&self, ttl: Duration, now_secs: u64) -> String {
        self.mint(now_secs.saturating_add(ttl.as_secs()))
    }

    /// Whether `token` was minted with this secret and is still valid at
    /// `now_secs`.
    pub fn verifies(&self, token: &str, now_secs: u64) -> bool {
        let Some((claim, mac)) = token.rsplit_once('.') else {
            return false;
        };
        let mut parts = claim.split('.');
        let (Some(scheme), Some(expires), Some(_nonce), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return false;
        };
        if scheme != self.scheme {
            return false;
        }
        let Ok(mac) = hex::decode(mac) else {
            return false;
        };
        // The MAC first, in constant time; the expiry only of a genuine token.
        self.mac(claim).verify_slice(&mac).is_ok()
            && expires.parse::<u64>().is_ok_and(|at| now_secs < at)
    }

    fn mac(&self, claim: &str) -> HmacSha256 {
        let mut mac = <HmacSha256 as KeyInit>::new_from_slice(&self.key)
            .expect("HMAC takes keys of any length");
        mac.update(claim.as_bytes());
        mac
    }
}

/// The text of a file only its owner may access (a secret or a token list).
fn read_private(path: &Path) -> Result<Zeroizing<String>, TokenError> {
    read_text(path, shared).map_err(|refused| match refused {
        Refused::Io(source) => TokenError::Io {
            path: path.to_owned(),
            source,
        },
        Refused::Mode(mode) => TokenError::Exposed {
            path: path.to_owned(),
            mode,
        },
    })
}

/// The tokens an HTTP bridge accepts.
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    fixed: HashSet<[u8; 32]>,
    secret: Option<TokenSecret>,
}

impl Tokens {
    /// Accepts `token` as given.
    pub fn with_fixed(mut self, token: &str) -> Self {
        self.fixed.insert(Sha256::digest(token.as_bytes()).into());
        self
    }

    /// Accepts the tokens listed in `path`, refusing a file others can
    /// access.
    pub fn with_file(mut self, path: &Path) -> Result<Self, TokenError> {
        let text = read_private(path)?;
        let before = self.fixed.len();
        for line in text.lines().map(str::trim) {
            if !line.is_empty() && !line.starts_with('#') {
                self = self.with_fixed(line);
            }
        }
        if self.fixed.len() == before {
            return Err(TokenError::NoTokens {
                path: path.to_owned(),
            });
        }
        Ok(self)
    }

    /// Accepts tokens minted with `secret`.
    pub fn with_secret(mut self, secret: TokenSecret) -> Self {
        self.secret = Some(secret);
        self
    }

    /// Whether any token could be accepted at all.
    pub fn is_empty(&self) -> bool {
        self.fixed.is_empty() && self.secret.is_none()
    }

    /// Whether `token` is accepted at `now_secs`.
    pub fn accepts(&self, token: &str, now_secs: u64) -> bool {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        self.fixed.contains(&digest)
            || self
                .secret
                .as_ref()
                .is_some_and(|secret| secret.verifies(token, now_secs))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_minted_token_works_until_it_expires_and_only_with_its_secret() {
        let secret = TokenSecret::from_bytes([7; 32]);
        let token = secret.mint(1_000);
        assert!(token.starts_with("axipc1.1000."));
        assert!(secret.verifies(&token, 999));
        assert!(!secret.verifies(&token, 1_000), "expired at its time");
        assert!(!TokenSecret::from_bytes([8; 32]).verifies(&token, 999));
        let forged = token.replacen("axipc1.1000.", "axipc1.9000.", 1);
        assert!(
            !secret.verifies(&forged, 999),
            "a changed expiry breaks the MAC"
        );
        assert_ne!(secret.mint(1_000), token, "each token has its own nonce");
        for junk in ["", "axipc1", "axipc1.1.2", "axipc1.x.y.zz", "a.b.c.d.e"] {
            assert!(!secret.verifies(junk, 0), "{junk:?}");
        }
    }

    #[test]
    fn a_token_of_another_scheme_is_refused_even_with_the_same_key() {
        let ax_ipc = TokenSecret::from_bytes([7; 32]);
        let mcp = ax_ipc.clone().with_scheme("mcp1");
        let token = mcp.mint(1_000);
        assert!(token.starts_with("mcp1.1000."));
        assert!(mcp.verifies(&token, 999));
        assert!(!ax_ipc.verifies(&token, 999));
        assert!(!mcp.verifies(&ax_ipc.mint(1_000), 999));
    }

    #[test]
    fn secrets_are_created_private_once_and_tokens_files_read() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secret");
        let (first, created) = TokenSecret::load_or_create(&path).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let (again, created) = TokenSecret::load_or_create(&path).unwrap();
        assert!(!created);
        assert!(again.verifies(&first.mint(10), 0));

        let list = dir.path().join("tokens");
        std::fs::write(&list, "# turn tokens\n\nalpha\n  beta \n").unwrap();
        std::fs::set_permissions(&list, std::fs::Permissions::from_mode(0o600)).unwrap();
        let tokens = Tokens::default().with_file(&list).unwrap();
        assert!(tokens.accepts("alpha", 0) && tokens.accepts("beta", 0));
        assert!(!tokens.accepts("# turn tokens", 0) && !tokens.accepts("gamma", 0));
        std::fs::write(&list, "# none\n").unwrap();
        assert!(matches!(
            Tokens::default().with_file(&list),
            Err(TokenError::NoTokens { .. })
        ));
    }

    #[test]
    fn secrets_and_token_files_others_can_read_are_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        TokenSecret::load_or_create(&secret).unwrap();
        let list = dir.path().join("tokens");
        std::fs::write(&list, "alpha\n").unwrap();
        for mode in [0o640, 0o604, 0o644] {
            for path in [&secret, &list] {
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
            }
            let exposed = |result: Result<(), TokenError>| matches!(result, Err(TokenError::Exposed { mode: m, .. }) if m == mode);
            assert!(exposed(TokenSecret::load(&secret).map(drop)), "{mode:o}");
            assert!(
                exposed(TokenSecret::load_or_create(&secret).map(drop)),
                "{mode:o}"
            );
            assert!(
                exposed(Tokens::default().with_file(&list).map(drop)),
                "{mode:o}"
            );
        }
    }
}
