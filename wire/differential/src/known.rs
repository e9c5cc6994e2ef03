//! The known differences. Most are leniencies: the reference accepts input
//! that our spec (docs/wire.md: one encoding) forbids; such a disagreement counts
//! as known only when undoing those leniencies in the input, as the
//! reference reads them, makes agdx produce exactly what the reference
//! produced from the original. A few go the other way: the reference refuses
//! what docs/wire.md accepts; such a disagreement counts as known only when
//! removing what it refuses makes the reference produce exactly what agdx
//! produced.

use crate::cbor::{Node, Style};
use crate::run::Payload;

/// One leniency of the reference that agdx keeps refusing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Leniency {
    Tags,
    TwoByteSimple,
    IndefiniteLength,
    NullForAbsent,
    ByteStringKeys,
    DuplicateMetadataKeys,
    DuplicatePartitions,
    BytesForText,
    ArrayForBytes,
    BytesForArray,
    UndefinedAsNull,
    PresenceVersion,
    RefusesUnassignedSimple,
    RefusesHugeNegativeBignum,
    RefusesLongKeys,
    PresenceInboxCap,
}

/// Every known difference and why it stays.
pub const KNOWN: &[(Leniency, &str)] = &[
    (
        Leniency::Tags,
        "the reference skips a CBOR tag before a field's item (and reads a tag 2/3 bignum as an integer where it expects one); wire.md gives each field one major type, with no tag",
    ),
    (
        Leniency::TwoByteSimple,
        "the reference reads the two-byte forms of false, true, null and undefined (0xf8 0x14..0x17) as those values; they are not well-formed (RFC 8949 section 3.3), and wire.md fails them",
    ),
    (
        Leniency::IndefiniteLength,
        "the reference reads indefinite-length strings, arrays and maps; wire.md has definite lengths only",
    ),
    (
        Leniency::NullForAbsent,
        "the reference reads null (or undefined) for an absent optional field; wire.md omits absent optionals, never null",
    ),
    (
        Leniency::ByteStringKeys,
        "the reference matches a field name given as a byte string; wire.md keys are text",
    ),
    (
        Leniency::DuplicateMetadataKeys,
        "the reference keeps the last of repeated metadata keys; wire.md fails on a duplicate key",
    ),
    (
        Leniency::DuplicatePartitions,
        "the reference keeps the last of repeated partitions in a fold snapshot's `as_of`; wire.md fails on a duplicate key",
    ),
    (
        Leniency::BytesForText,
        "the reference reads a UTF-8 byte string as a metadata text value; wire.md text is major type 3",
    ),
    (
        Leniency::ArrayForBytes,
        "the reference reads an array of small integers as a byte field (its JSON form); wire.md byte strings are major type 2",
    ),
    (
        Leniency::BytesForArray,
        "the reference reads a byte string as an array of its bytes where a field is an array (an empty one as an empty card capability list); wire.md arrays are major type 4",
    ),
    (
        Leniency::UndefinedAsNull,
        "the reference reads undefined as a null metadata value; wire.md metadata has null, not undefined",
    ),
    (
        Leniency::PresenceVersion,
        "the reference accepts a presence body of any `v`; wire.md pins v = 1, and a body of another version is not read as this one",
    ),
    (
        Leniency::RefusesUnassignedSimple,
        "the other way round: the reference refuses an unassigned simple value (0xe0..0xf3, 0xf8 0x20..0xff) even under an unknown key; wire.md ignores unknown keys, and those values are well-formed, valid CBOR",
    ),
    (
        Leniency::RefusesHugeNegativeBignum,
        "the other way round: the reference refuses a negative bignum (tag 3 before at most 16 bytes) below -2^127 even under an unknown key (it reads the value as an i128); wire.md ignores unknown keys, and the item is well-formed, valid CBOR",
    ),
    (
        Leniency::PresenceInboxCap,
        "the other way round: the reference caps a presence `inbox` at 256 bytes; wire.md sets no cap on it",
    ),
    (
        Leniency::RefusesLongKeys,
        "the other way round: the reference refuses a key of more than 4096 bytes in an envelope or capsule map (its decoder's buffer); wire.md sets no such limit, and an unknown key of any length is skipped",
    ),
];

/// The longest presence `inbox` the reference accepts.
const PRESENCE_INBOX_CAP: usize = 256;

/// The longest key the reference reads in an envelope or capsule map.
const REFERENCE_KEY_BUFFER: usize = 4096;

