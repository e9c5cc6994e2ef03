//! A verifying worker (docs/runtime.md §4 step 4) answers commands signed by
//! an enrolled key and refuses the rest: unsigned, unknown key, forged,
//! wrong principal, expired, revoked, context mismatch, each dead-lettered
//! `rejected` and answered `unauthorized` naming the failed check. Keys are
//! judged as of the record's log timestamp. On every backend.

use crate::support;

use agdx::trust::{ContextBinding, KeyKind, Observed, Signer, VerifyError};
use agdx::wire::{
    AgentEnvelope, ContentType, CorrelationId, DeadLetterReason, ErrorBody, ErrorCode, Kind,
};
use agdx::worker::{EchoHandler, WorkerConfig};
use agdx::{Answer, AskError, Clock, CommandRequest, Requester, SystemClock};
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric, quick_config};
use support::trust::{HOUR, Keys, append_raw, record_with_id};

/// A worker for `summarizer` that verifies commands and signs its replies.
fn verifying_worker(fabric: &Fabric, keys: &Keys, signer: Signer) -> Running {
    let config = WorkerConfig {
        verifier: Some(keys.verifier()),
        ..quick_config(fabric.dir.path().join("state-summarizer"))
    };
    let producer = fabric.producer("summarizer").with_signer(signer);
    Running::start(agdx::worker::Worker::new(producer, config).handle("summarize", EchoHandler))
}

fn request(body: &str) -> CommandRequest {
    CommandRequest::new("summarize", body.as_bytes().to_vec()).to(agent_id("summarizer"))
}

/// The `error` reply with `correlation`, once it is on the log.
async fn error_reply(fabric: &Fabric, correlation: CorrelationId) -> ErrorBody {
    let envelope = eventually("the error reply", || async {
        fabric
            .responses()
            .await
            .into_iter()
            .find(|e| e.kind == Kind::Error && e.correlation == Some(correlation))
    })
    .await;
    ErrorBody::decode_valid(&envelope.body).expect("an error body")
}

/// Checks a refusal: `unauthorized`, the failed check in the detail, the
/// message naming it, and the command dead-lettered `rejected` verbatim.
async fn assert_refused(fabric: &Fabric, error: &ErrorBody, check: &str, says: &str, body: &[u8]) {
    assert_eq!(error.code, ErrorCode::Unauthorized, "{error:?}");
    let detail = error
        .detail
        .as_ref()
        .and_then(|d| d.get("check"))
        .and_then(|v| v.as_str());
    assert_eq!(detail, Some(check), "{error:?}");
    let message = error.message.as_deref().unwrap_or_default();
    assert!(message.contains(says), "{check}: {message}");
    assert!(
        message.starts_with("agent 'summarizer' accepts only commands signed by an enrolled key: "),
        "{message}"
    );
    let capsule = eventually("the dead letter", || async {
        fabric
            .dead_letters()
            .await
            .into_iter()
            .find(|d| AgentEnvelope::decode(&d.payload).is_ok_and(|e| e.body == body))
    })
    .await;
    assert_eq!(capsule.reason, DeadLetterReason::Rejected);
    assert_eq!(capsule.detail.as_deref(), Some(message));
    let original = fabric
        .command_at(capsule.source.partition, capsule.source.offset)
        .await;
    assert_eq!(capsule.payload, original.payload, "kept verbatim");
}

