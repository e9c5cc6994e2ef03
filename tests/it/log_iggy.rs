//! What the Iggy binding promises beyond the shared log conformance suite:
//! the same partition for a key as Iggy itself picks, typed headers that
//! other Iggy clients read, ids as the server numbers them, and consumer
//! group membership per connection.
//!
//! Needs an Iggy 0.8.x server (see `support/iggy.rs`); without one every test
//! says why and passes without checking anything.

use crate::support::iggy as iggy_support;
use bytes::Bytes;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use agdx::log::{Cause, GroupMember, LogError, OutgoingRecord, SharedLog, TopicInfo};
use agdx::routing::partition_for_key;
use agdx::wire::HeaderValue;
use iggy::prelude::{
    Client, CompressionAlgorithm, Consumer, ConsumerGroupClient, HeaderKey, IggyClient, IggyExpiry,
    IggyMessage, MaxTopicSize, MessageClient, PartitionClient, Partitioning, PollingStrategy,
    StreamClient, TopicClient,
};
use iggy_support::{IggyTestLog, iggy_log, unique_name};
use tracing_subscriber::layer::SubscriberExt;

/// The test server, or `None` (with the reason printed) when there is none.
async fn server() -> Option<IggyTestLog> {
    match iggy_log().await {
        Ok(server) => Some(server),
        Err(why) => {
            iggy_support::say_skipped(&why);
            None
        }
    }
}

/// A plain `iggy` client on the test server, as another program would use it.
async fn plain_client(server: &IggyTestLog) -> IggyClient {
    let client =
        IggyClient::from_connection_string(&server.url).expect("a valid connection string");
    client.connect().await.expect("the plain client connects");
    client
}

fn record(payload: &[u8]) -> OutgoingRecord {
    OutgoingRecord {
        headers: Vec::new(),
        payload: Bytes::copy_from_slice(payload),
    }
}

async fn topic(log: &SharedLog, partitions: u32) -> TopicInfo {
    log.ensure_topic(&unique_name("stream"), "records", partitions)
        .await
        .expect("ensure_topic")
}

