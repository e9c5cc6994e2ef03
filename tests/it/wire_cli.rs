//! `agdx wire check | decode | encode` against the peer corpus and our own
//! fixtures: positives check ok and survive `decode | encode` byte for byte;
//! negatives are rejected with a reason and a failing exit code.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn agdx(args: &[&str], stdin: Option<&[u8]>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_agdx"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("agdx runs");
    let mut input = child.stdin.take().expect("stdin");
    input
        .write_all(stdin.unwrap_or_default())
        .expect("write stdin");
    drop(input);
    child.wait_with_output().expect("agdx finishes")
}

fn peer_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("AGDX_PEER_FIXTURES") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/peer-fixtures"),
    };
    if dir.is_dir() {
        Some(dir)
    } else {
        // Straight to stderr: the harness would hide a println! of a passing test.
        let _ = writeln!(
            std::io::stderr(),
            "peer fixtures not found at {} (set AGDX_PEER_FIXTURES); skipping the peer checks",
            dir.display()
        );
        None
    }
}

/// Our fixtures as (path, type, expect) from fixtures/MANIFEST.tsv.
fn our_fixtures() -> Vec<(PathBuf, String, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures");
    let manifest =
        std::fs::read_to_string(dir.join("MANIFEST.tsv")).expect("fixtures/MANIFEST.tsv");
    manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let cols: Vec<&str> = l.split('\t').collect();
            (dir.join(cols[0]), cols[1].to_owned(), cols[2].to_owned())
        })
        .collect()
}

/// The peer corpus as (path, type, valid?); the record binding file is not
/// a payload type and is checked by the wire crate's own tests.
fn peer_fixtures(dir: &Path) -> Vec<(PathBuf, &'static str, bool)> {
    let typed = [
        ("agent_error_body.bin", "error-body"),
        ("agent_body_ref.bin", "body-ref"),
        ("agent_dead_letter.bin", "dead-letter"),
        ("agent_signature.bin", "signature"),
    ];
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).expect("peer dir") {
        let name = entry
            .expect("entry")
            .file_name()
            .into_string()
            .expect("utf-8 name");
        if !name.ends_with(".bin") || name == "agent_record.bin" {
            continue;
        }
        let ty = typed
            .iter()
            .find(|(n, _)| *n == name)
            .map_or("envelope", |(_, t)| *t);
        out.push((dir.join(&name), ty, !name.contains("_invalid_")));
    }
    out
}

fn assert_round_trip(path: &Path, ty: &str) {
    let file = path.to_str().expect("utf-8 path");
    let decoded = agdx(&["wire", "decode", "--type", ty, file], None);
    assert!(
        decoded.status.success(),
        "decode {file}: {}",
        String::from_utf8_lossy(&decoded.stderr)
    );
    let encoded = agdx(&["wire", "encode", "--type", ty], Some(&decoded.stdout));
    assert!(
        encoded.status.success(),
        "encode {file}: {}",
        String::from_utf8_lossy(&encoded.stderr)
    );
    assert_eq!(
        encoded.stdout,
        std::fs::read(path).expect("fixture"),
        "decode | encode changed {file}"
    );
}

fn assert_check(path: &Path, ty: &str, valid: bool) {
    let file = path.to_str().expect("utf-8 path");
    let out = agdx(&["wire", "check", "--type", ty, file], None);
    let stdout = String::from_utf8_lossy(&out.stdout);
    if valid {
        assert!(out.status.success(), "check {file}: {stdout}");
        assert_eq!(stdout, format!("ok {file}\n"));
    } else {
        assert_eq!(out.status.code(), Some(1), "check {file}: {stdout}");
        assert!(
            stdout.starts_with(&format!("rejected {file}: ")),
            "{stdout}"
        );
        let decoded = agdx(&["wire", "decode", "--type", ty, file], None);
        assert_eq!(
            decoded.status.code(),
            Some(1),
            "decode of a negative must fail: {file}"
        );
        assert!(decoded.stdout.is_empty());
        assert!(!decoded.stderr.is_empty());
    }
}

#[test]
fn peer_corpus_checks_and_round_trips() {
    let Some(dir) = peer_dir() else { return };
    for (path, ty, valid) in peer_fixtures(&dir) {
        assert_check(&path, ty, valid);
        if valid {
            assert_round_trip(&path, ty);
        }
    }
}

