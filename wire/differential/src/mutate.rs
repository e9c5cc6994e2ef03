//! Structure-aware mutations of corpus items: entries dropped, repeated,
//! reordered, re-keyed and added, values swapped for hostile ones (boundary
//! integers, floats of every width, simple values, tags, deep nesting,
//! metadata of every shape), heads written wide or indefinite, subtrees
//! crossed over between inputs, and now and then a damaged byte.

use crate::cbor::{Node, Style};

/// A small deterministic generator (splitmix64): the same seed gives the
/// same inputs, so a failure can be replayed.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const KINDS: &[&str] = &["command", "response", "event", "chunk", "status", "error"];

const OPERATIONS: &[&str] = &[
    "task",
    "card",
    "progress",
    "quarantine",
    "unquarantine",
    "chat",
    "reasoning",
    "tool_args",
    "summarize",
    "state_delta",
];

/// Texts beside the kinds and operations.
const TEXTS: &[&str] = &[
    "memo",
    "Command",
    "stop",
    "json",
    "yaml",
    "cbor",
    "a",
    "planner",
    "led\nger",
    "tab\there",
    "é",
    "\u{7f}",
    "",
    "role",
    "user",
    "developer",
    "bridge_hops",
    "agdx.fence",
    "run",
    "on_behalf_of",
];

/// Any of the kinds, operations and other texts.
fn any_text(rng: &mut Rng) -> &'static str {
    let at = rng.below(KINDS.len() + OPERATIONS.len() + TEXTS.len());
    KINDS
        .iter()
        .chain(OPERATIONS)
        .chain(TEXTS)
        .nth(at)
        .copied()
        .unwrap_or_default()
}

const UINTS: &[u64] = &[
    0,
    1,
    2,
    3,
    7,
    9,
    10,
    23,
    24,
    42,
    255,
    256,
    300,
    65_535,
    65_536,
    u32::MAX as u64,
    u32::MAX as u64 + 1,
    1_717_171_777_000_000,
    i64::MAX as u64,
    i64::MAX as u64 + 1,
    u64::MAX,
];

/// `Nint(n)` is `-1 - n`: -1, -24, -2^63 (the smallest i64), -2^63-1, -2^64.
const NINTS: &[u64] = &[0, 23, 255, i64::MAX as u64, i64::MAX as u64 + 1, u64::MAX];

const F16S: &[u16] = &[
    0x0000, 0x8000, 0x3c00, 0x3e00, 0x7bff, 0x0001, 0x7c00, 0xfc00, 0x7e00, 0xfe00, 0x7e01, 0x7c01,
];
const F32S: &[u32] = &[
    0x3fc0_0000, // 1.5
    0x3dcc_cccd, // 0.1f32
    0x47c3_5000, // 100000
    0x0000_0001, // the smallest subnormal
    0x7f80_0000,
    0x7fc0_0000,
    0x7fc0_0001,
    0x7f80_0001,
    0x8000_0000,
];
const F64S: &[u64] = &[
    0x3ff8_0000_0000_0000, // 1.5
    0x3fb9_9999_9999_999a, // 0.1
    0x40f8_6a00_0000_0000, // 100000
    0x3fb9_9999_a000_0000, // 0.1f32 widened
    0x8000_0000_0000_0000,
    0x0000_0000_0000_0001,
    0x7ff0_0000_0000_0000,
    0x7ff8_0000_0000_0000,
    0xfff8_0000_0000_0000,
    0x7ff8_0000_0000_0001,
    0x7ff0_0000_0000_0001,
    0x43e0_0000_0000_0000, // 2^63
];

fn random_text(rng: &mut Rng) -> Node {
    match rng.below(10) {
        0 => Node::Text(vec![
            b'x';
            *rng.pick(&[64, 65, 256, 257, 1024, 1025, 4096, 4097])
        ]),
        1 => Node::Text(vec![0xff, b'a']),
        2 => Node::Text(vec![0xc3]),
        _ => Node::text(any_text(rng)),
    }
}

