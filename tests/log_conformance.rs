//! The log port's conformance suite: one set of checks, run against every
//! backend the harness finds (see `support`).

mod support;

use std::num::NonZeroU32;
use std::time::Duration;

use agdx::log::{LogError, OutgoingRecord, SharedLog, TopicInfo, partition_for_key};
use agdx::wire::{HeaderKind, HeaderValue, Headers};
use support::{Subject, drain, eventually, on_every_backend, record, texts, wait_for_split};

/// Long enough that a wait which ends is one that was woken.
const LONG_WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn append_and_poll_keep_order() {
    on_every_backend("order", check_append_poll_order).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typed_headers_round_trip() {
    on_every_backend("headers", check_headers_round_trip).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_keyed_by_conversation_land_in_its_partition() {
    on_every_backend("keys", check_keyed_partition).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_members_split_partitions_and_survivors_take_over() {
    on_every_backend("group", check_group_failover).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaving_a_group_hands_partitions_over_at_once() {
    on_every_backend("leave", check_graceful_leave).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_and_records_persist_across_restart() {
    on_every_backend("restart", check_persistence).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_poll_wakes_on_append() {
    on_every_backend("wake", check_poll_wakes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_keeps_to_the_byte_budget() {
    on_every_backend("budget", check_poll_byte_budget).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_give_typed_errors() {
    on_every_backend("errors", check_typed_errors).await;
}

/// The partition formula, against xxHash32 values computed independently
/// (the first three are the xxHash specification's test vectors, the
/// others were computed with Python's `xxhash` package).
#[test]
fn partition_for_key_is_xxhash32_mod_partitions() {
    let vectors: [(&[u8], u32); 5] = [
        (b"", 0x02CC_5D05),
        (b"a", 0x550D_7456),
        (b"abc", 0x32D1_53FF),
        (b"01J0Y1ZAG00000000000000002", 0xB6BD_3909),
        (b"01HZX3V5M8Q4R7T2W9YBCDEFGH", 0xB071_22BA),
    ];
    for (key, hash) in vectors {
        for partitions in [1, 2, 3, 8, 16, 1000] {
            assert_eq!(
                partition_for_key(key, count(partitions)),
                hash % partitions,
                "key {key:?}, {partitions} partitions"
            );
        }
    }
    assert_eq!(
        partition_for_key(b"01J0Y1ZAG00000000000000002", count(8)),
        1
    );
    assert_eq!(
        partition_for_key(b"01HZX3V5M8Q4R7T2W9YBCDEFGH", count(8)),
        2
    );
}

/// A partition count of the tests (never 0).
fn count(partitions: u32) -> NonZeroU32 {
    NonZeroU32::new(partitions).expect("at least one partition")
}

async fn check_append_poll_order(Subject { log, stream, .. }: Subject) {
    let topic = log
        .ensure_topic(&stream, "orders", 3)
        .await
        .expect("ensure_topic");
    assert_eq!(
        (
            topic.stream.as_str(),
            topic.topic.as_str(),
            topic.partitions.get()
        ),
        (stream.as_str(), "orders", 3)
    );
    assert_eq!(
        log.ensure_topic(&stream, "orders", 3)
            .await
            .expect("ensure_topic again"),
        topic
    );
    assert_eq!(
        log.topic(&stream, "orders").await.expect("topic"),
        Some(topic.clone())
    );
    assert_eq!(
        log.topic(&stream, "no-such-topic").await.expect("topic"),
        None
    );
    assert_eq!(log.last_offset(&topic, 1).await.expect("last_offset"), None);

    let mut expected = Vec::new();
    for batch in [1usize, 5, 10] {
        let records: Vec<OutgoingRecord> = (0..batch)
            .map(|_| {
                expected.push(format!("r{}", expected.len()));
                record(expected.last().unwrap().clone())
            })
            .collect();
        log.append(&topic, 1, records).await.expect("append");
    }
    assert_eq!(
        log.last_offset(&topic, 1).await.expect("last_offset"),
        Some(15)
    );
    assert_eq!(log.last_offset(&topic, 0).await.expect("last_offset"), None);
    assert_eq!(log.last_offset(&topic, 2).await.expect("last_offset"), None);

    let all = drain(log.as_ref(), &topic, 1, 0, 4).await;
    assert_eq!(texts(&all), expected);
    for (i, r) in all.iter().enumerate() {
        assert_eq!(r.position, topic.position(1, i as u64));
        assert!(r.headers.is_empty());
    }
    assert!(
        all.windows(2)
            .all(|w| w[0].timestamp_micros <= w[1].timestamp_micros),
        "timestamps go down"
    );
    assert!(
        all[0].timestamp_micros > 1_600_000_000_000_000,
        "timestamps are epoch microseconds"
    );

    let middle = log
        .poll(&topic, 1, 7, 3, Duration::ZERO)
        .await
        .expect("poll from 7");
    assert_eq!(texts(&middle), ["r7", "r8", "r9"]);
    let tail = drain(log.as_ref(), &topic, 1, 13, 100).await;
    assert_eq!(texts(&tail), ["r13", "r14", "r15"]);
    assert!(
        log.poll(&topic, 1, 16, 10, Duration::ZERO)
            .await
            .expect("poll past the end")
            .is_empty()
    );
    assert!(
        log.poll(&topic, 0, 0, 10, Duration::ZERO)
            .await
            .expect("poll empty")
            .is_empty()
    );

    log.append(&topic, 1, vec![record("r16")])
        .await
        .expect("append after polls");
    assert_eq!(
        log.last_offset(&topic, 1).await.expect("last_offset"),
        Some(16)
    );
    let last = log
        .poll(&topic, 1, 16, 10, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(texts(&last), ["r16"]);
}

fn sorted(headers: &Headers) -> Headers {
    let mut headers = headers.clone();
    headers.sort_by(|a, b| a.0.cmp(&b.0));
    headers
}

async fn check_headers_round_trip(Subject { log, stream, .. }: Subject) {
    let topic = log
        .ensure_topic(&stream, "headers", 1)
        .await
        .expect("ensure_topic");
    let conversation = 0x0123_4567_89AB_CDEF_FEDC_BA98_7654_3210_u128;
    let headers: Headers = vec![
        ("agdx.ct".into(), HeaderValue::u8(7)),
        ("agdx.av".into(), HeaderValue::u32(1)),
        (
            "gen_ai.conversation.id".into(),
            HeaderValue::u128(conversation),
        ),
        ("agdx.to".into(), HeaderValue::string("billing-agent")),
    ];
    let other: Headers = vec![
        ("agdx.ct".into(), HeaderValue::u8(255)),
        ("agdx.av".into(), HeaderValue::u32(u32::MAX)),
    ];
    log.append(
        &topic,
        0,
        vec![
            OutgoingRecord {
                headers: headers.clone(),
                payload: b"with".to_vec(),
            },
            record("without"),
            OutgoingRecord {
                headers: other.clone(),
                payload: b"other".to_vec(),
            },
        ],
    )
    .await
    .expect("append");
    let got = log
        .poll(&topic, 0, 0, 10, Duration::ZERO)
        .await
        .expect("poll");
    assert_eq!(texts(&got), ["with", "without", "other"]);
    assert_eq!(sorted(&got[0].headers), sorted(&headers));
    assert!(got[1].headers.is_empty());
    assert_eq!(sorted(&got[2].headers), sorted(&other));

    let find = |name: &str| {
        &got[0]
            .headers
            .iter()
            .find(|(n, _)| n == name)
            .expect("header present")
            .1
    };
    assert_eq!(
        (find("agdx.ct").kind, find("agdx.ct").as_u8()),
        (HeaderKind::Uint8, Some(7))
    );
    assert_eq!(
        (find("agdx.av").kind, find("agdx.av").as_u32()),
        (HeaderKind::Uint32, Some(1))
    );
    let conv = find("gen_ai.conversation.id");
    assert_eq!(
        (conv.kind, conv.as_u128()),
        (HeaderKind::Uint128, Some(conversation))
    );
    assert_eq!(
        conv.bytes,
        conversation.to_le_bytes(),
        "uint128 headers are little-endian"
    );
    assert_eq!(
        (find("agdx.to").kind, find("agdx.to").as_str()),
        (HeaderKind::String, Some("billing-agent"))
    );
}

async fn check_keyed_partition(Subject { log, stream, .. }: Subject) {
    let partitions = 8;
    let topic = log
        .ensure_topic(&stream, "keyed", partitions)
        .await
        .expect("ensure_topic");
    let conversations = [
        "01J0Y1ZAG00000000000000002",
        "01HZX3V5M8Q4R7T2W9YBCDEFGH",
        "01JABCDEFGHJKMNPQRSTVWXYZ0",
    ];
    for conversation in conversations {
        let partition = partition_for_key(conversation.as_bytes(), topic.partitions);
        for _ in 0..2 {
            log.append(&topic, partition, vec![record(conversation)])
                .await
                .expect("append");
        }
    }
    for partition in 0..partitions {
        let got = texts(&drain(log.as_ref(), &topic, partition, 0, 100).await);
        let expected: Vec<&str> = conversations
            .iter()
            .filter(|c| partition_for_key(c.as_bytes(), topic.partitions) == partition)
            .flat_map(|c| [*c, *c])
            .collect();
        assert_eq!(got, expected, "partition {partition}");
    }
}

/// Appends `per_partition` records `p<partition>-<n>` to every partition.
async fn fill(log: &SharedLog, topic: &TopicInfo, per_partition: u64) {
    for partition in 0..topic.partitions.get() {
        let records = (0..per_partition)
            .map(|n| record(format!("p{partition}-{n}")))
            .collect();
        log.append(topic, partition, records).await.expect("append");
    }
}

/// What a member would read next on `partition`: from the committed offset + 1.
async fn resume(log: &SharedLog, topic: &TopicInfo, group: &str, partition: u32) -> Vec<String> {
    let next = log
        .committed_offset(topic, group, partition)
        .await
        .expect("committed_offset")
        .map_or(0, |offset| offset + 1);
    texts(&drain(log.as_ref(), topic, partition, next, 10).await)
}

async fn check_group_failover(Subject { log, stream, .. }: Subject) {
    let partitions = 4;
    let topic = log
        .ensure_topic(&stream, "work", partitions)
        .await
        .expect("ensure_topic");
    fill(&log, &topic, 3).await;
    let group = "workers";
    let a = log.join_group(&topic, group).await.expect("join a");
    let b = log.join_group(&topic, group).await.expect("join b");
    assert_ne!(a.member_id(), b.member_id());
    let (_, owned_b) = wait_for_split(a.as_ref(), b.as_ref(), partitions).await;

    // Every member handles records 0 and 1 of its partitions and commits
    // them; record 2 is still in flight when member b dies.
    for partition in 0..partitions {
        assert_eq!(resume(&log, &topic, group, partition).await.len(), 3);
        log.store_offset(&topic, group, partition, 1)
            .await
            .expect("store_offset");
        assert_eq!(
            log.committed_offset(&topic, group, partition)
                .await
                .expect("committed"),
            Some(1)
        );
    }
    drop(b);

    let all: Vec<u32> = (0..partitions).collect();
    eventually("the survivor to own every partition", || async {
        (a.assigned().await.expect("assigned") == all).then_some(())
    })
    .await;
    for partition in owned_b {
        assert_eq!(
            resume(&log, &topic, group, partition).await,
            [format!("p{partition}-2")],
            "the survivor resumes after the committed offset of partition {partition}"
        );
    }
    a.leave().await.expect("leave");
}

async fn check_graceful_leave(Subject { log, stream, .. }: Subject) {
    let partitions = 4;
    let topic = log
        .ensure_topic(&stream, "work", partitions)
        .await
        .expect("ensure_topic");
    let a = log.join_group(&topic, "workers").await.expect("join a");
    let b = log.join_group(&topic, "workers").await.expect("join b");
    wait_for_split(a.as_ref(), b.as_ref(), partitions).await;
    b.leave().await.expect("leave");

    // Waited for with patience, so a loaded machine cannot fail it; that the
    // hand-over comes at once and not only when b's membership expires is
    // checked per backend (log_embedded, log_iggy), where one call settles it.
    let all: Vec<u32> = (0..partitions).collect();
    eventually("the remaining member to own every partition", || async {
        (a.assigned().await.expect("assigned") == all).then_some(())
    })
    .await;
    a.leave().await.expect("leave");
}

async fn check_persistence(
    Subject {
        log,
        reopen,
        stream,
    }: Subject,
) {
    let topic = log
        .ensure_topic(&stream, "durable", 2)
        .await
        .expect("ensure_topic");
    let member = log.join_group(&topic, "g").await.expect("join");
    log.append(&topic, 0, (0..5).map(|n| record(format!("d{n}"))).collect())
        .await
        .expect("append");
    log.store_offset(&topic, "g", 0, 2)
        .await
        .expect("store_offset");
    log.store_offset(&topic, "g", 0, 3)
        .await
        .expect("store_offset again");
    assert_eq!(
        log.committed_offset(&topic, "g", 0)
            .await
            .expect("committed"),
        Some(3)
    );
    assert_eq!(
        log.committed_offset(&topic, "g", 1)
            .await
            .expect("committed"),
        None
    );
    assert_eq!(
        log.committed_offset(&topic, "other", 0)
            .await
            .expect("committed"),
        None
    );
    member.leave().await.expect("leave");
    drop(log);

    let reopened = reopen().await;
    let log = reopened.log.clone();
    assert_eq!(
        log.topic(&stream, "durable").await.expect("topic"),
        Some(topic.clone())
    );
    assert_eq!(
        log.committed_offset(&topic, "g", 0)
            .await
            .expect("committed"),
        Some(3)
    );
    assert_eq!(
        log.committed_offset(&topic, "g", 1)
            .await
            .expect("committed"),
        None
    );
    assert_eq!(
        texts(&drain(log.as_ref(), &topic, 0, 0, 10).await),
        ["d0", "d1", "d2", "d3", "d4"]
    );
    assert_eq!(
        log.last_offset(&topic, 0).await.expect("last_offset"),
        Some(4)
    );
}

async fn check_poll_wakes(Subject { log, stream, .. }: Subject) {
    let topic = log
        .ensure_topic(&stream, "wake", 2)
        .await
        .expect("ensure_topic");
    assert!(
        log.poll(&topic, 0, 0, 10, Duration::from_millis(50))
            .await
            .expect("short wait")
            .is_empty(),
        "a wait with nothing appended ends empty"
    );

    for (from, payload) in [(0, "first"), (1, "second")] {
        let poller = {
            let (log, topic) = (log.clone(), topic.clone());
            tokio::spawn(async move { log.poll(&topic, 0, from, 10, LONG_WAIT).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        log.append(&topic, 1, vec![record("elsewhere")])
            .await
            .expect("append to another partition");
        log.append(&topic, 0, vec![record(payload)])
            .await
            .expect("append");
        let got = poller.await.expect("poller task").expect("poll");
        assert_eq!(
            texts(&got),
            [payload],
            "the waiting poll returned the appended record"
        );
        assert_eq!(got[0].position.offset, from);
    }
}

/// The byte budget of one poll: 64 MiB of payloads, after which a poll adds
/// no more records (it returns at least one).
const POLL_BUDGET: usize = 64 * 1024 * 1024;

async fn check_poll_byte_budget(Subject { log, stream, .. }: Subject) {
    // Records as large as the log takes (up to 9.6 MB; Kafka's default limit
    // is 1 MB), and enough of them to go two past the budget.
    let size = (log.max_record_bytes() - 4096).min(9_600_000);
    let records = (POLL_BUDGET / size + 2) as u64;
    let topic = log.ensure_topic(&stream, "t", 1).await.expect("ensure");
    for i in 0..records {
        let payload = vec![b'a' + i as u8; size];
        log.append(&topic, 0, vec![record(payload)])
            .await
            .expect("append a large record");
    }
    let mut from = 0;
    while from < records {
        let got = log
            .poll(&topic, 0, from, 100, Duration::ZERO)
            .await
            .expect("poll");
        assert!(
            !got.is_empty(),
            "a poll at {from} of {records} came back empty"
        );
        let before_last: usize = got[..got.len() - 1].iter().map(|r| r.payload.len()).sum();
        assert!(
            before_last < POLL_BUDGET,
            "a poll returned {} records of {size} bytes, past the {POLL_BUDGET}-byte budget",
            got.len()
        );
        for r in &got {
            assert_eq!(r.payload.len(), size);
            assert_eq!(r.payload[0], b'a' + r.position.offset as u8);
        }
        from += got.len() as u64;
    }
}

async fn check_typed_errors(Subject { log, stream, .. }: Subject) {
    let topic = log
        .ensure_topic(&stream, "strict", 2)
        .await
        .expect("ensure_topic");

    let empty_batch = log.append(&topic, 0, Vec::new()).await;
    assert!(
        matches!(empty_batch, Err(LogError::InvalidInput(_))),
        "empty batch: {empty_batch:?}"
    );
    let empty_payload = log.append(&topic, 0, vec![record("ok"), record("")]).await;
    assert!(
        matches!(empty_payload, Err(LogError::InvalidInput(_))),
        "empty payload: {empty_payload:?}"
    );

    let limit = log.max_record_bytes();
    let too_large = log
        .append(&topic, 0, vec![record(vec![b'x'; limit + 1])])
        .await;
    match too_large {
        Err(LogError::RecordTooLarge {
            size,
            limit: reported,
        }) => assert_eq!((size, reported), (limit + 1, limit)),
        other => panic!("oversized record: {other:?}"),
    }
    assert_eq!(
        log.last_offset(&topic, 0).await.expect("last_offset"),
        None,
        "a refused batch leaves nothing behind"
    );

    let bad_partition = log.append(&topic, 2, vec![record("x")]).await;
    assert!(
        matches!(
            bad_partition,
            Err(LogError::NoSuchPartition {
                partition: 2,
                partitions: 2,
                ..
            })
        ),
        "bad partition: {bad_partition:?}"
    );
    log.append(&topic, 1, vec![record("x")])
        .await
        .expect("append");
    for partition in [0, 1] {
        let none = log.poll(&topic, partition, 0, 0, Duration::ZERO).await;
        match none {
            Err(LogError::InvalidInput(message)) => {
                assert!(message.contains("at least 1"), "{message}")
            }
            other => panic!("a poll for 0 records: {other:?}"),
        }
    }
    let bad_poll = log.poll(&topic, 7, 0, 1, Duration::ZERO).await;
    assert!(
        matches!(
            bad_poll,
            Err(LogError::NoSuchPartition { partition: 7, .. })
        ),
        "bad partition: {bad_poll:?}"
    );

    let mismatch = log.ensure_topic(&stream, "strict", 3).await;
    assert!(
        matches!(
            mismatch,
            Err(LogError::PartitionMismatch {
                existing: 2,
                wanted: 3,
                ..
            })
        ),
        "partition mismatch: {mismatch:?}"
    );

    let missing = TopicInfo {
        stream: format!("{stream}-missing"),
        topic: "nowhere".into(),
        stream_id: u32::MAX - 7,
        topic_id: 1,
        partitions: NonZeroU32::MIN,
    };
    let append = log.append(&missing, 0, vec![record("x")]).await;
    assert!(
        matches!(append, Err(LogError::NoSuchTopic { .. })),
        "unknown topic: {append:?}"
    );
    let poll = log.poll(&missing, 0, 0, 1, Duration::ZERO).await;
    assert!(
        matches!(poll, Err(LogError::NoSuchTopic { .. })),
        "unknown topic: {poll:?}"
    );
    let last = log.last_offset(&missing, 0).await;
    assert!(
        matches!(last, Err(LogError::NoSuchTopic { .. })),
        "unknown topic: {last:?}"
    );
    assert_eq!(
        log.topic(&missing.stream, &missing.topic)
            .await
            .expect("topic"),
        None
    );
    assert!(
        !LogError::NoSuchTopic {
            stream: stream.clone(),
            topic: "x".into()
        }
        .is_retryable()
    );
}
