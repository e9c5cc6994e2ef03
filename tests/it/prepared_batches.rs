//! A batch prepared apart from its append: `prepare_commands` then
//! `publish_prepared` puts on the log exactly what `commands` puts there
//! (the same envelopes, headers and partitions; only the minted record ids
//! differ), and what a signing producer prepared verifies once appended.
//! On every backend.

use crate::support;

use std::collections::BTreeMap;
use std::sync::Arc;

use agdx::log::{LogRecord, OutgoingRecord, TopicInfo};
use agdx::trust::KeyKind;
use agdx::wire::{AgentEnvelope, ContentType, Headers, IdempotencyKey, Metadata};
use agdx::{
    CommandRequest, PreparedBatch, Producer, Sent, Topology, TopologyConfig, new_conversation_id,
    new_correlation_id, new_record_id,
};
use support::fabric::{Fabric, PARTITIONS, agent_id, fabrics, on_every_fabric};
use support::naming_backend;
use support::trust::Keys;

/// Commands with every refinement a request can carry. Each has its
/// conversation (given, or derived from its key) and its correlation fixed,
/// so the same requests sent twice land in the same partitions.
fn requests() -> Vec<CommandRequest> {
    let shared = new_conversation_id();
    (0..16)
        .map(|i| {
            let target = agent_id(if i % 2 == 0 { "summarizer" } else { "triage" });
            let request = CommandRequest::new("summarize", format!("incident {i}").into_bytes())
                .to(target)
                .correlation(new_correlation_id());
            match i % 4 {
                0 => request.conversation(shared),
                1 => request
                    .idempotency_key(IdempotencyKey::new(format!("key-{i}")).expect("a valid key")),
                2 => request
                    .conversation(new_conversation_id())
                    .content_type(ContentType::Json)
                    .metadata(Metadata::new().with("tenant", "acme"))
                    .deadline_micros(4_000_000_000_000_000),
                _ => request
                    .conversation(new_conversation_id())
                    .caused_by(new_record_id(), None)
                    .must_understand(1),
            }
        })
        .collect()
}

/// Every record of `topic`, by partition, in offset order.
async fn by_partition(fabric: &Fabric, topic: &TopicInfo) -> BTreeMap<u32, Vec<LogRecord>> {
    let mut all: BTreeMap<u32, Vec<LogRecord>> = BTreeMap::new();
    for record in fabric.records(topic).await {
        all.entry(record.position.partition)
            .or_default()
            .push(record);
    }
    all
}

/// Headers in key order: logs hand them back in an order of their own.
fn sorted(headers: &Headers) -> Headers {
    let mut headers = headers.clone();
    headers.sort_by(|(a, _), (b, _)| a.cmp(b));
    headers
}

/// What a record carries apart from the ids minted for it: its headers and
/// its envelope without the record id.
fn without_record_id(record: &LogRecord) -> (Headers, AgentEnvelope) {
    let mut envelope = AgentEnvelope::decode_valid(&record.payload).expect("a valid envelope");
    envelope.record = None;
    (sorted(&record.headers), envelope)
}

/// The records of `batch`, by partition.
fn records_of(batch: &PreparedBatch) -> BTreeMap<u32, Vec<OutgoingRecord>> {
    batch
        .records()
        .map(|(_, partition, records)| (partition, records.to_vec()))
        .collect()
}

fn without_record(sent: &[Sent]) -> Vec<Sent> {
    sent.iter()
        .map(|s| Sent {
            record: None,
            ..s.clone()
        })
        .collect()
}

#[tokio::test]
async fn a_prepared_batch_appends_what_commands_would() {
    const TEST: &str = "prepared_batches_like_commands";
    for fabric in fabrics(TEST).await {
        // A second topology with as many partitions on the same log, made
        // here: creating topics inside the checked future trips the
        // compiler's `Send` inference over async closures.
        let topology = TopologyConfig::new(format!("{}-prepared", fabric.stream))
            .with_partitions(PARTITIONS)
            .ensure(fabric.log.as_ref())
            .await
            .expect("create the second topology");
        let backend = fabric.backend;
        naming_backend(TEST, backend, like_commands(Arc::new(fabric), topology)).await;
    }
}

/// Sends the same requests with `commands` into the fabric's topology and
/// prepared, then published, into `topology`, and compares the two.
async fn like_commands(fabric: Arc<Fabric>, topology: Topology) {
    let requests = requests();
    let direct = fabric
        .producer("planner")
        .commands(requests.clone())
        .await
        .expect("send the commands");

    let producer = Producer::new(fabric.log.clone(), topology.clone(), agent_id("planner"));
    let batch = producer
        .prepare_commands(requests)
        .await
        .expect("prepare the commands");
    assert_eq!(batch.topics().collect::<Vec<_>>(), [&topology.commands]);
    let expected_sent = batch.sent().to_vec();
    let expected_records = records_of(&batch);
    assert!(
        fabric.records(&topology.commands).await.is_empty(),
        "preparing appends nothing"
    );
    let sent = producer
        .publish_prepared(batch)
        .await
        .expect("publish the prepared batch");
    assert_eq!(sent, expected_sent, "what was sent is what was prepared");
    assert_eq!(
        without_record(&sent),
        without_record(&direct),
        "same conversations, correlations and partitions"
    );

    let appended = by_partition(&fabric, &topology.commands).await;
    let appended_directly = by_partition(&fabric, &fabric.topology.commands).await;
    assert_eq!(
        appended.keys().collect::<Vec<_>>(),
        appended_directly.keys().collect::<Vec<_>>()
    );
    for (partition, records) in &appended {
        let prepared = &expected_records[partition];
        assert_eq!(records.len(), prepared.len(), "partition {partition}");
        for (record, prepared) in records.iter().zip(prepared) {
            assert_eq!(record.payload, prepared.payload);
            assert_eq!(sorted(&record.headers), sorted(&prepared.headers));
        }
        let direct: Vec<_> = appended_directly[partition]
            .iter()
            .map(without_record_id)
            .collect();
        let prepared: Vec<_> = records.iter().map(without_record_id).collect();
        assert_eq!(prepared, direct, "partition {partition}");
    }
    let ids: Vec<_> = appended
        .values()
        .flatten()
        .map(|r| {
            AgentEnvelope::decode(&r.payload)
                .expect("an envelope")
                .record
        })
        .collect();
    for s in &sent {
        assert!(ids.contains(&s.record), "{s:?} is on the log");
    }
}

#[tokio::test]
async fn a_signing_producers_prepared_batch_verifies() {
    on_every_fabric("prepared_batches_signed", |fabric| async move {
        let mut keys = Keys::new(fabric.dir.path());
        let signer = keys.enroll("planner", KeyKind::Agent);
        let producer = fabric.producer("planner").with_signer(signer);
        let batch = producer
            .prepare_commands(requests())
            .await
            .expect("prepare the commands");
        let sent = producer
            .publish_prepared(batch)
            .await
            .expect("publish the prepared batch");

        let verifier = keys.verifier();
        let records = fabric.records(&fabric.topology.commands).await;
        assert_eq!(records.len(), sent.len());
        for record in &records {
            let envelope = AgentEnvelope::decode_valid(&record.payload).expect("a valid envelope");
            let verified = verifier
                .verify_record(&envelope, record)
                .unwrap_or_else(|e| panic!("{:?} does not verify: {e}", envelope.record));
            assert_eq!(verified.principal, agent_id("planner"));
        }
    })
    .await;
}
