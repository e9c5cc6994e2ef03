//! `agdx keys`: generate, list, revoke and show signing keys.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Subcommand, ValueEnum};

use agdx::trust::{
    KeyEntry, KeyId, KeyKind, KeyRegistry, Signer, Validity, format_time, parse_time,
};
use agdx::wire::AgentId;
use agdx::{Clock, SystemClock};

use super::context::{Failure, parse_agent, parse_duration};

/// The `agdx keys` subcommands.
#[derive(Debug, Subcommand)]
pub enum KeysCommand {
    /// Create a key: write the secret key file (mode 0600) and enroll its
    /// public key in the registry (created when missing).
    Generate {
        /// Who signs with it: the agent id its records carry as source.
        #[arg(long, value_name = "NAME", value_parser = parse_agent)]
        principal: AgentId,
        /// `agent` (signs commands and replies) or `operator` (may also sign
        /// control facts such as quarantine).
        #[arg(long, value_enum)]
        kind: Kind,
        /// The key registry file.
        #[arg(long, value_name = "FILE", env = "AGDX_KEYS")]
        registry: PathBuf,
        /// Where to write the secret key file (never overwritten).
        #[arg(long, value_name = "KEYFILE")]
        out: PathBuf,
        /// How long the key is valid from now (e.g. 90d, 12h); forever when absent.
        #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
        valid_for: Option<Duration>,
    },
    /// List the enrolled keys and whether each is valid now.
    List {
        /// The key registry file.
        #[arg(long, value_name = "FILE", env = "AGDX_KEYS")]
        registry: PathBuf,
        /// One JSON object per line: the key's registry entry and its
        /// `status` now (valid, not-yet, expired, revoked).
        #[arg(long)]
        json: bool,
    },
    /// Revoke a key from a time on (default: now). Records that landed
    /// before that time still verify; later ones do not.
    Revoke {
        /// The key id (16 hex characters, as `agdx keys list` shows).
        #[arg(value_parser = parse_key_id)]
        key_id: KeyId,
        /// The key registry file.
        #[arg(long, value_name = "FILE", env = "AGDX_KEYS")]
        registry: PathBuf,
        /// Revoke from this time on (RFC 3339, e.g. 2025-06-01T12:00:00Z).
        #[arg(long, value_name = "TIME", value_parser = parse_time)]
        at: Option<u64>,
    },
    /// Print a secret key file's key id and public key.
    Show {
        /// The secret key file.
        keyfile: PathBuf,
    },
}

/// A key kind on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// Signs an agent's commands and replies.
    Agent,
    /// Also signs control facts (quarantine).
    Operator,
}

impl From<Kind> for KeyKind {
    fn from(kind: Kind) -> Self {
        match kind {
            Kind::Agent => KeyKind::Agent,
            Kind::Operator => KeyKind::Operator,
        }
    }
}

pub fn run(command: KeysCommand) -> Result<(), Failure> {
    let now = SystemClock.now_micros();
    match command {
        KeysCommand::Generate {
            principal,
            kind,
            registry: path,
            out,
            valid_for,
        } => {
            let mut registry = KeyRegistry::load_or_new(&path)?;
            let signer = Signer::generate()?;
            // Whole seconds read better in the registry; the window opens a
            // moment early rather than late.
            let valid_from = now - now % 1_000_000;
            let valid_to = valid_for.map(|d| {
                valid_from.saturating_add(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
            });
            let entry = KeyEntry::new(
                principal.clone(),
                kind.into(),
                signer.public_key(),
                Some(valid_from),
                valid_to,
            );
            registry.insert(entry)?;
            signer.write_key_file(&out)?;
            registry.save(&path)?;
            println!(
                "key {} for {} '{principal}': secret in {} (mode 0600), public key enrolled in {}",
                signer.key_id(),
                KeyKind::from(kind),
                out.display(),
                path.display()
            );
            Ok(())
        }
        KeysCommand::List {
            registry: path,
            json,
        } => {
            let registry = KeyRegistry::load(&path)?;
            if registry.is_empty() {
                let none = format!("no keys in {}", path.display());
                // With --json, standard output holds only the objects.
                if json {
                    eprintln!("agdx: {none}");
                } else {
                    println!("{none}");
                }
            }
            if json {
                for entry in registry.entries() {
                    println!("{}", key_json(entry, now)?);
                }
                return Ok(());
            }
            for entry in registry.entries() {
                println!(
                    "{}  {:<8}  {:<7}  {:<12}  {}",
                    entry.key_id,
                    entry.kind,
                    status(entry.validity_at(now)),
                    entry.principal.as_str(),
                    entry.describe_window()
                );
            }
            Ok(())
        }
        KeysCommand::Revoke {
            key_id,
            registry: path,
            at,
        } => {
            let mut registry = KeyRegistry::load(&path)?;
            let at = at.unwrap_or(now);
            let entry = registry.revoke(key_id, at)?.clone();
            registry.save(&path)?;
            println!(
                "revoked key {key_id} of '{}' from {} on: records that landed before still verify, later ones do not",
                entry.principal,
                format_time(at)
            );
            Ok(())
        }
        KeysCommand::Show { keyfile } => {
            let signer = Signer::from_key_file(&keyfile)?;
            println!(
                "key_id={} public_key={}",
                signer.key_id(),
                signer.public_key()
            );
            Ok(())
        }
    }
}

/// A key as `list --json` prints it: its registry entry, then `status`.
fn key_json(entry: &KeyEntry, now: u64) -> Result<serde_json::Value, Failure> {
    let mut json = serde_json::to_value(entry)?;
    if let Some(fields) = json.as_object_mut() {
        fields.insert("status".to_owned(), status(entry.validity_at(now)).into());
    }
    Ok(json)
}

fn status(validity: Validity) -> &'static str {
    match validity {
        Validity::Valid => "valid",
        Validity::NotYetValid(_) => "not-yet",
        Validity::Expired(_) => "expired",
        Validity::Revoked(_) => "revoked",
    }
}

/// Parses a key id, saying where to find one.
fn parse_key_id(text: &str) -> Result<KeyId, String> {
    text.parse().map_err(|error| {
        format!("{error} (`agdx keys list` shows them, `agdx keys show KEYFILE` shows one key's)")
    })
}
