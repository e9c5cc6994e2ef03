//! `agdx check` and `agdx tail` cover every inbox of the stream (inbox
//! routing, docs/runtime.md §2), whatever routing the command line itself
//! is given. On every backend.

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};

use agdx::CommandRouting;

use crate::support;
use support::fabric::{Fabric, agent_id, on_every_fabric};

/// Makes the inboxes of `agents` and appends one record to each; their
/// topic names.
async fn inboxes_with_a_record(fabric: &Fabric, agents: &[&str]) -> BTreeSet<String> {
    let topology = fabric.topology.clone().with_routing(CommandRouting::Inbox);
    let mut names = BTreeSet::new();
    for agent in agents {
        let inbox = topology
            .open_inbox(fabric.log.as_ref(), &agent_id(agent))
            .await
            .expect("make the inbox");
        fabric
            .log
            .append(&inbox, 0, vec![support::record(format!("to {agent}"))])
            .await
            .expect("append to the inbox");
        names.insert(inbox.topic);
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_without_a_topic_prints_every_inbox() {
    on_every_fabric("inbox-tail", |fabric| async move {
        let inboxes = inboxes_with_a_record(&fabric, &["alpha", "Team/Planner"]).await;
        let (code, stdout, stderr) = fabric.run_agdx(&["tail"]).await;
        assert_eq!(code, 0, "{stderr}");
        let tailed: BTreeSet<String> = support::json_lines(&stdout)
            .iter()
            .filter_map(|line| line["topic"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(tailed, inboxes, "one record of each inbox: {stdout}");

        let (code, _, stderr) = fabric
            .run_agdx(&["tail", "--topic", "agent.inbox.nobody"])
            .await;
        assert_ne!(code, 0);
        assert!(
            stderr.contains("agent.inbox.alpha"),
            "a missing inbox's error lists the inboxes there are: {stderr}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tail_follow_picks_up_an_inbox_made_after_it_started() {
    on_every_fabric("inbox-follow", |fabric| async move {
        let mut tail = fabric
            .agdx()
            .args(["tail", "--follow"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start agdx tail --follow");
        let stdout = tail.stdout.take().expect("the tail's stdout");
        let mut lines = BufReader::new(stdout).lines();
        // The tail has started when it prints a record of an agent topic.
        let responses = fabric.topology.responses.clone();
        let started = async {
            loop {
                fabric
                    .log
                    .append(&responses, 0, vec![support::record("marker")])
                    .await
                    .expect("append a marker");
                let next = tokio::time::timeout(Duration::from_millis(500), lines.next_line());
                if let Ok(line) = next.await {
                    return line.expect("read the tail").expect("a line");
                }
            }
        };
        let first = tokio::time::timeout(support::PATIENCE, started)
            .await
            .expect("the tail prints what arrives");
        assert!(first.contains("agent.responses"), "{first}");

        let inboxes = inboxes_with_a_record(&fabric, &["late"]).await;
        let inbox_line = async {
            loop {
                let line = lines.next_line().await.expect("read the tail");
                let line = line.expect("the tail runs on");
                if !line.contains("agent.responses") {
                    return line;
                }
            }
        };
        let line = tokio::time::timeout(support::PATIENCE, inbox_line)
            .await
            .expect("the tail finds the new inbox");
        let line: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
        assert_eq!(
            line["topic"].as_str().map(str::to_owned),
            inboxes.into_iter().next()
        );
        tail.kill().await.expect("stop the tail");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reads_every_inbox_back() {
    on_every_fabric("inbox-check", |fabric| async move {
        inboxes_with_a_record(&fabric, &["alpha", "Team/Planner"]).await;
        let (code, stdout, stderr) = fabric.run_agdx(&["check"]).await;
        assert_eq!(code, 0, "{stdout}{stderr}");
        assert!(
            stdout.contains(": 7 topics,") && stdout.contains("2 records read back intact"),
            "the five agent topics and both inboxes, with their records: {stdout}"
        );
    })
    .await;
}