/// Calls `assigned()` until `done` holds for the answer; the server settles
/// a membership change when it notices a closed connection.
async fn assigned_until(member: &dyn GroupMember, done: impl Fn(&[u32]) -> bool) -> Vec<u32> {
    let mut last = Vec::new();
    for _ in 0..400 {
        last = member.assigned().await.expect("assigned");
        if done(&last) {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the assignment never settled; last seen {last:?}");
}

#[tokio::test]
async fn partition_for_key_is_where_iggy_puts_a_keyed_message() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 7).await;
    let client = plain_client(&server).await;
    let (stream_id, topic_id) = (
        topic.stream_id.try_into().unwrap(),
        topic.topic_id.try_into().unwrap(),
    );
    let keys: Vec<String> = (0..64).map(|_| ulid::Ulid::new().to_string()).collect();
    for key in &keys {
        let mut message = vec![
            IggyMessage::builder()
                .payload(key.clone().into())
                .build()
                .unwrap(),
        ];
        let partitioning = Partitioning::messages_key(key.as_bytes()).unwrap();
        client
            .send_messages(&stream_id, &topic_id, &partitioning, &mut message)
            .await
            .expect("keyed send");
    }
    let mut seen = 0;
    for partition in 0..topic.partitions.get() {
        for rec in server
            .log
            .poll(&topic, partition, 0, 1000, Duration::ZERO)
            .await
            .unwrap()
        {
            let key = String::from_utf8(rec.payload.to_vec()).unwrap();
            assert_eq!(
                partition_for_key(key.as_bytes(), topic.partitions),
                partition,
                "key {key}"
            );
            seen += 1;
        }
    }
    assert_eq!(seen, keys.len());
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn topic_ids_are_the_servers_and_headers_are_typed_iggy_headers() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 3).await;
    assert_eq!(
        server.log.topic(&topic.stream, &topic.topic).await.unwrap(),
        Some(topic.clone())
    );
    assert_eq!(
        server
            .log
            .ensure_topic(&topic.stream, &topic.topic, 3)
            .await
            .unwrap(),
        topic
    );
    let client = plain_client(&server).await;
    let stream = client
        .get_stream(&topic.stream.as_str().try_into().unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stream.id, topic.stream_id);
    let details = client
        .get_topic(
            &topic.stream.as_str().try_into().unwrap(),
            &topic.topic.as_str().try_into().unwrap(),
        )
        .await
        .unwrap()
        .unwrap();
    assert_eq!((details.id, details.partitions_count), (topic.topic_id, 3));

    let conversation: u128 = 0x0196_3c5e_8a1b_7c2d_9e3f_4a5b_6c7d_8e9f;
    let headers = vec![
        ("agdx.ct".into(), HeaderValue::u8(2)),
        ("agdx.av".into(), HeaderValue::u32(1)),
        (
            "gen_ai.conversation.id".into(),
            HeaderValue::u128(conversation),
        ),
        ("agdx.to".into(), HeaderValue::string("billing")),
    ];
    let sent = OutgoingRecord {
        headers: headers.clone(),
        payload: Bytes::from_static(b"envelope"),
    };
    server
        .log
        .append(&topic, 2, vec![sent, record(b"second")])
        .await
        .unwrap();

    let read = server
        .log
        .poll(&topic, 2, 0, 10, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(read.len(), 2);
    assert_eq!(
        read[0].headers, headers,
        "headers come back in the order they were sent"
    );
    assert_eq!(read[0].position, topic.position(2, 0));
    assert_eq!(read[1].position, topic.position(2, 1));
    assert!(read[0].timestamp_micros > 0 && read[0].timestamp_micros <= read[1].timestamp_micros);

    let polled = client
        .poll_messages(
            &topic.stream_id.try_into().unwrap(),
            &topic.topic_id.try_into().unwrap(),
            Some(2),
            &Consumer::default(),
            &PollingStrategy::offset(0),
            1,
            false,
        )
        .await
        .unwrap();
    let map = polled.messages[0]
        .user_headers_map()
        .unwrap()
        .expect("headers");
    let value = |key: &str| map[&HeaderKey::try_from(key).unwrap()].clone();
    assert_eq!(
        value("gen_ai.conversation.id").as_uint128().unwrap(),
        conversation
    );
    assert_eq!(value("agdx.ct").as_uint8().unwrap(), 2);
    assert_eq!(value("agdx.av").as_uint32().unwrap(), 1);
    assert_eq!(value("agdx.to").as_str().unwrap(), "billing");
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn ensure_topic_refuses_another_partition_count() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 2).await;
    let err = server
        .log
        .ensure_topic(&topic.stream, &topic.topic, 4)
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            LogError::PartitionMismatch {
                existing: 2,
                wanted: 4,
                ..
            }
        ),
        "{err}"
    );
    let other = server.connect_again().await;
    let (a, b) = tokio::join!(
        server.log.ensure_topic(&topic.stream, "raced", 2),
        other.ensure_topic(&topic.stream, "raced", 2)
    );
    assert_eq!(a.unwrap(), b.unwrap());
}

#[tokio::test]
async fn a_message_with_a_malformed_header_block_is_reported_then_stepped_over() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 1).await;
    let client = plain_client(&server).await;
    // Another program's message whose user header block ends in the middle
    // of a field: a name of kind string claiming 200 bytes, with one there.
    let block: &[u8] = &[2, 200, 0, 0, 0, b'k'];
    let message = |payload: &'static [u8], headers: Option<&'static [u8]>| {
        let mut message = IggyMessage::builder()
            .payload(payload.into())
            .build()
            .unwrap();
        if let Some(block) = headers {
            message.header.user_headers_length = block.len() as u32;
            message.user_headers = Some(block.into());
        }
        message
    };
    let mut messages = vec![
        message(b"r0", None),
        message(b"bad", Some(block)),
        message(b"r2", None),
    ];
    client
        .send_messages(
            &topic.stream_id.try_into().unwrap(),
            &topic.topic_id.try_into().unwrap(),
            &Partitioning::partition_id(0),
            &mut messages,
        )
        .await
        .expect("the server takes the raw header block as it is");

    let poll = |from: u64| server.log.poll(&topic, 0, from, 10, Duration::ZERO);
    let before = poll(0).await.expect("the records before the bad one");
    assert_eq!(before.len(), 1);
    assert_eq!(before[0].payload, &b"r0"[..]);
    match poll(1).await {
        Err(LogError::Corrupt(damage)) => {
            assert_eq!(damage.position, topic.position(0, 1));
            assert_eq!(damage.count(), 1);
            let error = LogError::Corrupt(damage);
            assert!(!error.is_retryable());
            assert!(error.to_string().contains("commits offset 1"), "{error}");
        }
        other => panic!("the malformed message: {other:?}"),
    }
    let after = poll(2).await.expect("the records after the bad one");
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].payload, &b"r2"[..]);
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_topic_without_partitions_is_refused() {
    let Some(server) = server().await else { return };
    let stream = unique_name("stream");
    let client = plain_client(&server).await;
    client.create_stream(&stream).await.unwrap();
    let stream_id = stream.as_str().try_into().unwrap();
    // Created empty where the server allows that, else emptied afterwards.
    let created = client
        .create_topic(
            &stream_id,
            "empty",
            0,
            CompressionAlgorithm::None,
            None,
            IggyExpiry::ServerDefault,
            MaxTopicSize::ServerDefault,
        )
        .await;
    if created.is_err() {
        client
            .create_topic(
                &stream_id,
                "empty",
                1,
                CompressionAlgorithm::None,
                None,
                IggyExpiry::ServerDefault,
                MaxTopicSize::ServerDefault,
            )
            .await
            .unwrap();
        client
            .delete_partitions(&stream_id, &"empty".try_into().unwrap(), 1)
            .await
            .unwrap();
    }
    let found = server.log.topic(&stream, "empty").await;
    assert!(
        matches!(&found, Err(LogError::NoPartitions { topic, .. }) if topic == "empty"),
        "{found:?}"
    );
    let err = server
        .log
        .ensure_topic(&stream, "empty", 2)
        .await
        .unwrap_err();
    assert!(matches!(err, LogError::NoPartitions { .. }), "{err}");
    assert!(!err.is_retryable());
    assert!(
        err.to_string()
            .contains("add as many partitions as the stream's other topics have"),
        "{err}"
    );
    client.shutdown().await.unwrap();
}

