//! Signed records verify across implementations: every signed vector of
//! ours (`fixtures/signed/VECTORS.json`) verifies against the preimage the
//! reference computes from the decoded record, and for the reference's own
//! signed fixture agdx computes the reference's preimage.

use agdx_wire::{AgentEnvelope, signing_input};
use ed25519_dalek::{Signature, Verifier, VerifyingKey};

use crate::corpus::{fixtures_dir, reference_files, signed_vectors};
use crate::run::{hex, reference_signing_input};

pub fn unhex(text: &str) -> Result<Vec<u8>, String> {
    if !text.len().is_multiple_of(2) {
        return Err(format!("odd-length hex {text:?}"));
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).map_err(|e| format!("{text:?}: {e}")))
        .collect()
}

fn field<'a>(vector: &'a serde_json::Value, key: &str) -> Result<&'a str, String> {
    vector[key]
        .as_str()
        .ok_or_else(|| format!("a vector without {key}"))
}

/// One vector: the reference's preimage equals the listed one, and the
/// listed signature verifies over it.
fn vector(vector: &serde_json::Value) -> Result<(), String> {
    let file = field(vector, "file")?;
    let bytes = std::fs::read(fixtures_dir().join(file)).map_err(|e| format!("{file}: {e}"))?;
    let listed = unhex(field(vector, "signing_input")?)?;
    let theirs = reference_signing_input(&bytes).map_err(|e| format!("{file}: {e}"))?;
    if theirs != listed {
        return Err(format!(
            "{file}: the reference's preimage {} differs from ours {}",
            hex(&theirs),
            hex(&listed)
        ));
    }
    let key: [u8; 32] = unhex(field(vector, "public_key")?)?
        .try_into()
        .map_err(|_| format!("{file}: a public key of another length"))?;
    let signature: [u8; 64] = unhex(field(vector, "signature")?)?
        .try_into()
        .map_err(|_| format!("{file}: a signature of another length"))?;
    VerifyingKey::from_bytes(&key)
        .map_err(|e| format!("{file}: {e}"))?
        .verify(&theirs, &Signature::from_bytes(&signature))
        .map_err(|e| format!("{file}: does not verify over the reference's preimage: {e}"))
}

pub fn check(failures: &mut Vec<String>) {
    let list = match signed_vectors() {
        Ok(list) => list,
        Err(e) => {
            failures.push(e);
            return;
        }
    };
    let mut verified = 0;
    for v in &list {
        match vector(v) {
            Ok(()) => verified += 1,
            Err(why) => failures.push(why),
        }
    }
    let mut theirs_checked = 0;
    for (name, bytes) in reference_files() {
        match same_preimage(bytes) {
            Ok(true) => theirs_checked += 1,
            Ok(false) => {}
            Err(why) => failures.push(format!("{name}: {why}")),
        }
    }
    println!(
        "signing: {verified} of {} signed vectors verify over the reference's preimage; {theirs_checked} signed reference fixture(s) give agdx the reference's preimage",
        list.len()
    );
}

/// For an envelope both accept: whether it is signed (false when it is not,
/// or agdx does not decode it), and an error when agdx's signing input is
/// not the reference's.
pub fn same_preimage(bytes: &[u8]) -> Result<bool, String> {
    let Ok(envelope) = AgentEnvelope::decode(bytes) else {
        return Ok(false);
    };
    if envelope.signature.is_none() {
        return Ok(false);
    }
    let ours = signing_input(&envelope);
    match reference_signing_input(bytes) {
        Ok(theirs) if theirs == ours => Ok(true),
        Ok(theirs) => Err(format!(
            "agdx's preimage {} differs from the reference's {}",
            crate::shortened(&hex(&ours)),
            crate::shortened(&hex(&theirs))
        )),
        Err(e) => Err(format!("the reference computes no preimage: {e}")),
    }
}
