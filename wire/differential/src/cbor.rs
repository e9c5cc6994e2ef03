//! A CBOR item tree that can also say how each head is written (shortest,
//! wider than needed, indefinite length), so mutations can build both the
//! canonical form and the variants decoders differ on.

/// One CBOR item.
#[derive(Debug, Clone, PartialEq)]
pub enum Node {
    Uint(u64),
    /// The negative integer `-1 - n`.
    Nint(u64),
    Bytes(Vec<u8>),
    /// Text content, not necessarily UTF-8.
    Text(Vec<u8>),
    Array(Vec<Node>),
    Map(Vec<(Node, Node)>),
    Tag(u64, Box<Node>),
    /// A simple value: 20 false, 21 true, 22 null, 23 undefined, others
    /// unassigned (below 24 one byte, else `0xf8 n`, below 32 ill-formed).
    Simple(u8),
    F16(u16),
    F32(u32),
    F64(u64),
    /// An item written in another form than the shortest.
    Styled(Style, Box<Node>),
}

/// How a head is written.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Style {
    /// The argument in 1, 2, 4 or 8 bytes even when it is smaller.
    Wide(u8),
    /// An indefinite-length string (in chunks), array or map.
    Indefinite,
}

impl Node {
    pub fn text(s: &str) -> Node {
        Node::Text(s.as_bytes().to_vec())
    }

    pub const FALSE: Node = Node::Simple(20);
    pub const TRUE: Node = Node::Simple(21);
    pub const NULL: Node = Node::Simple(22);
    pub const UNDEFINED: Node = Node::Simple(23);

    /// The text, when the item is (valid UTF-8) text.
    pub fn as_text(&self) -> Option<&str> {
        match self {
            Node::Text(t) => std::str::from_utf8(t).ok(),
            Node::Styled(_, inner) => inner.as_text(),
            _ => None,
        }
    }

    /// The entries, when the item is a map.
    pub fn entries_mut(&mut self) -> Option<&mut Vec<(Node, Node)>> {
        match self {
            Node::Map(entries) => Some(entries),
            Node::Styled(_, inner) => inner.entries_mut(),
            _ => None,
        }
    }

    /// The items, when the item is an array.
    pub fn items_mut(&mut self) -> Option<&mut Vec<Node>> {
        match self {
            Node::Array(items) => Some(items),
            Node::Styled(_, inner) => inner.items_mut(),
            _ => None,
        }
    }

    /// The entries, when the item is a map.
    pub fn entries(&self) -> Option<&[(Node, Node)]> {
        match self {
            Node::Map(entries) => Some(entries),
            Node::Styled(_, inner) => inner.entries(),
            _ => None,
        }
    }

    /// The value under text key `key` of a map.
    pub fn get(&self, key: &str) -> Option<&Node> {
        self.entries()?
            .iter()
            .find(|(k, _)| k.as_text() == Some(key))
            .map(|(_, v)| v)
    }

    /// The encoded bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write(&mut out, None);
        out
    }

    /// Every item of the tree, this one included: how many.
    pub fn count(&self) -> usize {
        1 + match self {
            Node::Array(items) => items.iter().map(Node::count).sum(),
            Node::Map(entries) => entries.iter().map(|(k, v)| k.count() + v.count()).sum(),
            Node::Tag(_, inner) | Node::Styled(_, inner) => inner.count(),
            _ => 0,
        }
    }

    /// The `index`-th item in pre-order (0 is this one).
    pub fn nth_mut(&mut self, index: usize) -> Option<&mut Node> {
        let mut left = index;
        self.nth_inner(&mut left)
    }

    fn nth_inner(&mut self, left: &mut usize) -> Option<&mut Node> {
        if *left == 0 {
            return Some(self);
        }
        *left -= 1;
        match self {
            Node::Array(items) => items.iter_mut().find_map(|i| i.nth_inner(left)),
            Node::Map(entries) => entries
                .iter_mut()
                .find_map(|(k, v)| k.nth_inner(left).or_else(|| v.nth_inner(left))),
            Node::Tag(_, inner) | Node::Styled(_, inner) => inner.nth_inner(left),
            _ => None,
        }
    }

    fn write(&self, out: &mut Vec<u8>, style: Option<Style>) {
        match self {
            Node::Uint(v) => head(out, 0, *v, style),
            Node::Nint(v) => head(out, 1, *v, style),
            Node::Bytes(b) => string(out, 2, b, style),
            Node::Text(t) => string(out, 3, t, style),
            Node::Array(items) => {
                container_head(out, 4, items.len(), style);
                for item in items {
                    item.write(out, None);
                }
                end_indefinite(out, style);
            }
            Node::Map(entries) => {
                container_head(out, 5, entries.len(), style);
                for (k, v) in entries {
                    k.write(out, None);
                    v.write(out, None);
                }
                end_indefinite(out, style);
            }
            Node::Tag(tag, inner) => {
                head(out, 6, *tag, style);
                inner.write(out, None);
            }
            Node::Simple(v) if *v < 24 && style != Some(Style::Wide(1)) => out.push(0xe0 | v),
            Node::Simple(v) => out.extend_from_slice(&[0xf8, *v]),
            Node::F16(b) => {
                out.push(0xf9);
                out.extend_from_slice(&b.to_be_bytes());
            }
            Node::F32(b) => {
                out.push(0xfa);
                out.extend_from_slice(&b.to_be_bytes());
            }
            Node::F64(b) => {
                out.push(0xfb);
                out.extend_from_slice(&b.to_be_bytes());
            }
            Node::Styled(style, inner) => inner.write(out, Some(*style)),
        }
    }
}

