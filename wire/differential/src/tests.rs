//! Each known difference is told apart on an input that shows only it.

use crate::cbor::{self, Node, Style};
use crate::corpus::{Entry, reference_entry};
use crate::known::Leniency;
use crate::run::Payload;
use crate::{Verdict, compare};

/// A reference fixture as a tree.
fn fixture(name: &str) -> Node {
    let bytes = laser_wire::fixtures::bytes(name).expect("a fixture of the pinned corpus");
    cbor::parse(bytes).expect("one well-formed item")
}

/// `agent_command.bin` (a valid command with metadata) with `key: value`
/// added to the map `at` names: the envelope (`None`) or its metadata.
fn command_with(at: Option<&str>, key: Node, value: Node) -> Vec<u8> {
    let mut root = fixture("agent_command.bin");
    let entries = root.entries_mut().expect("a map");
    let map = match at {
        None => entries,
        Some(field) => entries
            .iter_mut()
            .find(|(k, _)| k.as_text() == Some(field))
            .and_then(|(_, v)| v.entries_mut())
            .expect("the map named"),
    };
    map.push((key, value));
    root.encode()
}

/// `name` with the value under `key` replaced.
fn replaced(name: &str, key: &str, value: Node) -> Vec<u8> {
    let mut root = fixture(name);
    let slot = root
        .entries_mut()
        .and_then(|e| e.iter_mut().find(|(k, _)| k.as_text() == Some(key)))
        .expect("the key");
    slot.1 = value;
    root.encode()
}

fn unknown(value: Node) -> Vec<u8> {
    command_with(None, Node::text("x-unknown"), value)
}

fn metadata(key: &str, value: Node) -> Vec<u8> {
    command_with(Some("metadata"), Node::text(key), value)
}

fn known_as(payload: Payload, bytes: &[u8]) -> Vec<Leniency> {
    match compare(payload, bytes) {
        Verdict::Known(found) => found,
        Verdict::SameBytes { .. } => panic!("both accept {}", crate::run::hex(bytes)),
        Verdict::BothRefuse => panic!("both refuse {}", crate::run::hex(bytes)),
        Verdict::Failure(why) => panic!("unexplained: {why}"),
    }
}

#[test]
fn the_fixtures_the_inputs_start_from_agree() {
    for name in ["agent_command.bin", "agent_presence.bin", "agent_card.bin"] {
        let bytes = laser_wire::fixtures::bytes(name).unwrap();
        let Entry::Payload(payload) = reference_entry(name) else {
            panic!("{name} is a payload");
        };
        assert!(
            matches!(compare(payload, bytes), Verdict::SameBytes { .. }),
            "{name}"
        );
    }
}

#[test]
fn each_leniency_of_the_reference_is_told_apart() {
    let tagged_text = Node::Tag(55_799, Box::new(Node::text("x")));
    let cases: Vec<(Leniency, Payload, Vec<u8>)> = vec![
        (
            Leniency::Tags,
            Payload::Envelope,
            replaced("agent_command.bin", "operation", tagged_text),
        ),
        (
            Leniency::TwoByteSimple,
            Payload::Envelope,
            unknown(Node::Styled(Style::Wide(1), Box::new(Node::NULL))),
        ),
        (
            Leniency::IndefiniteLength,
            Payload::Envelope,
            replaced(
                "agent_command.bin",
                "operation",
                Node::Styled(Style::Indefinite, Box::new(Node::text("chat"))),
            ),
        ),
        (
            Leniency::NullForAbsent,
            Payload::Envelope,
            command_with(None, Node::text("tool"), Node::NULL),
        ),
        (
            Leniency::ByteStringKeys,
            Payload::Envelope,
            command_with(None, Node::Bytes(b"x-unknown".to_vec()), Node::Uint(1)),
        ),
        (
            Leniency::DuplicateMetadataKeys,
            Payload::Envelope,
            metadata("priority", Node::text("low")),
        ),
        (
            Leniency::DuplicatePartitions,
            Payload::FoldSnapshot,
            replaced(
                "fold_snapshot.bin",
                "as_of",
                Node::Map(vec![
                    (Node::Uint(0), Node::Uint(1)),
                    (Node::Uint(0), Node::Uint(2)),
                ]),
            ),
        ),
        (
            Leniency::BytesForText,
            Payload::Envelope,
            metadata("a", Node::Bytes(b"text".to_vec())),
        ),
        (
            Leniency::ArrayForBytes,
            Payload::Envelope,
            replaced(
                "agent_command.bin",
                "body",
                Node::Array(vec![Node::Uint(1), Node::Uint(2)]),
            ),
        ),
        (
            Leniency::BytesForArray,
            Payload::Card,
            replaced("agent_card.bin", "capabilities", Node::Bytes(Vec::new())),
        ),
        (
            Leniency::UndefinedAsNull,
            Payload::Envelope,
            metadata("a", Node::UNDEFINED),
        ),
        (
            Leniency::PresenceVersion,
            Payload::Presence,
            replaced("agent_presence.bin", "v", Node::Uint(2)),
        ),
    ];
    for (leniency, payload, bytes) in cases {
        assert_eq!(known_as(payload, &bytes), [leniency], "{leniency:?}");
    }
}

#[test]
fn each_strictness_of_the_reference_is_told_apart() {
    let huge_negative = Node::Tag(3, Box::new(Node::Bytes(vec![0xff; 16])));
    let cases: Vec<(Leniency, Payload, Vec<u8>)> = vec![
        (
            Leniency::RefusesUnassignedSimple,
            Payload::Envelope,
            unknown(Node::Simple(0)),
        ),
        (
            Leniency::RefusesHugeNegativeBignum,
            Payload::Envelope,
            unknown(huge_negative),
        ),
        (
            Leniency::RefusesLongKeys,
            Payload::Envelope,
            command_with(None, Node::Text(vec![b'k'; 4097]), Node::Uint(1)),
        ),
        (
            Leniency::PresenceInboxCap,
            Payload::Presence,
            replaced("agent_presence.bin", "inbox", Node::Text(vec![b'i'; 257])),
        ),
    ];
    for (leniency, payload, bytes) in cases {
        assert_eq!(known_as(payload, &bytes), [leniency], "{leniency:?}");
    }
}
