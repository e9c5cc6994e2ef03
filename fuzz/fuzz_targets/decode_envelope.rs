//! Decoding hostile bytes never panics, and whatever decodes re-encodes to
//! bytes that decode to the same envelope. The body readers (`validate`
//! leaves bodies alone) see the same hostile bytes.

#![no_main]

use agdx_wire::{AgentEnvelope, ErrorBody, Kind, SIGNING_DOMAIN, signing_input};
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
    match envelope.kind {
        Kind::Status => {
            let _ = envelope.card_body();
            let _ = envelope.control_fact();
        }
        Kind::Error => {
            if let Ok(body) = ErrorBody::decode(&envelope.body) {
                assert_eq!(ErrorBody::decode(&body.encode()), Ok(body.clone()));
                let _ = body.validate();
            }
        }
        _ => {}
    }
});
