//! A network partition between real hosts: the log server on one host,
//! worker pools on two, a requester on a third, each a Linux network
//! namespace linked to a switch (`support/netns.rs`). Mid-run the link of
//! one worker host goes down for longer than the group's session timeout
//! and comes back. Every acknowledged command is answered, each keyed
//! command's handler runs once (but see below), and the cut-off host's pool rejoins and
//! handles commands again. Last, the requester asks with a 700 KiB body:
//! it crosses from the requester host to a worker host and back through the
//! blob store on the log.
//!
//! Runs once on Iggy (`AGDX_TEST_IGGY_SERVER`, started on the server host)
//! and once on Kafka (Tansu: `AGDX_TEST_TANSU_BIN` or `tansu` on PATH).
//! Needs root and iproute2 for the namespaces; without any of these it says
//! so on one line and passes.
//!
//! A handler that ran on the cut-off host just as its link went down, and
//! whose reply never reached the log, runs again on its next holder:
//! nothing on the log says it ran. The test tells such a key from any
//! other repeat by its first run's fence, and fails on any other repeat.
//!
//! The requester is this test binary run again on the requester host, as
//! the ignored test [`requester`] with its orders in the environment: a
//! process inside the namespace is the only way for the test to reach the
//! server, since nothing outside the namespaces can.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use agdx::log::LogSpec;
use agdx::wire::{AgentEnvelope, AgentId, IdempotencyKey, Kind};
use agdx::{
    Answer, ClaimCheck, CommandRequest, DEFAULT_CLAIM_CHECK_THRESHOLD, Fences, LogBlobStore,
    Producer, Requester, TopologyConfig, fence_of,
};
use support::fabric::lines_of;
use support::netns::{Host, Network};

/// Partitions of every topic.
const PARTITIONS: u32 = 8;
/// Keyed commands per append.
const BATCH: usize = 4;
/// The pause between the requester's appends.
const PACE: Duration = Duration::from_millis(150);
/// Most appends the requester makes before it stops on its own.
const MAX_BATCHES: usize = 2_000;
/// Appends made before the link is cut.
const BATCHES_BEFORE_CUT: usize = 20;
/// How long the worker host stays cut off: longer than Kafka's session
/// timeout (10 s) and than Iggy's heartbeat verification (5 s here).
const CUT: Duration = Duration::from_secs(25);
/// How long anything the test waits for may take.
const LIMIT: Duration = Duration::from_secs(240);

/// The requester's orders, in its environment.
const ROLE: &str = "AGDX_NETNS_REQUESTER";

/// The files the requester and the workers write into the shared directory.
struct Files {
    dir: PathBuf,
}

impl Files {
    /// Keys the log acknowledged, one per line.
    fn acknowledged(&self) -> PathBuf {
        self.dir.join("acknowledged")
    }
    /// `KEY FENCE` per reply on the log, written by the requester at the end.
    fn answered(&self) -> PathBuf {
        self.dir.join("answered")
    }
    /// `KEY HOST` per handler run, written by the workers.
    fn runs(&self) -> PathBuf {
        self.dir.join("runs")
    }
    /// Fences of handler runs whose holder was claimed over before it
    /// released the partition, one per line, written by the requester.
    fn stale(&self) -> PathBuf {
        self.dir.join("stale")
    }
    /// Present once the link is back: keys after it are `after-N`.
    fn restored(&self) -> PathBuf {
        self.dir.join("restored")
    }
    /// Present when the requester should stop sending.
    fn stop(&self) -> PathBuf {
        self.dir.join("stop")
    }
}

/// The log server on host 0.
enum Server {
    Iggy,
    Kafka,
}

