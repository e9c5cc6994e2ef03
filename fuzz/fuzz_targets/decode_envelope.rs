//! Decoding hostile bytes never panics, and whatever decodes re-encodes to
//! bytes that decode to the same value: as an envelope, and as every capsule
//! (each reads the same bytes), and its JSON view, as text, reads back to
//! the same bytes. The body readers (`validate` leaves bodies alone) see
//! the same hostile bytes. An envelope decoded from a shared buffer is the
//! one decoded by copying, its body a slice of that buffer.

#![no_main]

use std::fmt::Debug;

use agdx_wire::json::JsonCodec;
use agdx_wire::{
    AgentCard, AgentEnvelope, AgentPresence, BodyRef, Bytes, DeadLetter, ErrorBody, FoldSnapshot, Kind,
    SIGNING_DOMAIN, Signature, SignatureContext, TokenUsage, signing_input,
};
use libfuzzer_sys::fuzz_target;

/// Decoded as `T` and re-encoded, the bytes decode to the same value, which
/// re-encodes to the same bytes (the encoding is canonical), as does its
/// JSON view read back from text; the value and its encoding, when the data
/// decodes.
fn round_trip<T: JsonCodec + PartialEq + Debug>(data: &[u8]) -> Option<(T, Vec<u8>)> {
    let value = T::decode(data).ok()?;
    let again = value.encode();
    let decoded = T::decode(&again);
    assert_eq!(decoded.as_ref(), Ok(&value), "{}", T::TYPE_NAME);
    assert_eq!(
        decoded.map(|v| v.encode()).as_ref(),
        Ok(&again),
        "{}",
        T::TYPE_NAME
    );
    let text = serde_json::to_string(&value.to_json()).expect("the view prints");
    let read = agdx_wire::json::from_str(&text).expect("the printed view parses");
    let back = T::from_json(read).unwrap_or_else(|e| panic!("{}: {e}: {text}", T::TYPE_NAME));
    assert_eq!(back.encode(), again, "{} through JSON: {text}", T::TYPE_NAME);
    let _ = value.validate();
    Some((value, again))
}

fuzz_target!(|data: &[u8]| {
    let shared = Bytes::copy_from_slice(data);
    let by_share = AgentEnvelope::decode_shared(&shared);
    assert_eq!(by_share, AgentEnvelope::decode(data), "decoded from a shared buffer");
    if let Ok(envelope) = &by_share
        && !envelope.body.is_empty()
    {
        assert!(shared.as_ptr_range().contains(&envelope.body.as_ptr()));
    }
    round_trip::<ErrorBody>(data);
    round_trip::<BodyRef>(data);
    round_trip::<DeadLetter>(data);
    round_trip::<Signature>(data);
    round_trip::<SignatureContext>(data);
    round_trip::<AgentCard>(data);
    round_trip::<AgentPresence>(data);
    round_trip::<TokenUsage>(data);
    round_trip::<FoldSnapshot>(data);
    let Some((envelope, again)) = round_trip::<AgentEnvelope>(data) else {
        return;
    };
    if envelope.signature.is_none() {
        // Unsigned, the signed bytes are the domain then the envelope itself.
        assert_eq!(signing_input(&envelope)[SIGNING_DOMAIN.len()..], again[..]);
    }
    match envelope.kind {
        Kind::Status => {
            let _ = envelope.card_body();
            let _ = envelope.control_fact();
        }
        Kind::Error => {
            round_trip::<ErrorBody>(&envelope.body);
        }
        _ => {}
    }
});
