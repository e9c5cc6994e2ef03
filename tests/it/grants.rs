//! Routing does not grant access: a worker with grants handles a verified
//! command only when its signer may invoke the operation, and a delegated
//! command (`on_behalf_of`) only when both the signer and the user may. On
//! every backend.

use crate::support;

use agdx::trust::{Grant, Grants, KeyKind, Signer};
use agdx::wire::{AgentEnvelope, DeadLetterReason, ErrorCode, META_ON_BEHALF_OF, Metadata};
use agdx::worker::{EchoHandler, Worker, WorkerConfig};
use agdx::{Answer, AskError, CommandRequest, Requester};
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric, quick_config};
use support::trust::Keys;

fn grants(list: &[&str]) -> Grants {
    list.iter()
        .map(|g| g.parse::<Grant>().expect("a grant"))
        .collect()
}

async fn ask(
    fabric: &Fabric,
    as_agent: &str,
    signer: &Signer,
    operation: &str,
    on_behalf_of: Option<&str>,
    body: &str,
) -> Result<Answer, AskError> {
    let mut request = CommandRequest::new(operation, body.as_bytes().to_vec()).to(agent_id("docs"));
    if let Some(user) = on_behalf_of {
        request = request.metadata(Metadata::new().with(META_ON_BEHALF_OF, user));
    }
    Requester::new(fabric.producer(as_agent).with_signer(signer.clone()))
        .ask(request, ANSWER)
        .await
}

async fn assert_forbidden(
    fabric: &Fabric,
    result: Result<Answer, AskError>,
    message: &str,
    body: &str,
) {
    let error = match result {
        Err(AskError::Remote(error)) => error,
        other => panic!("{body}: expected a refusal, got {other:?}"),
    };
    assert_eq!(error.code, ErrorCode::Unauthorized);
    assert_eq!(error.message.as_deref(), Some(message));
    let check = error
        .detail
        .as_ref()
        .and_then(|d| d.get("check"))
        .and_then(|v| v.as_str());
    assert_eq!(check, Some("forbidden"));
    let capsule =
        eventually("the dead letter", || async {
            fabric.dead_letters().await.into_iter().find(|d| {
                AgentEnvelope::decode(&d.payload).is_ok_and(|e| e.body == body.as_bytes())
            })
        })
        .await;
    assert_eq!(capsule.reason, DeadLetterReason::Rejected);
    assert_eq!(capsule.detail.as_deref(), Some(message));
}

fn answered(result: Result<Answer, AskError>, body: &str) {
    match result {
        Ok(Answer::Response(reply)) => assert_eq!(reply.body, body.as_bytes()),
        other => panic!("{body}: expected an answer, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_decide_who_may_invoke_what_and_delegation_intersects() {
    on_every_fabric("grants", |fabric| async move {
        let mut keys = Keys::new(fabric.dir.path());
        let ops = keys.enroll("ops", KeyKind::Operator);
        let planner = keys.enroll("planner", KeyKind::Agent);
        let config = WorkerConfig {
            verifier: Some(keys.verifier()),
            grants: Some(grants(&[
                "ops:*",
                "planner:summarize",
                "planner:translate",
                "alice:summarize",
                "alice:delete",
            ])),
            ..quick_config(fabric.dir.path().join("state-docs"))
        };
        let worker = Running::start(
            Worker::new(fabric.producer("docs"), config).fallback(EchoHandler),
        );

        answered(ask(&fabric, "ops", &ops, "delete", None, "ops deletes").await, "ops deletes");
        answered(ask(&fabric, "planner", &planner, "summarize", None, "planner summarizes").await, "planner summarizes");
        assert_forbidden(
            &fabric,
            ask(&fabric, "planner", &planner, "delete", None, "planner deletes").await,
            "forbidden: 'planner' holds no grant for operation 'delete' on agent 'docs'",
            "planner deletes",
        )
        .await;

        // Delegation: the effective grant is the intersection.
        answered(
            ask(&fabric, "planner", &planner, "summarize", Some("alice"), "both may").await,
            "both may",
        );
        assert_forbidden(
            &fabric,
            ask(&fabric, "planner", &planner, "translate", Some("alice"), "only the signer may").await,
            "forbidden: 'planner' acts on behalf of 'alice', who holds no grant for operation 'translate' (a delegated command needs both grants) on agent 'docs'",
            "only the signer may",
        )
        .await;
        assert_forbidden(
            &fabric,
            ask(&fabric, "planner", &planner, "delete", Some("alice"), "only the user may").await,
            "forbidden: 'planner' holds no grant for operation 'delete' on agent 'docs'",
            "only the user may",
        )
        .await;
        assert_forbidden(
            &fabric,
            ask(&fabric, "planner", &planner, "summarize", Some("bob"), "the user holds nothing").await,
            "forbidden: 'planner' acts on behalf of 'bob', who holds no grant for operation 'summarize' (a delegated command needs both grants) on agent 'docs'",
            "the user holds nothing",
        )
        .await;
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_without_a_verifier_are_refused_at_start() {
    let fabric = support::fabric::embedded_fabric("grants-no-verifier").await;
    let config = WorkerConfig {
        grants: Some(grants(&["ops:*"])),
        ..quick_config(fabric.dir.path().join("state"))
    };
    let error = Worker::new(fabric.producer("docs"), config)
        .fallback(EchoHandler)
        .run(tokio_util::sync::CancellationToken::new())
        .await
        .expect_err("grants need a verifier");
    assert!(matches!(
        error,
        agdx::worker::WorkerError::GrantsWithoutVerifier
    ));
}