impl Server {
    fn name(&self) -> &'static str {
        match self {
            Server::Iggy => "iggy",
            Server::Kafka => "kafka",
        }
    }

    /// The server binary, or why there is none.
    fn binary(&self) -> Result<PathBuf, String> {
        match self {
            Server::Iggy => std::env::var_os("AGDX_TEST_IGGY_SERVER")
                .map(PathBuf::from)
                .ok_or_else(|| {
                    "the partition test starts its own server on a host of its own, which needs AGDX_TEST_IGGY_SERVER=/path/to/iggy-server (0.8.x)".to_owned()
                }),
            Server::Kafka => support::kafka::tansu_binary(),
        }
    }

    /// Starts the server on `host`, its output in `dir/server.log`, and
    /// returns its connection string.
    fn start(&self, host: &Host, binary: &Path, dir: &Path) -> (tokio::process::Child, String) {
        let log = std::fs::File::create(dir.join("server.log")).expect("a server log");
        let mut command = host.command(binary);
        command
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("share the server log"))
            .stderr(log);
        let url = match self {
            Server::Iggy => {
                // Heartbeat verification is what lets an Iggy server drop a
                // client whose host vanished; it is off by default.
                command
                    .arg("--with-default-root-credentials")
                    .env("IGGY_TCP_ADDRESS", format!("{}:8090", host.address))
                    .env("IGGY_HTTP_ENABLED", "false")
                    .env("IGGY_QUIC_ENABLED", "false")
                    .env("IGGY_WEBSOCKET_ENABLED", "false")
                    .env("IGGY_SYSTEM_PATH", dir.join("data"))
                    .env("IGGY_HEARTBEAT_ENABLED", "true")
                    .env("IGGY_HEARTBEAT_INTERVAL", "5 s");
                format!("iggy://iggy:iggy@{}:8090", host.address)
            }
            Server::Kafka => {
                let listener = format!("tcp://{}:9092", host.address);
                command
                    .arg("broker")
                    .args(["--listener-url", &listener])
                    .args(["--advertised-listener-url", &listener])
                    .args(["--storage-engine", "sqlite://tansu.db"])
                    .env_remove("RUST_LOG");
                support::kafka::test_url(&format!("{}:9092", host.address))
            }
        };
        (command.spawn().expect("start the log server"), url)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iggy_workers_survive_a_cut_off_host() {
    partition_run(Server::Iggy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_workers_survive_a_cut_off_host() {
    partition_run(Server::Kafka).await;
}

async fn partition_run(server: Server) {
    let skip = |why: &str| support::say_skipped_once(&format!("netns {}", server.name()), why);
    let binary = match server.binary() {
        Ok(binary) => binary,
        Err(why) => return skip(&why),
    };
    let network = match Network::build(4) {
        Ok(network) => network,
        Err(why) => return skip(&why),
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let files = Files {
        dir: dir.path().to_owned(),
    };
    let stream = support::unique_stream("netns");
    let (_server, url) = server.start(network.host(0), &binary, dir.path());
    let agdx = |host: &Host| {
        let mut command = host.command(env!("CARGO_BIN_EXE_agdx"));
        command
            .args(["--log", &url, "--stream", &stream])
            .env_remove("AGDX_LOG")
            .env_remove("AGDX_STREAM")
            .stdin(Stdio::null());
        command
    };

    // The server is up once the requester host can create the topology.
    let started = Instant::now();
    loop {
        let init = agdx(network.host(3))
            .args(["init", "--partitions", &PARTITIONS.to_string()])
            .output()
            .await
            .expect("run agdx init");
        if init.status.success() {
            break;
        }
        assert!(
            started.elapsed() < LIMIT,
            "the {} server on the server host never answered `agdx init`: {}\nserver log:\n{}",
            server.name(),
            String::from_utf8_lossy(&init.stderr),
            support::tail(&dir.path().join("server.log"))
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    let mut workers = Vec::new();
    for host in [1, 2] {
        let state = dir.path().join(format!("state-{host}"));
        let exec = format!(
            "echo \"$AGDX_IDEMPOTENCY_KEY h{host} $AGDX_FENCE\" >> '{}'; cat",
            files.runs().display()
        );
        let worker = agdx(network.host(host))
            .args(["worker", "--agent", "keeper"])
            .args(["--state-dir", &state.display().to_string()])
            .args(["--exec", &exec])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start a worker");
        workers.push(worker);
    }

    let mut requester = network
        .host(3)
        .command(std::env::current_exe().expect("this test binary"))
        .args(["netns_partition::requester", "--exact", "--ignored"])
        .args(["--nocapture", "--test-threads", "1"])
        .env(ROLE, format!("{url}\n{stream}\n{}", dir.path().display()))
        .stdin(Stdio::null())
        .spawn()
        .expect("start the requester");

    wait_until("the requester's first appends", || {
        lines_of(&files.acknowledged()).len() >= BATCHES_BEFORE_CUT * BATCH
    })
    .await;
    network.cut(1).expect("cut host 1 off");
    tokio::time::sleep(CUT).await;
    network.restore(1).expect("bring host 1 back");
    std::fs::write(files.restored(), b"").expect("mark the link restored");

    wait_until(
        "host 1's pool to handle a command sent after its link came back",
        || {
            lines_of(&files.runs())
                .iter()
                .any(|run| run.starts_with("after-") && run.split(' ').nth(1) == Some("h1"))
        },
    )
    .await;
    std::fs::write(files.stop(), b"").expect("tell the requester to stop");
    // Longer than the requester's own bounded waits.
    let status = tokio::time::timeout(3 * LIMIT, requester.wait())
        .await
        .expect("the requester finishes")
        .expect("wait for the requester");
    assert!(
        status.success(),
        "the requester failed ({status}); see its output above"
    );

    let acknowledged: HashSet<String> = lines_of(&files.acknowledged()).into_iter().collect();
    // `KEY FENCE` per reply (a key answered again has more).
    let replies: HashSet<(String, String)> = lines_of(&files.answered())
        .iter()
        .filter_map(|line| line.split_once(' '))
        .map(|(key, fence)| (key.to_owned(), fence.to_owned()))
        .collect();
    let answered: HashSet<String> = replies.iter().map(|(key, _)| key.clone()).collect();
    let stale: HashSet<String> = lines_of(&files.stale()).into_iter().collect();
    let unanswered: Vec<_> = acknowledged.difference(&answered).collect();
    assert!(
        unanswered.is_empty(),
        "acknowledged commands never answered: {unanswered:?}"
    );
    // `(host, fence)` per handler run, in the order they started.
    let mut runs: HashMap<String, Vec<(String, String)>> = HashMap::new();
    for run in lines_of(&files.runs()) {
        let mut fields = run.split(' ');
        let (Some(key), Some(host), Some(fence)) = (fields.next(), fields.next(), fields.next())
        else {
            panic!("a run line is KEY HOST FENCE: {run:?}");
        };
        runs.entry(key.to_owned())
            .or_default()
            .push((host.to_owned(), fence.to_owned()));
    }
    // A handler that ran on the host being cut off, just before its link
    // went down, runs again on the next holder when its reply did not reach
    // the log before that holder claimed the partition (after waiting for a
    // release that could not come): nothing told the next holder it ran.
    // Every other key runs once.
    let mut lost_in_the_cut = Vec::new();
    let mut repeated = Vec::new();
    for (key, hosts) in &runs {
        let Some(((first_host, first_fence), again)) = hosts.split_first() else {
            continue;
        };
        if again.is_empty() {
            continue;
        }
        let cut_off_unanswered =
            first_host == "h1" && again.len() == 1 && stale.contains(first_fence);
        if cut_off_unanswered {
            lost_in_the_cut.push(key);
        } else {
            repeated.push((key, hosts));
        }
    }
    assert!(
        repeated.is_empty(),
        "keyed effects ran more than once: {repeated:?}"
    );
    for key in &acknowledged {
        assert!(runs.contains_key(key), "{key}: its handler never ran");
    }
    eprintln!(
        "netns {}: {} commands acknowledged and answered, each handler run once but {} in hand on the cut-off host when its link went down ({lost_in_the_cut:?}), host 1 rejoined",
        server.name(),
        acknowledged.len(),
        lost_in_the_cut.len(),
    );
    for mut worker in workers {
        let _ = worker.start_kill();
        let _ = worker.wait().await;
    }
}

/// Waits, checking every half second, until `done` holds.
async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < LIMIT, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The requester: run on the requester host by [`partition_run`], it does
/// nothing anywhere else.
///
/// It appends keyed commands until told to stop (`before-N` keys, then
/// `after-N` once the link is back), notes every key the log acknowledged,
/// then waits until each is answered and writes the answered keys.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the partition test on a host of its own"]
async fn requester() {
    let Ok(orders) = std::env::var(ROLE) else {
        return;
    };
    let mut orders = orders.lines();
    let (url, stream, dir) = match (orders.next(), orders.next(), orders.next()) {
        (Some(url), Some(stream), Some(dir)) => (url, stream, dir),
        _ => panic!("{ROLE} holds URL, stream and directory, one per line"),
    };
    let files = Files { dir: dir.into() };
    let spec: LogSpec = url.parse().expect("a log URL");
    let log = spec.open().await.expect("connect to the log");
    let topology = topology_config(stream)
        .ensure(log.as_ref())
        .await
        .expect("the topology");
    let producer = Producer::new(
        log.clone(),
        topology.clone(),
        AgentId::new("client").unwrap(),
    );

    let mut acknowledged = Vec::new();
    let mut next = 0;
    for _ in 0..MAX_BATCHES {
        if files.stop().exists() {
            break;
        }
        let phase = if files.restored().exists() {
            "after"
        } else {
            "before"
        };
        let keys: Vec<String> = (next..next + BATCH)
            .map(|n| format!("{phase}-{n}"))
            .collect();
        next += BATCH;
        let requests = keys
            .iter()
            .map(|key| {
                CommandRequest::new("keep", key.as_bytes().to_vec())
                    .to(AgentId::new("keeper").unwrap())
                    .idempotency_key(IdempotencyKey::new(key).unwrap())
            })
            .collect();
        // An append the log did not acknowledge is not owed an answer.
        if let Err(error) = producer.commands(requests).await {
            eprintln!("requester: an append failed: {error}");
        } else {
            let mut lines = keys.join("\n");
            lines.push('\n');
            append(&files.acknowledged(), &lines);
            acknowledged.extend(keys);
        }
        tokio::time::sleep(PACE).await;
    }

    // Bounded by LIMIT: partitions may still be moving between the pools.
    let fences = Fences::new(log.clone(), topology.snapshots.clone());
    let started = Instant::now();
    let replies = loop {
        let mut replies = HashSet::new();
        let mut answered = HashSet::new();
        for partition in 0..PARTITIONS {
            for record in support::drain(log.as_ref(), &topology.responses, partition, 0, 500).await
            {
                let Ok(envelope) = AgentEnvelope::decode_valid(&record.payload) else {
                    continue;
                };
                if envelope.kind == Kind::Response
                    && let Some(ref key) = envelope.idempotency_key
                    && !key.as_str().starts_with(BIG)
                {
                    assert_eq!(
                        envelope.body,
                        key.as_str().as_bytes(),
                        "{key}: a wrong reply body"
                    );
                    let fence = fence_of(&envelope).map_or("-".to_owned(), |f| f.to_string());
                    replies.insert(format!("{key} {fence}"));
                    answered.insert(key.to_string());
                }
            }
        }
        let missing: Vec<_> = acknowledged
            .iter()
            .filter(|key| !answered.contains(*key))
            .collect();
        if missing.is_empty() {
            break replies;
        }
        assert!(
            started.elapsed() < LIMIT,
            "acknowledged commands still unanswered after {LIMIT:?}: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    // Which fences of the handler runs a newer holder claimed over before
    // they were released: their holders were taken over after the wait.
    let mut stale = Vec::new();
    let run_fences: HashSet<u64> = lines_of(&files.runs())
        .iter()
        .filter_map(|run| run.split(' ').nth(2)?.parse().ok())
        .collect();
    for fence in run_fences {
        if fences.is_stale(fence).await.expect("read the claims") {
            stale.push(fence.to_string());
        }
    }
    std::fs::write(files.stale(), stale.join("\n") + "\n").expect("write the stale fences");
    ask_large_body(&log, &topology_config(stream)).await;
    let mut lines: Vec<String> = replies.into_iter().collect();
    lines.sort();
    std::fs::write(files.answered(), lines.join("\n") + "\n").expect("write the answered keys");
}

/// The key of the large-body ask.
const BIG: &str = "big-";

fn topology_config(stream: &str) -> TopologyConfig {
    TopologyConfig::new(stream).with_partitions(PARTITIONS)
}

/// Asks with a body over the claim-check threshold: it goes to the blob
/// store on the log from this host, a worker host reads it and answers with
/// it (a claim check the other way), and this host reads that.
async fn ask_large_body(log: &agdx::log::SharedLog, topology: &TopologyConfig) {
    let store = std::sync::Arc::new(LogBlobStore::new(log.clone(), topology));
    let topics = topology.ensure(log.as_ref()).await.expect("the topology");
    let producer = Producer::new(log.clone(), topics, AgentId::new("client").unwrap())
        .with_claim_check(ClaimCheck::new(store, DEFAULT_CLAIM_CHECK_THRESHOLD));
    let requester = Requester::new(producer);
    let body: Vec<u8> = (0..700 * 1024).map(|n| (n % 251) as u8).collect();
    let request = CommandRequest::new("keep", body.clone())
        .to(AgentId::new("keeper").unwrap())
        .idempotency_key(IdempotencyKey::new(format!("{BIG}0")).unwrap());
    match requester
        .ask(request, LIMIT)
        .await
        .expect("the large-body ask")
    {
        Answer::Response(reply) => {
            assert!(reply.claim_checked, "the reply came as a claim check");
            assert!(reply.body == body, "the large body came back intact");
        }
        other => panic!("expected the large body back, got {other:?}"),
    }
}

/// Appends `text` to the file at `path`.
fn append(path: &Path, text: &str) {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .and_then(|mut file| file.write_all(text.as_bytes()))
        .expect("append to a shared file");
}