#[tokio::test]
async fn last_offset_and_polls_that_never_commit() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 1).await;
    assert_eq!(server.log.last_offset(&topic, 0).await.unwrap(), None);
    server
        .log
        .append(&topic, 0, vec![record(b"a")])
        .await
        .unwrap();
    assert_eq!(server.log.last_offset(&topic, 0).await.unwrap(), Some(0));
    server
        .log
        .append(&topic, 0, vec![record(b"b"), record(b"c")])
        .await
        .unwrap();
    assert_eq!(server.log.last_offset(&topic, 0).await.unwrap(), Some(2));
    let read = server
        .log
        .poll(&topic, 0, 1, 1, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].payload, &b"b"[..]);
    assert!(
        server
            .log
            .poll(&topic, 0, 3, 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        server
            .log
            .committed_offset(&topic, "readers", 0)
            .await
            .unwrap(),
        None
    );
}

#[tokio::test]
async fn a_waiting_poll_sees_a_record_appended_meanwhile() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 1).await;
    let writer = server.connect_again().await;
    let appended = topic.clone();
    let append = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        writer.append(&appended, 0, vec![record(b"late")]).await
    });
    let read = server
        .log
        .poll(&topic, 0, 0, 10, Duration::from_secs(30))
        .await
        .unwrap();
    append.await.unwrap().unwrap();
    assert_eq!(read.len(), 1);
    assert_eq!(read[0].payload, &b"late"[..]);
}

#[tokio::test]
async fn members_on_two_connections_share_the_partitions() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 4).await;
    let other = server.connect_again().await;
    let first = server.log.join_group(&topic, "workers").await.unwrap();
    assert_eq!(first.assigned().await.unwrap(), vec![0, 1, 2, 3]);
    let second = other.join_group(&topic, "workers").await.unwrap();
    assert_ne!(first.member_id(), second.member_id());
    let a = first.assigned().await.unwrap();
    let b = second.assigned().await.unwrap();
    assert!(
        !a.is_empty() && !b.is_empty(),
        "both members own partitions: {a:?} {b:?}"
    );
    let union: BTreeSet<u32> = a.iter().chain(&b).copied().collect();
    assert_eq!(
        union.len(),
        a.len() + b.len(),
        "no partition is owned twice: {a:?} {b:?}"
    );
    assert_eq!(union, (0..4).collect());

    second.leave().await.unwrap();
    assert_eq!(
        first.assigned().await.unwrap(),
        vec![0, 1, 2, 3],
        "leaving hands the partitions over at once"
    );

    let third = other.join_group(&topic, "workers").await.unwrap();
    let c = third.assigned().await.unwrap();
    assert!(!c.is_empty());
    drop(third);
    assert_eq!(
        assigned_until(first.as_ref(), |p| p.len() == 4).await,
        vec![0, 1, 2, 3]
    );
}