#[test]
fn our_fixtures_check_and_round_trip() {
    let fixtures = our_fixtures();
    assert!(fixtures.len() > 100, "the manifest lists the whole corpus");
    for (path, ty, expect) in &fixtures {
        assert_check(path, ty, expect == "valid");
        if expect == "valid" {
            assert_round_trip(path, ty);
        }
    }
}

#[test]
fn check_reports_every_file_and_fails_if_any_is_rejected() {
    let fixtures = our_fixtures();
    let pick = |expect: &str| {
        fixtures
            .iter()
            .find(|(_, ty, e)| ty == "envelope" && e == expect)
            .map(|(p, _, _)| p.to_str().expect("utf-8").to_owned())
            .expect("fixture")
    };
    let (good, bad) = (pick("valid"), pick("malformed"));
    let out = agdx(&["wire", "check", &good, &bad, &good], None);
    assert_eq!(out.status.code(), Some(1));
    let lines: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines.len(), 3);
    assert_eq!(lines[0], format!("ok {good}"));
    assert!(
        lines[1].starts_with(&format!("rejected {bad}: does not decode: ")),
        "{}",
        lines[1]
    );
}

#[test]
fn decode_shows_ids_positions_and_bytes_readably() {
    let fixture =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/envelope_command_full.bin");
    let out = agdx(&["wire", "decode", fixture.to_str().expect("utf-8")], None);
    assert!(out.status.success());
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(json["kind"], "command");
    assert_eq!(json["record"].as_str().map(str::len), Some(26));
    assert_eq!(json["cause_at"], "1/2/3/41");
    assert_eq!(json["body"], "incident 42");
    assert_eq!(json["signature"]["key_id"], "abababababababab");
    assert_eq!(json["metadata"]["ratio"], 0.1);
}

fn decode_json(path: &Path, ty: &str) -> serde_json::Value {
    let file = path.to_str().expect("utf-8");
    let out = agdx(&["wire", "decode", "--type", ty, file], None);
    assert!(
        out.status.success(),
        "decode {file}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn decode_fixture(name: &str, ty: &str) -> serde_json::Value {
    decode_json(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures")
            .join(name),
        ty,
    )
}

/// Bytes that happen to be valid UTF-8 (here 0x01 and 0x02, or a BodyRef's
/// CBOR) used to print as strings of control characters.
#[test]
fn decode_prints_byte_fields_as_lowercase_hex() {
    let json = decode_fixture("envelope_status_quarantine.bin", "envelope");
    assert_eq!(json["signature"]["key_id"], "0101010101010101");
    assert_eq!(json["signature"]["bytes"], "02".repeat(64));
    assert_eq!(json["body"], "rogue");

    let json = decode_fixture("body_ref.bin", "body-ref");
    assert_eq!(json["sha256"], "09".repeat(32));

    let json = decode_fixture("envelope_error_claim_checked.bin", "envelope");
    let hex = json["body"]["hex"]
        .as_str()
        .expect("a claim-checked body is hex");
    assert!(hex.starts_with("a369"), "{hex}");
    assert!(hex.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')));

    let json = decode_fixture("dead_letter.bin", "dead-letter");
    assert_eq!(json["payload"], serde_json::json!({"hex": "ff00"}));

    // Text stays text, line breaks and tabs included.
    let json = decode_fixture(
        "envelope_status_quarantine_body_not_an_agent.bin",
        "envelope",
    );
    assert_eq!(json["body"], "two\nlines");
}

/// Walks every string of a decoded payload.
fn strings<'a>(json: &'a serde_json::Value, out: &mut Vec<&'a str>) {
    match json {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(items) => items.iter().for_each(|i| strings(i, out)),
        serde_json::Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

#[test]
fn decode_never_prints_control_characters_for_bytes() {
    let mut positives: Vec<(PathBuf, String)> = our_fixtures()
        .into_iter()
        .filter(|(_, _, expect)| expect == "valid")
        .map(|(path, ty, _)| (path, ty))
        .collect();
    if let Some(dir) = peer_dir() {
        positives.extend(
            peer_fixtures(&dir)
                .into_iter()
                .filter(|(_, _, valid)| *valid)
                .map(|(path, ty, _)| (path, ty.to_owned())),
        );
    }
    for (path, ty) in positives {
        let json = decode_json(&path, &ty);
        let mut all = Vec::new();
        strings(&json, &mut all);
        for s in all {
            assert!(
                !s.chars()
                    .any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r')),
                "{} prints {s:?}",
                path.display()
            );
        }
    }
}

#[test]
fn encode_reads_hex_and_explains_bad_hex() {
    let signature = br#"{"scheme": "ed25519", "key_id": "00ff00ff00ff00ff",
        "bytes": {BYTES}}"#;
    let signature =
        String::from_utf8_lossy(signature).replace("{BYTES}", &format!("\"{}\"", "7f".repeat(64)));
    let out = agdx(
        &["wire", "encode", "--type", "signature"],
        Some(signature.as_bytes()),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut expected = vec![0xa3, 0x66];
    expected.extend_from_slice(b"scheme");
    expected.extend_from_slice(&[0x01, 0x66]);
    expected.extend_from_slice(b"key_id");
    expected.extend_from_slice(&[0x48, 0x00, 0xff, 0x00, 0xff, 0x00, 0xff, 0x00, 0xff, 0x65]);
    expected.extend_from_slice(b"bytes");
    expected.extend_from_slice(&[0x58, 0x40]);
    expected.extend_from_slice(&[0x7f; 64]);
    assert_eq!(out.stdout, expected);

    let body = br#"{"kind": "event", "record": "01J0Y1ZAG00000000000000001",
        "conversation": "01J0Y1ZAG00000000000000002", "source": "a", "body": {"hex": "00ff"}}"#;
    let out = agdx(&["wire", "encode"], Some(body));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.stdout
            .ends_with(&[0x64, b'b', b'o', b'd', b'y', 0x42, 0x00, 0xff])
    );

    let bad = signature.replace("00ff00ff00ff00ff", "not hex!");
    let out = agdx(
        &["wire", "encode", "--type", "signature"],
        Some(bad.as_bytes()),
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("`key_id`") && stderr.contains("lowercase hex"),
        "{stderr}"
    );
}

#[test]
fn encode_refuses_bad_json_and_invalid_payloads() {
    let out = agdx(&["wire", "encode"], Some(b"not json"));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.is_empty());
    let invalid = br#"{"kind": "command", "record": "01J0Y1ZAG00000000000000001",
        "conversation": "01J0Y1ZAG00000000000000002", "source": "planner", "body": "x"}"#;
    let out = agdx(&["wire", "encode"], Some(invalid));
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("command envelope is missing `correlation`"),
        "{stderr}"
    );
    let typo = br#"{"kind": "event", "conversation": "01J0Y1ZAG00000000000000002", "source": "a", "bdy": "x"}"#;
    let out = agdx(&["wire", "encode"], Some(typo));
    assert!(String::from_utf8_lossy(&out.stderr).contains("has no field `bdy`"));
}

