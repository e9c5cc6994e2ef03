//! Signing options shared by the commands that publish (`--key`,
//! `--bind-context`), and the checks that catch a key used as the wrong
//! agent before anything is sent.

use std::path::PathBuf;

use clap::Args;

use agdx::trust::{ContextBinding, KeyRegistry, Signer};
use agdx::wire::AgentId;

use super::context::{Failure, Global};

/// How records are signed.
#[derive(Debug, Args)]
pub struct SigningArgs {
    /// Sign every record with this secret key file (64 hex characters, mode 0600;
    /// `agdx keys generate` writes one). Its principal must be the sender.
    #[arg(long, value_name = "KEYFILE")]
    pub key: Option<PathBuf>,

    /// Bind the content type and wire version into each signature, so a
    /// verifier also checks the record's agdx.ct / agdx.av headers.
    #[arg(long, requires = "key")]
    pub bind_context: bool,
}

impl SigningArgs {
    /// The signer, when `--key` names one.
    pub fn signer(&self) -> Result<Option<Signer>, Failure> {
        let Some(path) = &self.key else {
            return Ok(None);
        };
        let binding = if self.bind_context {
            ContextBinding::ALL
        } else {
            ContextBinding::NONE
        };
        Ok(Some(Signer::from_key_file(path)?.with_binding(binding)))
    }
}

/// The principal the registry enrolls `signer`'s key for.
pub fn principal_of(registry: Option<&KeyRegistry>, signer: &Signer) -> Option<AgentId> {
    registry?
        .get(&signer.key_id())
        .map(|entry| entry.principal.clone())
}

/// Who a publishing command speaks as: `--as` (or `--agent`) when given,
/// else the principal of the `--key` in the registry, else `fallback`. A
/// key enrolled for someone else is refused: verifiers would reject every
/// record.
pub fn speaker(
    global: &Global,
    named: Option<&AgentId>,
    signer: Option<&Signer>,
    fallback: &str,
) -> Result<AgentId, Failure> {
    let registry = global.registry()?;
    let enrolled = signer.and_then(|s| principal_of(registry.as_ref(), s));
    match (named, enrolled) {
        (Some(named), Some(enrolled)) if named != &enrolled => Err(Failure::new(format!(
            "the key {} belongs to '{enrolled}', so records signed with it must come from '{enrolled}', not '{named}'; use that agent's key, or drop --as/--agent",
            signer.map(|s| s.key_id().to_string()).unwrap_or_default()
        ))),
        (Some(named), _) => Ok(named.clone()),
        (None, Some(enrolled)) => Ok(enrolled),
        (None, None) => match signer {
            Some(signer) => Err(Failure::new(format!(
                "say who signs with key {}: pass --as NAME (its principal), or --keys FILE (the registry that enrolls it)",
                signer.key_id()
            ))),
            None => AgentId::new(fallback).map_err(Failure::new),
        },
    }
}