/// What a field holds, for undoing the leniencies where they apply.
#[derive(Clone, Copy)]
enum Ty {
    Text,
    Bytes,
    Uint,
    Bool,
    Struct(&'static [Field]),
    Metadata,
    Capabilities,
    ContentRef,
    AsOf,
}

/// A named field; `optional` when the reference holds it as an `Option`
/// (null reads as absent there).
#[derive(Clone, Copy)]
struct Field(&'static str, Ty, bool);

const USAGE: &[Field] = &[
    Field("input_tokens", Ty::Uint, false),
    Field("output_tokens", Ty::Uint, false),
    Field("reasoning_output_tokens", Ty::Uint, true),
    Field("cache_read_input_tokens", Ty::Uint, true),
    Field("cache_creation_input_tokens", Ty::Uint, true),
];
const CONTEXT: &[Field] = &[
    Field("content_type", Ty::Uint, true),
    Field("agent_version", Ty::Uint, true),
];
const SIGNATURE: &[Field] = &[
    Field("scheme", Ty::Uint, false),
    Field("key_id", Ty::Bytes, false),
    Field("bytes", Ty::Bytes, false),
    Field("context", Ty::Struct(CONTEXT), true),
];
const ENVELOPE: &[Field] = &[
    Field("kind", Ty::Text, false),
    Field("record", Ty::Bytes, true),
    Field("conversation", Ty::Bytes, false),
    Field("source", Ty::Text, false),
    Field("target", Ty::Text, true),
    Field("cause", Ty::Bytes, true),
    Field("cause_at", Ty::Bytes, true),
    Field("correlation", Ty::Bytes, true),
    Field("channel", Ty::Bytes, true),
    Field("idempotency_key", Ty::Text, true),
    Field("deadline_micros", Ty::Uint, true),
    Field("sequence", Ty::Uint, true),
    Field("last", Ty::Bool, false),
    Field("finish_reason", Ty::Text, true),
    Field("task_state", Ty::Uint, true),
    Field("operation", Ty::Text, true),
    Field("tool", Ty::Text, true),
    Field("usage", Ty::Struct(USAGE), true),
    Field("metadata", Ty::Metadata, true),
    Field("must_understand", Ty::Uint, false),
    Field("body", Ty::Bytes, false),
    Field("signature", Ty::Struct(SIGNATURE), true),
];
const ERROR_BODY: &[Field] = &[
    Field("code", Ty::Uint, false),
    Field("message", Ty::Text, true),
    Field("retryable", Ty::Bool, false),
    Field("detail", Ty::Metadata, true),
];
const BODY_REF: &[Field] = &[
    Field("reference", Ty::Text, false),
    Field("size_bytes", Ty::Uint, false),
    Field("sha256", Ty::Bytes, false),
    Field("encryption", Ty::Uint, true),
];
const DEAD_LETTER: &[Field] = &[
    Field("source", Ty::Bytes, false),
    Field("reason", Ty::Uint, false),
    Field("attempts", Ty::Uint, false),
    Field("detail", Ty::Text, true),
    Field("payload", Ty::Bytes, false),
];
const CAPABILITY: &[Field] = &[
    Field("skill_id", Ty::Text, false),
    Field("input", Ty::ContentRef, true),
    Field("output", Ty::ContentRef, true),
    Field("cost_class", Ty::Uint, true),
    Field("latency_class", Ty::Uint, true),
    Field("max_concurrency", Ty::Uint, true),
    Field("health", Ty::Uint, true),
    Field("load", Ty::Uint, true),
];
const CARD: &[Field] = &[
    Field("name", Ty::Text, true),
    Field("version", Ty::Text, true),
    Field("capabilities", Ty::Capabilities, false),
    Field("ttl_micros", Ty::Uint, true),
];
const PRESENCE: &[Field] = &[
    Field("v", Ty::Uint, false),
    Field("agent", Ty::Text, false),
    Field("inbox", Ty::Text, true),
];
const SNAPSHOT: &[Field] = &[
    Field("conversation", Ty::Bytes, false),
    Field("as_of", Ty::AsOf, false),
    Field("state", Ty::Bytes, false),
];

/// Every field name either implementation knows, for mutations.
pub fn field_names() -> Vec<&'static str> {
    let mut names: Vec<&str> = [
        ENVELOPE,
        USAGE,
        CONTEXT,
        SIGNATURE,
        ERROR_BODY,
        BODY_REF,
        DEAD_LETTER,
        CAPABILITY,
        CARD,
        PRESENCE,
        SNAPSHOT,
    ]
    .iter()
    .flat_map(|schema| schema.iter().map(|f| f.0))
    .chain(["content_type", "schema_id"])
    .collect();
    names.sort_unstable();
    names.dedup();
    names
}

fn schema(payload: Payload) -> &'static [Field] {
    match payload {
        Payload::Envelope => ENVELOPE,
        Payload::ErrorBody => ERROR_BODY,
        Payload::BodyRef => BODY_REF,
        Payload::DeadLetter => DEAD_LETTER,
        Payload::Signature => SIGNATURE,
        Payload::SignatureContext => CONTEXT,
        Payload::Card => CARD,
        Payload::Presence => PRESENCE,
        Payload::Usage => USAGE,
        Payload::FoldSnapshot => SNAPSHOT,
    }
}

