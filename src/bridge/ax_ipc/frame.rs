//! The ax-ipc frame: a 4-byte big-endian length, then that many bytes of
//! UTF-8 JSON. A declared length over the limit ends the connection (the
//! peer is not speaking the protocol, or is hostile), before any of the
//! payload is buffered.

use bytes::{Buf, BytesMut};

/// The largest frame payload the AX host accepts: 10 MB (decimal, as the
/// reference host counts it).
pub const MAX_FRAME: usize = 10_000_000;

/// Bytes of the length prefix.
pub const PREFIX: usize = 4;

/// A frame declared a payload over the limit; the connection must close.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "a frame declared {declared} bytes, over the {limit}-byte limit; the connection is closed (send at most {limit} bytes of JSON per frame, after a 4-byte big-endian length)"
)]
pub struct FrameTooLarge {
    /// The length the prefix declared.
    pub declared: u64,
    /// The limit in force.
    pub limit: usize,
}

/// Splits a byte stream into frames: feed it what arrives with
/// [`push`](Self::push), take whole frames with
/// [`next_frame`](Self::next_frame).
///
/// ```
/// use agdx::bridge::ax_ipc::{FrameDecoder, encode_frame};
/// let mut decoder = FrameDecoder::default();
/// let bytes = encode_frame(br#"{"action":"memory_list"}"#);
/// decoder.push(&bytes[..3]);
/// assert_eq!(decoder.next_frame(), Ok(None));
/// decoder.push(&bytes[3..]);
/// assert_eq!(decoder.next_frame().unwrap().as_deref(), Some(&br#"{"action":"memory_list"}"#[..]));
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    buffer: BytesMut,
    limit: usize,
}

impl Default for FrameDecoder {
    fn default() -> Self {
        Self::new(MAX_FRAME)
    }
}

impl FrameDecoder {
    /// A decoder refusing payloads over `limit` bytes.
    pub fn new(limit: usize) -> Self {
        Self {
            buffer: BytesMut::new(),
            limit,
        }
    }

    /// Appends bytes read from the peer.
    pub fn push(&mut self, bytes: &[u8]) {
        self.buffer.extend_from_slice(bytes);
    }

    /// Bytes held that are not yet a whole frame.
    pub fn buffered(&self) -> usize {
        self.buffer.len()
    }

    /// The next whole frame's payload, `None` until one has arrived, or
    /// [`FrameTooLarge`] as soon as a prefix declares too much (the decoder
    /// is then of no further use: the stream cannot be resynchronised).
    pub fn next_frame(&mut self) -> Result<Option<bytes::Bytes>, FrameTooLarge> {
        let Some(prefix) = self.buffer.first_chunk::<PREFIX>() else {
            return Ok(None);
        };
        let declared = u32::from_be_bytes(*prefix);
        let length = usize::try_from(declared).unwrap_or(usize::MAX);
        if length > self.limit {
            return Err(FrameTooLarge {
                declared: u64::from(declared),
                limit: self.limit,
            });
        }
        if self.buffer.len() - PREFIX < length {
            // The buffer grows with what arrives, not with what a prefix
            // claims: four bytes must not make the bridge set aside 10 MB.
            return Ok(None);
        }
        self.buffer.advance(PREFIX);
        Ok(Some(self.buffer.split_to(length).freeze()))
    }
}

/// `payload` as one frame: its length (big-endian `u32`), then the bytes.
///
/// # Panics
/// When `payload` is 4 GiB or more, which no caller here builds (answers
/// are JSON the bridge made; requests are capped by [`MAX_FRAME`]).
pub fn encode_frame(payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).expect("a frame payload under 4 GiB");
    let mut frame = Vec::with_capacity(PREFIX + payload.len());
    frame.extend_from_slice(&length.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_anywhere_come_out_whole_and_in_order() {
        let stream: Vec<u8> = [&b"{}"[..], b"", b"[1,2]"]
            .iter()
            .flat_map(|p| encode_frame(p))
            .collect();
        for step in 1..stream.len() {
            let mut decoder = FrameDecoder::default();
            let mut frames = Vec::new();
            for piece in stream.chunks(step) {
                decoder.push(piece);
                while let Some(frame) = decoder.next_frame().unwrap() {
                    frames.push(frame);
                }
            }
            assert_eq!(frames, [&b"{}"[..], b"", b"[1,2]"], "split every {step}");
            assert_eq!(decoder.buffered(), 0);
        }
    }

    #[test]
    fn an_oversize_prefix_is_refused_before_its_payload_arrives() {
        let mut decoder = FrameDecoder::new(10);
        decoder.push(&11u32.to_be_bytes());
        assert_eq!(
            decoder.next_frame(),
            Err(FrameTooLarge {
                declared: 11,
                limit: 10
            })
        );
        let mut exact = FrameDecoder::new(10);
        exact.push(&encode_frame(b"0123456789"));
        assert_eq!(
            exact.next_frame().unwrap().as_deref(),
            Some(&b"0123456789"[..])
        );
        let mut huge = FrameDecoder::default();
        huge.push(&u32::MAX.to_be_bytes());
        assert!(huge.next_frame().is_err());
    }
}
