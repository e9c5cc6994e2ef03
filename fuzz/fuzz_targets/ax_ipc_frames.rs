//! The ax-ipc frame parser and the call gate take hostile bytes without
//! panicking. Frames split at any read size come out whole: every byte is
//! either in a frame or still buffered, and re-framing the frames gives the
//! stream back. Whatever the gate admits has its context fields taken out
//! and passes its action's schema.

#![no_main]

use std::sync::LazyLock;

use agdx::bridge::ax_ipc::{ActionSchemas, FrameDecoder, Gate, Routes, encode_frame};
use libfuzzer_sys::fuzz_target;

/// A small limit, so oversize prefixes are reached often.
const LIMIT: usize = 4096;

static GATE: LazyLock<Gate> = LazyLock::new(|| {
    let schemas = ActionSchemas::defaults().expect("the shipped schemas compile");
    let routes = Routes::new(vec!["*=agent".parse().expect("a valid route")]);
    Gate::new("fuzz", schemas, routes)
});

fn admit(raw: &[u8]) {
    let Ok(call) = GATE.admit(raw) else {
        return;
    };
    for field in ["_msgId", "_sessionId", "_requestId", "_userId", "_sessionScope", "_bridgeHops"] {
        assert!(!call.request.contains_key(field), "{field} left in the body");
    }
    let body = serde_json::Value::Object(call.request);
    assert_eq!(GATE.schemas().check(&call.action, &body), Ok(()));
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    admit(stream);
    let mut decoder = FrameDecoder::new(LIMIT);
    let mut frames = Vec::new();
    let mut closed = false;
    'reading: for piece in stream.chunks(usize::from(step).max(1)) {
        decoder.push(piece);
        loop {
            match decoder.next_frame() {
                Ok(Some(frame)) => frames.push(frame),
                Ok(None) => break,
                Err(too_large) => {
                    assert!(too_large.declared > LIMIT as u64);
                    closed = true;
                    break 'reading;
                }
            }
        }
    }
    let again: Vec<u8> = frames.iter().flat_map(|f| encode_frame(f)).collect();
    assert_eq!(again[..], stream[..again.len()]);
    if !closed {
        assert_eq!(again.len() + decoder.buffered(), stream.len());
    }
    for frame in &frames {
        admit(frame);
    }
});