/// The input with every known leniency undone as the reference reads it,
/// and which ones were there. A presence body's `v` becomes 1: a rule the
/// reference lacks, not a way it reads the input.
pub fn normalize(node: &Node, payload: Payload) -> (Node, Vec<Leniency>) {
    let mut found = Vec::new();
    let mut node = node.clone();
    one_byte_simples(&mut node, &mut found);
    structure(&mut node, schema(payload), &mut found);
    if payload == Payload::Presence
        && let Some(v) = node.entries_mut().and_then(|e| {
            e.iter_mut()
                .find(|(k, _)| k.as_text() == Some("v"))
                .map(|(_, v)| v)
        })
        && *v != Node::Uint(1)
    {
        found.push(Leniency::PresenceVersion);
        *v = Node::Uint(1);
    }
    found.sort_unstable();
    found.dedup();
    (node, found)
}

/// The input without what the reference refuses but wire.md accepts (an
/// unknown key holding an unassigned simple value or a negative bignum below
/// -2^127, a key longer than the reference's buffer), and whether there was
/// any. A presence `inbox` past the reference's cap is cut to it: a rule
/// agdx lacks, not a way it reads the input.
pub fn without_refused(node: &Node, payload: Payload) -> (Node, Vec<Leniency>) {
    let mut found = Vec::new();
    let mut node = node.clone();
    drop_refused(&mut node, schema(payload), &mut found);
    if payload == Payload::Presence
        && let Some(inbox) = node.entries_mut().and_then(|e| {
            e.iter_mut()
                .find(|(k, _)| k.as_text() == Some("inbox"))
                .map(|(_, v)| v)
        })
        && inbox
            .as_text()
            .is_some_and(|t| t.len() > PRESENCE_INBOX_CAP)
    {
        found.push(Leniency::PresenceInboxCap);
        *inbox = Node::text(&"x".repeat(PRESENCE_INBOX_CAP));
    }
    (node, found)
}

fn drop_refused(node: &mut Node, fields: &'static [Field], found: &mut Vec<Leniency>) {
    let Some(entries) = node.entries_mut() else {
        return;
    };
    entries.retain_mut(|(key, value)| {
        if key
            .as_text()
            .is_some_and(|k| k.len() > REFERENCE_KEY_BUFFER)
        {
            found.push(Leniency::RefusesLongKeys);
            return false;
        }
        match fields.iter().find(|f| key.as_text() == Some(f.0)) {
            Some(Field(_, Ty::Struct(inner), _)) => drop_refused(value, inner, found),
            Some(Field(_, Ty::Capabilities, _)) => {
                if let Some(items) = value.items_mut() {
                    items
                        .iter_mut()
                        .for_each(|i| drop_refused(i, CAPABILITY, found));
                }
            }
            Some(_) => {}
            None => {
                if let Some(refused) = refused_anywhere(value) {
                    found.push(refused);
                    return false;
                }
            }
        }
        true
    });
}

/// What the reference refuses in an item wherever it sits, an unknown key's
/// value included: an unassigned simple value, or a negative bignum (tag 3
/// before at most 16 bytes) below -2^127, which it reads as an `i128`.
fn refused_anywhere(node: &Node) -> Option<Leniency> {
    match node {
        Node::Simple(v) if !(20..=23).contains(v) => Some(Leniency::RefusesUnassignedSimple),
        Node::Tag(3, inner) if bignum_magnitude(inner).is_some_and(|v| v > i128::MAX as u128) => {
            Some(Leniency::RefusesHugeNegativeBignum)
        }
        Node::Array(items) => items.iter().find_map(refused_anywhere),
        Node::Map(entries) => entries
            .iter()
            .find_map(|(k, v)| refused_anywhere(k).or_else(|| refused_anywhere(v))),
        Node::Tag(_, inner) | Node::Styled(_, inner) => refused_anywhere(inner),
        _ => None,
    }
}