async fn ask_refused(requester: &Requester, body: &str) -> ErrorBody {
    match requester.ask(request(body), ANSWER).await {
        Err(AskError::Remote(error)) => error,
        other => panic!("{body}: expected an error reply, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verifying_worker_answers_signed_commands_and_refuses_the_rest() {
    on_every_fabric("signed-commands", |fabric| async move {
        let mut keys = Keys::new(fabric.dir.path());
        let planner = keys.enroll("planner", KeyKind::Agent);
        let summarizer = keys.enroll("summarizer", KeyKind::Agent);
        let now = SystemClock.now_micros();
        let expired =
            keys.enroll_with("old", KeyKind::Agent, |e| e.valid_to = Some(now - HOUR / 2));
        let revoked = keys.enroll_with("gone", KeyKind::Agent, |e| {
            e.revoked_at = Some(now - 60_000_000)
        });
        let worker = verifying_worker(&fabric, &keys, summarizer.clone());

        // Signed by the planner's key: answered, and the signed reply
        // verifies for a verifying requester.
        let signed = Requester::new(fabric.producer("planner").with_signer(planner.clone()))
            .with_verifier(keys.verifier());
        match signed
            .ask(request("incident 42"), ANSWER)
            .await
            .expect("a signed ask")
        {
            Answer::Response(reply) => {
                assert_eq!(reply.body, &b"incident 42"[..]);
                let signature = reply.envelope.signature.as_ref().expect("a signed reply");
                assert_eq!(signature.key_id, summarizer.key_id().to_bytes());
            }
            other => panic!("expected a response, got {other:?}"),
        }
        assert_eq!(signed.unverified(), 0);

        let unsigned = ask_refused(&fabric.requester("planner"), "unsigned").await;
        assert_refused(
            &fabric,
            &unsigned,
            "unsigned",
            "the record is unsigned",
            b"unsigned",
        )
        .await;

        let stranger = Signer::generate().unwrap();
        let unknown = Requester::new(fabric.producer("planner").with_signer(stranger.clone()));
        let error = ask_refused(&unknown, "unknown key").await;
        let says = format!(
            "signed with key {}, which is not in the key registry",
            stranger.key_id()
        );
        assert_refused(&fabric, &error, "unknown_key", &says, b"unknown key").await;

        let impostor = Requester::new(fabric.producer("mallory").with_signer(planner.clone()));
        let error = ask_refused(&impostor, "impostor").await;
        let says = format!(
            "signed with key {} of 'planner', but the record claims source 'mallory'",
            planner.key_id()
        );
        assert_refused(&fabric, &error, "wrong_principal", &says, b"impostor").await;

        let old = Requester::new(fabric.producer("old").with_signer(expired.clone()));
        let error = ask_refused(&old, "expired").await;
        let says = format!("key {} of 'old' expired at", expired.key_id());
        assert_refused(&fabric, &error, "expired", &says, b"expired").await;

        let gone = Requester::new(fabric.producer("gone").with_signer(revoked.clone()));
        let error = ask_refused(&gone, "revoked").await;
        let says = format!("key {} of 'gone' was revoked at", revoked.key_id());
        assert_refused(&fabric, &error, "revoked", &says, b"revoked").await;

        // Forged: signed, then the body changed on the way.
        let forged = planner.sign(command("original"), None);
        let mut tampered = forged.clone();
        tampered.body = b"forged".to_vec().into();
        append_raw(
            &fabric,
            &fabric.topology.commands,
            &tampered,
            ContentType::Raw,
        )
        .await;
        let error = error_reply(&fabric, tampered.correlation.unwrap()).await;
        let says = format!(
            "the signature does not verify with key {} of 'planner'",
            planner.key_id()
        );
        assert_refused(&fabric, &error, "bad_signature", &says, b"forged").await;
        let message = error.message.unwrap_or_default();
        let signature = forged.signature.as_ref().unwrap();
        for secret in [
            hex::encode(&signature.bytes),
            planner.public_key().to_string(),
        ] {
            assert!(
                !message.contains(&secret),
                "no key material in a refusal: {message}"
            );
        }

        // Bound to content type json, but the record says raw.
        let bound = planner
            .clone()
            .with_binding(ContextBinding::ALL)
            .sign_record(command("bound"), ContentType::Json);
        append_raw(&fabric, &fabric.topology.commands, &bound, ContentType::Raw).await;
        let error = error_reply(&fabric, bound.correlation.unwrap()).await;
        let says = "the signature binds content type json, but the record's header says raw";
        assert_refused(&fabric, &error, "context_mismatch", says, b"bound").await;

        // A bound context that matches is accepted.
        let bound_producer = fabric
            .producer("planner")
            .with_signer(planner.clone().with_binding(ContextBinding::ALL));
        let matched = Requester::new(bound_producer)
            .ask(request("matched").content_type(ContentType::Json), ANSWER)
            .await
            .expect("a bound, matching signature is accepted");
        assert!(matches!(matched, Answer::Response(r) if r.body == b"matched"[..]));
        worker.stop().await;
    })
    .await;
}

/// A command from `planner` to `summarizer`, not yet signed.
fn command(body: &str) -> AgentEnvelope {
    AgentEnvelope::command(
        agdx::new_record_id(),
        agdx::new_conversation_id(),
        agent_id("planner"),
        agdx::new_correlation_id(),
        Some("summarize"),
        body.as_bytes().to_vec(),
    )
    .with_target(agent_id("summarizer"))
}

/// A bridge that signs what it writes: the hop it stamps into
/// `bridge_hops` is stamped before the signature is made, so a verifying
/// worker accepts its commands and the command on the log carries the hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signing_bridge_s_commands_carry_its_hop_and_verify() {
    on_every_fabric("signed-bridge", |fabric| async move {
        let mut keys = Keys::new(fabric.dir.path());
        let bridge = keys.enroll("bridge", KeyKind::Agent);
        let summarizer = keys.enroll("summarizer", KeyKind::Agent);
        let worker = verifying_worker(&fabric, &keys, summarizer);
        let producer = fabric
            .producer("bridge")
            .with_signer(bridge.clone())
            .with_bridge_hop("axon:test");
        let requester = Requester::new(producer).with_verifier(keys.verifier());
        match requester
            .ask(request("through a bridge"), ANSWER)
            .await
            .expect("a signed command with a hop is accepted")
        {
            Answer::Response(reply) => assert_eq!(reply.body, &b"through a bridge"[..]),
            other => panic!("expected a response, got {other:?}"),
        }
        let command = fabric
            .records(&fabric.topology.commands)
            .await
            .into_iter()
            .filter_map(|r| AgentEnvelope::decode(&r.payload).ok())
            .find(|e| e.body == b"through a bridge"[..])
            .expect("the command on the log");
        assert_eq!(
            command
                .metadata
                .as_ref()
                .map(|m| m.bridge_hops().collect::<Vec<_>>()),
            Some(vec!["axon:test"])
        );
        let signature = command.signature.as_ref().expect("a signed command");
        assert_eq!(signature.key_id, bridge.key_id().to_bytes());
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_reply_does_not_resolve_a_verified_ask() {
    on_every_fabric("forged-reply", |fabric| async move {
        let mut keys = Keys::new(fabric.dir.path());
        let planner = keys.enroll("planner", KeyKind::Agent);
        let summarizer = keys.enroll("summarizer", KeyKind::Agent);
        let mallory = keys.enroll("mallory", KeyKind::Agent);
        let requester = Requester::new(fabric.producer("planner").with_signer(planner))
            .with_verifier(keys.verifier());
        let mut watch = requester.send(request("who answers?")).await.expect("send");
        let sent = watch.sent().clone();

        // Whoever can write the reply topic tries to answer first.
        let command =
            record_with_id(&fabric, &fabric.topology.commands, sent.record.unwrap()).await;
        let to = agdx::ReplyTo::for_command(
            &agdx::envelope_of(&command).unwrap(),
            Some(command.position),
        )
        .unwrap();
        let reply_as = |agent: &str, body: &str| {
            fabric
                .producer(agent)
                .response_envelope(&to, body.as_bytes().to_vec(), ContentType::Raw)
                .envelope
        };
        let forgeries = [
            reply_as("summarizer", "unsigned"),
            Signer::generate()
                .unwrap()
                .sign(reply_as("summarizer", "unknown key"), None),
            mallory.sign(reply_as("mallory", "mallory's own, validly signed"), None),
            mallory.sign(
                reply_as("summarizer", "mallory claiming to be summarizer"),
                None,
            ),
        ];
        for forged in &forgeries {
            append_raw(
                &fabric,
                &fabric.topology.responses,
                forged,
                ContentType::Raw,
            )
            .await;
        }
        let genuine = summarizer.sign(reply_as("summarizer", "the real answer"), None);
        append_raw(
            &fabric,
            &fabric.topology.responses,
            &genuine,
            ContentType::Raw,
        )
        .await;

        match watch.next(ANSWER).await.expect("a reply") {
            agdx::ReplyEvent::Response(reply) => assert_eq!(reply.body, &b"the real answer"[..]),
            other => panic!("expected the genuine response, got {other:?}"),
        }
        assert_eq!(
            watch.unverified(),
            4,
            "each forgery was ignored and counted"
        );
        assert_eq!(requester.unverified(), 4);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_judged_as_of_the_records_log_timestamp() {
    on_every_fabric("key-validity", |fabric| async move {
        let mut keys = Keys::new(fabric.dir.path());
        let planner = keys.enroll("planner", KeyKind::Agent);
        let sent = fabric
            .producer("planner")
            .with_signer(planner.clone())
            .command(request("judged when it landed"))
            .await
            .expect("send");
        let record = record_with_id(&fabric, &fabric.topology.commands, sent.record.unwrap()).await;
        let envelope = agdx::envelope_of(&record).unwrap();
        let landed = record.timestamp_micros;
        let observed = Observed::of(&record);
        // The planner's entry, changed by `adjust`, judges the stored record.
        let judge = |adjust: &dyn Fn(&mut agdx::trust::KeyEntry)| {
            let mut entry = keys.registry.get(&planner.key_id()).unwrap().clone();
            adjust(&mut entry);
            let mut registry = agdx::trust::KeyRegistry::new();
            registry.insert(entry).unwrap();
            agdx::trust::Verifier::new(registry).verify_decoded(
                &envelope,
                &record.payload,
                &observed,
            )
        };
        // Revoked after the record landed: replaying it still verifies.
        assert!(judge(&|e| e.revoked_at = Some(landed + 1)).is_ok());
        // Revoked at or before it: it does not.
        assert!(matches!(
            judge(&|e| e.revoked_at = Some(landed)),
            Err(VerifyError::Revoked { .. })
        ));
        // The window: open from `valid_from`, closed from `valid_to` on.
        assert!(matches!(
            judge(&|e| e.valid_from = Some(landed + 1)),
            Err(VerifyError::NotYetValid { .. })
        ));
        assert!(judge(&|e| e.valid_from = Some(landed)).is_ok());
        assert!(matches!(
            judge(&|e| e.valid_to = Some(landed)),
            Err(VerifyError::Expired { .. })
        ));
        assert!(judge(&|e| e.valid_to = Some(landed + 1)).is_ok());
    })
    .await;
}