fn head(out: &mut Vec<u8>, major: u8, v: u64, style: Option<Style>) {
    let m = major << 5;
    let shortest = shortest_width(v);
    // A wide form never truncates the argument.
    let width = match style {
        Some(Style::Wide(w)) if w >= shortest && matches!(w, 1 | 2 | 4 | 8) => w,
        _ => shortest,
    };
    match width {
        0 => out.push(m | v as u8),
        1 => out.extend_from_slice(&[m | 24, v as u8]),
        2 => {
            out.push(m | 25);
            out.extend_from_slice(&(v as u16).to_be_bytes());
        }
        4 => {
            out.push(m | 26);
            out.extend_from_slice(&(v as u32).to_be_bytes());
        }
        _ => {
            out.push(m | 27);
            out.extend_from_slice(&v.to_be_bytes());
        }
    }
}

/// Bytes after the initial byte that the shortest head for `v` takes.
fn shortest_width(v: u64) -> u8 {
    match v {
        0..=23 => 0,
        24..=0xff => 1,
        0x100..=0xffff => 2,
        0x1_0000..=0xffff_ffff => 4,
        _ => 8,
    }
}

fn string(out: &mut Vec<u8>, major: u8, content: &[u8], style: Option<Style>) {
    if style == Some(Style::Indefinite) {
        out.push((major << 5) | 31);
        // Two chunks (the second may be empty), then the break.
        let (a, b) = content.split_at(content.len() / 2);
        for chunk in [a, b] {
            head(out, major, chunk.len() as u64, None);
            out.extend_from_slice(chunk);
        }
        out.push(0xff);
        return;
    }
    head(out, major, content.len() as u64, style);
    out.extend_from_slice(content);
}

fn container_head(out: &mut Vec<u8>, major: u8, len: usize, style: Option<Style>) {
    if style == Some(Style::Indefinite) {
        out.push((major << 5) | 31);
    } else {
        head(out, major, len as u64, style);
    }
}

fn end_indefinite(out: &mut Vec<u8>, style: Option<Style>) {
    if style == Some(Style::Indefinite) {
        out.push(0xff);
    }
}

/// Parses one well-formed item and nothing after it; `None` for anything
/// else. Non-shortest and indefinite forms come back as [`Node::Styled`].
pub fn parse(bytes: &[u8]) -> Option<Node> {
    let mut p = Parser { buf: bytes, pos: 0 };
    let node = p.item(0)?;
    (p.pos == bytes.len()).then_some(node)
}

struct Parser<'a> {
    buf: &'a [u8],
    pos: usize,
}

/// Deeper than any decoder under test follows; parsing gives up there.
const PARSE_DEPTH: usize = 600;

