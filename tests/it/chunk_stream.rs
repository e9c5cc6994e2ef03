//! Reading a chunk stream reply through the log: duplicates are dropped, a
//! gap ends the stream, records after the terminal are late, an error on the
//! channel fails it, and a passed deadline abandons it. On every backend.

use crate::support;

use std::num::NonZeroU64;
use std::sync::Arc;
use std::time::Duration;

use agdx::wire::{AgentEnvelope, ContentType, ErrorBody, ErrorCode, StreamPurpose};
use agdx::{
    CommandRequest, ManualClock, Outgoing, Producer, ReplyEvent, ReplyTo, ReplyWatch,
    StreamCounters, StreamEnd,
};
use support::fabric::{ANSWER, agent_id, on_every_fabric};

/// Sends a command nobody handles, so the test can write the reply stream itself.
async fn open_watch(requester: &agdx::Requester) -> (ReplyWatch, ReplyTo) {
    let watch = requester
        .send(CommandRequest::new("tell", b"go".to_vec()).to(agent_id("streamer")))
        .await
        .expect("send");
    let sent = watch.sent();
    let to = ReplyTo {
        conversation: sent.conversation,
        correlation: sent.correlation.expect("a command has a correlation"),
        cause: sent.record,
        cause_at: None,
        target: agent_id("reader"),
        idempotency_key: None,
        fence: None,
        task_states: false,
    };
    (watch, to)
}

/// Chunk `sequence` of channel 7 answering `to`, carrying `text`.
fn chunk(to: &ReplyTo, sequence: u64, text: &str) -> AgentEnvelope {
    let source = agent_id("streamer");
    let channel = agdx::wire::ChannelId::from_u128(7);
    match NonZeroU64::new(sequence) {
        None => AgentEnvelope::chunk_open(
            to.conversation,
            source,
            to.correlation,
            channel,
            StreamPurpose::Chat,
            text.as_bytes().to_vec(),
        ),
        Some(seq) => AgentEnvelope::chunk(
            to.conversation,
            source,
            to.correlation,
            channel,
            seq,
            text.as_bytes().to_vec(),
        ),
    }
}

async fn publish(producer: &Producer, envelopes: Vec<AgentEnvelope>) {
    let responses = producer.topology().responses.clone();
    let items = envelopes
        .into_iter()
        .map(|e| Outgoing::new(e, ContentType::Raw))
        .collect();
    producer
        .publish(&responses, items)
        .await
        .expect("publish the stream");
}

