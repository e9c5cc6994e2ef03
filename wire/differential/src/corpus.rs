//! The two corpora the generated inputs start from: ours (`fixtures/`, typed
//! by its manifest, and its signed envelopes) and the reference's whole
//! public agent corpus (embedded in laser-wire's `fixtures` feature).

use std::path::PathBuf;

use crate::run::Payload;

/// One corpus file.
pub struct Seed {
    pub name: String,
    pub payload: Payload,
    pub bytes: Vec<u8>,
    /// Whether the corpus says it is accepted (else refused).
    pub valid: bool,
}

/// `fixtures/` of this repository.
pub fn fixtures_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fixtures")
}

/// Our corpus, from `fixtures/MANIFEST.tsv`.
pub fn ours() -> Result<Vec<Seed>, String> {
    let dir = fixtures_dir();
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv"))
        .map_err(|e| format!("reading {}/MANIFEST.tsv: {e}", dir.display()))?;
    let mut seeds = Vec::new();
    for line in manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let [file, type_name, expect] = cols[..] else {
            return Err(format!("MANIFEST.tsv: not three columns: {line:?}"));
        };
        let Some(payload) = Payload::from_type_name(type_name) else {
            continue;
        };
        let bytes = std::fs::read(dir.join(file)).map_err(|e| format!("reading {file}: {e}"))?;
        seeds.push(Seed {
            name: file.to_owned(),
            payload,
            bytes,
            valid: expect == "valid",
        });
    }
    // The signed envelopes, so that generated inputs carry signatures too.
    for vector in signed_vectors()? {
        let file = vector["file"]
            .as_str()
            .ok_or("signed/VECTORS.json: a vector without file")?;
        let bytes = std::fs::read(dir.join(file)).map_err(|e| format!("reading {file}: {e}"))?;
        seeds.push(Seed {
            name: file.to_owned(),
            payload: Payload::Envelope,
            bytes,
            valid: true,
        });
    }
    Ok(seeds)
}

/// The vectors of `fixtures/signed/VECTORS.json`.
pub fn signed_vectors() -> Result<Vec<serde_json::Value>, String> {
    let path = fixtures_dir().join("signed/VECTORS.json");
    let vectors: serde_json::Value = std::fs::read(&path)
        .map_err(|e| e.to_string())
        .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    vectors["vectors"]
        .as_array()
        .cloned()
        .ok_or_else(|| format!("{}: no vectors list", path.display()))
}

/// What a file of the reference's agent corpus is.
pub enum Entry {
    Payload(Payload),
    /// The Iggy record binding (partition key, typed headers, payload).
    Record,
    /// Not an AGDX payload at all, and why.
    NotAgdx(&'static str),
}

/// LaserData's agent workflow control frames (`laser_wire::agent_workflow`):
/// its own server's submit/status/list surface, which AGDX does not define.
const WORKFLOW_FRAMES: &[&str] = &[
    "agent_submit.bin",
    "agent_reply_status.bin",
    "agent_list_page.bin",
    "agent_reply_list_page.bin",
    "agent_reply_error.bin",
];

/// The type of a reference agent fixture, by its name.
pub fn reference_entry(name: &str) -> Entry {
    match name {
        "agent_body_ref.bin" => Entry::Payload(Payload::BodyRef),
        "agent_card.bin" => Entry::Payload(Payload::Card),
        "agent_dead_letter.bin" => Entry::Payload(Payload::DeadLetter),
        "agent_error_body.bin" => Entry::Payload(Payload::ErrorBody),
        "agent_presence.bin" => Entry::Payload(Payload::Presence),
        "agent_signature.bin" => Entry::Payload(Payload::Signature),
        "agent_record.bin" => Entry::Record,
        FOLD_SNAPSHOT => Entry::Payload(Payload::FoldSnapshot),
        n if WORKFLOW_FRAMES.contains(&n) => Entry::NotAgdx(
            "LaserData agent-workflow control frames (laser_wire::agent_workflow), not AGDX payloads",
        ),
        _ => Entry::Payload(Payload::Envelope),
    }
}

/// The reference's fold snapshot: not named `agent_*`, but the AGDX fold
/// snapshot (docs/wire.md, Capsules) all the same.
const FOLD_SNAPSHOT: &str = "fold_snapshot.bin";

/// Every AGDX file of the reference corpus (each `agent_*` file and its fold
/// snapshot), in its order.
pub fn reference_files() -> Vec<(&'static str, &'static [u8])> {
    laser_wire::fixtures::ALL
        .iter()
        .filter(|(name, _)| name.starts_with("agent_") || *name == FOLD_SNAPSHOT)
        .copied()
        .collect()
}

/// The reference's agent corpus as seeds (its record binding and workflow
/// frames aside).
pub fn reference() -> Vec<Seed> {
    reference_files()
        .into_iter()
        .filter_map(|(name, bytes)| match reference_entry(name) {
            Entry::Payload(payload) => Some(Seed {
                name: name.to_owned(),
                payload,
                bytes: bytes.to_vec(),
                valid: !name.contains("_invalid_"),
            }),
            Entry::Record | Entry::NotAgdx(_) => None,
        })
        .collect()
}
