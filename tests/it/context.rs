//! A conversation's turns for a prompt (`Replay::context`, `agdx
//! context`): commands and responses and whole streams as turns, kept by
//! last N, a token budget, roles and one record's causal branch. On every
//! backend.

use agdx::replay::{ContextPolicy, Replay, Role};
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
