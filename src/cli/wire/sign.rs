//! `agdx wire sign` and `agdx wire verify`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use agdx::trust::{
    KeyEntry, KeyKind, KeyRegistry, Observed, PublicKey, Signer, Verifier, parse_time,
};
use agdx::wire::{AgentEnvelope, AgentId, ContentType, SignatureContext};
use agdx::{Clock, SystemClock};

use super::super::context::{Failure, Global, parse_agent};
use super::{all_ok, read};

/// Options of `agdx wire sign`.
#[derive(Debug, Args)]
pub struct SignArgs {
    /// The secret key file to sign with.
    #[arg(long, value_name = "KEYFILE")]
    pub key: PathBuf,
    /// Bind this content type: the record's agdx.ct header must then say the same.
    #[arg(long, value_name = "TYPE")]
    pub bind_content_type: Option<ContentType>,
    /// Bind this wire version: the record's agdx.av header must then say the same.
    #[arg(long, value_name = "N")]
    pub bind_agent_version: Option<u32>,
    /// The envelope to sign.
    pub file: PathBuf,
}

/// Options of `agdx wire verify`.
#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Verify with this public key (64 hex characters) instead of the registry (--keys).
    #[arg(long, value_name = "HEX")]
    pub public_key: Option<PublicKey>,
    /// With --public-key: the principal the key belongs to (checked against
    /// each envelope's source). Without it the source's claim is shown unchecked.
    #[arg(long, value_name = "AGENT", requires = "public_key", value_parser = parse_agent)]
    pub principal: Option<AgentId>,
    /// Judge the keys' validity as of this time (RFC 3339; default now).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub at: Option<u64>,
    /// Envelopes to verify.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,
}

pub fn sign(args: SignArgs) -> Result<(), Failure> {
    let signer = Signer::from_key_file(&args.key)?;
    let bytes =
        read(&args.file).map_err(|e| Failure::new(format!("{}: {e}", args.file.display())))?;
    let envelope = AgentEnvelope::decode_valid(&bytes)
        .map_err(|e| Failure::new(format!("{}: {e}", args.file.display())))?;
    let context = (args.bind_content_type.is_some() || args.bind_agent_version.is_some())
        .then_some(SignatureContext {
            content_type: args.bind_content_type,
            agent_version: args.bind_agent_version,
        });
    let signed = signer.sign(envelope, context).encode();
    let mut out = std::io::stdout().lock();
    out.write_all(&signed)?;
    out.flush()?;
    Ok(())
}

pub fn verify(args: VerifyArgs, global: &Global) -> ExitCode {
    match verify_files(args, global) {
        Ok(every) => all_ok(every),
        Err(failure) => super::super::context::finish(Err(failure)),
    }
}

/// Which keys `wire verify` trusts.
enum Trusted {
    Registry(Verifier),
    Key(PublicKey),
}

/// Verifies each file, printing its verdict; `true` when all verified.
fn verify_files(args: VerifyArgs, global: &Global) -> Result<bool, Failure> {
    let registry = match (args.public_key, global.registry()?) {
        (Some(_), Some(_)) => {
            return Err(Failure::new(
                "verify with either --public-key or the key registry (--keys / AGDX_KEYS), not both",
            ));
        }
        (None, None) => {
            return Err(Failure::new(
                "say which keys to trust: --public-key HEX or --keys FILE (or AGDX_KEYS)",
            ));
        }
        (None, Some(registry)) => Trusted::Registry(Verifier::new(registry)),
        (Some(public_key), None) => Trusted::Key(public_key),
    };
    let observed = Observed::file(args.at.unwrap_or_else(|| SystemClock.now_micros()));
    let mut every = true;
    for file in &args.files {
        let verdict = read(file).and_then(|bytes| {
            let (verifier, claimed) = match &registry {
                Trusted::Registry(verifier) => (verifier.clone(), false),
                Trusted::Key(public_key) => one_key(&bytes, *public_key, args.principal.as_ref())?,
            };
            let verified = verifier
                .verify(&bytes, &observed)
                .map_err(|e| e.to_string())?;
            Ok(format!(
                "key_id={} principal={}{}",
                verified.key_id,
                verified.principal,
                if claimed { " (claimed)" } else { "" }
            ))
        });
        match verdict {
            Ok(who) => println!("ok {} {who}", file.display()),
            Err(reason) => {
                every = false;
                println!("rejected {}: {reason}", file.display());
            }
        }
    }
    Ok(every)
}

/// A verifier trusting one key for `principal`, or for the envelope's own
/// source when no principal was named (then `true`: the principal is only
/// the source's claim).
fn one_key(
    bytes: &[u8],
    public_key: PublicKey,
    principal: Option<&AgentId>,
) -> Result<(Verifier, bool), String> {
    let (principal, claimed) = match principal {
        Some(principal) => (principal.clone(), false),
        None => (
            AgentEnvelope::decode(bytes)
                .map_err(|e| format!("not a valid envelope: {e}"))?
                .source,
            true,
        ),
    };
    let mut registry = KeyRegistry::new();
    registry
        .insert(KeyEntry::new(
            principal,
            KeyKind::Agent,
            public_key,
            None,
            None,
        ))
        .map_err(|e| e.to_string())?;
    Ok((Verifier::new(registry), claimed))
}