fn random_bytes(rng: &mut Rng) -> Node {
    let len = *rng.pick(&[0, 1, 2, 8, 15, 16, 17, 19, 20, 21, 31, 32, 33, 63, 64, 65]);
    let fill = rng.next() as u8;
    Node::Bytes(vec![fill; len])
}

fn random_float(rng: &mut Rng) -> Node {
    match rng.below(3) {
        0 => Node::F16(*rng.pick(F16S)),
        1 => Node::F32(*rng.pick(F32S)),
        _ => Node::F64(*rng.pick(F64S)),
    }
}

fn random_simple(rng: &mut Rng) -> Node {
    match rng.below(8) {
        0 => Node::FALSE,
        1 => Node::TRUE,
        2 => Node::NULL,
        3 => Node::UNDEFINED,
        // 0xe0..0xf3: one-byte simple values 0..19, unassigned.
        4 => Node::Simple(rng.below(20) as u8),
        // 0xf8 0x00..0x1f: not well-formed.
        5 => Node::Styled(Style::Wide(1), Box::new(Node::Simple(rng.below(24) as u8))),
        6 => Node::Simple(24 + rng.below(8) as u8),
        _ => Node::Simple(32 + rng.below(224) as u8),
    }
}

/// Arrays nested `depth` deep around `inner`.
fn nest(depth: usize, inner: Node) -> Node {
    (0..depth).fold(inner, |node, _| Node::Array(vec![node]))
}

/// A hostile value of any type; `depth` bounds how deep it nests.
pub fn random_value(rng: &mut Rng, depth: usize) -> Node {
    let leaf = depth == 0;
    match rng.below(if leaf { 7 } else { 11 }) {
        0 => Node::Uint(*rng.pick(UINTS)),
        1 => Node::Nint(*rng.pick(NINTS)),
        2 => random_bytes(rng),
        3 => random_text(rng),
        4 => random_float(rng),
        5 => random_simple(rng),
        6 => Node::Uint(rng.next() >> rng.below(64)),
        7 => Node::Array(
            (0..rng.below(4))
                .map(|_| random_value(rng, depth - 1))
                .collect(),
        ),
        8 => Node::Map(
            (0..rng.below(3))
                .map(|_| (random_key(rng), random_value(rng, depth - 1)))
                .collect(),
        ),
        9 => {
            let tag = *rng.pick(&[0, 1, 2, 3, 24, 32, 55_799, 1_000_000]);
            // Bignums around the 64- and 128-bit edges, leading zeros too.
            let inner = if tag == 2 || tag == 3 {
                let len = *rng.pick(&[0, 1, 7, 8, 9, 15, 16, 17, 18]);
                let mut bytes = vec![*rng.pick(&[0x00, 0x01, 0x7f, 0x80, 0xff]); len];
                if let Some(last) = bytes.last_mut() {
                    *last = rng.next() as u8;
                }
                Node::Bytes(bytes)
            } else {
                random_value(rng, depth - 1)
            };
            Node::Tag(tag, Box::new(inner))
        }
        _ => {
            let style = if rng.chance(50) {
                Style::Indefinite
            } else {
                Style::Wide(*rng.pick(&[1, 2, 4, 8]))
            };
            Node::Styled(style, Box::new(random_value(rng, depth - 1)))
        }
    }
}

/// A map key: mostly a known field name, sometimes an unknown or
/// ill-typed one.
fn random_key(rng: &mut Rng) -> Node {
    let fields = crate::known::field_names();
    match rng.below(10) {
        0 => Node::text("x-unknown"),
        1 => Node::Bytes(rng.pick(&fields).as_bytes().to_vec()),
        2 => Node::Uint(rng.below(30) as u64),
        3 => Node::Text(vec![b'k'; *rng.pick(&[256, 257, 4096, 4097])]),
        _ => Node::text(rng.pick::<&str>(&fields)),
    }
}

