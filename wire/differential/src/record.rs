//! The reference's Iggy record binding file (`agent_record.bin`): its payload
//! agrees in both implementations, and agdx builds the same headers and
//! partition key from the decoded envelope.

use agdx_wire::{AgentEnvelope, ContentType, HEADER_CONTENT_TYPE, record_headers};

use crate::cbor::{self, Node};
use crate::corpus::{Entry, reference_entry, reference_files};
use crate::run::{self, Outcome, Payload};

pub fn check(failures: &mut Vec<String>) {
    let files = reference_files();
    let mut skipped = Vec::new();
    let mut checked = 0;
    for (name, bytes) in files.iter().copied() {
        match reference_entry(name) {
            Entry::Record => match binding(bytes) {
                Ok(()) => checked += 1,
                Err(why) => failures.push(format!("{name}: {why}")),
            },
            Entry::NotAgdx(why) => skipped.push((name, why)),
            Entry::Payload(_) => {}
        }
    }
    let names: Vec<&str> = skipped.iter().map(|(name, _)| *name).collect();
    let mut reasons: Vec<&str> = skipped.iter().map(|(_, why)| *why).collect();
    reasons.dedup();
    println!(
        "reference agent corpus: {} files in all (every agent_* file and fold_snapshot.bin); record bindings checked {checked}; left out {} ({}): {}",
        files.len(),
        names.len(),
        reasons.join("; "),
        names.join(", ")
    );
}

fn binding(bytes: &[u8]) -> Result<(), String> {
    let tree = cbor::parse(bytes).ok_or("not one CBOR item")?;
    let text = |n: Option<&Node>| n.and_then(Node::as_text).map(str::to_owned);
    let partition_key = text(tree.get("partition_key")).ok_or("no partition_key")?;
    let Some(Node::Bytes(payload)) = tree.get("payload") else {
        return Err("no payload".into());
    };
    let ours = run::agdx(Payload::Envelope, payload);
    let theirs = run::reference(Payload::Envelope, payload);
    if ours != Outcome::Accepted(payload.clone()) || !ours.agrees_with(&theirs) {
        return Err(format!(
            "payload: agdx {}, reference {}",
            ours.short(),
            theirs.short()
        ));
    }
    let envelope = AgentEnvelope::decode_valid(payload).map_err(|e| e.to_string())?;
    if envelope.conversation.to_string() != partition_key {
        return Err(format!(
            "partition key {partition_key}, agdx shows the conversation as {}",
            envelope.conversation
        ));
    }
    let listed = tree
        .get("headers")
        .and_then(Node::entries)
        .ok_or("no headers")?;
    let mut want: Vec<(String, String, Vec<u8>)> = Vec::new();
    for (key, value) in listed {
        let key = key.as_text().ok_or("a header key that is not text")?;
        let kind = text(value.get("kind")).ok_or("a header without kind")?;
        let Some(Node::Bytes(b)) = value.get("bytes") else {
            return Err(format!("header {key} without bytes"));
        };
        want.push((key.to_owned(), kind, b.clone()));
    }
    let content_type = want
        .iter()
        .find(|(k, _, _)| k == HEADER_CONTENT_TYPE)
        .and_then(|(_, _, b)| b.first())
        .map_or(ContentType::Raw, |c| ContentType::from_code(*c));
    let mut built: Vec<(String, String, Vec<u8>)> = record_headers(&envelope, content_type)
        .into_iter()
        .map(|(k, v)| (k.into_owned(), v.kind.name().to_owned(), v.bytes.to_vec()))
        .collect();
    want.sort();
    built.sort();
    if want != built {
        return Err(format!(
            "headers: the file lists {want:?}, agdx builds {built:?}"
        ));
    }
    Ok(())
}
