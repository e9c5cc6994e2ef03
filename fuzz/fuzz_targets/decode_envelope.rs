//! Decoding hostile bytes never panics, and whatever decodes re-encodes to
//! bytes that decode to the same envelope.

#![no_main]

use agdx_wire::{AgentEnvelope, SIGNING_DOMAIN, signing_input};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(envelope) = AgentEnvelope::decode(data) else {
        return;
    };
    let again = envelope.encode();
    assert_eq!(AgentEnvelope::decode(&again).as_ref(), Ok(&envelope));
    let _ = envelope.validate();
    if envelope.signature.is_none() {
        // Unsigned, the signed bytes are the domain then the envelope itself.
        assert_eq!(signing_input(&envelope)[SIGNING_DOMAIN.len()..], again[..]);
    }
});