/// Reads the watch until the stream ends: the chunks and the end.
async fn read_stream(watch: &mut ReplyWatch) -> (Vec<String>, StreamEnd) {
    let mut chunks = Vec::new();
    loop {
        match watch.next(ANSWER).await.expect("a reply event") {
            ReplyEvent::Chunk { body, .. } => {
                chunks.push(String::from_utf8(body.to_vec()).expect("utf-8"))
            }
            ReplyEvent::StreamEnd(end) => return (chunks, end),
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Reads on after the terminal (nothing more is reported) until the records
/// still on their way have been counted as `expected`.
async fn settle(watch: &mut ReplyWatch, expected: StreamCounters) {
    let give_up = tokio::time::Instant::now() + support::PATIENCE;
    loop {
        assert!(
            watch.next(Duration::from_millis(50)).await.is_err(),
            "nothing follows a terminal"
        );
        let counters = watch.stream_counters().expect("a stream was read");
        if counters == expected {
            return;
        }
        assert!(
            tokio::time::Instant::now() < give_up,
            "the counters stayed at {counters:?}, expected {expected:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_are_dropped_and_records_after_the_terminal_are_late() {
    on_every_fabric("stream-dups", |fabric| async move {
        let requester = fabric.requester("reader");
        let (mut watch, to) = open_watch(&requester).await;
        let channel = agdx::wire::ChannelId::from_u128(7);
        let failure = ErrorBody::new(ErrorCode::Internal).with_message("too late to matter");
        let records = vec![
            chunk(&to, 0, "a"),
            chunk(&to, 0, "a"),
            chunk(&to, 1, "b"),
            chunk(&to, 1, "b"),
            chunk(&to, 2, "c").as_last(Some("stop"), None),
            chunk(&to, 3, "d"),
            AgentEnvelope::error(
                agdx::new_record_id(),
                to.conversation,
                agent_id("streamer"),
                to.correlation,
                &failure,
            )
            .with_stream_terminal(channel, 4),
        ];
        publish(requester.producer(), records).await;
        let (chunks, end) = read_stream(&mut watch).await;
        assert_eq!(chunks, ["a", "b", "c"]);
        assert_eq!(
            end,
            StreamEnd::Finished {
                finish_reason: Some("stop".into()),
                usage: None
            }
        );
        settle(
            &mut watch,
            StreamCounters {
                applied: 3,
                duplicates: 2,
                late: 2,
            },
        )
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_chunk_ends_the_stream_with_a_gap() {
    on_every_fabric("stream-gap", |fabric| async move {
        let requester = fabric.requester("reader");
        let (mut watch, to) = open_watch(&requester).await;
        publish(
            requester.producer(),
            vec![
                chunk(&to, 0, "a"),
                chunk(&to, 2, "c"),
                chunk(&to, 3, "d").as_last(None, None),
            ],
        )
        .await;
        let (chunks, end) = read_stream(&mut watch).await;
        assert_eq!(chunks, ["a"]);
        assert_eq!(
            end,
            StreamEnd::Gap {
                expected: 1,
                received: 2
            }
        );
        settle(
            &mut watch,
            StreamCounters {
                applied: 1,
                duplicates: 0,
                late: 1,
            },
        )
        .await;
        // The gap is the reader's conclusion: the log holds the raw records only.
        let on_log = fabric
            .responses()
            .await
            .into_iter()
            .filter(|e| e.correlation == Some(to.correlation))
            .count();
        assert_eq!(on_log, 3);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_on_the_channel_fails_the_stream() {
    on_every_fabric("stream-error", |fabric| async move {
        let requester = fabric.requester("reader");
        let (mut watch, to) = open_watch(&requester).await;
        let failure = ErrorBody::new(ErrorCode::ToolFailure).with_message("the model crashed");
        let error = AgentEnvelope::error(
            agdx::new_record_id(),
            to.conversation,
            agent_id("streamer"),
            to.correlation,
            &failure,
        )
        .with_stream_terminal(agdx::wire::ChannelId::from_u128(7), 1);
        publish(requester.producer(), vec![chunk(&to, 0, "a"), error]).await;
        let (chunks, end) = read_stream(&mut watch).await;
        assert_eq!(chunks, ["a"]);
        assert_eq!(end, StreamEnd::Failed(failure));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_past_its_opening_deadline_is_abandoned() {
    on_every_fabric("stream-deadline", |fabric| async move {
        let clock = Arc::new(ManualClock::new(1_000_000));
        let requester = fabric.requester("reader").with_clock(clock.clone());
        let (mut watch, to) = open_watch(&requester).await;
        publish(
            requester.producer(),
            vec![
                chunk(&to, 0, "a").with_deadline_micros(2_000_000),
                chunk(&to, 1, "b"),
            ],
        )
        .await;
        let mut chunks = Vec::new();
        while chunks.len() < 2 {
            match watch.next(ANSWER).await.expect("a chunk") {
                ReplyEvent::Chunk { body, .. } => chunks.push(body),
                other => panic!("unexpected {other:?}"),
            }
        }
        clock.set_micros(2_000_001);
        match watch.next(ANSWER).await.expect("the end") {
            ReplyEvent::StreamEnd(end) => assert_eq!(
                end,
                StreamEnd::Abandoned {
                    deadline_micros: 2_000_000
                }
            ),
            other => panic!("unexpected {other:?}"),
        }
        publish(
            requester.producer(),
            vec![chunk(&to, 2, "c").as_last(Some("stop"), None)],
        )
        .await;
        settle(
            &mut watch,
            StreamCounters {
                applied: 2,
                duplicates: 0,
                late: 1,
            },
        )
        .await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batched_writer_holds_chunks_back_until_the_batch_fills_or_the_stream_ends() {
    on_every_fabric("stream-batch", |fabric| async move {
        let requester = fabric.requester("reader");
        let (mut watch, to) = open_watch(&requester).await;
        let writer = fabric.producer("streamer");
        let mut stream = writer.stream(&to, StreamPurpose::Chat, None).batch(3);
        let on_log = || async {
            fabric
                .responses()
                .await
                .into_iter()
                .filter(|e| e.correlation == Some(to.correlation))
                .count()
        };
        stream.send(b"a".to_vec()).await.expect("send");
        stream.send(b"b".to_vec()).await.expect("send");
        assert_eq!(
            on_log().await,
            0,
            "two chunks of a batch of three are held back"
        );
        stream.send(b"c".to_vec()).await.expect("send");
        assert_eq!(on_log().await, 3, "a full batch goes out in one append");
        stream.send(b"d".to_vec()).await.expect("send");
        stream
            .finish(Vec::new(), Some("stop"), None)
            .await
            .expect("finish");
        assert_eq!(
            on_log().await,
            5,
            "finishing appends what was held back and the last chunk"
        );
        let (chunks, end) = read_stream(&mut watch).await;
        assert_eq!(chunks, ["a", "b", "c", "d"]);
        assert_eq!(
            end,
            StreamEnd::Finished {
                finish_reason: Some("stop".into()),
                usage: None
            }
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_started_over_on_a_new_channel_replaces_the_unfinished_one() {
    on_every_fabric("stream-restart", |fabric| async move {
        let requester = fabric.requester("reader");
        let (mut watch, to) = open_watch(&requester).await;
        // A writer that crashed after two chunks and, run again, streamed anew.
        let again = agdx::wire::ChannelId::from_u128(8);
        let source = agent_id("streamer");
        let rerun = vec![
            AgentEnvelope::chunk_open(
                to.conversation,
                source.clone(),
                to.correlation,
                again,
                StreamPurpose::Chat,
                b"A".to_vec(),
            ),
            AgentEnvelope::chunk_last(
                to.conversation,
                source,
                to.correlation,
                again,
                NonZeroU64::MIN,
                b"B".to_vec(),
                Some("stop"),
                None,
            ),
        ];
        publish(
            requester.producer(),
            vec![chunk(&to, 0, "a"), chunk(&to, 1, "b")],
        )
        .await;
        publish(requester.producer(), rerun).await;
        let mut events = Vec::new();
        loop {
            let event = watch.next(ANSWER).await.expect("a reply event");
            let done = matches!(event, ReplyEvent::StreamEnd(_));
            events.push(event);
            if done {
                break;
            }
        }
        assert_eq!(
            events,
            vec![
                ReplyEvent::Chunk {
                    sequence: 0,
                    body: b"a".to_vec().into()
                },
                ReplyEvent::Chunk {
                    sequence: 1,
                    body: b"b".to_vec().into()
                },
                ReplyEvent::StreamRestarted { channel: again },
                ReplyEvent::Chunk {
                    sequence: 0,
                    body: b"A".to_vec().into()
                },
                ReplyEvent::Chunk {
                    sequence: 1,
                    body: b"B".to_vec().into()
                },
                ReplyEvent::StreamEnd(StreamEnd::Finished {
                    finish_reason: Some("stop".into()),
                    usage: None
                }),
            ]
        );
    })
    .await;
}