impl Parser<'_> {
    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let out = self.buf.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(out)
    }

    fn byte(&mut self) -> Option<u8> {
        Some(self.take(1)?[0])
    }

    /// The argument and the style it was written in.
    fn argument(&mut self, info: u8) -> Option<(u64, Option<Style>)> {
        let (v, width) = match info {
            0..=23 => return Some((u64::from(info), None)),
            24 => (u64::from(self.byte()?), 1),
            25 => (
                u64::from(u16::from_be_bytes(self.take(2)?.try_into().ok()?)),
                2,
            ),
            26 => (
                u64::from(u32::from_be_bytes(self.take(4)?.try_into().ok()?)),
                4,
            ),
            27 => (u64::from_be_bytes(self.take(8)?.try_into().ok()?), 8),
            _ => return None,
        };
        Some((
            v,
            (width != shortest_width(v)).then_some(Style::Wide(width)),
        ))
    }

    fn item(&mut self, depth: usize) -> Option<Node> {
        if depth > PARSE_DEPTH {
            return None;
        }
        let initial = self.byte()?;
        let (major, info) = (initial >> 5, initial & 0x1f);
        if major == 7 {
            return Some(match info {
                0..=23 => Node::Simple(info),
                24 => match self.byte()? {
                    // Two bytes for what one holds (ill-formed below 32).
                    b @ 0..=23 => Node::Styled(Style::Wide(1), Box::new(Node::Simple(b))),
                    b => Node::Simple(b),
                },
                25 => Node::F16(u16::from_be_bytes(self.take(2)?.try_into().ok()?)),
                26 => Node::F32(u32::from_be_bytes(self.take(4)?.try_into().ok()?)),
                27 => Node::F64(u64::from_be_bytes(self.take(8)?.try_into().ok()?)),
                _ => return None,
            });
        }
        if info == 31 {
            let node = match major {
                2 | 3 => {
                    let mut content = Vec::new();
                    while self.buf.get(self.pos) != Some(&0xff) {
                        let chunk = self.byte()?;
                        if chunk >> 5 != major {
                            return None;
                        }
                        let (len, _) = self.argument(chunk & 0x1f)?;
                        content.extend_from_slice(self.take(usize::try_from(len).ok()?)?);
                    }
                    if major == 2 {
                        Node::Bytes(content)
                    } else {
                        Node::Text(content)
                    }
                }
                4 => {
                    let mut items = Vec::new();
                    while self.buf.get(self.pos) != Some(&0xff) {
                        items.push(self.item(depth + 1)?);
                    }
                    Node::Array(items)
                }
                5 => {
                    let mut entries = Vec::new();
                    while self.buf.get(self.pos) != Some(&0xff) {
                        entries.push((self.item(depth + 1)?, self.item(depth + 1)?));
                    }
                    Node::Map(entries)
                }
                _ => return None,
            };
            self.pos += 1;
            return Some(Node::Styled(Style::Indefinite, Box::new(node)));
        }
        let (arg, style) = self.argument(info)?;
        let node = match major {
            0 => Node::Uint(arg),
            1 => Node::Nint(arg),
            2 => Node::Bytes(self.take(usize::try_from(arg).ok()?)?.to_vec()),
            3 => Node::Text(self.take(usize::try_from(arg).ok()?)?.to_vec()),
            4 => {
                // Every item takes a byte: refuse a claim the input cannot back.
                if arg > (self.buf.len() - self.pos) as u64 {
                    return None;
                }
                let mut items = Vec::new();
                for _ in 0..arg {
                    items.push(self.item(depth + 1)?);
                }
                Node::Array(items)
            }
            5 => {
                if arg > (self.buf.len() - self.pos) as u64 {
                    return None;
                }
                let mut entries = Vec::new();
                for _ in 0..arg {
                    entries.push((self.item(depth + 1)?, self.item(depth + 1)?));
                }
                Node::Map(entries)
            }
            _ => Node::Tag(arg, Box::new(self.item(depth + 1)?)),
        };
        Some(match style {
            Some(style) => Node::Styled(style, Box::new(node)),
            None => node,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_encode_round_trip_every_form() {
        let cases: [&[u8]; 9] = [
            &[0x18, 0x05],
            &[0x5f, 0x41, 0x01, 0x41, 0x02, 0xff],
            &[0x9f, 0x01, 0x9f, 0xff, 0xff],
            &[0xbf, 0x61, b'a', 0xf7, 0xff],
            &[0xc2, 0x41, 0x01],
            &[0xf8, 0x00],
            &[0xf9, 0x7e, 0x00],
            &[0x19, 0x00, 0x01],
            &[0xa1, 0x41, b'k', 0x3b, 0x80, 0, 0, 0, 0, 0, 0, 0],
        ];
        for bytes in cases {
            let node = parse(bytes).unwrap();
            assert_eq!(node.encode(), bytes, "{node:?}");
        }
        assert_eq!(parse(&[0x82, 0x01]), None);
        assert_eq!(parse(&[0x01, 0x02]), None);
    }
}