/// A metadata value: text, integers at the range's edges, floats of every
/// width, nested arrays (to the nesting limit and past it), and what the
/// contract refuses (bytes, maps, undefined, tags).
fn metadata_value(rng: &mut Rng) -> Node {
    match rng.below(9) {
        0 => Node::Nint(*rng.pick(NINTS)),
        1 => Node::Uint(*rng.pick(UINTS)),
        2 => random_float(rng),
        3 => nest(1 + rng.below(3), Node::text("a")),
        // Around the limit: the envelope, the metadata map, then arrays.
        4 => nest(250 + rng.below(8), Node::Array(Vec::new())),
        // Each item counts 1 + 1: 512 of them are the 1024 cap.
        5 => Node::Array(vec![Node::text("x"); *rng.pick(&[0, 119, 511, 512, 513])]),
        6 => Node::Text(vec![b'v'; *rng.pick(&[1, 1022, 1024, 1025])]),
        _ => random_value(rng, 2),
    }
}

/// A metadata key: short ones whose byte-wise and length-first orders
/// differ, pinned keys, keys around the 256-byte cap, and numbered ones
/// enough to pass the 32-entry cap.
fn metadata_key(rng: &mut Rng) -> Node {
    let keys = [
        "role",
        "b",
        "B",
        "aa",
        "a",
        "é",
        "z",
        "agdx.fence",
        "bridge_hops",
        "run",
        "k10",
        "k2",
    ];
    match rng.below(10) {
        0 => Node::Text(vec![b'm'; *rng.pick(&[255, 256, 257])]),
        1 | 2 => Node::text(&format!("k{}", rng.below(40))),
        _ => Node::text(rng.pick::<&str>(&keys)),
    }
}

/// Adds distinct numbered keys to `metadata` until it holds 31, 32 or 33
/// entries (the cap is 32), with values that keep the total size in bounds.
fn fill_metadata(rng: &mut Rng, metadata: &mut Vec<(Node, Node)>) {
    let want = 31 + rng.below(3);
    for n in 0..want {
        if metadata.len() >= want {
            return;
        }
        let key = Node::text(&format!("fill{n:02}"));
        if !metadata.iter().any(|(k, _)| *k == key) {
            let at = rng.below(metadata.len() + 1);
            metadata.insert(at, (key, Node::Uint(n as u64)));
        }
    }
}

/// Indices (pre-order) of the maps in `node`.
fn maps(node: &Node) -> Vec<usize> {
    let mut out = Vec::new();
    let mut index = 0;
    walk(node, &mut index, &mut out);
    out
}

fn walk(node: &Node, index: &mut usize, out: &mut Vec<usize>) {
    if node.entries().is_some() {
        out.push(*index);
    }
    *index += 1;
    match node {
        Node::Array(items) => items.iter().for_each(|i| walk(i, index, out)),
        Node::Map(entries) => entries.iter().for_each(|(k, v)| {
            walk(k, index, out);
            walk(v, index, out);
        }),
        Node::Tag(_, inner) | Node::Styled(_, inner) => walk(inner, index, out),
        _ => {}
    }
}

/// Applies one to four structure-aware mutations to `root`: `gentle` ones
/// keep a valid input likely valid (so both sides have bytes to compare),
/// the others are hostile; `donors` are other corpus items to cross
/// subtrees over from.
pub fn mutate(rng: &mut Rng, root: &mut Node, donors: &[Node], gentle: bool) {
    for _ in 0..1 + rng.below(4) {
        if gentle {
            mutate_gently(rng, root);
        } else {
            mutate_once(rng, root, donors);
        }
    }
}

