//! How replayed records look to people: timeline lines (chunk streams
//! folded into one line) and causal-graph drawings (an indented tree,
//! Graphviz DOT, Mermaid). Shared by `timeline`, `graph` and `demo`.
//!
//! What peers wrote (operations, bodies, error messages, dead-letter
//! details) reaches a terminal only through [`printable`], here and in
//! every other view for people (`dlq`, `agents`, `quarantine --list`,
//! error messages); JSON output needs no escaping of its own.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::time::Duration;

use agdx::replay::{CausalGraph, NodeKey, ReplayItem, ReplayRecord};
use agdx::wire::{AgentEnvelope, ChannelId, ContentType, ErrorBody, Kind, RecordId};
use agdx::{StreamAssembler, StreamEnd, StreamEvent};

/// Characters of a body shown in a line.
const PREVIEW: usize = 48;

/// `text` made safe to show on a terminal: every control character (ESC,
/// BEL, CR, line breaks, the C1 controls) and every bidirectional
/// formatting character is written as a visible escape (`\x1b`, `\n`,
/// `\u{202e}`), so nothing a peer wrote can set the terminal's title,
/// clear the screen, move the cursor, forge a line or reorder what is shown.
pub fn printable(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() || is_bidi(c);
    if !text.chars().any(unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\x{:02x}", u32::from(c));
            }
            c if is_bidi(c) => {
                let _ = write!(out, "\\u{{{:04x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// The characters that change the direction text is shown in (embeddings,
/// overrides, isolates, marks).
fn is_bidi(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

/// `HH:MM:SS.mmm` (UTC) of epoch microseconds.
pub fn time_of_day(micros: u64) -> String {
    let time = std::time::UNIX_EPOCH + Duration::from_micros(micros);
    let text = humantime::format_rfc3339_millis(time).to_string();
    // 2024-05-01T12:00:01.234Z
    text.get(11..23).unwrap_or(&text).to_owned()
}

/// A short, one-line view of a body: text quoted and cut, an error body
/// decoded, anything else by size.
pub fn preview(envelope: &AgentEnvelope, content_type: ContentType) -> String {
    if envelope.body.is_empty() {
        return String::new();
    }
    if envelope.kind == Kind::Error
        && let Ok(error) = ErrorBody::decode_valid(&envelope.body)
    {
        return format!(
            "{}: {}",
            error.code.name(),
            error.message.as_deref().unwrap_or("(no message)")
        );
    }
    match (content_type, std::str::from_utf8(&envelope.body)) {
        (ContentType::Raw | ContentType::Json, Ok(text)) => quote(text),
        _ => format!("({} bytes {})", envelope.body.len(), content_type.name()),
    }
}

/// Text in double quotes, on one line (line breaks and tabs become
/// spaces), cut to [`PREVIEW`] characters; still to be made [`printable`].
fn quote(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    let flat = flat.trim();
    if flat.chars().count() > PREVIEW {
        let cut: String = flat.chars().take(PREVIEW - 1).collect();
        format!("\"{cut}…\"")
    } else {
        format!("\"{flat}\"")
    }
}

/// `source → target` (or just the source).
fn route(envelope: &AgentEnvelope) -> String {
    match &envelope.target {
        Some(target) => format!("{} → {target}", envelope.source),
        None => envelope.source.to_string(),
    }
}

/// The topic without the `agent.` prefix every agent topic has.
fn short_topic(topic: &str) -> &str {
    topic.strip_prefix("agent.").unwrap_or(topic)
}

/// What a record is, in a few words: `command hello`, `status task
/// working`, `dead letter rejected`, ...
fn what(record: &ReplayRecord) -> String {
    match &record.item {
        ReplayItem::Envelope(e) => {
            let mut what = e.kind.as_str().to_owned();
            if let Some(op) = &e.operation {
                what.push(' ');
                what.push_str(op);
            }
            if let Some(state) = e.task_state {
                what.push(' ');
                what.push_str(state.name());
            }
            what
        }
        ReplayItem::DeadLetter { capsule, .. } => {
            format!(
                "dead letter {} after {} attempt(s)",
                capsule.reason.name(),
                capsule.attempts
            )
        }
        ReplayItem::Snapshot(s) => format!("fold snapshot as_of {:?}", s.as_of),
    }
}

/// Builds timeline lines record by record: each record at once, except a
/// chunk stream, which becomes one line when it ends (or when the timeline
/// is finished).
#[derive(Default)]
pub struct Timeline {
    /// Log time of each command and event seen, for reply latencies.
    sent: HashMap<RecordId, u64>,
    streams: BTreeMap<ChannelId, OpenStream>,
}

struct OpenStream {
    first: ReplayRecord,
    assembler: StreamAssembler,
    body: Vec<u8>,
    purpose: Option<String>,
    records: u64,
}

impl Timeline {
    /// The lines `record` completes (none for a chunk of an open stream).
    pub fn push(&mut self, record: &ReplayRecord) -> Vec<String> {
        let Some(envelope) = record.envelope() else {
            return vec![self.line(record, &what(record), &self.detail(record), None)];
        };
        if let Some(id) = envelope.record.filter(|_| envelope.kind == Kind::Command) {
            self.sent.insert(id, record.timestamp_micros);
        }
        match (envelope.kind, envelope.channel) {
            (Kind::Chunk, Some(channel)) | (Kind::Error, Some(channel)) => {
                let stream = self.streams.entry(channel).or_insert_with(|| OpenStream {
                    first: record.clone(),
                    assembler: StreamAssembler::new(channel),
                    body: Vec::new(),
                    purpose: None,
                    records: 0,
                });
                stream.records += 1;
                if envelope.sequence == Some(0) {
                    stream.purpose.clone_from(&envelope.operation);
                }
                let mut ended = None;
                for event in stream.assembler.push(envelope, record.timestamp_micros) {
                    match event {
                        StreamEvent::Chunk { body, .. } => stream.body.extend_from_slice(&body),
                        StreamEvent::End(end) => ended = Some(end),
                    }
                }
                match ended {
                    Some(end) => {
                        let stream = self.streams.remove(&channel).expect("the open stream");
                        vec![self.stream_line(stream, &describe_end(&end), Some(record))]
                    }
                    None => Vec::new(),
                }
            }
            _ => {
                let latency = self.latency(record);
                vec![self.line(record, &what(record), &self.detail(record), latency)]
            }
        }
    }

    /// Lines for the streams still open at `now_micros`: abandoned when
    /// their deadline passed (a reader-local conclusion), else open.
    pub fn finish(&mut self, now_micros: u64) -> Vec<String> {
        std::mem::take(&mut self.streams)
            .into_values()
            .map(|mut stream| {
                let state = match stream.assembler.tick(now_micros) {
                    Some(StreamEvent::End(end)) => describe_end(&end),
                    _ => "open (no last chunk yet)".to_owned(),
                };
                self.stream_line(stream, &state, None)
            })
            .collect()
    }

    fn latency(&self, record: &ReplayRecord) -> Option<String> {
        let envelope = record.envelope()?;
        if !matches!(envelope.kind, Kind::Response | Kind::Error | Kind::Chunk) {
            return None;
        }
        let sent = self.sent.get(&envelope.cause?)?;
        let micros = record.timestamp_micros.saturating_sub(*sent);
        Some(format!("+{}", human_micros(micros)))
    }

    fn detail(&self, record: &ReplayRecord) -> String {
        match &record.item {
            ReplayItem::Envelope(e) => {
                let body = preview(e, record.content_type);
                let mut detail = if body.is_empty() {
                    route(e)
                } else {
                    format!("{}  {body}", route(e))
                };
                if let Some(usage) = &e.usage {
                    detail.push_str("  ");
                    detail.push_str(&usage_note(usage));
                }
                detail
            }
            ReplayItem::DeadLetter { capsule, original } => {
                let of = match original {
                    Some(e) => format!(
                        "{} {}",
                        e.kind.as_str(),
                        e.record.map(|r| r.to_string()).unwrap_or_default()
                    ),
                    None => "an undecodable record".to_owned(),
                };
                format!(
                    "of {of} at {}: {}",
                    capsule.source,
                    capsule.detail.as_deref().unwrap_or("")
                )
            }
            ReplayItem::Snapshot(s) => format!("{} bytes of state", s.state.len()),
        }
    }

    fn stream_line(&self, stream: OpenStream, end: &str, last: Option<&ReplayRecord>) -> String {
        let counters = stream.assembler.counters();
        let envelope = stream
            .first
            .envelope()
            .expect("a stream record is an envelope");
        let what = format!(
            "chunks ×{} {}",
            stream.records,
            stream.purpose.as_deref().unwrap_or("")
        );
        let text = String::from_utf8_lossy(&stream.body);
        let detail = format!(
            "{}  {}  {end}  (applied {}, duplicates {}, late {})",
            route(envelope),
            quote(&text),
            counters.applied,
            counters.duplicates,
            counters.late
        );
        let latency = last.and_then(|r| self.latency(r));
        self.line(&stream.first, what.trim_end(), &detail, latency)
    }

    fn line(
        &self,
        record: &ReplayRecord,
        what: &str,
        detail: &str,
        latency: Option<String>,
    ) -> String {
        let place = format!("{}/{}", record.position.partition, record.position.offset);
        let mut line = format!(
            "{}  {:<10} {:<7} {:<22} {}",
            time_of_day(record.timestamp_micros),
            short_topic(&record.topic),
            place,
            printable(what),
            printable(detail),
        );
        if let Some(latency) = latency {
            line.push_str("  ");
            line.push_str(&latency);
        }
        line
    }
}

/// What a turn reported spending.
fn usage_note(usage: &agdx::wire::TokenUsage) -> String {
    format!(
        "usage {} in / {} out",
        usage.input_tokens, usage.output_tokens
    )
}

/// How a stream ended, with the reader's own conclusions marked as such.
fn describe_end(end: &StreamEnd) -> String {
    match end {
        StreamEnd::Finished {
            finish_reason,
            usage,
        } => {
            let reason = finish_reason.as_deref().unwrap_or("no reason");
            match usage {
                Some(usage) => format!("finished ({reason}, {})", usage_note(usage)),
                None => format!("finished ({reason})"),
            }
        }
        StreamEnd::Failed(error) => format!(
            "failed: {}: {}",
            error.code.name(),
            error.message.as_deref().unwrap_or("(no message)")
        ),
        StreamEnd::Gap { expected, received } => {
            format!("gap: chunk {expected} missing, {received} came (reader-local, not on the log)")
        }
        StreamEnd::Abandoned { deadline_micros } => format!(
            "abandoned: deadline {} passed (reader-local, not on the log)",
            time_of_day(*deadline_micros)
        ),
    }
}

/// `850 µs`, `12 ms`, `1.5 s`.
pub fn human_micros(micros: u64) -> String {
    match micros {
        0..1_000 => format!("{micros} µs"),
        1_000..10_000_000 => format!("{} ms", micros / 1_000),
        _ => format!("{:.1} s", micros as f64 / 1e6),
    }
}

/// A causal graph as drawn: chunks of one stream under one cause merged
/// into one box.
struct Drawing {
    boxes: Vec<DrawnBox>,
    edges: Vec<(usize, usize)>,
}

struct DrawnBox {
    label: String,
    start: bool,
}

impl Drawing {
    fn of(graph: &CausalGraph) -> Self {
        let mut boxes: Vec<DrawnBox> = Vec::new();
        let mut at: HashMap<NodeKey, usize> = HashMap::new();
        let mut streams: HashMap<(Vec<NodeKey>, ChannelId), (usize, Vec<ReplayRecord>)> =
            HashMap::new();
        for node in graph.nodes() {
            let first = node.first();
            let chunk = first
                .envelope()
                .filter(|e| e.kind == Kind::Chunk)
                .and_then(|e| e.channel);
            let index = match chunk {
                Some(channel) => {
                    let group = (node.parents.clone(), channel);
                    let (index, records) = streams.entry(group).or_insert_with(|| {
                        boxes.push(DrawnBox {
                            label: String::new(),
                            start: false,
                        });
                        (boxes.len() - 1, Vec::new())
                    });
                    records.push(first.clone());
                    *index
                }
                None => {
                    boxes.push(DrawnBox {
                        label: node_label(first, node.records.len()),
                        start: false,
                    });
                    boxes.len() - 1
                }
            };
            boxes[index].start |= node.key == *graph.start();
            at.insert(node.key, index);
        }
        for (index, records) in streams.into_values() {
            boxes[index].label = stream_label(&records);
        }
        for b in &mut boxes {
            b.label = printable(&b.label).into_owned();
        }
        let mut edges = Vec::new();
        for node in graph.nodes() {
            for parent in &node.parents {
                let edge = (at[parent], at[&node.key]);
                if !edges.contains(&edge) {
                    edges.push(edge);
                }
            }
        }
        Drawing { boxes, edges }
    }

    fn children(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        self.edges
            .iter()
            .filter(move |(from, _)| *from == index)
            .map(|(_, to)| *to)
    }

    fn roots(&self) -> Vec<usize> {
        (0..self.boxes.len())
            .filter(|i| !self.edges.iter().any(|(_, to)| to == i))
            .collect()
    }
}

fn node_label(record: &ReplayRecord, appearances: usize) -> String {
    let mut label = what(record);
    if let Some(e) = record.envelope() {
        let _ = write!(label, " · {}", route(e));
        let body = preview(e, record.content_type);
        if !body.is_empty() {
            let _ = write!(label, " · {body}");
        }
    }
    if appearances > 1 {
        let _ = write!(label, " · appended {appearances}×");
    }
    label
}

fn stream_label(records: &[ReplayRecord]) -> String {
    let envelopes: Vec<&AgentEnvelope> = records.iter().filter_map(|r| r.envelope()).collect();
    let purpose = envelopes
        .iter()
        .find_map(|e| e.operation.clone())
        .unwrap_or_default();
    let mut body = Vec::new();
    let mut sorted = envelopes.clone();
    sorted.sort_by_key(|e| e.sequence);
    sorted.dedup_by_key(|e| e.sequence);
    for e in &sorted {
        body.extend_from_slice(&e.body);
    }
    let finish = sorted
        .iter()
        .find(|e| e.last)
        .map(|e| format!(" · {}", e.finish_reason.as_deref().unwrap_or("last")))
        .unwrap_or_default();
    let route = envelopes.first().map(|e| route(e)).unwrap_or_default();
    format!(
        "chunks ×{} {purpose} · {route} · {}{finish}",
        records.len(),
        quote(&String::from_utf8_lossy(&body))
    )
}

/// The graph as an indented tree; a node reached again is named, not
/// drawn again.
pub fn graph_text(graph: &CausalGraph) -> String {
    let drawing = Drawing::of(graph);
    let mut out = String::new();
    let mut drawn = vec![false; drawing.boxes.len()];
    for root in drawing.roots() {
        tree(&drawing, root, "", "", &mut drawn, &mut out);
    }
    // Only a cycle of causes has no root; draw it from its first record.
    while let Some(first) = drawn.iter().position(|d| !d) {
        tree(&drawing, first, "", "", &mut drawn, &mut out);
    }
    for missing in graph.missing() {
        let _ = writeln!(
            out,
            "(cause {missing} is not on the log where the walk looked)"
        );
    }
    out
}

fn tree(
    drawing: &Drawing,
    index: usize,
    lead: &str,
    rest: &str,
    drawn: &mut [bool],
    out: &mut String,
) {
    let b = &drawing.boxes[index];
    let mark = if b.start { "  ◀ start" } else { "" };
    if drawn[index] {
        let _ = writeln!(out, "{lead}↺ {} (shown above)", b.label);
        return;
    }
    drawn[index] = true;
    let _ = writeln!(out, "{lead}{}{mark}", b.label);
    let children: Vec<usize> = drawing.children(index).collect();
    for (i, child) in children.iter().enumerate() {
        let last = i + 1 == children.len();
        let (branch, next) = if last {
            ("└─ ", "   ")
        } else {
            ("├─ ", "│  ")
        };
        tree(
            drawing,
            *child,
            &format!("{rest}{branch}"),
            &format!("{rest}{next}"),
            drawn,
            out,
        );
    }
}

/// The graph in Graphviz DOT.
pub fn graph_dot(graph: &CausalGraph) -> String {
    let drawing = Drawing::of(graph);
    let escape = |s: &str| s.replace('\\', "\\\\").replace('"', "\\\"");
    let mut out = String::from(
        "digraph causal {\n  rankdir=TB;\n  node [shape=box, fontname=\"monospace\"];\n",
    );
    for (i, b) in drawing.boxes.iter().enumerate() {
        let style = if b.start { ", style=bold" } else { "" };
        let _ = writeln!(out, "  n{i} [label=\"{}\"{style}];", escape(&b.label));
    }
    for (from, to) in &drawing.edges {
        let _ = writeln!(out, "  n{from} -> n{to};");
    }
    out.push_str("}\n");
    out
}

/// The graph as a Mermaid flowchart.
pub fn graph_mermaid(graph: &CausalGraph) -> String {
    let drawing = Drawing::of(graph);
    let escape = |s: &str| s.replace('"', "#quot;");
    let mut out = String::from("flowchart TD\n");
    for (i, b) in drawing.boxes.iter().enumerate() {
        let _ = writeln!(out, "  n{i}[\"{}\"]", escape(&b.label));
    }
    for (from, to) in &drawing.edges {
        let _ = writeln!(out, "  n{from} --> n{to}");
    }
    if let Some(start) = drawing.boxes.iter().position(|b| b.start) {
        let _ = writeln!(out, "  style n{start} stroke-width:3px");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::printable;

    #[test]
    fn control_and_direction_characters_are_shown_escaped() {
        assert_eq!(printable("plain · text → ok"), "plain · text → ok");
        assert_eq!(
            printable("\u{1b}]0;title\u{7}\u{1b}[2J"),
            "\\x1b]0;title\\x07\\x1b[2J"
        );
        assert_eq!(printable("a\nb\rc\td"), "a\\nb\\rc\\td");
        assert_eq!(printable("\u{9b}31m\u{7f}"), "\\x9b31m\\x7f");
        assert_eq!(printable("abc\u{202e}fed"), "abc\\u{202e}fed");
    }
}
