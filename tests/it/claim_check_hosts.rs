//! Claim checks across hosts: a large body written through one log handle
//! is read through another that shares no directory with it, through the
//! log blob store (on every backend) and through an S3 store (s3s-fs); the
//! resolved body keeps its content type. Also as `agdx` processes started
//! in different directories, with the default store and with `--blobs`.

use crate::support;

use std::sync::Arc;

use agdx::log::{LogSpec, SharedLog};
use agdx::wire::{BodyRef, ContentType};
use agdx::worker::{EchoHandler, Worker};
use agdx::{
    Answer, BlobStore, ClaimCheck, CommandRequest, DEFAULT_CLAIM_CHECK_THRESHOLD, LogBlobRef,
    LogBlobStore, MAX_BLOB_CHUNK_BYTES, ObjectBlobStore, Producer, Requester, TopologyConfig,
    content_type_of, envelope_of,
};
use sha2::Digest as _;
use support::fabric::{
    ANSWER, Fabric, PARTITIONS, Running, agent_id, on_every_fabric, quick_config,
};
use support::s3;

/// A JSON body over the default threshold and over one chunk record.
fn json_body() -> Vec<u8> {
    let text = "x".repeat(MAX_BLOB_CHUNK_BYTES + 100 * 1024);
    format!("{{\"data\":\"{text}\"}}").into_bytes()
}

/// Another handle on the fabric's log, as another host would open it.
async fn other_handle(fabric: &Fabric) -> SharedLog {
    let spec: LogSpec = fabric.spec.parse().expect("the fabric's log spec");
    spec.open().await.expect("open a second handle on the log")
}

fn topology(fabric: &Fabric) -> TopologyConfig {
    TopologyConfig::new(&fabric.stream).with_partitions(PARTITIONS)
}

/// An echo worker on `log` claim-checking through `store`; its state is in
/// a directory of its own.
fn echo_worker(fabric: &Fabric, log: SharedLog, store: Arc<dyn BlobStore>) -> Running {
    let check = ClaimCheck::new(store, DEFAULT_CLAIM_CHECK_THRESHOLD);
    let producer =
        Producer::new(log, fabric.topology.clone(), agent_id("echo")).with_claim_check(check);
    let state = fabric.dir.path().join("state-of-the-other-host");
    Running::start(Worker::new(producer, quick_config(state)).handle("echo", EchoHandler))
}

