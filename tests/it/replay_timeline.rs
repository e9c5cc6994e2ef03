//! Replaying one conversation: every record of it across the agent topics
//! (and nothing of its partition neighbours), raw, in log order; the same
//! through `agdx timeline`, for people and as JSON lines. On every backend.

use crate::support;

use agdx::replay::{Replay, ReplayItem};
use agdx::wire::Kind;
use agdx::worker::EchoHandler;
use agdx::{AskError, CommandRequest};
use support::agents::{neighbour_of, refusing, storyteller};
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// Asks echo, the storyteller and the refusing ledger in one conversation,
/// and echo once in a neighbour conversation sharing its partition.
async fn converse(fabric: &Fabric) -> agdx::wire::ConversationId {
    let conversation = agdx::new_conversation_id();
    let requester = fabric.requester("cli");
    let ask = |agent: &str, operation: &str, body: &str| {
        CommandRequest::new(operation, body.as_bytes().to_vec())
            .to(agent_id(agent))
            .conversation(conversation)
    };
    requester
        .ask(ask("echo", "hello", "hi"), ANSWER)
        .await
        .expect("echo answers");
    requester
        .ask(ask("story", "tell", "go"), ANSWER)
        .await
        .expect("the story");
    match requester
        .ask(ask("ledger", "post", "order 7"), ANSWER)
        .await
    {
        Err(AskError::Remote(_)) => {}
        other => panic!("the ledger refuses, got {other:?}"),
    }
    let neighbour = CommandRequest::new("hello", b"not me".to_vec())
        .to(agent_id("echo"))
        .conversation(neighbour_of(fabric, conversation));
    requester
        .ask(neighbour, ANSWER)
        .await
        .expect("echo answers the neighbour");
    conversation
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conversation_replays_raw_across_topics_in_log_order() {
    on_every_fabric("timeline", |fabric| async move {
        let workers = [
            Running::start(fabric.worker("echo").handle("hello", EchoHandler)),
            Running::start(
                fabric
                    .worker("story")
                    .handle("tell", storyteller(&["once ", "upon ", "a time"])),
            ),
            Running::start(
                fabric
                    .worker("ledger")
                    .handle("post", refusing("the ledger is closed")),
            ),
        ];
        let conversation = converse(&fabric).await;
        // The capsule goes out right after the error reply; wait for it.
        support::eventually("the dead letter", || async {
            (!fabric.dead_letters().await.is_empty()).then_some(())
        })
        .await;

        let mut replay = Replay::new(fabric.log.clone(), &fabric.topology, conversation);
        let records = replay.read_to_end().await.expect("replay");
        let seen: Vec<String> = records
            .iter()
            .map(|r| match &r.item {
                ReplayItem::Envelope(e) => format!("{} {}", r.topic, e.kind.as_str()),
                ReplayItem::DeadLetter { .. } => format!("{} dead letter", r.topic),
                ReplayItem::Snapshot(_) => format!("{} snapshot", r.topic),
            })
            .collect();
        assert_eq!(
            seen,
            [
                "agent.commands command",
                "agent.responses response",
                "agent.commands command",
                "agent.responses chunk",
                "agent.responses chunk",
                "agent.responses chunk",
                "agent.commands command",
                "agent.responses error",
                "agent.dlq dead letter",
            ],
            "{seen:#?}"
        );
        assert!(
            records
                .iter()
                .all(|r| r.conversation() == Some(conversation))
        );
        assert!(
            replay.skipped() >= 2,
            "the neighbour's command and reply were read and stepped over"
        );
        let keys: Vec<_> = records.iter().map(|r| r.order_key()).collect();
        assert!(
            keys.windows(2).all(|w| w[0] <= w[1]),
            "log order: timestamp, then position"
        );
        // Raw: the payload is the bytes on the log.
        let command = &records[0];
        let stored = fabric
            .command_at(command.position.partition, command.position.offset)
            .await;
        assert_eq!(command.payload, stored.payload);

        // From per-partition offsets: responses from the stream's second chunk on.
        let second_chunk = records[4].position.offset;
        let later = Replay::new(fabric.log.clone(), &fabric.topology, conversation)
            .from_topic_offset("agent.responses", second_chunk)
            .read_to_end()
            .await
            .expect("replay from an offset");
        let responses: Vec<Kind> = later
            .iter()
            .filter(|r| r.topic == "agent.responses")
            .filter_map(|r| r.envelope().map(|e| e.kind))
            .collect();
        assert_eq!(responses, [Kind::Chunk, Kind::Chunk, Kind::Error]);
        assert_eq!(
            later.len(),
            records.len() - 2,
            "the response and the first chunk are before the offset"
        );

        // For people: one line per record, the stream folded into one.
        let id = conversation.to_string();
        let (code, stdout, stderr) = fabric.run_agdx(&["timeline", &id]).await;
        assert_eq!(code, 0, "{stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 7, "{stdout}");
        assert!(
            lines[0].contains("commands")
                && lines[0].contains("command hello")
                && lines[0].contains("cli → echo")
                && lines[0].contains("\"hi\""),
            "{stdout}"
        );
        assert!(
            lines[1].contains("response") && lines[1].contains(" +"),
            "a reply shows its latency: {stdout}"
        );
        assert!(
            lines[3].contains("chunks ×3 chat")
                && lines[3].contains("\"once upon a time\"")
                && lines[3].contains("finished (stop)")
                && lines[3].contains("applied 3, duplicates 0, late 0"),
            "{stdout}"
        );
        assert!(
            lines[5].contains("error")
                && lines[5].contains("invalid_request: the ledger is closed"),
            "{stdout}"
        );
        assert!(
            lines[6].contains("dlq") && lines[6].contains("dead letter rejected"),
            "{stdout}"
        );
        assert!(
            !stdout.contains("not me"),
            "the neighbour conversation stays out: {stdout}"
        );

        // As JSON lines: one per record, the tail form.
        let (code, stdout, _) = fabric.run_agdx(&["timeline", &id, "--json"]).await;
        assert_eq!(code, 0);
        let json: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        assert_eq!(json.len(), 9);
        assert_eq!(json[3]["kind"], "chunk");
        assert_eq!(json[8]["topic"], "agent.dlq");

        let (code, _, stderr) = fabric
            .run_agdx(&["timeline", &agdx::new_conversation_id().to_string()])
            .await;
        assert_eq!(code, 1);
        assert!(stderr.contains("has no records"), "{stderr}");
        for worker in workers {
            worker.stop().await;
        }
    })
    .await;
}
