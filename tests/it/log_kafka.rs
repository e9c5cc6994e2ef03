//! What the Kafka binding promises beyond the shared log conformance suite:
//! records, headers and offsets as a plain Kafka client sees them, records
//! other clients wrote, partitions handed over only once the work in hand
//! is done, and a broker killed with SIGKILL losing nothing acknowledged.
//!
//! Needs a Kafka-protocol broker (see `support/kafka.rs`); without one every
//! test says why and passes without checking anything.

use crate::support;
use bytes::Bytes;

use std::sync::Arc;
use std::time::Duration;

use agdx::log::kafka::KafkaLog;
use agdx::log::{Cause, LogError, OutgoingRecord, SharedLog, TopicInfo};
use agdx::wire::{HeaderBytes, HeaderKind, HeaderValue, Headers};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, Headers as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use support::kafka::{KafkaTestLog, TansuBroker, kafka_log, tansu_binary, test_url};
use support::{eventually, record, texts, unique_stream};

/// The test broker, or `None` (with the reason printed) when there is none.
async fn broker() -> Option<KafkaTestLog> {
    match kafka_log().await {
        Ok(broker) => Some(broker),
        Err(why) => {
            support::kafka::say_skipped(&why);
            None
        }
    }
}

/// The `HOST:PORT` list of a test connection string.
fn brokers_of(url: &str) -> String {
    let rest = url.trim_start_matches("kafka://");
    rest.split('?').next().unwrap_or(rest).to_owned()
}

fn plain_config(url: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", brokers_of(url));
    config
}

/// A plain consumer reading `partition` of Kafka topic `name` from `offset`.
fn plain_reader(url: &str, name: &str, partition: i32, offset: i64) -> BaseConsumer {
    let consumer: BaseConsumer = plain_config(url)
        .set("group.id", "plain-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a plain consumer");
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(name, partition, Offset::Offset(offset))
        .unwrap();
    consumer.assign(&list).expect("assign");
    consumer
}

/// A record as a plain consumer reads it: offset, headers as (name,
/// bytes), payload.
type PlainRecord = (i64, Vec<(String, Vec<u8>)>, Vec<u8>);

/// The next `count` records a plain consumer reads.
fn plain_read(consumer: &BaseConsumer, count: usize) -> Vec<PlainRecord> {
    let mut out = Vec::new();
    while out.len() < count {
        let message = consumer
            .poll(Duration::from_secs(20))
            .expect("a record within 20 s")
            .expect("a readable record");
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                    .collect()
            })
            .unwrap_or_default();
        out.push((
            message.offset(),
            headers,
            message.payload().unwrap_or_default().to_vec(),
        ));
    }
    out
}

