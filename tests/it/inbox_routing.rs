//! The inbox routing: a command to agent X travels on X's own topic, X's
//! pool reads only its own commands there, and peers of either routing
//! still reach each other. Replies, streams, idempotency, dead letters and
//! replay work through inboxes as through `agent.commands`. On every
//! backend.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use agdx::log::TopicInfo;
use agdx::replay::{
    Direction, GraphStart, NodeKey, RedriveOutcome, Replay, causal_graph, dead_letters, redrive,
};
use agdx::wire::{AgentId, IdempotencyKey, Kind, StreamPurpose};
use agdx::worker::{EchoHandler, HandlerError, HandlerReply, Worker, handler_fn};
use agdx::{
    Answer, AskError, CommandRequest, CommandRouting, Producer, ReplyEvent, Requester, Topology,
    fence_of,
};

use crate::support;
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric, quick_config};

/// The fabric's topology with the inbox routing.
fn inbox_topology(fabric: &Fabric) -> Topology {
    fabric.topology.clone().with_routing(CommandRouting::Inbox)
}

/// A producer writing as `agent` with the inbox routing.
fn inbox_producer(fabric: &Fabric, agent: &str) -> Producer {
    Producer::new(fabric.log.clone(), inbox_topology(fabric), agent_id(agent))
}

/// A requester asking as `agent` with the inbox routing.
fn inbox_requester(fabric: &Fabric, agent: &str) -> Requester {
    Requester::new(inbox_producer(fabric, agent))
}

/// A worker for `agent` with the inbox routing.
fn inbox_worker(fabric: &Fabric, agent: &str) -> Worker {
    Worker::new(
        inbox_producer(fabric, agent),
        quick_config(fabric.dir.path().join(format!("state-{agent}"))),
    )
}

/// `agent`'s inbox topic, once its pool has created it.
async fn inbox_of(fabric: &Fabric, agent: &str) -> TopicInfo {
    let topology = inbox_topology(fabric);
    eventually("the pool to create its inbox", || async {
        topology
            .find_inbox(fabric.log.as_ref(), &agent_id(agent))
            .await
            .expect("look the inbox up")
    })
    .await
}

/// Whether `agent` has an inbox topic.
async fn has_inbox(fabric: &Fabric, agent: &str) -> bool {
    inbox_topology(fabric)
        .find_inbox(fabric.log.as_ref(), &agent_id(agent))
        .await
        .expect("look the inbox up")
        .is_some()
}

