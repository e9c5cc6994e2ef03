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

/// Asks its caller "which day?" (waiting `wait` at most), then answers
/// "booked for DAY".
pub fn booking(wait: std::time::Duration) -> impl Handler {
    handler_fn(move |request| async move {
        let day = request
            .ask_input(b"which day?".to_vec(), wait)
            .await
            .map_err(|e| HandlerError::fatal(e.to_string()))?;
        Ok(HandlerReply::raw(format!(
            "booked for {}",
            String::from_utf8_lossy(&day)
        )))
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

/// What a [`heeding`] handler saw: how many calls started, and whether
/// one was told its command was cancelled.
#[derive(Clone, Default)]
pub struct Heeded {
    pub started: std::sync::Arc<std::sync::atomic::AtomicU32>,
    pub told: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl Heeded {
    pub fn started(&self) -> u32 {
        self.started.load(std::sync::atomic::Ordering::SeqCst)
    }
    pub fn told(&self) -> bool {
        self.told.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// A handler that waits (ten minutes at most) until its command is
/// cancelled, and notes what it saw.
pub fn heeding() -> (impl Handler, Heeded) {
    let heeded = Heeded::default();
    let seen = heeded.clone();
    let handler = handler_fn(move |request| {
        let seen = seen.clone();
        async move {
            use std::sync::atomic::Ordering;
            seen.started.fetch_add(1, Ordering::SeqCst);
            tokio::select! {
                () = request.cancelled() => seen.told.store(request.is_cancelled(), Ordering::SeqCst),
                () = tokio::time::sleep(std::time::Duration::from_secs(600)) => {}
            }
            Ok(HandlerReply::json("{}"))
        }
    });
    (handler, heeded)
}
