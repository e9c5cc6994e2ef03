//! Live agent cards: a worker publishes its card when it starts, again
//! before half its TTL, and its leaving when it stops; readers see who is
//! live, and `ask` says at once (and in its timeout) whether a worker for
//! the agent was seen. On every backend.

use crate::support;

use std::time::Duration;

use agdx::cards::{ANY_OPERATION, LiveAgents, WorkerSeen, worker_seen};
use agdx::log::OutgoingRecord;
use agdx::routing::card_conversation;
use agdx::wire::{AgentEnvelope, ContentType, StatusOperation, record_headers};
use agdx::worker::{EchoHandler, WorkerConfig};
use agdx::{Clock, SystemClock, system_clock};
use support::eventually;
use support::fabric::{Fabric, Running, agent_id, on_every_fabric, quick_config};

/// A worker for `agent` whose card lives `ttl`.
fn worker(fabric: &Fabric, agent: &str, ttl: Duration) -> Running {
    let config = WorkerConfig {
        card_ttl: ttl,
        agent_version: Some("1.2.3".into()),
        ..quick_config(fabric.dir.path().join(format!("state-{agent}")))
    };
    let worker = agdx::worker::Worker::new(fabric.producer(agent), config)
        .handle("hello", EchoHandler)
        .handle("bye", EchoHandler);
    Running::start(worker)
}

async fn live(fabric: &Fabric) -> LiveAgents {
    let mut agents = LiveAgents::default();
    agents
        .catch_up(&fabric.log, &fabric.topology.registry)
        .await
        .expect("read the registry");
    agents
}