#[tokio::test]
async fn a_lone_partition_belongs_to_exactly_one_member() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 1).await;
    let other = server.connect_again().await;
    let first = server.log.join_group(&topic, "workers").await.unwrap();
    let second = other.join_group(&topic, "workers").await.unwrap();
    let owned = |a: &[u32], b: &[u32]| {
        let mut all = [a, b].concat();
        all.sort_unstable();
        all
    };
    // Empty, the partition's owner can only be told apart by asking the server.
    let (a, b) = (
        first.assigned().await.unwrap(),
        second.assigned().await.unwrap(),
    );
    assert_eq!(owned(&a, &b), vec![0], "{a:?} {b:?}");
    server
        .log
        .append(&topic, 0, vec![record(b"x"), record(b"y")])
        .await
        .unwrap();
    let (a2, b2) = (
        first.assigned().await.unwrap(),
        second.assigned().await.unwrap(),
    );
    assert_eq!((a2, b2), (a, b));
}

#[tokio::test]
async fn commits_go_through_the_member_that_owns_the_partition() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 2).await;
    for partition in 0..2 {
        server
            .log
            .append(
                &topic,
                partition,
                vec![record(b"0"), record(b"1"), record(b"2")],
            )
            .await
            .unwrap();
    }
    let other = server.connect_again().await;
    let first = server.log.join_group(&topic, "workers").await.unwrap();
    let second = other.join_group(&topic, "workers").await.unwrap();
    let a = first.assigned().await.unwrap();
    let b = second.assigned().await.unwrap();
    assert_eq!((a.len(), b.len()), (1, 1), "{a:?} {b:?}");
    // Through either handle, whichever member owns the partition commits.
    server
        .log
        .store_offset(&topic, "workers", b[0], 1)
        .await
        .unwrap();
    other
        .store_offset(&topic, "workers", a[0], 2)
        .await
        .unwrap();
    assert_eq!(
        server
            .log
            .committed_offset(&topic, "workers", b[0])
            .await
            .unwrap(),
        Some(1)
    );
    assert_eq!(
        other
            .committed_offset(&topic, "workers", a[0])
            .await
            .unwrap(),
        Some(2)
    );
    let err = server
        .log
        .store_offset(&topic, "workers", 0, 9)
        .await
        .unwrap_err();
    assert!(matches!(err, LogError::InvalidInput(_)), "{err}");
    first.leave().await.unwrap();
    second.leave().await.unwrap();

    // With no member left, a commit joins briefly.
    server
        .log
        .store_offset(&topic, "workers", 1, 0)
        .await
        .unwrap();
    assert_eq!(
        server
            .log
            .committed_offset(&topic, "workers", 1)
            .await
            .unwrap(),
        Some(0)
    );
    server
        .log
        .store_offset(&topic, "fresh-group", 0, 2)
        .await
        .unwrap();
    assert_eq!(
        server
            .log
            .committed_offset(&topic, "fresh-group", 0)
            .await
            .unwrap(),
        Some(2)
    );
}

#[tokio::test]
async fn a_partition_owned_by_another_program_cannot_be_committed_here() {
    let Some(server) = server().await else { return };
    let topic = topic(&server.log, 1).await;
    server
        .log
        .append(&topic, 0, vec![record(b"0")])
        .await
        .unwrap();
    let client = plain_client(&server).await;
    let (stream, topic_id) = (
        topic.stream_id.try_into().unwrap(),
        topic.topic_id.try_into().unwrap(),
    );
    client
        .create_consumer_group(&stream, &topic_id, "foreign")
        .await
        .unwrap();
    client
        .join_consumer_group(&stream, &topic_id, &"foreign".try_into().unwrap())
        .await
        .unwrap();
    let err = server
        .log
        .store_offset(&topic, "foreign", 0, 0)
        .await
        .unwrap_err();
    assert!(
        matches!(err, LogError::NotOwner { partition: 0, .. }),
        "{err}"
    );
    client.shutdown().await.unwrap();
}

/// Counts the error events of the `iggy` client, which logs every request
/// the server refuses.
struct IggyErrors(Arc<AtomicUsize>);

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for IggyErrors {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() == tracing::Level::ERROR && meta.target().starts_with("iggy") {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }
}

