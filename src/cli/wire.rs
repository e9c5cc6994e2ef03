//! `agdx wire`: check, decode and encode wire payloads.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agdx_wire::json::{JsonCodec, Value};
use agdx_wire::{
    AgentCard, AgentEnvelope, AgentPresence, BodyRef, DeadLetter, ErrorBody, FoldSnapshot,
    Signature, SignatureContext, TokenUsage, WireError,
};
use clap::{Subcommand, ValueEnum};

mod sign;

use super::context::Global;

/// The `agdx wire` subcommands.
#[derive(Debug, Subcommand)]
pub enum WireCommand {
    /// Check that each file holds one valid payload of the given type that
    /// re-encodes to exactly the same bytes. Prints `ok FILE` or
    /// `rejected FILE: REASON` per file; exits 0 only when every file is ok.
    Check {
        /// The payload type every file holds.
        #[arg(long = "type", value_enum, default_value_t = PayloadType::Envelope)]
        payload_type: PayloadType,
        /// The files to check.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Decode one payload and print it as pretty JSON (the form `agdx wire
    /// --help` describes: digests and keys in lowercase hex, bodies as text
    /// or {"hex": "..."}). An invalid payload prints the reason on standard
    /// error and exits 1.
    Decode {
        /// The payload type the file holds.
        #[arg(long = "type", value_enum, default_value_t = PayloadType::Envelope)]
        payload_type: PayloadType,
        /// The file to decode.
        file: PathBuf,
    },
    /// Read the JSON form (as printed by `decode`) on standard input and
    /// write the payload's CBOR bytes to standard output. An invalid payload
    /// is refused with the reason on standard error and exit code 1.
    Encode {
        /// The payload type to encode.
        #[arg(long = "type", value_enum, default_value_t = PayloadType::Envelope)]
        payload_type: PayloadType,
    },
    /// Sign an envelope and write the signed envelope's bytes to standard
    /// output (a signature it carried is replaced).
    Sign(sign::SignArgs),
    /// Verify signed envelopes with a public key or the key registry
    /// (--keys). Prints `ok FILE key_id=… principal=…` or
    /// `rejected FILE: REASON` per file; exits 0 only when all verified.
    Verify(sign::VerifyArgs),
}

/// The payload types of the wire contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum PayloadType {
    /// An agent envelope.
    Envelope,
    /// The body of an error envelope.
    ErrorBody,
    /// A claim check (body of content type `ref`).
    BodyRef,
    /// A dead-letter capsule.
    DeadLetter,
    /// A signature.
    Signature,
    /// A signature context.
    SignatureContext,
    /// An agent card.
    Card,
    /// An agent presence announcement.
    Presence,
    /// A fold snapshot.
    FoldSnapshot,
    /// Token usage.
    Usage,
}

/// Runs the same generic function for whichever payload type was asked.
macro_rules! dispatch {
    ($ty:expr, $f:ident ( $($arg:expr),* )) => {
        match $ty {
            PayloadType::Envelope => $f::<AgentEnvelope>($($arg),*),
            PayloadType::ErrorBody => $f::<ErrorBody>($($arg),*),
            PayloadType::BodyRef => $f::<BodyRef>($($arg),*),
            PayloadType::DeadLetter => $f::<DeadLetter>($($arg),*),
            PayloadType::Signature => $f::<Signature>($($arg),*),
            PayloadType::SignatureContext => $f::<SignatureContext>($($arg),*),
            PayloadType::Card => $f::<AgentCard>($($arg),*),
            PayloadType::Presence => $f::<AgentPresence>($($arg),*),
            PayloadType::FoldSnapshot => $f::<FoldSnapshot>($($arg),*),
            PayloadType::Usage => $f::<TokenUsage>($($arg),*),
        }
    };
}

/// Runs one `agdx wire` subcommand and returns the process exit code.
pub fn run(cmd: WireCommand, global: &Global) -> ExitCode {
    match cmd {
        WireCommand::Sign(args) => super::context::finish(sign::sign(args)),
        WireCommand::Verify(args) => sign::verify(args, global),
        WireCommand::Check {
            payload_type,
            files,
        } => {
            let mut every = true;
            for file in &files {
                match dispatch!(payload_type, check(file)) {
                    Ok(()) => println!("ok {}", file.display()),
                    Err(reason) => {
                        every = false;
                        println!("rejected {}: {reason}", file.display());
                    }
                }
            }
            all_ok(every)
        }
        WireCommand::Decode { payload_type, file } => {
            match dispatch!(payload_type, decode(&file)) {
                Ok(json) => match serde_json::to_string_pretty(&json) {
                    Ok(text) => {
                        println!("{text}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&format!("cannot print JSON: {e}")),
                },
                Err(reason) => fail(&format!("{}: {reason}", file.display())),
            }
        }
        WireCommand::Encode { payload_type } => {
            let mut input = String::new();
            if let Err(e) = std::io::stdin().read_to_string(&mut input) {
                return fail(&format!("cannot read standard input: {e}"));
            }
            let json = match agdx_wire::json::from_str(&input) {
                Ok(j) => j,
                Err(e) => return fail(&format!("standard input is not JSON: {e}")),
            };
            match dispatch!(payload_type, encode(json)) {
                Ok(bytes) => {
                    let mut out = std::io::stdout().lock();
                    match out.write_all(&bytes).and_then(|()| out.flush()) {
                        Ok(()) => ExitCode::SUCCESS,
                        Err(e) => fail(&format!("cannot write standard output: {e}")),
                    }
                }
                Err(reason) => fail(&reason),
            }
        }
    }
}

/// Prints a per-file verdict list's end: exit 0 only when every file passed.
fn all_ok(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn fail(reason: &str) -> ExitCode {
    eprintln!("{reason}");
    ExitCode::FAILURE
}

fn read(file: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(file).map_err(|e| format!("cannot read: {e}"))
}

fn reason(e: WireError) -> String {
    match e {
        WireError::Decode(e) => format!("does not decode: {e}"),
        WireError::Invalid(e) => format!("invalid: {e}"),
    }
}

fn check<T: JsonCodec>(file: &Path) -> Result<(), String> {
    let bytes = read(file)?;
    let value = T::decode_valid(&bytes).map_err(reason)?;
    let again = value.encode();
    if again != bytes {
        return Err(format!(
            "valid, but re-encodes to different bytes ({} instead of {}): the input is not in canonical form \
             (field order, integer or float width, unknown keys, or explicit defaults)",
            again.len(),
            bytes.len()
        ));
    }
    Ok(())
}

fn decode<T: JsonCodec>(file: &Path) -> Result<Value, String> {
    let bytes = read(file)?;
    T::decode_valid(&bytes).map(|v| v.to_json()).map_err(reason)
}

fn encode<T: JsonCodec>(json: Value) -> Result<Vec<u8>, String> {
    let value =
        T::from_json(json).map_err(|e| format!("cannot read the {} JSON: {e}", T::TYPE_NAME))?;
    value
        .validate()
        .map_err(|e| format!("refusing to encode: {e}"))?;
    Ok(value.encode())
}