async fn cards_of(fabric: &Fabric, agent: &str) -> usize {
    let registry = fabric.topology.registry.clone();
    fabric
        .records(&registry)
        .await
        .iter()
        .filter_map(|r| AgentEnvelope::decode(&r.payload).ok())
        .filter(|e| e.source.as_str() == agent)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_keep_their_cards_fresh_and_leave_when_they_stop() {
    on_every_fabric("cards", |fabric| async move {
        let first = worker(&fabric, "greeter", Duration::from_millis(600));
        let second = worker(&fabric, "greeter", Duration::from_millis(600));
        let now = || SystemClock.now_micros();
        let agent = eventually("both members' cards", || async {
            live(&fabric)
                .await
                .live(now())
                .into_iter()
                .find(|a| a.members.len() == 2)
        })
        .await;
        assert_eq!(agent.agent.as_str(), "greeter");
        assert_eq!(agent.operations, ["bye", "hello"]);
        assert_eq!(agent.card.name.as_deref(), Some("greeter"));
        assert_eq!(agent.card.version.as_deref(), Some("1.2.3"));
        assert_eq!(agent.card.ttl_micros, Some(600_000));
        assert_ne!(agent.members[0], agent.members[1]);

        // Re-published before half the TTL: still live well after one TTL.
        eventually("several cards per member", || async {
            (cards_of(&fabric, "greeter").await >= 8).then_some(())
        })
        .await;
        assert_eq!(
            live(&fabric).await.live(now()).len(),
            1,
            "still live after more than a TTL"
        );
        let seen = worker_seen(
            &fabric.log,
            &fabric.topology,
            &agent_id("greeter"),
            &system_clock(),
        )
        .await
        .expect("look up");
        assert!(seen.is_live(), "{seen:?}");

        // The CLI lists it.
        let (code, out, stderr) = fabric.run_agdx(&["agents"]).await;
        assert_eq!(code, 0, "{stderr}");
        let row: Vec<&str> = out
            .lines()
            .nth(1)
            .expect("a row")
            .split_whitespace()
            .collect();
        assert_eq!(&row[..4], ["greeter", "bye,", "hello", "2"], "{out}");
        let (code, out, stderr) = fabric.run_agdx(&["agents", "--json"]).await;
        assert_eq!(code, 0, "{stderr}");
        let objects = support::json_lines(&out);
        assert_eq!(objects.len(), 1, "{out}");
        let listed = &objects[0];
        assert_eq!(
            (
                &listed["agent"],
                &listed["operations"],
                listed["members"].as_array().map(Vec::len)
            ),
            (
                &serde_json::json!("greeter"),
                &serde_json::json!(["bye", "hello"]),
                Some(2)
            ),
            "{out}"
        );
        for time in ["last_seen", "expires"] {
            let text = listed[time].as_str().expect("a time");
            assert!(
                humantime::parse_rfc3339(text).is_ok(),
                "{time} is RFC 3339: {out}"
            );
        }

        // A graceful stop publishes the leaving: gone at once, not after the TTL.
        first.stop().await;
        let after = live(&fabric).await.live(now());
        assert_eq!(after[0].members.len(), 1, "one member left");
        second.stop().await;
        assert!(live(&fabric).await.live(now()).is_empty(), "both left");
        let seen = worker_seen(
            &fabric.log,
            &fabric.topology,
            &agent_id("greeter"),
            &system_clock(),
        )
        .await
        .expect("look up");
        assert!(matches!(seen, WorkerSeen::Gone { .. }), "{seen:?}");
        let (_, out, _) = fabric.run_agdx(&["agents"]).await;
        assert!(out.starts_with("no live agents"), "{out}");
        let (code, out, stderr) = fabric.run_agdx(&["agents", "--json"]).await;
        assert_eq!((code, out.as_str()), (0, ""), "only objects on stdout");
        assert!(stderr.starts_with("agdx: no live agents"), "{stderr}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_card_the_fold_cannot_use_is_skipped_and_counted() {
    on_every_fabric("cards-broken", |fabric| async move {
        let agent = agent_id("odd");
        let broken = AgentEnvelope::status(
            agdx::new_record_id(),
            card_conversation(&agent),
            agent.clone(),
            StatusOperation::Card,
            b"not a card".to_vec(),
        );
        let registry = &fabric.topology.registry;
        let partition = agdx::routing::partition_of(registry, broken.conversation);
        let record = OutgoingRecord {
            headers: record_headers(&broken, ContentType::Cbor),
            payload: broken.encode().into(),
        };
        fabric
            .log
            .append(registry, partition, vec![record])
            .await
            .expect("append");
        // A worker with a fallback lists "any operation".
        let config = quick_config(fabric.dir.path().join("state"));
        let running = Running::start(
            agdx::worker::Worker::new(fabric.producer("odd"), config).fallback(EchoHandler),
        );
        let agents = eventually("the worker's card", || async {
            let agents = live(&fabric).await;
            (!agents.live(SystemClock.now_micros()).is_empty()).then_some(agents)
        })
        .await;
        assert_eq!(agents.skipped(), 1);
        assert_eq!(
            agents.live(SystemClock.now_micros())[0].operations,
            [ANY_OPERATION]
        );
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_says_whether_a_worker_for_the_agent_was_seen() {
    on_every_fabric("cards-ask", |fabric| async move {
        let ask = |agent: &'static str| {
            let fabric = fabric.clone();
            async move { fabric.run_agdx(&["ask", "--to", agent, "--operation", "hello", "--timeout", "3s", "hi"]).await }
        };
        let (code, _, stderr) = ask("nobody").await;
        assert_eq!(code, 4);
        let warning = format!("agdx: no live worker for agent 'nobody' seen on {} — the command waits on the log; start one", fabric.log.describe());
        assert!(stderr.starts_with(&warning), "{stderr}");
        assert!(stderr.contains("worker --agent nobody ...`"), "{stderr}");
        assert!(stderr.contains("no worker for 'nobody' was seen on this log"), "{stderr}");

        let running = worker(&fabric, "greeter", Duration::from_secs(60));
        eventually("the card", || async { (cards_of(&fabric, "greeter").await > 0).then_some(()) }).await;
        let (code, out, stderr) = fabric.run_agdx(&["ask", "--to", "greeter", "--operation", "hello", "--timeout", "20s", "hi"]).await;
        assert_eq!((code, out.as_str(), stderr.as_str()), (0, "hi\n", ""), "a live agent: no warning");
        running.stop().await;

        let (code, _, stderr) = ask("greeter").await;
        assert_eq!(code, 4);
        assert!(stderr.starts_with("agdx: no live worker for agent 'greeter' seen"), "{stderr}");
        assert!(stderr.contains("no worker for 'greeter' is live (workers were seen, but left or their cards expired)"), "{stderr}");
    })
    .await;
}
