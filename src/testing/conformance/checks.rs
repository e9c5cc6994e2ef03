//! The checks of the log conformance suite, one function each (see
//! [`super::Check`]).

use std::num::NonZeroU32;
use std::time::Duration;

use agdx_wire::{HeaderKind, HeaderValue, Headers};
use bytes::Bytes;

use super::Subject;
use crate::log::{
    Append, LogError, OffsetCommit, OutgoingRecord, POLL_BYTES_BUDGET, SharedLog, TopicInfo,
};
use crate::routing::partition_for_key;
use crate::testing::{drain, eventually, record, texts, wait_for_split};

/// Long enough that a wait which ends is one that was woken.
const LONG_WAIT: Duration = Duration::from_secs(30);

/// Records come back in the order appended, with their positions and
/// timestamps; topics are created once and found again.
pub async fn append_and_poll_keep_order(Subject { log, stream, .. }: Subject) {
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

/// Typed headers come back with their kinds and bytes.
pub async fn typed_headers_round_trip(Subject { log, stream, .. }: Subject) {
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
                payload: Bytes::from_static(b"with"),
            },
            record("without"),
            OutgoingRecord {
                headers: other.clone(),
                payload: Bytes::from_static(b"other"),
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
        conv.bytes.as_slice(),
        conversation.to_le_bytes(),
        "uint128 headers are little-endian"
    );
    assert_eq!(
        (find("agdx.to").kind, find("agdx.to").as_str()),
        (HeaderKind::String, Some("billing-agent"))
    );
}

