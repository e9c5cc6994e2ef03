//! Operator-signed quarantine (docs/runtime.md §6): a quarantine stops asks to
//! the agent before they are sent and pauses its worker pool; lifting it
//! resumes both. Facts that are unsigned, signed by an agent key or an
//! expired operator key, re-published verbatim, or whose body names no
//! agent change nothing. On every backend.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use agdx::routing::card_conversation;
use agdx::trust::{KeyKind, QuarantineFold, QuarantineWatch};
use agdx::wire::{AgentEnvelope, Kind};
use agdx::worker::{EchoHandler, Worker, WorkerConfig};
use agdx::{Answer, AskError, Clock, CommandRequest, ProduceError, Requester, SystemClock};
use serde_json::json;
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric, quick_config};
use support::trust::{HOUR, Keys, record_with_id};

fn hello(body: &str) -> CommandRequest {
    CommandRequest::new("hello", body.as_bytes().to_vec()).to(agent_id("echo"))
}

async fn answered(fabric: &Fabric, correlation: agdx::wire::CorrelationId) -> bool {
    fabric
        .responses()
        .await
        .iter()
        .any(|e| e.kind == Kind::Response && e.correlation == Some(correlation))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_quarantine_stops_asks_and_pauses_the_pool_and_lifting_it_resumes_both() {
    on_every_fabric("quarantine", |fabric| async move {
        let mut keys = Keys::new(fabric.dir.path());
        let ops = keys.enroll("ops", KeyKind::Operator);
        let worker = Worker::new(
            fabric.producer("echo"),
            WorkerConfig {
                quarantine: Some(keys.verifier()),
                ..quick_config(fabric.dir.path().join("state-echo"))
            },
        )
        .handle("hello", EchoHandler);
        let stats = worker.stats();
        let running = Running::start(worker);
        let watch = Arc::new(
            QuarantineWatch::start(fabric.log.clone(), fabric.topology.clone(), keys.verifier())
                .await
                .expect("follow the registry"),
        );
        let requester = Requester::new(fabric.producer("asker").with_quarantine(watch.clone()));
        assert!(matches!(
            requester.ask(hello("before"), ANSWER).await,
            Ok(Answer::Response(_))
        ));

        let operator = fabric.producer("ops").with_signer(ops);
        operator
            .status_quarantine(&agent_id("echo"), true, Some("leaking data"))
            .await
            .expect("publish the quarantine");

        // Once the requester's watch has read the fact, asks fail fast,
        // before anything is sent.
        eventually("the watch to see the quarantine", || async {
            watch.check(&agent_id("echo")).err()
        })
        .await;
        let message = match requester.ask(hello("refused"), ANSWER).await {
            Err(AskError::Produce(ProduceError::Quarantined(q))) => q.to_string(),
            other => panic!("expected a quarantine refusal, got {other:?}"),
        };
        assert!(
            message.starts_with("agent 'echo' is quarantined by 'ops' since "),
            "{message}"
        );
        assert!(message.ends_with(" (leaking data)"), "{message}");
        assert!(
            !fabric
                .records(&fabric.topology.commands)
                .await
                .iter()
                .any(|r| {
                    AgentEnvelope::decode(&r.payload).is_ok_and(|e| e.body == b"refused"[..])
                }),
            "a refused ask sends nothing"
        );

        // The pool pauses: a command sent past the check waits.
        eventually("the pool to pause", || async {
            stats.paused.load(Ordering::Relaxed).then_some(())
        })
        .await;
        let handled = stats.handled.load(Ordering::Relaxed);
        let waiting = fabric
            .producer("asker")
            .command(hello("waits"))
            .await
            .expect("send");
        let correlation = waiting.correlation.unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert!(
            !answered(&fabric, correlation).await,
            "a paused pool takes no new work"
        );
        assert_eq!(stats.handled.load(Ordering::Relaxed), handled);

        // Lifting the quarantine resumes both, without a restart.
        operator
            .status_quarantine(&agent_id("echo"), false, None)
            .await
            .expect("publish the lift");
        eventually("the waiting command to be answered", || async {
            answered(&fabric, correlation).await.then_some(())
        })
        .await;
        assert!(!stats.paused.load(Ordering::Relaxed));
        eventually("the watch to see the lift", || async {
            watch.check(&agent_id("echo")).ok()
        })
        .await;
        assert!(matches!(
            requester.ask(hello("after"), ANSWER).await,
            Ok(Answer::Response(_))
        ));
        running.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_agent_signed_expired_and_republished_facts_change_nothing() {
    on_every_fabric("forged-facts", |fabric| async move {
        let dir = fabric.dir.path();
        let mut keys = Keys::new(dir);
        let ops = keys.enroll("ops", KeyKind::Operator);
        let mallory = keys.enroll("mallory", KeyKind::Agent);
        let now = SystemClock.now_micros();
        let retired = keys.enroll_with("old-ops", KeyKind::Operator, |e| e.valid_to = Some(now - HOUR / 2));
        let fact = |source: &str, quarantined: bool| {
            AgentEnvelope::status_quarantine(
                agdx::new_record_id(),
                card_conversation(&agent_id("echo")),
                agent_id(source),
                &agent_id("echo"),
                quarantined,
            )
        };

        // A genuine quarantine, then its lift, both by the operator.
        let operator = fabric.producer("ops").with_signer(ops.clone());
        let genuine = operator.status_quarantine(&agent_id("echo"), true, None).await.unwrap();
        operator.status_quarantine(&agent_id("echo"), false, None).await.unwrap();
        let captured = record_with_id(&fabric, &fabric.topology.registry, genuine.record.unwrap()).await;

        // Forged and replayed facts, appended verbatim with `agdx publish`.
        let files = [
            ("unsigned.bin", fact("ops", true).encode()),
            ("agent-signed.bin", mallory.sign(fact("mallory", true), None).encode()),
            ("expired.bin", retired.sign(fact("old-ops", true), None).encode()),
            ("replayed.bin", captured.payload.to_vec()),
            ("bad-body.bin", {
                let mut bad = fact("ops", true);
                bad.body = b"\xffnot text".to_vec().into();
                ops.sign(bad, None).encode()
            }),
        ];
        let mut args = vec!["publish".to_owned(), "--topic".into(), "agent.registry".into()];
        for (name, bytes) in &files {
            std::fs::write(dir.join(name), bytes).unwrap();
            args.push(dir.join(name).display().to_string());
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, stdout, stderr) = fabric.run_agdx(&args).await;
        assert_eq!(code, 0, "{stderr}");
        assert_eq!(stdout.lines().count(), 5, "{stdout}");
        assert!(stdout.lines().all(|l| l.starts_with("published ") && l.contains("topic=agent.registry")), "{stdout}");

        // The fold: still lifted, and each forged fact ignored for its reason.
        let state = QuarantineFold::read(&fabric.log, &fabric.topology.registry, keys.verifier())
            .await
            .unwrap();
        assert!(state.quarantined(&agent_id("echo")).is_none(), "{state:?}");
        let counts: Vec<(&str, usize)> = state.ignored_counts().into_iter().collect();
        assert_eq!(
            counts,
            [("bad_body", 1), ("expired", 1), ("not_operator", 1), ("replayed", 1), ("unsigned", 1)]
        );

        // Asks are not refused, and the list says why each fact was ignored.
        let keys_arg = keys.arg();
        let (code, _, stderr) = fabric
            .run_agdx(&["--keys", &keys_arg, "send", "--to", "echo", "--operation", "hello", "still reachable"])
            .await;
        assert_eq!(code, 0, "{stderr}");
        let (code, stdout, stderr) = fabric.run_agdx(&["--keys", &keys_arg, "quarantine", "--list"]).await;
        assert_eq!(code, 0, "{stderr}");
        let lines: Vec<&str> = stdout.lines().collect();
        assert_eq!(lines.len(), 6, "{stdout}");
        assert!(lines[0].starts_with("echo active: quarantine lifted by 'ops' at "), "{stdout}");
        let ignored = |says: &str| lines.iter().filter(|l| l.starts_with("ignored quarantine fact at ") && l.contains(says)).count();
        assert_eq!(ignored("the record is unsigned"), 1, "{stdout}");
        assert_eq!(ignored(&format!("signed by 'mallory' with key {}, an agent key; only operator keys sign control facts", mallory.key_id())), 1, "{stdout}");
        assert_eq!(ignored(&format!("key {} of 'old-ops' expired at", retired.key_id())), 1, "{stdout}");
        assert_eq!(ignored(&format!("record {} was applied already; a re-published copy changes nothing", genuine.record.unwrap())), 1, "{stdout}");
        assert_eq!(ignored("the body of a status `quarantine` is not UTF-8 text, so it names no agent"), 1, "{stdout}");

        // The same for programs: the state, then each ignored fact, one JSON object a line.
        let (code, stdout, stderr) = fabric.run_agdx(&["--keys", &keys_arg, "quarantine", "--list", "--json"]).await;
        assert_eq!(code, 0, "{stderr}");
        let objects = support::json_lines(&stdout);
        assert_eq!(objects.len(), 6, "{stdout}");
        assert_eq!((&objects[0]["agent"], &objects[0]["quarantined"], &objects[0]["by"]), (&json!("echo"), &json!(false), &json!("ops")), "{stdout}");
        let ignored: Vec<(&str, &str)> = objects[1..]
            .iter()
            .map(|o| (o["ignored"]["operation"].as_str().unwrap_or("-"), o["ignored"]["why"].as_str().unwrap_or("-")))
            .collect();
        assert_eq!(ignored.len(), 5, "{stdout}");
        assert!(ignored.iter().all(|(operation, _)| *operation == "quarantine"), "{stdout}");
        assert!(ignored.iter().any(|(_, why)| why.contains("the record is unsigned")), "{stdout}");
    })
    .await;
}