/// A metadata value both sides accept: text, integers across the range,
/// floats of every width (NaNs and signed zeros included), booleans, null,
/// and arrays of those nesting a few levels.
fn valid_metadata_value(rng: &mut Rng, depth: usize) -> Node {
    match rng.below(if depth == 0 { 6 } else { 7 }) {
        0 => Node::text(any_text(rng)),
        1 => Node::Uint(*rng.pick(UINTS)),
        2 => Node::Nint(*rng.pick(&NINTS[..4])),
        3 => random_float(rng),
        4 => rng.pick(&[Node::TRUE, Node::FALSE, Node::NULL]).clone(),
        5 => Node::Styled(Style::Wide(*rng.pick(&[2, 4, 8])), Box::new(Node::Uint(7))),
        _ => Node::Array(
            (0..rng.below(4))
                .map(|_| valid_metadata_value(rng, depth - 1))
                .collect(),
        ),
    }
}

/// A well-typed value for the field `name` (of whichever payload has it),
/// around the field's caps and rules, so that the validity rules of both
/// sides meet inputs that decode.
fn well_typed(rng: &mut Rng, name: &str) -> Option<Node> {
    let text_of = |rng: &mut Rng, lens: &[usize]| Node::Text(vec![b'a'; *rng.pick(lens)]);
    let bytes_of = |rng: &mut Rng, lens: &[usize]| {
        let fill = rng.next() as u8;
        Node::Bytes(vec![fill; *rng.pick(lens)])
    };
    let uint = |rng: &mut Rng, values: &[u64]| Node::Uint(*rng.pick(values));
    Some(match name {
        "kind" => Node::text(rng.pick::<&str>(KINDS)),
        "record" | "conversation" | "cause" | "correlation" | "channel" => bytes_of(rng, &[16]),
        "cause_at" | "payload" | "state" | "body" => bytes_of(rng, &[0, 1, 20]),
        // An envelope's agent id, or a dead letter's log position.
        "source" if rng.chance(50) => bytes_of(rng, &[20]),
        "source" | "target" | "agent" => text_of(rng, &[1, 256, 257]),
        "idempotency_key" => text_of(rng, &[1, 64, 65]),
        "operation" => Node::text(rng.pick::<&str>(OPERATIONS)),
        "finish_reason" | "tool" | "name" | "version" | "skill_id" | "message" | "detail"
        | "inbox" => text_of(rng, &[0, 1, 256, 257]),
        "reference" => text_of(rng, &[0, 1, 1024, 1025]),
        "last" | "retryable" => rng.pick(&[Node::TRUE, Node::FALSE]).clone(),
        "key_id" => bytes_of(rng, &[7, 8, 9]),
        "bytes" => bytes_of(rng, &[63, 64, 65]),
        "sha256" => bytes_of(rng, &[31, 32, 33]),
        "task_state" | "code" | "reason" | "scheme" | "encryption" | "health" | "v" => {
            uint(rng, &[0, 1, 2, 3, 4, 7, 8, 9, 10, 255])
        }
        "content_type" | "cost_class" | "latency_class" => uint(rng, &[0, 1, 8, 255, 256]),
        "agent_version" | "attempts" | "max_concurrency" | "load" => uint(
            rng,
            &[0, 1, 1000, 1001, 65_535, 65_536, u32::MAX as u64, 1 << 32],
        ),
        "deadline_micros"
        | "sequence"
        | "must_understand"
        | "ttl_micros"
        | "size_bytes"
        | "input_tokens"
        | "output_tokens"
        | "reasoning_output_tokens"
        | "cache_read_input_tokens"
        | "cache_creation_input_tokens" => uint(rng, &[0, 1, 2, 1_717_171_777_000_000, u64::MAX]),
        "usage" => Node::Map(vec![
            (Node::text("input_tokens"), Node::Uint(3)),
            (Node::text("output_tokens"), Node::Uint(5)),
        ]),
        "context" => Node::Map(vec![(Node::text("content_type"), Node::Uint(1))]),
        "input" | "output" => Node::Map(vec![if rng.chance(50) {
            (Node::text("content_type"), Node::text("json"))
        } else {
            (Node::text("schema_id"), Node::text("s"))
        }]),
        "as_of" => Node::Map(
            (0..rng.below(3))
                .map(|p| (Node::Uint(p as u64), uint(rng, &[0, 41, u64::MAX])))
                .collect(),
        ),
        _ => return None,
    })
}

