//! A conversation's turns for a prompt (`Replay::context`, `agdx
//! context`): commands and responses and whole streams as turns, kept by
//! last N, a token budget, roles and one record's causal branch. On every
//! backend.

use agdx::replay::{ContextPolicy, ConversationContext, Replay, Role};
use agdx::wire::StreamPurpose;
use agdx::worker::{HandlerError, HandlerReply, handler_fn};
use agdx::{Answer, CommandRequest, new_conversation_id};

use crate::support;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// A pool for agent `math`: `add` answers "4" with a response, `more`
/// answers "6, then 8" as a stream.
fn math(fabric: &Fabric) -> Running {
    Running::start(
        fabric
            .worker("math")
            .handle(
                "add",
                handler_fn(|_| async move { Ok(HandlerReply::raw("4")) }),
            )
            .handle(
                "more",
                handler_fn(|request| async move {
                    let fail = |e: agdx::ProduceError| HandlerError::retryable(e.to_string());
                    let mut writer = request
                        .stream(StreamPurpose::Chat, None)
                        .ok_or_else(|| HandlerError::fatal("a stream answers a command"))?;
                    writer.send(b"6, ".to_vec()).await.map_err(fail)?;
                    writer
                        .finish(b"then 8".to_vec(), Some("stop"), None)
                        .await
                        .map_err(fail)?;
                    Ok(HandlerReply::Streamed)
                }),
            ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_are_kept_by_last_budget_role_and_branch() {
    on_every_fabric("context", |fabric| async move {
        let running = math(&fabric);
        let requester = fabric.requester("asker");
        let conversation = new_conversation_id();
        let first = CommandRequest::new("add", b"what is 2+2?".to_vec())
            .to(agent_id("math"))
            .conversation(conversation);
        let Answer::Response(four) = requester.ask(first, ANSWER).await.expect("an answer") else {
            panic!("expected a response");
        };
        let four_record = four.envelope.record.expect("a response has a record id");
        let first_record = four.envelope.cause.expect("it names the command");
        let mut second = requester
            .send(
                CommandRequest::new("more", b"and then?".to_vec())
                    .to(agent_id("math"))
                    .conversation(conversation)
                    .caused_by(four_record, None),
            )
            .await
            .expect("send");
        let second_record = second.sent().record.expect("a command has a record id");
        while !matches!(
            second.next(ANSWER).await.expect("a reply"),
            agdx::ReplyEvent::StreamEnd(_)
        ) {}
        // A command on a side branch, after the second.
        let side = CommandRequest::new("add", b"unrelated".to_vec())
            .to(agent_id("math"))
            .conversation(conversation);
        requester.ask(side, ANSWER).await.expect("an answer");

        let context = |policy: ContextPolicy| {
            let log = fabric.log.clone();
            let topology = fabric.topology.clone();
            async move {
                Replay::new(log, &topology, conversation)
                    .context(&policy)
                    .await
                    .expect("the context")
                    .into_iter()
                    .map(|t| (t.role, String::from_utf8(t.body).expect("text")))
                    .collect::<Vec<_>>()
            }
        };
        use Role::*;
        let all = context(ContextPolicy::default()).await;
        let pairs = |list: &[(Role, &str)]| -> Vec<(Role, String)> {
            list.iter().map(|(r, t)| (*r, (*t).to_owned())).collect()
        };
        assert_eq!(
            all,
            pairs(&[
                (User, "what is 2+2?"),
                (Assistant, "4"),
                (User, "and then?"),
                (Assistant, "6, then 8"),
                (User, "unrelated"),
                (Assistant, "4"),
            ])
        );
        assert_eq!(context(ContextPolicy::default().last(2)).await, all[4..]);
        // Tokens are bytes / 4, rounded up: "unrelated" 3, "4" 1,
        // "6, then 8" 3.
        assert_eq!(context(ContextPolicy::default().budget(7)).await, all[3..]);
        assert_eq!(context(ContextPolicy::default().budget(6)).await, all[4..]);
        assert_eq!(
            context(ContextPolicy::default().roles([Assistant])).await,
            pairs(&[(Assistant, "4"), (Assistant, "6, then 8"), (Assistant, "4")])
        );
        assert_eq!(
            context(ContextPolicy::default().branch_of(second_record)).await,
            all[..4],
            "the second command, its ancestors and the stream answering it"
        );
        assert_eq!(
            context(ContextPolicy::default().branch_of(first_record)).await,
            all[..1]
        );
        assert_eq!(
            context(
                ContextPolicy::default()
                    .branch_of(second_record)
                    .last(1)
                    .roles([User])
            )
            .await,
            pairs(&[(User, "and then?")]),
            "the parts compose"
        );

        // The same through `agdx context`.
        let (code, stdout, stderr) = fabric
            .run_agdx(&[
                "context",
                &conversation.to_string(),
                "--last",
                "3",
                "--json",
            ])
            .await;
        assert_eq!(code, 0, "{stderr}");
        let turns: Vec<serde_json::Value> = stdout
            .lines()
            .map(|l| serde_json::from_str(l).expect("a JSON line"))
            .collect();
        let roles: Vec<&str> = turns.iter().filter_map(|t| t["role"].as_str()).collect();
        assert_eq!(roles, ["assistant", "user", "assistant"]);
        assert_eq!(turns[0]["body"], "6, then 8");
        assert_eq!(turns[0]["tokens"], 3);
        running.stop().await;
    })
    .await;
}

/// A context saved as a snapshot, with a stream still open, resumes from
/// it: it reads only the records after the snapshot (and the open stream's
/// chunks again), and assembles the same turns as a reading from the start.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_context_resumes_from_its_snapshot_with_the_same_turns() {
    on_every_fabric("context-snapshot", |fabric| async move {
        let go_on = std::sync::Arc::new(tokio::sync::Notify::new());
        let heard = go_on.clone();
        let running = Running::start(
            fabric
                .worker("math")
                .handle(
                    "add",
                    handler_fn(|_| async move { Ok(HandlerReply::raw("4")) }),
                )
                .handle(
                    "slow",
                    handler_fn(move |request| {
                        let heard = heard.clone();
                        async move {
                            let fail = |e: agdx::ProduceError| HandlerError::retryable(e.to_string());
                            let mut writer = request
                                .stream(StreamPurpose::Chat, None)
                                .ok_or_else(|| HandlerError::fatal("a stream answers a command"))?;
                            writer.send(b"first ".to_vec()).await.map_err(fail)?;
                            heard.notified().await;
                            writer
                                .finish(b"last".to_vec(), Some("stop"), None)
                                .await
                                .map_err(fail)?;
                            Ok(HandlerReply::Streamed)
                        }
                    }),
                ),
        );
        let requester = fabric.requester("asker");
        let conversation = new_conversation_id();
        let add = |n: usize| {
            CommandRequest::new("add", format!("question {n}").into_bytes())
                .to(agent_id("math"))
                .conversation(conversation)
        };
        for n in 0..6 {
            requester.ask(add(n), ANSWER).await.expect("an answer");
        }
        let mut slow = requester
            .send(
                CommandRequest::new("slow", b"take your time".to_vec())
                    .to(agent_id("math"))
                    .conversation(conversation),
            )
            .await
            .expect("send");
        assert!(
            matches!(
                slow.next(ANSWER).await.expect("a reply"),
                agdx::ReplyEvent::Chunk { .. }
            ),
            "the stream's first chunk comes first"
        );

        let (log, topology) = (fabric.log.clone(), fabric.topology.clone());
        let mut first = ConversationContext::resume(log.clone(), &topology, conversation)
            .await
            .expect("a context");
        assert!(first.resumed_from().is_none(), "no snapshot yet");
        let read_before = first.catch_up().await.expect("read");
        first
            .save()
            .await
            .expect("save")
            .expect("something was read, so a snapshot");

        go_on.notify_one();
        while !matches!(
            slow.next(ANSWER).await.expect("a reply"),
            agdx::ReplyEvent::StreamEnd(_)
        ) {}
        requester.ask(add(6), ANSWER).await.expect("an answer");

        let texts = |turns: Vec<agdx::replay::Turn>| -> Vec<(Role, String)> {
            turns
                .into_iter()
                .map(|t| (t.role, String::from_utf8(t.body).expect("text")))
                .collect()
        };
        let mut whole = ConversationContext::from_start(log.clone(), &topology, conversation);
        let read_whole = whole.catch_up().await.expect("read");
        let expected = texts(whole.turns(&ContextPolicy::default()));
        assert_eq!(expected.len(), 16, "7 asks, their answers and the stream: {expected:?}");
        assert!(expected.contains(&(Role::Assistant, "first last".to_owned())));

        let mut resumed = ConversationContext::resume(log.clone(), &topology, conversation)
            .await
            .expect("a context");
        assert!(resumed.resumed_from().is_some(), "it starts from the snapshot");
        let read_after = resumed.catch_up().await.expect("read");
        assert_eq!(texts(resumed.turns(&ContextPolicy::default())), expected);
        assert!(
            read_after < read_whole && read_after < read_before,
            "a resumed reading reads what follows the snapshot: {read_after} records, where the whole conversation is {read_whole}"
        );
        assert_eq!(
            texts(resumed.turns(&ContextPolicy::default().last(3))),
            expected[13..],
            "policies apply to the resumed turns"
        );

        // `agdx context` starts from the snapshot too, and `--from-start`
        // reads everything; both print the same turns.
        let (code, resumed_out, stderr) = fabric
            .run_agdx(&["context", &conversation.to_string(), "--json", "--save"])
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert!(stderr.contains("saved a context snapshot"), "{stderr}");
        let (code, whole_out, stderr) = fabric
            .run_agdx(&["context", &conversation.to_string(), "--json", "--from-start"])
            .await;
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(resumed_out.lines().count(), 16);
        assert_eq!(resumed_out, whole_out);
        running.stop().await;
    })
    .await;
}
