//! Several Kafka-protocol brokers, one of them killed mid-run: three Tansu
//! brokers sharing one PostgreSQL database, a pool of worker processes
//! spread over them, keyed commands sent while broker 2 is killed with
//! SIGKILL. Every acknowledged command is answered, and each key's handler
//! runs once.
//!
//! Needs Tansu built with its PostgreSQL store (`cargo install tansu
//! --locked --features libsql,postgres`; `AGDX_TEST_TANSU_BIN` or `tansu`
//! on PATH) and Debian's `postgresql` (see `support/postgres.rs`); without
//! them it says so on one line and passes.
//!
//! It runs only when `AGDX_TEST_KAFKA_CLUSTER=1`: on Tansu 0.6 it does not
//! pass yet (after the kill, clients that reached the dead broker's address
//! time out fetching metadata: the brokers share one node id, so the client
//! cannot tell them apart), and CI must not depend on it.
//!
//! What it shows: no acknowledged append is lost and no keyed effect
//! repeats when the broker a client talks to disappears and the clients
//! carry on through the others. What it cannot show: replication. Tansu
//! brokers are stateless in front of one database (the database is the
//! single copy), and they all announce the same node id, so a client
//! treats them as one broker at several addresses, not as partition
//! leaders and followers.

mod support;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use agdx::log::SharedLog;
use agdx::log::kafka::KafkaLog;
use agdx::wire::{AgentId, IdempotencyKey, Kind};
use agdx::{CommandRequest, Producer, TopologyConfig};
use support::eventually;
use support::fabric::lines_of;
use support::kafka::{TansuBroker, tansu_binary, test_url};
use support::postgres::Postgres;

/// Keyed commands in all; broker 2 dies after a third of them.
const COMMANDS: usize = 300;
/// Commands per append while sending.
const BATCH: usize = 10;
/// Partitions of every topic.
const PARTITIONS: u32 = 4;

/// Three brokers on one database, or why not.
async fn cluster(pg: &Postgres) -> Result<Vec<TansuBroker>, String> {
    let binary = tansu_binary()?;
    let schema =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/support/tansu/postgres-schema.sql");
    pg.load(&schema)?;
    let mut brokers = Vec::new();
    for _ in 0..3 {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        match TansuBroker::start(&binary, dir, &pg.url()).await {
            Ok(broker) => brokers.push(broker),
            Err(why) if why.contains("feature") || why.contains("postgres") => {
                return Err(format!(
                    "{} cannot use PostgreSQL (build it with `--features libsql,postgres`): {why}",
                    binary.display()
                ));
            }
            Err(why) => panic!("a Tansu broker on PostgreSQL did not start: {why}"),
        }
    }
    Ok(brokers)
}