/// The body of a response answer.
fn response(answer: Answer) -> Vec<u8> {
    match answer {
        Answer::Response(reply) => reply.body.to_vec(),
        other => panic!("expected a response, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ask_through_an_inbox_is_answered_streamed_and_deduplicated() {
    on_every_fabric("inbox-ask", |fabric| async move {
        let charged = Arc::new(AtomicU32::new(0));
        let charges = charged.clone();
        let worker = inbox_worker(&fabric, "echo")
            .handle("hello", EchoHandler)
            .handle(
                "charge",
                handler_fn(move |_| {
                    let charges = charges.clone();
                    async move {
                        let n = charges.fetch_add(1, Ordering::SeqCst) + 1;
                        Ok(HandlerReply::raw(format!("charge {n}").into_bytes()))
                    }
                }),
            )
            .handle(
                "tell",
                handler_fn(|request| async move {
                    let mut stream = request
                        .stream(StreamPurpose::Chat, None)
                        .expect("a command can be streamed to");
                    for word in ["once ", "upon"] {
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
                }),
            );
        let running = Running::start(worker);
        let inbox = inbox_of(&fabric, "echo").await;
        assert_eq!(inbox.topic, "agent.inbox.echo");
        let requester = inbox_requester(&fabric, "asker");

        // A reply, through the inbox.
        let mut watch = requester
            .send(CommandRequest::new("hello", b"hi".to_vec()).to(agent_id("echo")))
            .await
            .expect("send");
        assert_eq!(
            watch.sent().topic,
            inbox.topic,
            "the command went to the inbox"
        );
        let reply = match watch.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Response(reply) => reply,
            other => panic!("expected a response, got {other:?}"),
        };
        assert_eq!(reply.body, &b"hi"[..]);
        let cause_at = reply.envelope.cause_at.expect("the command's position");
        assert_eq!(
            cause_at.topic, inbox.topic_id,
            "the reply points at the command in the inbox"
        );
        assert!(
            fence_of(&reply.envelope).is_some(),
            "the holder of the inbox partition answers under its fence"
        );

        // A stream.
        match requester
            .ask(
                CommandRequest::new("tell", b"go".to_vec()).to(agent_id("echo")),
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
                assert_eq!(body, b"once upon");
                assert_eq!(finish_reason.as_deref(), Some("stop"));
            }
            other => panic!("expected a streamed answer, got {other:?}"),
        }

        // Idempotency: the second arrival of a key gets the stored reply.
        let key = IdempotencyKey::new("order-42").expect("a key");
        for _ in 0..2 {
            let body = response(
                requester
                    .ask(
                        CommandRequest::new("charge", b"42 EUR".to_vec())
                            .to(agent_id("echo"))
                            .idempotency_key(key.clone()),
                        ANSWER,
                    )
                    .await
                    .expect("ask"),
            );
            assert_eq!(body, b"charge 1");
        }
        assert_eq!(charged.load(Ordering::SeqCst), 1, "the handler ran once");

        assert!(
            fabric.records(&fabric.topology.commands).await.is_empty(),
            "nothing went to agent.commands"
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_from_an_inbox_is_redriven_back_into_it() {
    on_every_fabric("inbox-dlq", |fabric| async move {
        let fixed = Arc::new(AtomicBool::new(false));
        let is_fixed = fixed.clone();
        let running = Running::start(inbox_worker(&fabric, "ledger").handle(
            "post",
            handler_fn(move |request| {
                let is_fixed = is_fixed.clone();
                async move {
                    if !is_fixed.load(Ordering::SeqCst) {
                        return Err(HandlerError::fatal("the ledger is closed"));
                    }
                    Ok(HandlerReply::raw(
                        [b"posted ".as_slice(), &request.body].concat(),
                    ))
                }
            }),
        ));
        let inbox = inbox_of(&fabric, "ledger").await;
        let requester = inbox_requester(&fabric, "asker");
        // A dead letter, redriven back into the inbox once fixed.
        let asked = requester
            .ask(
                CommandRequest::new("post", b"order 7".to_vec()).to(agent_id("ledger")),
                ANSWER,
            )
            .await;
        assert!(matches!(asked, Err(AskError::Remote(_))), "{asked:?}");
        let entry = eventually("the dead letter", || async {
            dead_letters(&fabric.log, &fabric.topology)
                .await
                .expect("list")
                .pop()
        })
        .await;
        assert_eq!(entry.capsule.source.topic, inbox.topic_id);
        let record = entry
            .original
            .as_ref()
            .and_then(|e| e.record)
            .expect("the original");
        fixed.store(true, Ordering::SeqCst);
        let outcome = redrive(&fabric.producer("ops"), &entry, false)
            .await
            .expect("redrive");
        match outcome {
            RedriveOutcome::Redriven { topic, .. } => assert_eq!(topic, inbox.topic),
            other => panic!("expected a redrive, got {other:?}"),
        }
        eventually("the redriven command to be answered", || async {
            fabric
                .responses()
                .await
                .into_iter()
                .find(|e| e.kind == Kind::Response && e.cause == Some(record))
                .filter(|e| e.body == b"posted order 7"[..])
        })
        .await;

        assert!(fabric.records(&fabric.topology.commands).await.is_empty());
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_reading_its_inbox_reads_none_of_another_agents_commands() {
    on_every_fabric("inbox-apart", |fabric| async move {
        let alpha = inbox_worker(&fabric, "alpha").handle("hello", EchoHandler);
        let beta = inbox_worker(&fabric, "beta").handle("hello", EchoHandler);
        let (alpha_stats, beta_stats) = (alpha.stats(), beta.stats());
        let (alpha, beta) = (Running::start(alpha), Running::start(beta));
        inbox_of(&fabric, "alpha").await;
        inbox_of(&fabric, "beta").await;
        let requester = inbox_requester(&fabric, "asker");
        for (agent, count) in [("beta", 6), ("alpha", 2)] {
            for i in 0..count {
                let body = format!("{agent} {i}").into_bytes();
                let answer = requester
                    .ask(
                        CommandRequest::new("hello", body.clone()).to(agent_id(agent)),
                        ANSWER,
                    )
                    .await
                    .expect("ask");
                assert_eq!(response(answer), body);
            }
        }
        alpha.stop().await;
        beta.stop().await;
        let read = |stats: &agdx::worker::WorkerStats| {
            (
                stats.handled.load(Ordering::Relaxed),
                stats.skipped.load(Ordering::Relaxed),
                stats.committed_records.load(Ordering::Relaxed),
            )
        };
        assert_eq!(
            read(&alpha_stats),
            (2, 0, 2),
            "alpha read its two commands and nothing else"
        );
        assert_eq!(
            read(&beta_stats),
            (6, 0, 6),
            "beta read its six commands and nothing else"
        );
    })
    .await;
}

/// Asks `agent` to echo `body`, checks the echo, and returns the topic
/// the command went to.
async fn ask(requester: &Requester, agent: &str, body: &str) -> String {
    let request = CommandRequest::new("hello", body.as_bytes().to_vec()).to(agent_id(agent));
    let mut watch = requester.send(request).await.expect("send");
    let topic = watch.sent().topic.clone();
    match watch.next(ANSWER).await.expect("a reply") {
        ReplyEvent::Response(reply) => assert_eq!(reply.body, body.as_bytes()),
        other => panic!("expected a response, got {other:?}"),
    }
    topic
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requesters_and_pools_of_either_routing_reach_each_other() {
    on_every_fabric("inbox-mixed", |fabric| async move {
        let inboxed = inbox_worker(&fabric, "inboxed").handle("hello", EchoHandler);
        let inboxed_stats = inboxed.stats();
        let inboxed = Running::start(inboxed);
        let shared = Running::start(fabric.worker("shared").handle("hello", EchoHandler));
        let inbox = inbox_of(&fabric, "inboxed").await;
        let (old, new) = (
            fabric.requester("old-asker"),
            inbox_requester(&fabric, "new-asker"),
        );
        // A shared requester reaches an inbox pool through agent.commands.
        assert_eq!(ask(&old, "inboxed", "a").await, "agent.commands");
        // An inbox requester reaches a shared pool: it has no inbox, so
        // the command goes to agent.commands.
        assert_eq!(ask(&new, "shared", "b").await, "agent.commands");
        assert!(
            !has_inbox(&fabric, "shared").await,
            "no inbox was made for it"
        );
        // Inbox to inbox.
        assert_eq!(ask(&new, "inboxed", "c").await, inbox.topic);
        // A command sent before its agent's pool ever ran waits on
        // agent.commands, and the inbox pool started later answers it.
        let mut early = new
            .send(CommandRequest::new("hello", b"early".to_vec()).to(agent_id("late")))
            .await
            .expect("send");
        assert_eq!(early.sent().topic, "agent.commands");
        let late = Running::start(inbox_worker(&fabric, "late").handle("hello", EchoHandler));
        match early.next(ANSWER).await.expect("a reply") {
            ReplyEvent::Response(reply) => assert_eq!(reply.body, &b"early"[..]),
            other => panic!("expected a response, got {other:?}"),
        }
        inboxed.stop().await;
        shared.stop().await;
        late.stop().await;
        assert_eq!(
            inboxed_stats.handled.load(Ordering::Relaxed),
            2,
            "the inbox pool answered from both topics"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inbox_conversation_replays_with_its_commands_in_log_order() {
    on_every_fabric("inbox-replay", |fabric| async move {
        let running = Running::start(inbox_worker(&fabric, "echo").handle("hello", EchoHandler));
        let inbox = inbox_of(&fabric, "echo").await;
        let requester = inbox_requester(&fabric, "asker");
        let conversation = agdx::new_conversation_id();
        for body in ["one", "two"] {
            let answer = requester
                .ask(
                    CommandRequest::new("hello", body.as_bytes().to_vec())
                        .to(agent_id("echo"))
                        .conversation(conversation),
                    ANSWER,
                )
                .await
                .expect("ask");
            assert_eq!(response(answer), body.as_bytes());
        }
        running.stop().await;

        // Read by a reader of either routing: the inbox is found from the
        // agents the conversation's records name.
        for topology in [fabric.topology.clone(), inbox_topology(&fabric)] {
            let records = Replay::new(fabric.log.clone(), &topology, conversation)
                .read_to_end()
                .await
                .expect("replay");
            let seen: Vec<(String, Kind, Vec<u8>)> = records
                .iter()
                .filter_map(|r| {
                    let e = r.envelope()?;
                    Some((r.topic.clone(), e.kind, e.body.to_vec()))
                })
                .collect();
            let (inbox, responses) = (inbox.topic.clone(), "agent.responses".to_owned());
            assert_eq!(
                seen,
                vec![
                    (inbox.clone(), Kind::Command, b"one".to_vec()),
                    (responses.clone(), Kind::Response, b"one".to_vec()),
                    (inbox, Kind::Command, b"two".to_vec()),
                    (responses, Kind::Response, b"two".to_vec()),
                ]
            );
        }
        let (code, out, stderr) = fabric
            .run_agdx(&["timeline", &conversation.to_string()])
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert!(
            out.contains(" inbox.echo "),
            "the timeline shows the commands in the inbox: {out}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_topology_flag_routes_the_command_line_through_inboxes() {
    on_every_fabric("inbox-cli", |fabric| async move {
        let mut worker = fabric.spawn_worker_process(&[
            "--topology",
            "inbox",
            "--agent",
            "copier",
            "--exec",
            "cat",
        ]);
        let inbox = inbox_of(&fabric, "copier").await;
        let (code, stdout, stderr) = fabric
            .run_agdx(&[
                "--topology",
                "inbox",
                "ask",
                "--to",
                "copier",
                "--operation",
                "copy",
                "--timeout",
                "20s",
                "through the inbox",
            ])
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout.trim_end(), "through the inbox");
        assert_eq!(
            fabric.records(&inbox).await.len(),
            1,
            "one command in the inbox"
        );
        assert!(fabric.records(&fabric.topology.commands).await.is_empty());
        let (code, tailed, stderr) = fabric
            .run_agdx(&["tail", "--topic", "agent.inbox.copier"])
            .await;
        assert_eq!(code, 0, "{stderr}");
        let lines = support::json_lines(&tailed);
        assert_eq!(lines.len(), 1, "{tailed}");
        assert_eq!(lines[0]["topic"], "agent.inbox.copier");

        // The default is the shared topic, which the inbox pool reads too.
        let (code, stdout, stderr) = fabric
            .run_agdx(&[
                "ask",
                "--to",
                "copier",
                "--operation",
                "copy",
                "--timeout",
                "20s",
                "through the shared topic",
            ])
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout.trim_end(), "through the shared topic");
        assert_eq!(fabric.records(&fabric.topology.commands).await.len(), 1);
        support::fabric::terminate(&mut worker).await;

        let (code, _, stderr) = fabric.run_agdx(&["--topology", "mailbox", "tail"]).await;
        assert_eq!(code, 2, "{stderr}");
        assert!(
            stderr.contains("shared") && stderr.contains("inbox"),
            "the error names the routings: {stderr}"
        );
    })
    .await;
}

/// Every agent id names a topic that every backend accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_agent_id_gets_an_inbox_on_every_backend() {
    on_every_fabric("inbox-names", |fabric| async move {
        let topology = inbox_topology(&fabric);
        let long = "Ä".repeat(128);
        for id in [
            "plain-name",
            "Team/Planner",
            "with space.and_dots",
            long.as_str(),
        ] {
            let agent = AgentId::new(id).expect("a valid agent id");
            let inbox = topology
                .open_inbox(fabric.log.as_ref(), &agent)
                .await
                .unwrap_or_else(|e| panic!("an inbox for {id:?}: {e}"));
            assert_eq!(inbox.topic, topology.inbox_name(&agent));
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_causal_graph_follows_a_cause_into_an_inbox() {
    on_every_fabric("inbox-graph", |fabric| async move {
        // A planner that, for each plan, asks echo in a new conversation,
        // caused by the plan (which sits in the planner's inbox).
        let asks = Arc::new(inbox_requester(&fabric, "planner"));
        let planner = handler_fn(move |request| {
            let asks = asks.clone();
            async move {
                let cause = request.envelope.record.expect("a command has a record id");
                let step = CommandRequest::new("hello", b"step".to_vec())
                    .to(agent_id("echo"))
                    .caused_by(cause, Some(request.position));
                asks.ask(step, ANSWER)
                    .await
                    .map_err(|e| HandlerError::retryable(e.to_string()))?;
                Ok(HandlerReply::raw("planned"))
            }
        });
        let workers = [
            Running::start(inbox_worker(&fabric, "echo").handle("hello", EchoHandler)),
            Running::start(inbox_worker(&fabric, "planner").handle("plan", planner)),
        ];
        let echo_inbox = inbox_of(&fabric, "echo").await;
        inbox_of(&fabric, "planner").await;
        let requester = inbox_requester(&fabric, "cli");
        let answer = requester
            .ask(
                CommandRequest::new("plan", b"trip".to_vec()).to(agent_id("planner")),
                ANSWER,
            )
            .await
            .expect("the plan is answered");
        assert_eq!(response(answer), b"planned");
        for worker in workers {
            worker.stop().await;
        }
        let step = fabric.records(&echo_inbox).await;
        let step = agdx::envelope_of(&step[0]).expect("the step command");
        let graph = causal_graph(
            &fabric.log,
            &fabric.topology,
            GraphStart {
                node: NodeKey::Record(step.record.expect("a record id")),
                conversation: Some(step.conversation),
            },
            Direction::Up,
        )
        .await
        .expect("the graph");
        let operations: Vec<Option<String>> = graph
            .nodes()
            .filter_map(|n| n.first().envelope().map(|e| e.operation.clone()))
            .collect();
        assert!(
            operations.contains(&Some("plan".to_owned())),
            "the plan, in the planner's inbox, is an ancestor of the step: {operations:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_members_of_an_inbox_pool_read_their_inbox_as_a_group_of_its_own() {
    on_every_fabric("inbox-groups", |fabric| async move {
        let first = Running::start(inbox_worker(&fabric, "pair").handle("hello", EchoHandler));
        let second = Running::start(inbox_worker(&fabric, "pair").handle("hello", EchoHandler));
        let inbox = inbox_of(&fabric, "pair").await;
        let (old, new) = (
            fabric.requester("old-asker"),
            inbox_requester(&fabric, "new-asker"),
        );
        // Both topics answered while two members share them: the
        // membership of one topic never waits on the other's.
        for n in 0..4 {
            assert_eq!(ask(&new, "pair", &format!("inbox {n}")).await, inbox.topic);
            assert_eq!(
                ask(&old, "pair", &format!("shared {n}")).await,
                "agent.commands"
            );
        }
        let topology = inbox_topology(&fabric);
        assert_eq!(topology.consumer_group(&inbox, "pair"), "pair.inbox");
        assert_eq!(
            topology.consumer_group(&fabric.topology.commands, "pair"),
            "pair"
        );
        // Each topic's commits are under its own group, and nothing of the
        // inbox is committed under the shared topic's group.
        let committed = |topic: TopicInfo, group: &'static str| {
            let log = fabric.log.clone();
            async move {
                let mut any = false;
                for partition in 0..topic.partitions.get() {
                    any |= log
                        .committed_offset(&topic, group, partition)
                        .await
                        .expect("read a committed offset")
                        .is_some();
                }
                any
            }
        };
        eventually("the inbox's commits under pair.inbox", || {
            let inbox = inbox.clone();
            async move { committed(inbox, "pair.inbox").await.then_some(()) }
        })
        .await;
        eventually("agent.commands' commits under pair", || {
            let commands = fabric.topology.commands.clone();
            async move { committed(commands, "pair").await.then_some(()) }
        })
        .await;
        assert!(
            !committed(inbox.clone(), "pair").await,
            "the inbox is read under its own group"
        );
        first.stop().await;
        second.stop().await;
    })
    .await;
}