/// Asks the echo agent with the JSON body through `store` and checks the
/// answer: the same bytes, content type json on the way there (the echo
/// answers with the content type its handler saw) and back. Returns the
/// BodyRef the command carried on the log.
async fn ask_json(fabric: &Fabric, store: Arc<dyn BlobStore>) -> BodyRef {
    let check = ClaimCheck::new(store, DEFAULT_CLAIM_CHECK_THRESHOLD);
    let requester = Requester::new(fabric.producer("asker").with_claim_check(check));
    let body = json_body();
    let request = CommandRequest::new("echo", body.clone())
        .to(agent_id("echo"))
        .content_type(ContentType::Json);
    match requester.ask(request, ANSWER).await.expect("ask") {
        Answer::Response(reply) => {
            assert!(
                reply.body == body,
                "the reader gets the bytes that were sent"
            );
            assert!(reply.claim_checked, "the reply went as a claim check too");
            assert_eq!(
                reply.content_type,
                ContentType::Json,
                "the handler saw json and the reply reads as json"
            );
        }
        other => panic!("expected a response, got {other:?}"),
    }
    let commands = fabric.records(&fabric.topology.commands).await;
    assert_eq!(content_type_of(&commands[0]), ContentType::Ref);
    let envelope = envelope_of(&commands[0]).expect("an envelope");
    BodyRef::decode_valid(&envelope.body).expect("a BodyRef on the log")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_json_body_crosses_log_handles_through_the_log_blob_store() {
    on_every_fabric("blobs-on-log", |fabric| async move {
        let other = other_handle(&fabric).await;
        let worker = echo_worker(
            &fabric,
            other.clone(),
            Arc::new(LogBlobStore::new(other, &topology(&fabric))),
        );
        let store = Arc::new(LogBlobStore::new(fabric.log.clone(), &topology(&fabric)));
        let body_ref = ask_json(&fabric, store).await;
        let at: LogBlobRef = body_ref.reference.parse().expect("a log blob reference");
        assert_eq!(at.topic, "agent.blobs");
        assert_eq!(
            at.records, 2,
            "{} bytes in chunks of at most 512 KiB",
            body_ref.size_bytes
        );
        let blobs = fabric
            .log
            .topic(&fabric.stream, "agent.blobs")
            .await
            .expect("look the blob topic up")
            .expect("the blob topic was made");
        let chunks = support::drain(fabric.log.as_ref(), &blobs, at.partition, at.first, 2).await;
        assert!(
            chunks
                .iter()
                .all(|c| c.payload.len() <= MAX_BLOB_CHUNK_BYTES),
            "every chunk is below the log's record limit"
        );
        worker.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_json_body_crosses_log_handles_through_an_s3_store() {
    let Some(server) = s3::s3_server_or_skip().await else {
        return;
    };
    let fabric = support::fabric::embedded_fabric("blobs-on-s3").await;
    let url = server.url("claims");
    let open = || -> Arc<dyn BlobStore> {
        Arc::new(ObjectBlobStore::open_with(&url, server.options()).expect("open the S3 store"))
    };
    let other = other_handle(&fabric).await;
    let worker = echo_worker(&fabric, other, open());
    let body_ref = ask_json(&fabric, open()).await;
    let hex = body_ref.reference.strip_prefix(&format!("{url}/"));
    assert_eq!(
        hex,
        Some(hex::encode(body_ref.sha256).as_str()),
        "{}",
        body_ref.reference
    );
    worker.stop().await;
}

/// `agdx worker` started in one directory and `agdx ask` in another: each
/// process's own directory holds nothing the other reads, so the blob must
/// be where both look (the default store of the log, or `--blobs`).
async fn ask_across_directories(fabric: &Fabric, extra: &[&str], env: &[(&str, String)]) {
    let dirs = ["worker-host", "asker-host"].map(|name| {
        let dir = fabric.dir.path().join(name);
        std::fs::create_dir_all(&dir).expect("make a host directory");
        dir
    });
    let mut worker = fabric.agdx();
    worker
        .args(extra)
        .args(["worker", "--agent", "echo", "--echo"])
        .envs(env.iter().cloned())
        .current_dir(&dirs[0])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let _worker = worker.spawn().expect("start agdx worker");
    let body = json_body();
    let mut ask = fabric.agdx();
    ask.args(extra)
        .args([
            "ask",
            "--to",
            "echo",
            "--operation",
            "echo",
            "--content-type",
            "json",
            "--timeout",
            "60s",
        ])
        .envs(env.iter().cloned())
        .current_dir(&dirs[1])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = ask.spawn().expect("start agdx ask");
    let mut stdin = child.stdin.take().expect("ask's stdin");
    tokio::io::AsyncWriteExt::write_all(&mut stdin, &body)
        .await
        .expect("write the body");
    drop(stdin);
    let output = child.wait_with_output().await.expect("agdx ask");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(0), "agdx ask failed: {stderr}");
    assert!(
        output.stdout.trim_ascii_end() == body.as_slice(),
        "the echo is the body ({} bytes printed); stderr: {stderr}",
        output.stdout.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_processes_in_different_directories_share_blobs_by_default() {
    on_every_fabric("blobs-cli-default", |fabric| async move {
        ask_across_directories(&fabric, &[], &[]).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agdx_processes_share_blobs_through_an_s3_store() {
    let Some(server) = s3::s3_server_or_skip().await else {
        return;
    };
    let fabric = support::fabric::embedded_fabric("blobs-cli-s3").await;
    let url = server.url("cli");
    ask_across_directories(&fabric, &["--blobs", &url], &server.env()).await;
    // The command's body and its echo are one object: named by its SHA-256.
    let name = hex::encode(sha2::Sha256::digest(json_body()));
    let object = server.root().join(s3::BUCKET).join("cli").join(name);
    assert!(
        object.is_file(),
        "the blob is in the bucket: {}",
        object.display()
    );
}