/// The bootstrap list of `brokers`, starting with broker `first`.
fn bootstrap(brokers: &[TansuBroker], first: usize) -> String {
    let n = brokers.len();
    (0..n)
        .map(|k| brokers[(first + k) % n].address.clone())
        .collect::<Vec<_>>()
        .join(",")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_pool_over_three_brokers_survives_one_broker_killed() {
    if std::env::var_os("AGDX_TEST_KAFKA_CLUSTER").is_none_or(|v| v != "1") {
        return support::say_skipped_once(
            "kafka cluster",
            "set AGDX_TEST_KAFKA_CLUSTER=1 to run it; on Tansu 0.6 it fails (metadata fetches time out after a broker is killed: Tansu brokers share one node id)",
        );
    }
    let pg = match Postgres::start() {
        Ok(pg) => pg,
        Err(why) => return support::say_skipped_once("kafka cluster", &why),
    };
    let mut brokers = match cluster(&pg).await {
        Ok(brokers) => brokers,
        Err(why) => return support::say_skipped_once("kafka cluster", &why),
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let stream = support::unique_stream("cluster");
    let runs = dir.path().join("runs.log");

    // The sender talks to broker 2 first, so its death is felt.
    let sender_url = test_url(&bootstrap(&brokers, 1));
    let log: SharedLog =
        std::sync::Arc::new(KafkaLog::connect(&sender_url).await.expect("connect"));
    let topology = TopologyConfig::new(&stream)
        .with_partitions(PARTITIONS)
        .ensure(log.as_ref())
        .await
        .expect("create the topology");

    // A worker process per broker, each listing its own broker first.
    let mut workers = Vec::new();
    for first in 0..3 {
        let state = dir.path().join(format!("state-{first}"));
        let exec = format!(
            "echo \"$AGDX_IDEMPOTENCY_KEY\" >> '{}'; cat",
            runs.display()
        );
        let worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"))
            .args([
                "--log",
                &test_url(&bootstrap(&brokers, first)),
                "--stream",
                &stream,
            ])
            .args([
                "worker",
                "--agent",
                "keeper",
                "--state-dir",
                &state.display().to_string(),
            ])
            .args(["--exec", &exec])
            .env_remove("AGDX_LOG")
            .env_remove("AGDX_STREAM")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("start a worker process");
        workers.push(worker);
    }

    let producer = Producer::new(
        log.clone(),
        topology.clone(),
        AgentId::new("client").unwrap(),
    );
    let mut acknowledged: HashSet<String> = HashSet::new();
    let mut failed_appends = 0;
    for start in (0..COMMANDS).step_by(BATCH) {
        if start == COMMANDS / 3 {
            brokers[1].kill();
        }
        let keys: Vec<String> = (start..start + BATCH).map(|i| format!("key-{i}")).collect();
        let requests = keys
            .iter()
            .map(|key| {
                CommandRequest::new("keep", key.as_bytes().to_vec())
                    .to(AgentId::new("keeper").unwrap())
                    .idempotency_key(IdempotencyKey::new(key).unwrap())
            })
            .collect();
        // An append the cluster did not acknowledge is not owed an answer.
        match producer.commands(requests).await {
            Ok(_) => acknowledged.extend(keys),
            Err(error) => {
                failed_appends += 1;
                eprintln!("an append failed while a broker was down: {error}");
            }
        }
    }
    assert!(
        acknowledged.len() >= COMMANDS / 2,
        "most appends were acknowledged ({} of {COMMANDS}; {failed_appends} batches failed)",
        acknowledged.len()
    );

    let responses = eventually("every acknowledged command to be answered", || async {
        let mut answered: HashMap<String, Vec<Vec<u8>>> = HashMap::new();
        for partition in 0..PARTITIONS {
            let records =
                support::drain(log.as_ref(), &topology.responses, partition, 0, 500).await;
            for record in records {
                let envelope =
                    agdx::wire::AgentEnvelope::decode_valid(&record.payload).expect("a reply");
                if envelope.kind == Kind::Response
                    && let Some(key) = envelope.idempotency_key
                {
                    answered
                        .entry(key.to_string())
                        .or_default()
                        .push(envelope.body);
                }
            }
        }
        acknowledged
            .iter()
            .all(|key| answered.contains_key(key))
            .then_some(answered)
    })
    .await;
    for key in &acknowledged {
        assert!(
            responses[key].iter().all(|body| body == key.as_bytes()),
            "{key}: a wrong reply body"
        );
    }

    let mut runs_per_key: HashMap<String, usize> = HashMap::new();
    for key in lines_of(&runs) {
        *runs_per_key.entry(key).or_default() += 1;
    }
    let repeated: Vec<_> = runs_per_key.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        repeated.is_empty(),
        "keyed effects ran more than once: {repeated:?}"
    );
    for key in &acknowledged {
        assert_eq!(
            runs_per_key.get(key),
            Some(&1),
            "{key}: the handler ran once"
        );
    }
    for mut worker in workers {
        support::fabric::terminate(&mut worker).await;
    }
    drop(brokers);
}