/// The value of a bignum's content, when the reference reads it as one
/// where any item may stand: a definite byte string of at most 16 bytes.
fn bignum_magnitude(content: &Node) -> Option<u128> {
    match content {
        Node::Bytes(b) if b.len() <= 16 => big(b),
        Node::Styled(Style::Wide(_), inner) => bignum_magnitude(inner),
        _ => None,
    }
}

/// Removes tags before an item and indefinite lengths, outermost first.
/// Where the reference reads an integer (`integers`), tags 2 and 3 are
/// bignums and become integers.
fn untag(node: &mut Node, found: &mut Vec<Leniency>, integers: bool) {
    loop {
        match node {
            Node::Tag(tag, inner) => {
                let bignum = match *tag {
                    2 | 3 if integers => bignum_as_integer(inner).map(|v| (v, *tag == 3)),
                    _ => None,
                };
                match bignum {
                    // One the reference cannot hold it refuses: leave it.
                    Some((v, negative)) => {
                        let Ok(v) = u64::try_from(v) else { return };
                        found.push(Leniency::Tags);
                        *node = if negative {
                            Node::Nint(v)
                        } else {
                            Node::Uint(v)
                        };
                        return;
                    }
                    None => {
                        found.push(Leniency::Tags);
                        *node = (**inner).clone();
                    }
                }
            }
            Node::Styled(Style::Indefinite, inner) => {
                found.push(Leniency::IndefiniteLength);
                *node = (**inner).clone();
            }
            // A tag whose head is written wide.
            Node::Styled(Style::Wide(_), inner) if matches!(**inner, Node::Tag(..)) => {
                *node = (**inner).clone();
            }
            _ => return,
        }
    }
}

/// The value of a bignum's content where the reference expects an
/// integer: a byte string of any form, at most 16 bytes past its leading
/// zeros.
fn bignum_as_integer(content: &Node) -> Option<u128> {
    match content {
        Node::Bytes(b) => {
            let significant = &b[b.iter().take_while(|&&byte| byte == 0).count()..];
            (significant.len() <= 16)
                .then(|| big(significant))
                .flatten()
        }
        Node::Styled(_, inner) => bignum_as_integer(inner),
        _ => None,
    }
}

fn big(bytes: &[u8]) -> Option<u128> {
    bytes
        .iter()
        .try_fold(0u128, |acc, b| Some(acc.checked_mul(256)? + u128::from(*b)))
}

fn is_null(node: &Node) -> bool {
    matches!(node, Node::Simple(22 | 23))
}

fn structure(node: &mut Node, fields: &'static [Field], found: &mut Vec<Leniency>) {
    untag(node, found, false);
    let Some(entries) = node.entries_mut() else {
        return;
    };
    for (key, _) in entries.iter_mut() {
        // A field name is read as an identifier: tags skipped, bignum or not.
        loop {
            match key {
                Node::Tag(_, inner) => {
                    found.push(Leniency::Tags);
                    *key = (**inner).clone();
                }
                Node::Styled(Style::Wide(_), inner) => *key = (**inner).clone(),
                _ => break,
            }
        }
        if let Node::Bytes(b) = key {
            found.push(Leniency::ByteStringKeys);
            // A name that is not UTF-8 names no field: any unknown key.
            *key = match std::str::from_utf8(b) {
                Ok(name) => Node::text(name),
                Err(_) => Node::text("x-not-utf-8"),
            };
        }
    }
    entries.retain_mut(|(key, value)| {
        let Some(field) = fields.iter().find(|f| key.as_text() == Some(f.0)) else {
            // An unknown key's value is skipped whatever its form.
            plain(value, found);
            return true;
        };
        untag(value, found, matches!(field.1, Ty::Uint));
        if field.2 && is_null(value) {
            found.push(Leniency::NullForAbsent);
            return false;
        }
        typed(value, field.1, found);
        true
    });
}

/// The two-byte false, true, null and undefined, read as the one-byte ones.
fn one_byte_simples(node: &mut Node, found: &mut Vec<Leniency>) {
    match node {
        Node::Styled(Style::Wide(1), inner) if matches!(**inner, Node::Simple(20..=23)) => {
            found.push(Leniency::TwoByteSimple);
            *node = (**inner).clone();
        }
        Node::Array(items) => items.iter_mut().for_each(|i| one_byte_simples(i, found)),
        Node::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            one_byte_simples(k, found);
            one_byte_simples(v, found);
        }),
        Node::Tag(_, inner) | Node::Styled(_, inner) => one_byte_simples(inner, found),
        _ => {}
    }
}

/// A head written wide, as both read it: the item itself.
fn unstyle(node: &mut Node) {
    while let Node::Styled(Style::Wide(_), inner) = node {
        *node = (**inner).clone();
    }
}