#[test]
fn help_describes_the_commands() {
    let out = agdx(&["wire", "--help"], None);
    let help = String::from_utf8_lossy(&out.stdout);
    for word in ["check", "decode", "encode"] {
        assert!(help.contains(word), "{help}");
    }
    assert!(
        help.contains("lowercase hex") && help.contains("{\"hex\": \"...\"}"),
        "{help}"
    );
    let out = agdx(&["wire", "check", "--help"], None);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("fold-snapshot") && help.contains("re-encodes"),
        "{help}"
    );
}

/// JSON has no NaN or infinity: those floats get an object form, and a NaN
/// with a payload keeps its bits, so `decode | encode` gives the same bytes.
#[test]
fn non_finite_metadata_floats_survive_decode_and_encode() {
    use agdx_wire::{AgentEnvelope, AgentId, ConversationId, Metadata, RecordId};
    let payload_nan = f64::from_bits(0x7ff8_0000_0000_0001);
    let event = AgentEnvelope::event(
        RecordId::from_u128(1),
        ConversationId::from_u128(2),
        AgentId::new("ledger").unwrap(),
        b"x".to_vec(),
    )
    .with_metadata(
        Metadata::new()
            .with("nan", f64::NAN)
            .with("odd_nan", payload_nan)
            .with("down", f64::NEG_INFINITY)
            .with("half", 0.5),
    );
    let bytes = event.encode();
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("floats.bin");
    std::fs::write(&path, &bytes).expect("write");
    let json = decode_json(&path, "envelope");
    assert_eq!(json["metadata"]["nan"], serde_json::json!({"float": "NaN"}));
    assert_eq!(
        json["metadata"]["odd_nan"],
        serde_json::json!({"float_bits": "7ff8000000000001"})
    );
    assert_eq!(
        json["metadata"]["down"],
        serde_json::json!({"float": "-Infinity"})
    );
    assert_eq!(json["metadata"]["half"], 0.5);
    assert_round_trip(&path, "envelope");
}
