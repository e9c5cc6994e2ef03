//! Several Kafka-protocol brokers, one of them killed mid-run: three Tansu
//! brokers sharing one PostgreSQL database, a pool of worker processes
//! connected through them, keyed commands sent while broker 2 is killed
//! with SIGKILL. Every acknowledged command is answered, and each key's
//! handler runs once.
//!
//! Needs Tansu built with its PostgreSQL store (`cargo install tansu
//! --locked --features libsql,postgres`; `AGDX_TEST_TANSU_BIN` or `tansu`
//! on PATH) and PostgreSQL 16 or later (see `support/postgres.rs`;
//! `AGDX_TEST_PG_BIN` names its bin directory); without them it says so on
//! one line and passes.
//!
//! The brokers sit behind one address, a TCP balancer of the harness
//! (`support/balancer.rs`), and all advertise it. Tansu brokers all announce
//! the same broker id, so a client given their own addresses takes them for
//! one broker that moves between addresses with every metadata answer, and
//! once that address is the dead broker's it has no other to ask. Behind a
//! balancer they are what they are: a stateless tier in front of one store.
//!
//! It runs only when `AGDX_TEST_KAFKA_CLUSTER=1`, because on Tansu 0.6 it
//! fails in about one run of four, and CI must not depend on that. The
//! failure is keyed effects running twice. When the broker dies, some
//! members lose their coordinator and rejoin. Tansu answers each JoinGroup
//! at once instead of waiting for every member to rejoin, so the leader
//! assigns from stale member metadata, and a partition goes to a new
//! member while its previous owner, which was never told to revoke it,
//! still works on it. No acknowledged command goes unanswered in any run.
//!
//! What it shows: no acknowledged append is lost and no keyed effect
//! repeats when the broker that part of the clients' connections go to
//! disappears and they carry on through the others. What it cannot show:
//! replication, or partition leaders moving between brokers. The database
//! is the single copy, and to a client the cluster is one broker.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;

use agdx::log::SharedLog;
use agdx::log::kafka::KafkaLog;
use agdx::wire::{AgentId, IdempotencyKey, Kind};
use agdx::{CommandRequest, Producer, TopologyConfig};
use support::balancer::Balancer;
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

/// Three brokers on one database behind one balancer, or why not.
async fn cluster(pg: &Postgres) -> Result<(Vec<TansuBroker>, Balancer), String> {
    let binary = tansu_binary()?;
    let schema = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it/support/tansu/postgres-schema.sql");
    pg.load(&schema)?;
    let ports = (0..3)
        .map(|_| support::free_port())
        .collect::<Result<Vec<_>, _>>()?;
    let servers = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let balancer = Balancer::start(support::free_port()?, servers).await?;
    let mut brokers = Vec::new();
    for port in ports {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        match TansuBroker::start_on(&binary, dir, &pg.url(), port, Some(&balancer.address)).await {
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
    Ok((brokers, balancer))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_pool_over_three_brokers_survives_one_broker_killed() {
    if std::env::var_os("AGDX_TEST_KAFKA_CLUSTER").is_none_or(|v| v != "1") {
        return support::say_skipped_once(
            "kafka cluster",
            "set AGDX_TEST_KAFKA_CLUSTER=1 to run it; on Tansu 0.6 about one run in four repeats keyed effects (its group coordinator hands a partition to a new member before the previous owner revokes it)",
        );
    }
    let pg = match Postgres::start() {
        Ok(pg) => pg,
        Err(why) => return support::say_skipped_once("kafka cluster", &why),
    };
    match pg.major_version() {
        Ok(major) if major >= 16 => {}
        Ok(major) => {
            return support::say_skipped_once(
                "kafka cluster",
                &format!(
                    "Tansu's PostgreSQL store needs PostgreSQL 16 or later (15 refuses its queries: 'subquery in FROM must have an alias'), and {} is {major}; set AGDX_TEST_PG_BIN to the bin directory of a newer one (`pip install pgserver` ships 16 in pgserver/pginstall/bin)",
                    pg.binaries().display()
                ),
            );
        }
        Err(why) => return support::say_skipped_once("kafka cluster", &why),
    }
    let (mut brokers, balancer) = match cluster(&pg).await {
        Ok(cluster) => cluster,
        Err(why) => return support::say_skipped_once("kafka cluster", &why),
    };
    let url = test_url(&balancer.address);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let stream = support::unique_stream("cluster");
    let runs = dir.path().join("runs.log");

    let log: SharedLog = std::sync::Arc::new(KafkaLog::connect(&url).await.expect("connect"));
    let topology = TopologyConfig::new(&stream)
        .with_partitions(PARTITIONS)
        .ensure(log.as_ref())
        .await
        .expect("create the topology");

    // Three worker processes; the balancer spreads their connections.
    let mut workers = Vec::new();
    for first in 0..3 {
        let state = dir.path().join(format!("state-{first}"));
        let exec = format!(
            "echo \"$AGDX_IDEMPOTENCY_KEY\" >> '{}'; cat",
            runs.display()
        );
        let worker = tokio::process::Command::new(env!("CARGO_BIN_EXE_agdx"))
            .args(["--log", &url, "--stream", &stream])
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
                        .push(envelope.body.to_vec());
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
    drop(balancer);
}
