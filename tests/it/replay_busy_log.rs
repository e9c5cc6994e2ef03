//! Replay finds a conversation's records wherever they sit in its
//! partitions: with more than one poll's worth of other records before and
//! after them, `Replay`, `Folded::catch_up`, `causal_graph`, `agdx
//! timeline` and `agdx graph --conversation` all find every one of them.
//! On the embedded log and Iggy; not on the Kafka test broker (see
//! [`TANSU_SLOW_FETCH`]).

use crate::support;

use std::sync::Arc;

use agdx::replay::{
    Direction, Fold, Folded, GraphStart, NodeKey, Replay, ReplayRecord, causal_graph,
};
use agdx::wire::{ConversationId, Kind};
use agdx::worker::EchoHandler;
use agdx::{CommandRequest, ReplyEvent};
use support::agents::neighbour_of;
use support::fabric::{ANSWER, Fabric, Running, agent_id, fabrics};

/// Other records put before and after the conversation's: more than the
/// 1000 records one replay poll asks for.
const CROWD: usize = 1_500;

/// Fills the conversation's partitions with others' records: commands of a
/// neighbour conversation to an agent nobody runs, and bytes that are no
/// agent record on the responses topic.
async fn crowd(fabric: &Fabric, conversation: ConversationId) {
    let neighbour = neighbour_of(fabric, conversation);
    let requests = (0..CROWD)
        .map(|n| {
            CommandRequest::new("idle", format!("noise {n}").into_bytes())
                .to(agent_id("nobody"))
                .conversation(neighbour)
        })
        .collect();
    fabric
        .producer("crowd")
        .commands(requests)
        .await
        .expect("the neighbour's commands");
    let responses = &fabric.topology.responses;
    let partition = agdx::routing::partition_of(responses, conversation);
    let noise = (0..CROWD)
        .map(|n| support::record(format!("not a record {n}")))
        .collect();
    fabric
        .log
        .append(responses, partition, noise)
        .await
        .expect("other bytes on the responses topic");
}

/// Counts the records folded.
struct Count;

impl Fold for Count {
    type State = u64;
    fn name(&self) -> &str {
        "count"
    }
    fn apply(&self, state: &mut u64, _: &ReplayRecord) {
        *state += 1;
    }
}

/// Why the Kafka test broker sits this out: Tansu 0.6 answers a fetch of a
/// partition holding some 3,000 records here with nothing for over 20 s
/// (longer than a poll waits for records the log holds), and its metadata
/// requests time out meanwhile; a plain poll from offset 0 fails the same
/// way, so this says nothing about replay.
const TANSU_SLOW_FETCH: &str = "Tansu cannot serve a fetch of a 3,000-record partition in time";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_among_thousands_of_other_records_replays_whole() {
    for fabric in fabrics("busy_replay").await {
        if fabric.backend == "kafka" {
            support::say_skipped_once("kafka", TANSU_SLOW_FETCH);
            continue;
        }
        let backend = fabric.backend;
        let check = replays_whole(Arc::new(fabric));
        support::naming_backend("busy_replay", backend, check).await;
    }
}

/// The check itself, on one fabric.
async fn replays_whole(fabric: Arc<Fabric>) {
    let worker = Running::start(fabric.worker("echo").handle("hello", EchoHandler));
    let conversation = agdx::new_conversation_id();
    crowd(&fabric, conversation).await;
    let request = CommandRequest::new("hello", b"among the crowd".to_vec())
        .to(agent_id("echo"))
        .conversation(conversation);
    let requester = fabric.requester("cli");
    let mut watch = requester.send(request).await.expect("send");
    let command = watch.sent().record.expect("a command has a record id");
    loop {
        match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Status(_) => {}
            ReplyEvent::Response(_) => break,
            other => panic!("expected a response, got {other:?}"),
        }
    }
    crowd(&fabric, conversation).await;

    let records = Replay::new(fabric.log.clone(), &fabric.topology, conversation)
        .read_to_end()
        .await
        .expect("replay");
    let kinds: Vec<Kind> = records
        .iter()
        .filter_map(|r| r.envelope().map(|e| e.kind))
        .collect();
    assert_eq!(kinds, [Kind::Command, Kind::Response], "{records:#?}");

    let mut folded = Folded::from_start(
        Count,
        fabric.log.clone(),
        fabric.topology.clone(),
        fabric.topology.responses.clone(),
        conversation,
    );
    assert_eq!(folded.catch_up().await.expect("catch up"), 1);
    assert_eq!(*folded.state(), 1, "the response is folded");
    let last_response = fabric
        .log
        .last_offset(
            &fabric.topology.responses,
            agdx::routing::partition_of(&fabric.topology.responses, conversation),
        )
        .await
        .expect("last offset");
    assert_eq!(folded.as_of(), last_response, "folded to the end");

    let start = GraphStart {
        node: NodeKey::Record(command),
        conversation: Some(conversation),
    };
    let graph = causal_graph(&fabric.log, &fabric.topology, start, Direction::Both)
        .await
        .expect("the graph of the command");
    assert_eq!(graph.len(), 2, "the command and its response");

    let id = conversation.to_string();
    let (code, stdout, stderr) = fabric.run_agdx(&["timeline", &id]).await;
    assert_eq!(code, 0, "{stderr}");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    assert!(lines[0].contains("command hello"), "{stdout}");
    assert!(lines[1].contains("response"), "{stdout}");

    let (code, stdout, stderr) = fabric
        .run_agdx(&["graph", &command.to_string(), "--conversation", &id])
        .await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("◀ start") && stdout.lines().count() == 2,
        "{stdout}"
    );
    worker.stop().await;
}
