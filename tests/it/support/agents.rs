//! Handlers the replay and operations tests run: a storyteller that
//! streams its answer, a handler that always refuses, and conversations
//! placed in a chosen partition.

use agdx::wire::{ConversationId, StreamPurpose};
use agdx::worker::{Handler, HandlerError, HandlerReply, handler_fn};

use super::fabric::Fabric;

/// Streams `words` as chat chunks, the last one finishing with `stop`.
pub fn storyteller(words: &'static [&'static str]) -> impl Handler {
    handler_fn(move |request| async move {
        let fail = |e: agdx::ProduceError| HandlerError::retryable(e.to_string());
        let mut writer = request
            .stream(StreamPurpose::Chat, None)
            .ok_or_else(|| HandlerError::fatal("a story needs a command to answer"))?;
        let (last, rest) = words.split_last().expect("at least one word");
        for word in rest {
            writer.send(word.as_bytes().to_vec()).await.map_err(fail)?;
        }
        writer
            .finish(last.as_bytes().to_vec(), Some("stop"), None)
            .await
            .map_err(fail)?;
        Ok(HandlerReply::Streamed)
    })
}

/// Fails every command, not retryably, with `message`.
pub fn refusing(message: &'static str) -> impl Handler {
    handler_fn(move |_| async move { Err(HandlerError::fatal(message)) })
}

/// A new conversation whose records land in the same partition as `of`'s.
pub fn neighbour_of(fabric: &Fabric, of: ConversationId) -> ConversationId {
    let commands = &fabric.topology.commands;
    let partition = agdx::routing::partition_of(commands, of);
    loop {
        let conversation = agdx::new_conversation_id();
        if conversation != of && agdx::routing::partition_of(commands, conversation) == partition {
            return conversation;
        }
    }
}
