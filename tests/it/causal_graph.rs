//! The causal graph over the log: from any record, its ancestors, its
//! descendants or both, following `cause` (and `cause_at` into another
//! conversation); drawn by `agdx graph` as a tree, DOT or Mermaid. On every
//! backend.

use crate::support;

use std::sync::Arc;

use agdx::replay::{Direction, GraphStart, NodeKey, causal_graph};
use agdx::wire::Kind;
use agdx::worker::{EchoHandler, HandlerError, HandlerReply, handler_fn};
use agdx::{CommandRequest, Requester};
use support::agents::storyteller;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// A planner that, for each plan, asks echo in the same conversation and
/// the storyteller in a new one, both caused by the plan, then answers.
fn planner(requester: Arc<Requester>) -> impl agdx::worker::Handler {
    handler_fn(move |request| {
        let requester = requester.clone();
        async move {
            let cause = request.envelope.record.expect("a command has a record id");
            let step = |operation: &str, agent: &str| {
                CommandRequest::new(operation, b"step".to_vec())
                    .to(agent_id(agent))
                    .caused_by(cause, Some(request.position))
            };
            let same = step("hello", "echo").conversation(request.envelope.conversation);
            let failed = |e: agdx::AskError| HandlerError::retryable(e.to_string());
            requester.ask(same, ANSWER).await.map_err(failed)?;
            requester
                .ask(step("tell", "story"), ANSWER)
                .await
                .map_err(failed)?;
            Ok(HandlerReply::raw("planned"))
        }
    })
}

fn kinds(graph: &agdx::replay::CausalGraph) -> Vec<(Kind, Option<String>)> {
    graph
        .nodes()
        .filter_map(|n| n.first().envelope().map(|e| (e.kind, e.operation.clone())))
        .collect()
}

fn start_of(record: agdx::wire::RecordId) -> GraphStart {
    GraphStart {
        node: NodeKey::Record(record),
        conversation: None,
    }
}

async fn plan(fabric: &Fabric) -> (agdx::wire::RecordId, agdx::wire::ConversationId) {
    let requester = fabric.requester("cli");
    let mut watch = requester
        .ask_stream(CommandRequest::new("plan", b"trip".to_vec()).to(agent_id("planner")))
        .await
        .expect("send the plan");
    let sent = watch.sent().clone();
    loop {
        if watch
            .next(ANSWER)
            .await
            .expect("the plan is answered")
            .is_terminal()
        {
            break;
        }
    }
    (sent.record.expect("a record id"), sent.conversation)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_graph_walks_up_down_and_both_across_conversations() {
    on_every_fabric("graph", |fabric| async move {
        let workers = [
            Running::start(fabric.worker("echo").handle("hello", EchoHandler)),
            Running::start(
                fabric
                    .worker("story")
                    .handle("tell", storyteller(&["a ", "b"])),
            ),
            Running::start(
                fabric
                    .worker("planner")
                    .handle("plan", planner(Arc::new(fabric.requester("planner")))),
            ),
        ];
        let (plan_record, conversation) = plan(&fabric).await;
        let (log, topology) = (&fabric.log, &fabric.topology);

        // Down from the plan: within its conversation, the echo step and its
        // answer, and the planner's answer; a tree.
        let down = causal_graph(log, topology, start_of(plan_record), Direction::Down)
            .await
            .expect("down");
        assert_eq!(
            kinds(&down),
            [
                (Kind::Command, Some("plan".to_owned())),
                (Kind::Command, Some("hello".to_owned())),
                (Kind::Response, None),
                (Kind::Response, None),
            ]
        );
        let start = *down.start();
        assert_eq!(
            down.children(&start).len(),
            2,
            "a tree: the step and the answer under the plan"
        );
        assert_eq!(down.roots(), [&start]);

        // Up from the story's last chunk, in another conversation: its
        // command, then (through cause_at) the plan.
        let story_conversation = fabric
            .responses()
            .await
            .into_iter()
            .find(|e| e.kind == Kind::Chunk && e.last)
            .expect("the story's last chunk")
            .conversation;
        assert_ne!(story_conversation, conversation);
        let chunk = agdx::replay::Replay::new(log.clone(), topology, story_conversation)
            .read_to_end()
            .await
            .expect("replay the story")
            .into_iter()
            .find(|r| r.envelope().is_some_and(|e| e.last))
            .expect("the last chunk");
        let up = causal_graph(
            log,
            topology,
            GraphStart {
                node: NodeKey::Position(chunk.position),
                conversation: None,
            },
            Direction::Up,
        )
        .await
        .expect("up");
        assert_eq!(
            kinds(&up),
            [
                (Kind::Command, Some("plan".to_owned())),
                (Kind::Command, Some("tell".to_owned())),
                (Kind::Chunk, None),
            ],
            "a thread up to the plan, found in the other conversation through cause_at"
        );
        assert_eq!(up.roots(), [&NodeKey::Record(plan_record)]);
        assert_eq!(up.missing().count(), 0);

        // Both from the echo step: its ancestor and its descendant, not its siblings.
        let step = down.children(&start)[0];
        let NodeKey::Record(step_record) = step else {
            panic!("a command has an id")
        };
        let both = causal_graph(
            log,
            topology,
            GraphStart {
                node: step,
                conversation: Some(conversation),
            },
            Direction::Both,
        )
        .await
        .expect("both");
        assert_eq!(
            kinds(&both),
            [
                (Kind::Command, Some("plan".to_owned())),
                (Kind::Command, Some("hello".to_owned())),
                (Kind::Response, None)
            ]
        );

        // Drawn by the CLI.
        let id = plan_record.to_string();
        let (code, text, stderr) = fabric.run_agdx(&["graph", &id, "--down"]).await;
        assert_eq!(code, 0, "{stderr}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert!(
            lines[0].starts_with("command plan · cli → planner") && lines[0].ends_with("◀ start"),
            "{text}"
        );
        assert!(
            lines[1].starts_with("├─ command hello · planner → echo"),
            "{text}"
        );
        assert!(
            lines[2].starts_with("│  └─ response · echo → planner"),
            "{text}"
        );
        assert!(
            lines[3].starts_with("└─ response · planner → cli · \"planned\""),
            "{text}"
        );

        let (code, mermaid, _) = fabric
            .run_agdx(&[
                "graph",
                &id,
                "--format",
                "mermaid",
                "--conversation",
                &conversation.to_string(),
            ])
            .await;
        assert_eq!(code, 0);
        assert!(mermaid.starts_with("flowchart TD\n"), "{mermaid}");
        assert_eq!(mermaid.matches(" --> ").count(), 3, "{mermaid}");
        let (_, dot, _) = fabric
            .run_agdx(&["graph", &step_record.to_string(), "--format", "dot", "--up"])
            .await;
        assert!(
            dot.starts_with("digraph causal {") && dot.matches(" -> ").count() == 1,
            "{dot}"
        );

        let (code, _, stderr) = fabric
            .run_agdx(&["graph", &agdx::new_record_id().to_string()])
            .await;
        assert_eq!(code, 1);
        assert!(
            stderr.contains("is on none of the agent topics"),
            "{stderr}"
        );
        for worker in workers {
            worker.stop().await;
        }
    })
    .await;
}