/// A mutation that keeps a valid input likely valid: entries reordered,
/// metadata added in any key order, unknown keys added, heads written wide,
/// an optional entry dropped, a field set to a well-typed value.
fn mutate_gently(rng: &mut Rng, root: &mut Node) {
    let Some(entries) = root.entries_mut() else {
        return;
    };
    match rng.below(7) {
        6 => {
            let name = if rng.chance(50) && !entries.is_empty() {
                entries[rng.below(entries.len())]
                    .0
                    .as_text()
                    .map(str::to_owned)
            } else {
                Some((*rng.pick(&crate::known::field_names())).to_owned())
            };
            let Some(name) = name else { return };
            let Some(value) = well_typed(rng, &name) else {
                return;
            };
            match entries.iter_mut().find(|(k, _)| k.as_text() == Some(&name)) {
                Some(entry) => entry.1 = value,
                None => {
                    let at = rng.below(entries.len() + 1);
                    entries.insert(at, (Node::text(&name), value));
                }
            }
        }
        0 => {
            for i in (1..entries.len()).rev() {
                entries.swap(i, rng.below(i + 1));
            }
        }
        1 => {
            let value = valid_metadata_value(rng, 1);
            let at = rng.below(entries.len() + 1);
            entries.insert(at, (Node::text("x-unknown"), value));
        }
        // Integers and lengths written wider than needed.
        2 => {
            let count = root.count();
            let at = rng.below(count);
            let width = *rng.pick(&[1, 2, 4, 8]);
            if let Some(node) = root.nth_mut(at)
                && matches!(
                    node,
                    Node::Uint(_) | Node::Bytes(_) | Node::Text(_) | Node::Map(_)
                )
            {
                *node = Node::Styled(Style::Wide(width), Box::new(node.clone()));
            }
        }
        3 => {
            let optional = [
                "target",
                "cause",
                "cause_at",
                "idempotency_key",
                "tool",
                "metadata",
            ];
            entries.retain(|(k, _)| {
                !k.as_text().is_some_and(|k| optional.contains(&k)) || rng.chance(50)
            });
        }
        5 if rng.chance(25) => {
            if let Some(metadata) = metadata_entries(entries) {
                fill_metadata(rng, metadata);
            }
        }
        _ => {
            if let Some(metadata) = metadata_entries(entries) {
                for _ in 0..1 + rng.below(4) {
                    let key = metadata_key(rng);
                    if metadata.iter().any(|(k, _)| *k == key) {
                        continue;
                    }
                    let entry = (key, valid_metadata_value(rng, 3));
                    let at = rng.below(metadata.len() + 1);
                    metadata.insert(at, entry);
                }
            }
        }
    }
}