#[tokio::test]
async fn group_work_sends_no_request_the_server_refuses() {
    let Some(server) = server().await else { return };
    let refused = Arc::new(AtomicUsize::new(0));
    // This test's runtime runs on this thread only, so the default
    // subscriber sees every event of its clients.
    let _counting = tracing::subscriber::set_default(
        tracing_subscriber::registry().with(IggyErrors(refused.clone())),
    );
    let topic = topic(&server.log, 4).await;
    for partition in 0..4 {
        server
            .log
            .append(&topic, partition, vec![record(b"0"), record(b"1")])
            .await
            .unwrap();
    }
    assert_eq!(
        server
            .log
            .committed_offset(&topic, "workers", 0)
            .await
            .unwrap(),
        None,
        "a group that does not exist yet has no offsets"
    );
    let other = server.connect_again().await;
    let first = server.log.join_group(&topic, "workers").await.unwrap();
    let second = other.join_group(&topic, "workers").await.unwrap();
    for round in 0..3 {
        let a = first.assigned().await.unwrap();
        let b = second.assigned().await.unwrap();
        assert_eq!([a.as_slice(), &b].concat().len(), 4, "{a:?} {b:?}");
        for (log, partition) in a
            .iter()
            .map(|&p| (&other, p))
            .chain(b.iter().map(|&p| (&server.log, p)))
        {
            assert_eq!(
                log.committed_offset(&topic, "workers", partition)
                    .await
                    .unwrap(),
                (round > 0).then_some(1)
            );
            log.store_offset(&topic, "workers", partition, 1)
                .await
                .unwrap();
        }
    }
    assert_eq!(refused.load(Ordering::Relaxed), 0);

    // A lone empty partition needs a commit the server refuses to tell its
    // owner apart; asked again, the answer stands until the members change.
    let lone = self::topic(&server.log, 1).await;
    let first = server.log.join_group(&lone, "standby").await.unwrap();
    let second = other.join_group(&lone, "standby").await.unwrap();
    let answers = (
        first.assigned().await.unwrap(),
        second.assigned().await.unwrap(),
    );
    let after_first_look = refused.load(Ordering::Relaxed);
    assert!(after_first_look <= 2, "{after_first_look}");
    for _ in 0..5 {
        let again = (
            first.assigned().await.unwrap(),
            second.assigned().await.unwrap(),
        );
        assert_eq!(again, answers);
    }
    assert_eq!(refused.load(Ordering::Relaxed), after_first_look);
}

#[tokio::test]
async fn unreachable_servers_and_wrong_passwords_say_so() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("iggy://iggy:iggy@127.0.0.1:{port}");
    let err = agdx::log::iggy::IggyLog::connect(&url)
        .await
        .err()
        .expect("nothing listens there");
    assert!(matches!(err, LogError::Unavailable { .. }), "{err}");
    assert!(
        err.to_string().contains(&format!("127.0.0.1:{port}"))
            && err.to_string().contains("deploy/"),
        "{err}"
    );
    assert!(!err.to_string().contains("Kafka"), "{err}");
    match std::error::Error::source(&err).and_then(|c| c.downcast_ref::<Cause>()) {
        Some(Cause::Io(io)) => assert_eq!(io.kind(), std::io::ErrorKind::ConnectionRefused),
        other => panic!("{err:?} keeps no system error: {other:?}"),
    }

    let Some(server) = server().await else { return };
    let wrong = server.url.replace("iggy:iggy@", "iggy:wrong-password@");
    let err = agdx::log::iggy::IggyLog::connect(&wrong)
        .await
        .err()
        .expect("the password is wrong");
    assert!(matches!(err, LogError::AccessDenied { .. }), "{err}");
    assert!(!err.to_string().contains("wrong-password"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_retention_is_its_message_expiry() {
    let Some(server) = server().await else { return };
    let stream = unique_name("stream");
    let hours = server
        .log
        .ensure_topic_retained(
            &stream,
            "aging",
            1,
            agdx::log::Retention::For(Duration::from_secs(7200)),
        )
        .await
        .expect("a topic with a retention");
    let kept = server
        .log
        .ensure_topic_retained(&stream, "kept", 1, agdx::log::Retention::Forever)
        .await
        .expect("a topic kept forever");
    let client = plain_client(&server).await;
    let expiry = async |topic: &TopicInfo| {
        client
            .get_topic(
                &topic.stream.as_str().try_into().unwrap(),
                &topic.topic.as_str().try_into().unwrap(),
            )
            .await
            .expect("get the topic")
            .expect("the topic")
            .message_expiry
    };
    assert_eq!(
        expiry(&hours).await,
        IggyExpiry::ExpireDuration(Duration::from_secs(7200).into())
    );
    assert_eq!(expiry(&kept).await, IggyExpiry::NeverExpire);
}
