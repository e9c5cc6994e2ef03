//! The JSON view (feature `json`): every positive of our corpus and of the
//! peer corpus goes payload → JSON text → payload byte for byte, and JSON
//! that would lose or drop data is refused with the field it names.

#![cfg(feature = "json")]

mod common;

use std::path::Path;

use agdx_wire::json::{JsonCodec, JsonError, from_str};
use agdx_wire::*;

/// Bytes → JSON text → bytes, for one payload type.
fn through_json<T: JsonCodec>(bytes: &[u8], name: &str) {
    let value = T::decode_valid(bytes).unwrap_or_else(|e| panic!("{name}: {e}"));
    let text = serde_json::to_string_pretty(&value.to_json()).expect("JSON text");
    let read = from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = T::from_json(read).unwrap_or_else(|e| panic!("{name}: {e}\n{text}"));
    assert_eq!(back.encode(), bytes, "{name} changed through\n{text}");
}

fn through_json_as(ty: &str, bytes: &[u8], name: &str) {
    match ty {
        "envelope" => through_json::<AgentEnvelope>(bytes, name),
        "error-body" => through_json::<ErrorBody>(bytes, name),
        "body-ref" => through_json::<BodyRef>(bytes, name),
        "dead-letter" => through_json::<DeadLetter>(bytes, name),
        "signature" => through_json::<Signature>(bytes, name),
        "signature-context" => through_json::<SignatureContext>(bytes, name),
        "card" => through_json::<AgentCard>(bytes, name),
        "presence" => through_json::<AgentPresence>(bytes, name),
        "fold-snapshot" => through_json::<FoldSnapshot>(bytes, name),
        "usage" => through_json::<TokenUsage>(bytes, name),
        other => panic!("{name}: unknown payload type {other}"),
    }
}

#[test]
fn our_positives_survive_the_json_view() {
    let dir = common::fixtures_dir();
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("the manifest");
    let mut count = 0;
    for line in manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols[2] == "valid" {
            through_json_as(cols[1], &common::read(&dir, cols[0]), cols[0]);
            count += 1;
        }
    }
    assert!(
        count > 30,
        "the manifest lists the corpus: {count} positives"
    );
}

#[test]
fn peer_positives_survive_the_json_view() {
    let Some(dir) = common::peer_dir() else {
        return;
    };
    let typed = [
        ("agent_error_body.bin", "error-body"),
        ("agent_body_ref.bin", "body-ref"),
        ("agent_dead_letter.bin", "dead-letter"),
        ("agent_signature.bin", "signature"),
    ];
    for entry in std::fs::read_dir(&dir).expect("the peer corpus") {
        let name = entry.expect("an entry").file_name();
        let name = name.to_str().expect("a UTF-8 name");
        if !name.ends_with(".bin") || name.contains("_invalid_") || name == "agent_record.bin" {
            continue;
        }
        let ty = typed
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("envelope", |(_, t)| *t);
        through_json_as(ty, &common::read(Path::new(&dir), name), name);
    }
}

fn event_json(extra: &str) -> String {
    format!(
        r#"{{"kind": "event", "record": "01J0Y1ZAG00000000000000001",
            "conversation": "01J0Y1ZAG00000000000000002", "source": "a", "body": "x"{extra}}}"#
    )
}

#[test]
fn a_typo_names_the_unknown_field() {
    let json = from_str(&event_json(r#", "bdy": "y""#)).expect("JSON");
    let err = AgentEnvelope::from_json(json).expect_err("a typo");
    assert_eq!(
        err,
        JsonError::UnknownField {
            what: "envelope",
            field: "bdy".into()
        }
    );
    assert_eq!(err.to_string(), "envelope has no field `bdy`");
}

#[test]
fn a_repeated_key_is_refused_not_collapsed() {
    let err = from_str(&event_json(r#", "metadata": {"k": 1, "k": 2}"#)).expect_err("twice");
    assert!(err.to_string().contains("\"k\" appears twice"), "{err}");
    let err = from_str(&event_json(r#", "body": "y""#)).expect_err("twice");
    assert!(err.to_string().contains("\"body\" appears twice"), "{err}");
}

#[test]
fn nested_errors_name_the_path() {
    let json = from_str(&event_json(
        r#", "usage": {"input_tokens": -1, "output_tokens": 0}"#,
    ))
    .expect("JSON");
    let err = AgentEnvelope::from_json(json).expect_err("a negative count");
    assert_eq!(
        err.to_string(),
        "`usage`: `input_tokens`: -1 is not an unsigned integer in range"
    );
    let err = TokenUsage::from_json(from_str("[]").expect("JSON")).expect_err("not an object");
    assert_eq!(err.to_string(), "usage must be a JSON object");
}

/// The top-level keys of a CBOR map, in order.
fn cbor_keys(bytes: &[u8]) -> Vec<String> {
    match ciborium::from_reader::<ciborium::Value, _>(bytes).expect("CBOR") {
        ciborium::Value::Map(entries) => entries
            .into_iter()
            .map(|(k, _)| k.into_text().expect("a text key"))
            .collect(),
        other => panic!("not a map: {other:?}"),
    }
}

fn json_keys<T: JsonCodec>(bytes: &[u8]) -> Vec<String> {
    let value = T::decode(bytes).expect("decodes");
    match value.to_json() {
        serde_json::Value::Object(map) => map.keys().cloned().collect(),
        other => panic!("not an object: {other}"),
    }
}

/// Each field is declared once: the JSON view names exactly the keys the
/// CBOR map holds, in the same order.
#[test]
fn json_names_are_the_cbor_keys_in_order() {
    let dir = common::fixtures_dir();
    let manifest = std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("the manifest");
    for line in manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
    {
        let cols: Vec<&str> = line.split('\t').collect();
        if cols[2] != "valid" {
            continue;
        }
        let bytes = common::read(&dir, cols[0]);
        let json = match cols[1] {
            "envelope" => json_keys::<AgentEnvelope>(&bytes),
            "error-body" => json_keys::<ErrorBody>(&bytes),
            "body-ref" => json_keys::<BodyRef>(&bytes),
            "dead-letter" => json_keys::<DeadLetter>(&bytes),
            "signature" => json_keys::<Signature>(&bytes),
            "signature-context" => json_keys::<SignatureContext>(&bytes),
            "card" => json_keys::<AgentCard>(&bytes),
            "presence" => json_keys::<AgentPresence>(&bytes),
            "fold-snapshot" => json_keys::<FoldSnapshot>(&bytes),
            "usage" => json_keys::<TokenUsage>(&bytes),
            other => panic!("unknown payload type {other}"),
        };
        assert_eq!(json, cbor_keys(&bytes), "{}", cols[0]);
    }
}

/// Every finite float prints as the shortest decimal that reads back as the
/// same bits; a parser that rounds that decimal to a neighbour changes the
/// bytes of the payload (found by fuzzing).
#[test]
fn metadata_floats_read_back_to_their_bits() {
    let tricky = f64::from_bits(0x3fb9_9999_9989_999a);
    let event = AgentEnvelope::event(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        AgentId::new("ledger").expect("an agent id"),
        b"x".to_vec(),
    )
    .with_metadata(Metadata::new().with("ratio", tricky));
    through_json::<AgentEnvelope>(&event.encode(), "a float a fast parser misrounds");
}
