//! Ask → worker → reply, end to end through the log, on every backend.

use crate::support;

use agdx::wire::{ContentType, Kind, StreamPurpose};
use agdx::worker::{EchoHandler, HandlerError, HandlerReply, handler_fn};
use agdx::{Answer, CommandRequest, ReplyEvent, StreamEnd};
use support::fabric::{ANSWER, Running, agent_id, on_every_fabric};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_gets_the_workers_response_addressed_back_to_the_asker() {
    on_every_fabric("ask", |fabric| async move {
        let worker = Running::start(fabric.worker("echo").handle("hello", EchoHandler));
        let requester = fabric.requester("asker");
        let request = CommandRequest::new("hello", b"hi there".to_vec())
            .to(agent_id("echo"))
            .content_type(ContentType::Json);
        let mut watch = requester.send(request).await.expect("send");
        let sent = watch.sent().clone();
        let reply = match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Response(reply) => reply,
            other => panic!("expected a response, got {other:?}"),
        };
        assert_eq!(reply.body, &b"hi there"[..]);
        assert_eq!(reply.content_type, ContentType::Json);
        let e = &reply.envelope;
        assert_eq!(e.kind, Kind::Response);
        assert_eq!(e.source, agent_id("echo"));
        assert_eq!(
            e.target,
            Some(agent_id("asker")),
            "a reply is addressed to the asker"
        );
        assert_eq!(e.correlation, sent.correlation);
        assert_eq!(e.conversation, sent.conversation);
        assert_eq!(e.cause, sent.record, "the reply's cause is the command");
        let cause_at = e
            .cause_at
            .expect("the reply carries the command's position");
        assert_eq!(cause_at.partition, sent.partition);
        let command = fabric.command_at(cause_at.partition, cause_at.offset).await;
        assert_eq!(
            agdx::envelope_of(&command).expect("the command").record,
            sent.record
        );

        // The same via `ask`, twice in one conversation.
        for body in ["one", "two"] {
            let request = CommandRequest::new("hello", body.as_bytes().to_vec())
                .to(agent_id("echo"))
                .conversation(sent.conversation);
            match requester.ask(request, ANSWER).await.expect("ask") {
                Answer::Response(reply) => assert_eq!(reply.body, body.as_bytes()),
                other => panic!("expected a response, got {other:?}"),
            }
        }
        worker.stop().await;
    })
    .await;
}

/// A watch outlives the requester that sent its command: dropping the
/// requester stops only the readers nobody waits on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_hears_its_reply_after_its_requester_is_dropped() {
    on_every_fabric("watch-outlives", |fabric| async move {
        let requester = fabric.requester("asker");
        let request = CommandRequest::new("hello", b"still here".to_vec()).to(agent_id("echo"));
        let mut watch = requester.send(request).await.expect("send");
        drop(requester);
        let worker = Running::start(fabric.worker("echo").handle("hello", EchoHandler));
        match watch.next(ANSWER).await {
            Ok(ReplyEvent::Response(reply)) => assert_eq!(reply.body, &b"still here"[..]),
            other => panic!("expected the response, got {other:?}"),
        }
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streaming_handler_reaches_the_asker_chunk_by_chunk() {
    on_every_fabric("stream", |fabric| async move {
        let storyteller = handler_fn(|request| async move {
            let mut stream = request
                .stream(StreamPurpose::Chat, None)
                .expect("a command can be streamed to");
            for word in ["once ", "upon ", "a ", "time"] {
                stream
                    .send(word.as_bytes().to_vec())
                    .await
                    .map_err(|e| HandlerError::retryable(e.to_string()))?;
            }
            stream
                .finish(Vec::new(), Some("stop"), None)
                .await
                .map_err(|e| HandlerError::retryable(e.to_string()))?;
            Ok(HandlerReply::Streamed)
        });
        let worker = Running::start(fabric.worker("story").handle("tell", storyteller));
        let requester = fabric.requester("reader");

        let mut watch = requester
            .ask_stream(CommandRequest::new("tell", b"go".to_vec()).to(agent_id("story")))
            .await
            .expect("send");
        let mut chunks = Vec::new();
        let end = loop {
            match watch.next(ANSWER).await.expect("a reply event") {
                ReplyEvent::Chunk { sequence, body } => {
                    chunks.push((sequence, String::from_utf8(body.to_vec()).expect("utf-8")))
                }
                ReplyEvent::StreamEnd(end) => break end,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(
            chunks,
            vec![
                (0, "once ".into()),
                (1, "upon ".into()),
                (2, "a ".into()),
                (3, "time".into())
            ]
        );
        assert_eq!(
            end,
            StreamEnd::Finished {
                finish_reason: Some("stop".into()),
                usage: None
            }
        );
        let counters = watch.stream_counters().expect("a stream was read");
        assert_eq!(
            (counters.applied, counters.duplicates, counters.late),
            (5, 0, 0)
        );

        match requester
            .ask(
                CommandRequest::new("tell", b"again".to_vec()).to(agent_id("story")),
                ANSWER,
            )
            .await
            .expect("ask")
        {
            Answer::Streamed {
                body,
                finish_reason,
                ..
            } => {
                assert_eq!(body, b"once upon a time");
                assert_eq!(finish_reason.as_deref(), Some("stop"));
            }
            other => panic!("expected a streamed answer, got {other:?}"),
        }
        worker.stop().await;
    })
    .await;
}