/// Every tag and indefinite length removed, however deep.
fn plain(node: &mut Node, found: &mut Vec<Leniency>) {
    untag(node, found, false);
    match node {
        Node::Array(items) => items.iter_mut().for_each(|i| plain(i, found)),
        Node::Map(entries) => entries.iter_mut().for_each(|(k, v)| {
            plain(k, found);
            plain(v, found);
        }),
        Node::Styled(_, inner) => plain(inner, found),
        _ => {}
    }
}

fn typed(value: &mut Node, ty: Ty, found: &mut Vec<Leniency>) {
    match ty {
        Ty::Struct(fields) => structure(value, fields, found),
        Ty::Metadata => metadata(value, found),
        Ty::Bytes => {
            // Each item is read as an integer: tags skipped, bignums read.
            let mut read = Vec::new();
            let bytes = value.items_mut().and_then(|items| {
                items
                    .iter()
                    .map(|i| {
                        let mut i = i.clone();
                        untag(&mut i, &mut read, true);
                        unstyle(&mut i);
                        match i {
                            Node::Uint(b) => u8::try_from(b).ok(),
                            _ => None,
                        }
                    })
                    .collect::<Option<Vec<u8>>>()
            });
            if let Some(bytes) = bytes {
                found.push(Leniency::ArrayForBytes);
                found.append(&mut read);
                *value = Node::Bytes(bytes);
            }
        }
        Ty::Capabilities => {
            unstyle(value);
            if let Node::Bytes(b) = value
                && b.is_empty()
            {
                found.push(Leniency::BytesForArray);
                *value = Node::Array(Vec::new());
            }
            if let Some(items) = value.items_mut() {
                for item in items {
                    structure(item, CAPABILITY, found);
                }
            }
        }
        Ty::ContentRef => structure(value, &[], found),
        Ty::AsOf => as_of(value, found),
        Ty::Text | Ty::Uint | Ty::Bool => {}
    }
}

/// Metadata is a map of text keys read through serde's buffered (untagged)
/// path: the last of repeated keys wins, byte strings read as text,
/// undefined as null; tags there are refused, bignums aside.
fn metadata(node: &mut Node, found: &mut Vec<Leniency>) {
    untag(node, found, false);
    let Some(entries) = node.entries_mut() else {
        return;
    };
    let mut kept: Vec<(Node, Node)> = Vec::new();
    for (mut key, mut value) in std::mem::take(entries) {
        // Keys are read as strings: tags skipped, chunks joined.
        untag(&mut key, found, false);
        unstyle(&mut key);
        metadata_value(&mut value, found);
        let same = |k: &Node| k.as_text().is_some() && k.as_text() == key.as_text();
        match kept.iter_mut().find(|(k, _)| same(k)) {
            Some(slot) => {
                found.push(Leniency::DuplicateMetadataKeys);
                slot.1 = value;
            }
            None => kept.push((key, value)),
        }
    }
    *entries = kept;
}

/// A fold snapshot's `as_of` is a map of integers read through serde's map
/// path: tags skipped (bignums read as integers), the last of repeated
/// partitions kept.
fn as_of(node: &mut Node, found: &mut Vec<Leniency>) {
    let Some(entries) = node.entries_mut() else {
        return;
    };
    let mut kept: Vec<(Node, Node)> = Vec::new();
    for (mut partition, mut offset) in std::mem::take(entries) {
        untag(&mut partition, found, true);
        unstyle(&mut partition);
        untag(&mut offset, found, true);
        match kept.iter_mut().find(|(p, _)| *p == partition) {
            Some(slot) => {
                found.push(Leniency::DuplicatePartitions);
                slot.1 = offset;
            }
            None => kept.push((partition, offset)),
        }
    }
    *entries = kept;
}

fn metadata_value(node: &mut Node, found: &mut Vec<Leniency>) {
    unstyle(node);
    if let Node::Tag(2 | 3, inner) = node
        && bignum_magnitude(inner).is_some()
    {
        untag(node, found, true);
    }
    if let Node::Styled(Style::Indefinite, _) = node {
        untag(node, found, false);
        unstyle(node);
    }
    match node {
        Node::Bytes(b) if std::str::from_utf8(b).is_ok() => {
            found.push(Leniency::BytesForText);
            *node = Node::Text(b.clone());
        }
        Node::Simple(23) => {
            found.push(Leniency::UndefinedAsNull);
            *node = Node::NULL;
        }
        Node::Array(items) => items.iter_mut().for_each(|i| metadata_value(i, found)),
        _ => {}
    }
}