/// Records appended to the partition [`partition_for_key`] names for their
/// conversation are found there and nowhere else.
pub async fn records_keyed_by_conversation_land_in_its_partition(
    Subject { log, stream, .. }: Subject,
) {
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

/// Two members split the partitions; when one dies, the other takes its
/// partitions over from their committed offsets.
pub async fn group_members_split_partitions_and_survivors_take_over(
    Subject { log, stream, .. }: Subject,
) {
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

/// A member that leaves hands its partitions to the one that stays.
pub async fn leaving_a_group_hands_partitions_over_at_once(Subject { log, stream, .. }: Subject) {
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
    // hand-over comes at once and not only when b's membership expires is a
    // backend's own test, where one call settles it.
    let all: Vec<u32> = (0..partitions).collect();
    eventually("the remaining member to own every partition", || async {
        (a.assigned().await.expect("assigned") == all).then_some(())
    })
    .await;
    a.leave().await.expect("leave");
}

/// Records and committed offsets are there when the storage is opened again.
pub async fn offsets_and_records_persist_across_restart(
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

/// A poll waiting on an empty partition returns the record appended to it
/// (and not one appended elsewhere).
pub async fn a_waiting_poll_wakes_on_append(Subject { log, stream, .. }: Subject) {
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

/// A poll stops adding records once their payloads reach
/// [`POLL_BYTES_BUDGET`], and always returns at least one.
pub async fn a_poll_keeps_to_the_byte_budget(Subject { log, stream, .. }: Subject) {
    // Records as large as the log takes (up to 9.6 MB; Kafka's default limit
    // is 1 MB), and enough of them to go two past the budget.
    let size = (log.max_record_bytes() - 4096).min(9_600_000);
    let records = (POLL_BYTES_BUDGET / size + 2) as u64;
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
            before_last < POLL_BYTES_BUDGET,
            "a poll returned {} records of {size} bytes, past the {POLL_BYTES_BUDGET}-byte budget",
            got.len()
        );
        for r in &got {
            assert_eq!(r.payload.len(), size);
            assert_eq!(r.payload[0], b'a' + r.position.offset as u8);
        }
        from += got.len() as u64;
    }
}

/// What the port refuses is refused with the typed error that says why,
/// and leaves nothing behind.
pub async fn bad_requests_give_typed_errors(Subject { log, stream, .. }: Subject) {
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

/// [`Log::append_and_commit`](crate::log::Log::append_and_commit) writes
/// every batch, then stores the offset; a call refused for its input (a
/// bad record in any batch, a partition the topic lacks) writes nothing,
/// neither a batch nor the offset.
pub async fn append_and_commit_is_all_or_nothing(Subject { log, stream, .. }: Subject) {
    let commands = log
        .ensure_topic(&stream, "commands", 2)
        .await
        .expect("ensure_topic");
    let replies = log
        .ensure_topic(&stream, "replies", 2)
        .await
        .expect("ensure_topic");
    let letters = log
        .ensure_topic(&stream, "letters", 1)
        .await
        .expect("ensure_topic");
    log.append(
        &commands,
        1,
        (0..3).map(|n| record(format!("c{n}"))).collect(),
    )
    .await
    .expect("append commands");
    let group = "workers";
    let member = log.join_group(&commands, group).await.expect("join");
    eventually("the only member to own every partition", || async {
        (member.assigned().await.expect("assigned") == [0, 1]).then_some(())
    })
    .await;
    let batch = |topic: &TopicInfo, partition: u32, payloads: &[&str]| Append {
        topic: topic.clone(),
        partition,
        records: payloads.iter().map(|p| record(*p)).collect(),
    };
    let commit = |partition: u32, offset: u64| OffsetCommit {
        topic: commands.clone(),
        group: group.to_owned(),
        partition,
        offset,
    };

    log.append_and_commit(
        vec![
            batch(&replies, 0, &["r0", "r1"]),
            batch(&replies, 1, &["r2"]),
            batch(&letters, 0, &["d0"]),
        ],
        commit(1, 1),
    )
    .await
    .expect("append_and_commit");
    let written = async || {
        (
            texts(&drain(log.as_ref(), &replies, 0, 0, 10).await),
            texts(&drain(log.as_ref(), &replies, 1, 0, 10).await),
            texts(&drain(log.as_ref(), &letters, 0, 0, 10).await),
            log.committed_offset(&commands, group, 1)
                .await
                .expect("committed_offset"),
        )
    };
    let after_first = (
        vec!["r0".to_owned(), "r1".to_owned()],
        vec!["r2".to_owned()],
        vec!["d0".to_owned()],
        Some(1),
    );
    assert_eq!(written().await, after_first);

    let empty_payload = log
        .append_and_commit(
            vec![batch(&replies, 0, &["r3"]), batch(&letters, 0, &["d1", ""])],
            commit(1, 2),
        )
        .await;
    assert!(
        matches!(empty_payload, Err(LogError::InvalidInput(_))),
        "a batch with an empty payload: {empty_payload:?}"
    );
    let too_large = Append {
        topic: letters.clone(),
        partition: 0,
        records: vec![record(vec![b'x'; log.max_record_bytes() + 1])],
    };
    let too_large = log
        .append_and_commit(vec![batch(&replies, 1, &["r4"]), too_large], commit(1, 2))
        .await;
    assert!(
        matches!(too_large, Err(LogError::RecordTooLarge { .. })),
        "an oversized record: {too_large:?}"
    );
    let no_partition = log
        .append_and_commit(vec![batch(&replies, 2, &["r5"])], commit(1, 2))
        .await;
    assert!(
        matches!(
            no_partition,
            Err(LogError::NoSuchPartition { partition: 2, .. })
        ),
        "a batch for a partition the topic lacks: {no_partition:?}"
    );
    let no_commit_partition = log
        .append_and_commit(vec![batch(&replies, 0, &["r6"])], commit(2, 0))
        .await;
    assert!(
        matches!(
            no_commit_partition,
            Err(LogError::NoSuchPartition { partition: 2, .. })
        ),
        "a commit for a partition the topic lacks: {no_commit_partition:?}"
    );
    assert_eq!(
        written().await,
        after_first,
        "a refused append_and_commit wrote something"
    );
    member.leave().await.expect("leave");
}
