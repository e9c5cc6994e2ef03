//! The bearer tokens of the HTTP bridges (ax-ipc, mcp): the flags that
//! name them and the `token` subcommand that mints one.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use agdx::bridge::token::{TokenError, TokenSecret, Tokens};
use agdx::{Clock, SystemClock};

use crate::cli::context::{Failure, parse_duration};

/// `--tokens` and `--token-secret`.
#[derive(Debug, Args)]
pub struct TokenFlags {
    /// HTTP: accept the bearer tokens listed in FILE (one per line).
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,

    /// HTTP: accept tokens minted by this bridge's `token --secret FILE`.
    #[arg(long, value_name = "FILE")]
    pub token_secret: Option<PathBuf>,
}

/// Mint a bearer token for the HTTP transport, valid for --ttl: prints it
/// on stdout. The secret file is created (mode 0600) when missing; start
/// the bridge with --token-secret on the same file.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The secret the bridge checks tokens with (created when missing).
    #[arg(long, value_name = "FILE")]
    pub secret: PathBuf,

    /// How long the token works.
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub ttl: Duration,
}

/// Whose tokens: the bridge's subcommand name and its token scheme.
#[derive(Debug, Clone, Copy)]
pub struct Minter {
    /// `ax-ipc`, `mcp`: as in `agdx bridge NAME token`.
    pub bridge: &'static str,
    /// The prefix its tokens carry.
    pub scheme: &'static str,
}

impl Minter {
    /// Prints a token valid for `--ttl` on stdout, creating the secret
    /// file when it is missing.
    pub fn mint(self, args: TokenArgs) -> Result<(), Failure> {
        let (secret, created) =
            TokenSecret::load_or_create(&args.secret).map_err(|e| self.failure(e))?;
        if created {
            eprintln!(
                "agdx: created the token secret {} (mode 0600); start the bridge with --token-secret {}",
                args.secret.display(),
                args.secret.display()
            );
        }
        let now_secs = SystemClock.now_micros() / 1_000_000;
        println!(
            "{}",
            secret.with_scheme(self.scheme).mint_for(args.ttl, now_secs)
        );
        Ok(())
    }

    /// The tokens `flags` name (none when they name no file).
    pub fn tokens(self, flags: &TokenFlags) -> Result<Tokens, Failure> {
        let mut tokens = Tokens::default();
        if let Some(path) = &flags.tokens {
            tokens = tokens.with_file(path)?;
        }
        if let Some(path) = &flags.token_secret {
            let secret = TokenSecret::load(path).map_err(|e| self.failure(e))?;
            tokens = tokens.with_secret(secret.with_scheme(self.scheme));
        }
        Ok(tokens)
    }

    /// A secret file that cannot be used, with how to make one.
    fn failure(self, error: TokenError) -> Failure {
        match &error {
            TokenError::BadSecret { path } => Failure::new(format!(
                "{error}; `agdx bridge {} token --secret {}` creates one",
                self.bridge,
                path.display()
            )),
            _ => error.into(),
        }
    }
}
