//! An Iggy server killed with SIGKILL after commands were sent and answered,
//! then restarted on the same data directory: every command `agdx send`
//! acknowledged is still on the log, and every command the worker committed
//! has its reply there. The server runs with its default settings, which
//! keep up to 1,024 messages per partition in memory; only agdx's own
//! flushes make the appends durable.
//!
//! Needs a server binary of the test's own (`AGDX_TEST_IGGY_SERVER`), since
//! it kills it; without one it says so and passes.

use crate::support;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use agdx::TopologyConfig;
use agdx::log::iggy::IggyLog;
use agdx::log::{Log, SharedLog, TopicInfo};
use agdx::wire::{AgentEnvelope, Kind, RecordId};
use support::eventually;
use support::fabric::{Fabric, iggy_fabric};
use support::iggy::{own_server, say_skipped};

const COMMANDS: usize = 300;
const AGENT: &str = "echo";

/// The committed offset of the worker's group per partition of `topic`.
async fn committed(log: &dyn Log, topic: &TopicInfo) -> Vec<Option<u64>> {
    let mut offsets = Vec::new();
    for partition in 0..topic.partitions.get() {
        let offset = log
            .committed_offset(topic, AGENT, partition)
            .await
            .expect("read a committed offset");
        offsets.push(offset);
    }
    offsets
}

/// The last offset per partition of `topic`.
async fn last_offsets(log: &dyn Log, topic: &TopicInfo) -> Vec<Option<u64>> {
    let mut offsets = Vec::new();
    for partition in 0..topic.partitions.get() {
        offsets.push(
            log.last_offset(topic, partition)
                .await
                .expect("last offset"),
        );
    }
    offsets
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_iggy_server_keeps_every_acknowledged_command_and_committed_reply() {
    let mut server = match own_server().await {
        Ok(server) => server,
        Err(reason) => {
            say_skipped(&reason);
            return;
        }
    };
    let mut fabric: Fabric = iggy_fabric(&server.url(), "server-crash", ()).await;

    let input = fabric.dir.path().join("commands.jsonl");
    let lines: Vec<String> = (0..COMMANDS)
        .map(|i| format!(r#"{{"to":"{AGENT}","operation":"work","body":"n-{i}"}}"#))
        .collect();
    std::fs::write(&input, lines.join("\n")).expect("write the commands");
    let (code, stdout, stderr) = fabric
        .run_agdx(&["send", "--jsonl", &input.display().to_string()])
        .await;
    assert_eq!(code, 0, "send --jsonl failed: {stderr}");
    assert_eq!(stdout.trim(), format!("sent {COMMANDS} commands"));

    let state = fabric.dir.path().join("state").display().to_string();
    let mut worker =
        fabric.spawn_worker_process(&["--agent", AGENT, "--echo", "--state-dir", &state]);
    let commands = fabric.topology.commands.clone();
    let ends = last_offsets(fabric.log.as_ref(), &commands).await;
    let at_kill = eventually("the worker to commit every command", || async {
        let now = committed(fabric.log.as_ref(), &commands).await;
        (now == ends).then_some(now)
    })
    .await;

    server.kill();
    worker.start_kill().expect("kill the worker");
    worker.wait().await.expect("reap the worker");
    server
        .restart()
        .await
        .unwrap_or_else(|e| panic!("restart the server: {e}"));
    let log: SharedLog = match IggyLog::connect(&server.url()).await {
        Ok(log) => Arc::new(log),
        Err(e) => panic!("connect after the restart: {e}"),
    };
    fabric.log = log.clone();
    let topology = TopologyConfig::new(&fabric.stream)
        .open(log.as_ref())
        .await
        .expect("the topology after the restart");

    // Every acknowledged command is there.
    let mut bodies = HashSet::new();
    let mut command_ids: HashMap<(u32, u64), RecordId> = HashMap::new();
    for record in fabric.records(&topology.commands).await {
        let envelope = AgentEnvelope::decode_valid(&record.payload).expect("a valid command");
        bodies.insert(String::from_utf8(envelope.body.to_vec()).expect("a text body"));
        let id = envelope.record.expect("a command has a record id");
        command_ids.insert((record.position.partition, record.position.offset), id);
    }
    let sent: HashSet<String> = (0..COMMANDS).map(|i| format!("n-{i}")).collect();
    assert_eq!(
        sent.difference(&bodies).count(),
        0,
        "{} of {COMMANDS} acknowledged commands are gone after the crash",
        sent.difference(&bodies).count()
    );

    // The commits survived, and every committed command has its reply.
    assert_eq!(
        committed(log.as_ref(), &topology.commands).await,
        at_kill,
        "the group's offsets after the restart"
    );
    let replied: HashSet<RecordId> = fabric
        .responses()
        .await
        .into_iter()
        .filter(|reply| reply.kind == Kind::Response && reply.source.as_str() == AGENT)
        .filter_map(|reply| reply.cause)
        .collect();
    let mut unanswered = 0;
    for (partition, offset) in at_kill.iter().enumerate() {
        let Some(offset) = offset else { continue };
        for at in 0..=*offset {
            let id = command_ids
                .get(&(partition as u32, at))
                .unwrap_or_else(|| panic!("no command at {partition}/{at}"));
            if !replied.contains(id) {
                unanswered += 1;
            }
        }
    }
    assert_eq!(
        unanswered, 0,
        "committed commands without a reply after the crash"
    );
}