fn mutate_once(rng: &mut Rng, root: &mut Node, donors: &[Node]) {
    let count = root.count();
    match rng.below(13) {
        // Replace any item but the root with a hostile value.
        0 | 1 => {
            if count > 1 {
                let at = 1 + rng.below(count - 1);
                let value = random_value(rng, 3);
                if let Some(node) = root.nth_mut(at) {
                    *node = value;
                }
            }
        }
        2 => with_map(rng, root, |rng, entries| {
            if !entries.is_empty() {
                entries.remove(rng.below(entries.len()));
            }
        }),
        3 => with_map(rng, root, |rng, entries| {
            if !entries.is_empty() {
                let (key, _) = entries[rng.below(entries.len())].clone();
                let value = random_value(rng, 2);
                entries.push((key, value));
            }
        }),
        4 => with_map(rng, root, |rng, entries| {
            for i in (1..entries.len()).rev() {
                entries.swap(i, rng.below(i + 1));
            }
        }),
        5 => with_map(rng, root, |rng, entries| {
            let key = random_key(rng);
            let value = random_value(rng, 3);
            let at = rng.below(entries.len() + 1);
            entries.insert(at, (key, value));
        }),
        6 => with_map(rng, root, |rng, entries| {
            if !entries.is_empty() {
                let at = rng.below(entries.len());
                entries[at].0 = random_key(rng);
            }
        }),
        // Write an item's head wide or indefinite, or tag it.
        7 => {
            let at = rng.below(count);
            let style = if rng.chance(50) {
                Style::Indefinite
            } else {
                Style::Wide(*rng.pick(&[1, 2, 4, 8]))
            };
            let tagged = rng.chance(30);
            let tag = *rng.pick(&[0, 1, 2, 3, 24, 55_799]);
            if let Some(node) = root.nth_mut(at) {
                let inner = Box::new(node.clone());
                *node = if tagged {
                    Node::Tag(tag, inner)
                } else {
                    Node::Styled(style, inner)
                };
            }
        }
        // Cross a subtree over from another input.
        8 if !donors.is_empty() => {
            let donor = rng.pick(donors);
            let from = rng.below(donor.count());
            let mut donor = donor.clone();
            let Some(graft) = donor.nth_mut(from).map(|n| n.clone()) else {
                return;
            };
            if count > 1 {
                let at = 1 + rng.below(count - 1);
                if let Some(node) = root.nth_mut(at) {
                    *node = graft;
                }
            }
        }
        // Metadata of every shape, keys in any order.
        9..=11 => {
            let Some(entries) = root.entries_mut() else {
                return;
            };
            if let Some(metadata) = metadata_entries(entries) {
                for _ in 0..1 + rng.below(3) {
                    let entry = (metadata_key(rng), metadata_value(rng));
                    let at = rng.below(metadata.len() + 1);
                    metadata.insert(at, entry);
                }
            }
        }
        _ => {
            if let Some(entries) = root.entries_mut()
                && !entries.is_empty()
            {
                let at = rng.below(entries.len());
                entries[at].1 = nest(250 + rng.below(8), random_value(rng, 0));
            }
        }
    }
}

/// The entries of the metadata map among `entries`: an error body's
/// `detail` map when there is one, else `metadata`, added empty when there
/// is none.
fn metadata_entries(entries: &mut Vec<(Node, Node)>) -> Option<&mut Vec<(Node, Node)>> {
    let named = |name: &str, entries: &[(Node, Node)]| {
        entries
            .iter()
            .position(|(k, v)| k.as_text() == Some(name) && v.entries().is_some())
    };
    let at = match named("detail", entries).or_else(|| named("metadata", entries)) {
        Some(at) => at,
        None => {
            entries.push((Node::text("metadata"), Node::Map(Vec::new())));
            entries.len() - 1
        }
    };
    entries[at].1.entries_mut()
}

fn with_map(rng: &mut Rng, root: &mut Node, f: impl FnOnce(&mut Rng, &mut Vec<(Node, Node)>)) {
    let maps = maps(root);
    if maps.is_empty() {
        return;
    }
    let at = *rng.pick(&maps);
    if let Some(entries) = root.nth_mut(at).and_then(Node::entries_mut) {
        f(rng, entries);
    }
}

/// Now and then damages the encoded bytes: a flipped bit, a cut, a byte
/// more.
pub fn damage(rng: &mut Rng, bytes: &mut Vec<u8>) {
    if bytes.is_empty() || !rng.chance(8) {
        return;
    }
    let at = rng.below(bytes.len());
    match rng.below(4) {
        0 => bytes[at] ^= 1 << rng.below(8),
        1 => bytes.truncate(at),
        2 => bytes.insert(at, rng.next() as u8),
        _ => bytes.push(rng.next() as u8),
    }
}