async fn topic(log: &SharedLog, partitions: u32) -> TopicInfo {
    log.ensure_topic(&unique_stream("kafka"), "records", partitions)
        .await
        .expect("ensure_topic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_port_is_unavailable_in_kafka_terms_and_keeps_librdkafkas_error() {
    let port = support::free_port().expect("a free port");
    let url = format!("kafka://127.0.0.1:{port}");
    let err = match KafkaLog::connect_within(&url, Duration::from_secs(2)).await {
        Ok(_) => panic!("nothing listens on {url}"),
        Err(err) => err,
    };
    let text = err.to_string();
    assert!(matches!(err, LogError::Unavailable { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(text.contains(&url), "{text}");
    assert!(text.contains("Kafka-protocol broker"), "{text}");
    for foreign in ["Iggy", "iggy"] {
        assert!(
            !text.contains(foreign),
            "a Kafka log's error says {foreign:?}: {text}"
        );
    }
    match std::error::Error::source(&err).and_then(|c| c.downcast_ref::<Cause>()) {
        Some(Cause::Kafka(_)) => {}
        other => panic!("{err:?} keeps no librdkafka error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_kafka_consumer_sees_the_topic_name_offsets_and_header_bytes() {
    let Some(broker) = broker().await else { return };
    let topic = topic(&broker.log, 2).await;
    let conversation = 0x0123_4567_89ab_cdef_0011_2233_4455_6677_u128;
    let headers: Headers = vec![
        ("agdx.ct".into(), HeaderValue::u8(7)),
        ("agdx.av".into(), HeaderValue::u32(1)),
        (
            "gen_ai.conversation.id".into(),
            HeaderValue::u128(conversation),
        ),
        ("agdx.to".into(), HeaderValue::string("billing")),
    ];
    broker
        .log
        .append(
            &topic,
            1,
            vec![
                record("first"),
                OutgoingRecord {
                    headers,
                    payload: Bytes::from_static(b"second"),
                },
            ],
        )
        .await
        .expect("append");

    let name = format!("{}.records", topic.stream);
    let consumer = plain_reader(&broker.url, &name, 1, 0);
    let read = tokio::task::spawn_blocking(move || plain_read(&consumer, 2))
        .await
        .unwrap();
    assert_eq!((read[0].0, read[0].2.as_slice()), (0, &b"first"[..]));
    assert!(read[0].1.is_empty());
    assert_eq!((read[1].0, read[1].2.as_slice()), (1, &b"second"[..]));
    assert_eq!(
        read[1].1,
        vec![
            ("agdx.ct".to_owned(), vec![7]),
            ("agdx.av".to_owned(), vec![1, 0, 0, 0]),
            (
                "gen_ai.conversation.id".to_owned(),
                conversation.to_le_bytes().to_vec()
            ),
            ("agdx.to".to_owned(), b"billing".to_vec()),
        ],
        "Kafka headers carry the bytes of the Iggy typed values"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_from_other_clients_are_read_and_malformed_headers_make_a_corrupt_record() {
    let Some(broker) = broker().await else { return };
    let topic = topic(&broker.log, 1).await;
    let name = format!("{}.records", topic.stream);
    let producer: FutureProducer = plain_config(&broker.url)
        .create()
        .expect("a plain producer");
    let with = |key: &str, value: &[u8]| {
        Some(OwnedHeaders::new().insert(Header {
            key,
            value: Some(value),
        }))
    };
    for (payload, headers) in [
        (&b"traced"[..], with("x-trace", b"abc")),
        (&b"two-byte content type"[..], with("agdx.ct", &[1, 2])),
        (&b"after"[..], with("agdx.ct", &[3])),
    ] {
        let mut outgoing = FutureRecord::<(), _>::to(&name)
            .partition(0)
            .payload(payload);
        if let Some(headers) = headers {
            outgoing = outgoing.headers(headers);
        }
        producer
            .send(outgoing, Duration::from_secs(10))
            .await
            .expect("a plain send");
    }

    let first = broker
        .log
        .poll(&topic, 0, 0, 10, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(
        texts(&first),
        ["traced"],
        "the poll stops before the malformed record"
    );
    assert_eq!(
        first[0].headers,
        vec![(
            "x-trace".into(),
            HeaderValue {
                kind: HeaderKind::Raw,
                bytes: HeaderBytes::from_slice(b"abc")
            }
        )]
    );
    match broker.log.poll(&topic, 0, 1, 10, Duration::ZERO).await {
        Err(LogError::Corrupt(damage)) => {
            assert_eq!(damage.position, topic.position(0, 1));
            assert_eq!(damage.count(), 1);
            assert!(damage.reason.contains("agdx.ct"), "{}", damage.reason);
            assert_eq!(
                damage.payload.as_deref(),
                Some(&b"two-byte content type"[..]),
                "the payload is kept so the record can be dead-lettered and redriven"
            );
        }
        other => panic!("a poll starting at a malformed record: {other:?}"),
    }
    let after = broker
        .log
        .poll(&topic, 0, 2, 10, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(texts(&after), ["after"]);
    assert_eq!(after[0].headers[0].1, HeaderValue::u8(3));
}

/// Any producer sets a record's `CreateTime`; one far in the future is
/// read as the latest time there is, not a panic or a wrapped-around time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_create_time_from_another_client_too_large_for_micros_saturates() {
    let Some(broker) = broker().await else { return };
    let topic = topic(&broker.log, 1).await;
    let name = format!("{}.records", topic.stream);
    let producer: FutureProducer = plain_config(&broker.url)
        .create()
        .expect("a plain producer");
    let ordinary = 1_700_000_000_000_i64;
    // The first millisecond count whose microseconds do not fit in a u64.
    let first_too_large = i64::try_from(u64::MAX / 1000 + 1).unwrap();
    for (payload, millis) in [
        ("far", i64::MAX),
        ("just past", first_too_large),
        ("ordinary", ordinary),
    ] {
        producer
            .send(
                FutureRecord::<(), _>::to(&name)
                    .partition(0)
                    .payload(payload)
                    .timestamp(millis),
                Duration::from_secs(10),
            )
            .await
            .expect("a plain send");
    }

    let read = broker
        .log
        .poll(&topic, 0, 0, 10, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(texts(&read), ["far", "just past", "ordinary"]);
    let stamps: Vec<u64> = read.iter().map(|r| r.timestamp_micros).collect();
    assert_eq!(
        stamps,
        [u64::MAX, u64::MAX, 1_700_000_000_000_000],
        "microseconds saturate; an ordinary time converts exactly"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_offset_is_the_next_one_to_read_in_kafka() {
    let Some(broker) = broker().await else { return };
    let topic = topic(&broker.log, 1).await;
    let name = format!("{}.records", topic.stream);
    broker
        .log
        .append(
            &topic,
            0,
            (0..10).map(|n| record(format!("r{n}"))).collect(),
        )
        .await
        .expect("append");
    broker
        .log
        .store_offset(&topic, "g", 0, 4)
        .await
        .expect("store_offset");

    // Group `g` of the stream, as Kafka's tools name it.
    let group: BaseConsumer = plain_config(&broker.url)
        .set("group.id", format!("{}.g", topic.stream))
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition(&name, 0);
    let (group, committed) = tokio::task::spawn_blocking(move || {
        let committed = group
            .committed_offsets(list, Duration::from_secs(10))
            .expect("committed");
        (group, committed)
    })
    .await
    .unwrap();
    assert_eq!(
        committed.find_partition(&name, 0).unwrap().offset(),
        Offset::Offset(5),
        "agdx's last processed offset 4 is Kafka's next offset 5"
    );

    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&name, 0, Offset::Offset(8))
        .unwrap();
    tokio::task::spawn_blocking(move || group.commit(&list, CommitMode::Sync))
        .await
        .unwrap()
        .expect("a plain commit");
    assert_eq!(
        broker.log.committed_offset(&topic, "g", 0).await.unwrap(),
        Some(7)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_partition_moves_only_after_the_work_in_hand_is_reported_done() {
    let Some(broker) = broker().await else { return };
    let log = broker.log.clone();
    let topic = topic(&log, 2).await;
    log.append(&topic, 0, vec![record("a"), record("b")])
        .await
        .unwrap();
    log.append(&topic, 1, vec![record("c"), record("d")])
        .await
        .unwrap();
    let first = log.join_group(&topic, "pool").await.expect("join first");
    assert_eq!(first.assigned().await.unwrap(), [0, 1]);
    first.working_on(&[0, 1]).await;

    let second_log: SharedLog = broker.connect_again().await;
    let joining = {
        let topic = topic.clone();
        tokio::spawn(async move {
            second_log
                .join_group(&topic, "pool")
                .await
                .map(|m| (m, second_log))
        })
    };
    // The first member learns it gives one partition up, and still has work in hand on it.
    let kept = eventually(
        "a partition to be revoked from the first member",
        || async {
            let owned = first.assigned().await.unwrap();
            (owned.len() == 1).then(|| owned[0])
        },
    )
    .await;
    let moving = 1 - kept;
    first.working_on(&[0, 1]).await;
    let (second, _second_log) = joining.await.unwrap().expect("join second");

    // While the work is in hand the partition stays with the first member,
    // which can still commit it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !second.assigned().await.unwrap().contains(&moving),
        "the partition moved before the work in hand was done"
    );
    log.store_offset(&topic, "pool", moving, 0)
        .await
        .expect("the member handing the partition over commits its last record");

    first.working_on(&[kept]).await;
    eventually("the second member to get the partition", || async {
        (second.assigned().await.unwrap() == [moving]).then_some(())
    })
    .await;
    assert_eq!(
        log.committed_offset(&topic, "pool", moving).await.unwrap(),
        Some(0)
    );
    match log.store_offset(&topic, "pool", moving, 1).await {
        Err(LogError::NotOwner { .. }) | Ok(()) => {}
        other => panic!("a commit after the hand-over: {other:?}"),
    }
    second.leave().await.unwrap();
    first.leave().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tansu_broker_killed_with_sigkill_keeps_acknowledged_records_and_offsets() {
    let binary = match tansu_binary() {
        Ok(binary) if std::env::var("AGDX_TEST_KAFKA_BROKERS").is_err() => binary,
        Ok(_) => {
            return support::kafka::say_skipped(
                "the broker kill test needs a Tansu it starts itself, not AGDX_TEST_KAFKA_BROKERS",
            );
        }
        Err(why) => return support::kafka::say_skipped(&why),
    };
    let dir = tempfile::tempdir().unwrap();
    let mut tansu = TansuBroker::start(&binary, dir, "sqlite://tansu.db")
        .await
        .expect("start tansu");
    let url = test_url(&tansu.address);
    let log: SharedLog = Arc::new(KafkaLog::connect(&url).await.expect("connect"));
    let topic = topic(&log, 2).await;
    log.append(&topic, 1, (0..5).map(|n| record(format!("d{n}"))).collect())
        .await
        .expect("append");
    log.store_offset(&topic, "g", 1, 2)
        .await
        .expect("store_offset");
    drop(log);

    tansu.kill();
    tansu
        .restart()
        .await
        .expect("restart tansu on the same store");
    let log: SharedLog = Arc::new(KafkaLog::connect(&url).await.expect("reconnect"));
    assert_eq!(
        log.topic(&topic.stream, &topic.topic).await.unwrap(),
        Some(topic.clone())
    );
    assert_eq!(
        texts(&support::drain(log.as_ref(), &topic, 1, 0, 10).await),
        ["d0", "d1", "d2", "d3", "d4"]
    );
    assert_eq!(log.committed_offset(&topic, "g", 1).await.unwrap(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topics_retention_is_its_retention_ms() {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let Some(broker) = broker().await else { return };
    let stream = unique_stream("kafka");
    for (topic, retention) in [
        (
            "aging",
            agdx::log::Retention::For(Duration::from_secs(7200)),
        ),
        ("kept", agdx::log::Retention::Forever),
    ] {
        broker
            .log
            .ensure_topic_retained(&stream, topic, 1, retention)
            .await
            .expect("a topic with a retention");
    }
    let admin: AdminClient<DefaultClientContext> =
        plain_config(&broker.url).create().expect("an admin client");
    for (topic, wanted) in [("aging", "7200000"), ("kept", "-1")] {
        let name = format!("{stream}.{topic}");
        let described = admin
            .describe_configs([&ResourceSpecifier::Topic(&name)], &AdminOptions::new())
            .await
            .expect("describe the topic's configuration");
        let config = described
            .into_iter()
            .next()
            .expect("one answer")
            .expect("the topic's configuration");
        let retention = config
            .get("retention.ms")
            .and_then(|entry| entry.value.clone());
        assert_eq!(retention.as_deref(), Some(wanted), "{name}");
    }
}
