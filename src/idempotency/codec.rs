//! How stored replies are laid out in the database: a sequence of
//! (content-type code u8, length u32 BE, envelope bytes).

use agdx_wire::{AgentEnvelope, ContentType};

use crate::producer::Outgoing;

pub(super) fn encode_replies(replies: &[Outgoing]) -> Vec<u8> {
    let mut out = Vec::new();
    for reply in replies {
        let bytes = reply.envelope.encode();
        out.push(reply.content_type.code());
        out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_be_bytes());
        out.extend_from_slice(&bytes);
    }
    out
}

pub(super) fn decode_replies(mut blob: &[u8]) -> Result<Vec<Outgoing>, String> {
    let mut replies = Vec::new();
    while let [ct, a, b, c, d, rest @ ..] = blob {
        let len = u32::from_be_bytes([*a, *b, *c, *d]) as usize;
        let bytes = rest
            .get(..len)
            .ok_or_else(|| format!("a reply claims {len} bytes, {} remain", rest.len()))?;
        let envelope = AgentEnvelope::decode(bytes).map_err(|e| e.to_string())?;
        replies.push(Outgoing::new(envelope, ContentType::from_code(*ct)));
        blob = &rest[len..];
    }
    if blob.is_empty() {
        Ok(replies)
    } else {
        Err(format!("{} stray bytes at the end", blob.len()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agdx_wire::{AgentId, ConversationId, CorrelationId, RecordId};

    #[test]
    fn stored_replies_decode_to_what_was_stored() {
        let env = AgentEnvelope::response(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            AgentId::new("a").unwrap(),
            CorrelationId::from_u128(3),
            b"ok".to_vec(),
        );
        let replies = vec![
            Outgoing::new(env.clone(), ContentType::Json),
            Outgoing::new(env, ContentType::Raw),
        ];
        assert_eq!(decode_replies(&encode_replies(&replies)).unwrap(), replies);
        let blob = encode_replies(&replies);
        assert!(decode_replies(&blob[..blob.len() - 1]).is_err());
    }
}
