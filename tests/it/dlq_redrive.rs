//! Dead-letter tools: a command dead-lettered by a failing handler is
//! listed, shown, and after the handler is fixed, redriven: its original
//! bytes go back unchanged and the fixed worker answers. The redrive is
//! remembered on the log, so doing it again is a no-op unless forced. On
//! every backend.

use crate::support;

use agdx::replay::dead_letters;
use agdx::wire::Kind;
use agdx::worker::{HandlerReply, handler_fn};
use agdx::{AskError, CommandRequest};
use support::agents::refusing;
use support::eventually;
use support::fabric::{ANSWER, Fabric, Running, agent_id, on_every_fabric};

/// The records of the commands topic carrying exactly `payload`.
async fn copies(fabric: &Fabric, payload: &[u8]) -> usize {
    let commands = fabric.topology.commands.clone();
    fabric
        .records(&commands)
        .await
        .iter()
        .filter(|r| r.payload.as_ref() == payload)
        .count()
}

/// The responses caused by `record`.
async fn answers(fabric: &Fabric, record: agdx::wire::RecordId) -> Vec<String> {
    fabric
        .responses()
        .await
        .into_iter()
        .filter(|e| e.kind == Kind::Response && e.cause == Some(record))
        .map(|e| String::from_utf8_lossy(&e.body).into_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_redriven_after_the_fix_is_answered_once_per_redrive() {
    on_every_fabric("dlq", |fabric| async move {
        let broken = Running::start(
            fabric
                .worker("ledger")
                .handle("post", refusing("the ledger is closed")),
        );
        let requester = fabric.requester("cli");
        let asked = requester
            .ask(
                CommandRequest::new("post", b"order 42".to_vec()).to(agent_id("ledger")),
                ANSWER,
            )
            .await;
        assert!(matches!(asked, Err(AskError::Remote(_))), "{asked:?}");
        let entry = eventually("the dead letter", || async {
            dead_letters(&fabric.log, &fabric.topology)
                .await
                .expect("list")
                .pop()
        })
        .await;
        broken.stop().await;
        let original = entry.original.clone().expect("the original decodes");
        let record = original.record.expect("a command has a record id");
        let id = format!("{}/{}", entry.position.partition, entry.position.offset);

        let (code, list, stderr) = fabric.run_agdx(&["dlq", "list"]).await;
        assert_eq!(code, 0, "{stderr}");
        let rows: Vec<&str> = list.lines().collect();
        assert_eq!(rows.len(), 2, "a header and one dead letter: {list}");
        let row: Vec<&str> = rows[1].split_whitespace().collect();
        assert_eq!(
            (row[0], row[2], row[3], row[4], row[5], row[6]),
            (id.as_str(), "rejected", "1", "ledger", "post", "no"),
            "{list}"
        );

        let (code, shown, _) = fabric.run_agdx(&["dlq", "show", &id]).await;
        assert_eq!(code, 0);
        assert!(shown.contains("reason:     rejected"), "{shown}");
        assert!(
            shown.contains("handler failed after 1 attempt(s): the ledger is closed"),
            "{shown}"
        );
        assert!(
            shown.contains("\"body\": \"order 42\"") && shown.contains(&record.to_string()),
            "{shown}"
        );

        // The fix: a worker that posts.
        let fixed = Running::start(fabric.worker("ledger").handle(
            "post",
            handler_fn(|request| async move {
                Ok(HandlerReply::raw(
                    [b"posted ".as_slice(), &request.body].concat(),
                ))
            }),
        ));
        let (code, out, stderr) = fabric.run_agdx(&["dlq", "redrive", &id]).await;
        assert_eq!(code, 0, "{stderr}");
        assert!(
            out.starts_with(&format!("redriven {id} → agent.commands partition ")),
            "{out}"
        );
        let answered = eventually("the redriven command to be answered", || async {
            let got = answers(&fabric, record).await;
            (!got.is_empty()).then_some(got)
        })
        .await;
        assert_eq!(answered, ["posted order 42"]);
        assert_eq!(
            copies(&fabric, &entry.capsule.payload).await,
            2,
            "the original bytes, unchanged, once more"
        );

        // Remembered on the log: again is a no-op.
        let (code, out, _) = fabric.run_agdx(&["dlq", "redrive", &id]).await;
        assert_eq!(code, 0);
        assert!(
            out.starts_with(&format!("skipped {id}: already redriven")) && out.contains("by cli"),
            "{out}"
        );
        assert_eq!(copies(&fabric, &entry.capsule.payload).await, 2);
        let (_, list, _) = fabric.run_agdx(&["dlq", "list", "--agent", "ledger"]).await;
        assert!(
            list.lines()
                .nth(1)
                .is_some_and(|l| l.trim_end().ends_with("by cli")),
            "{list}"
        );

        // Unless forced.
        let (code, out, _) = fabric
            .run_agdx(&[
                "dlq", "redrive", "--all", "--reason", "rejected", "--force", "--as", "ops",
            ])
            .await;
        assert_eq!(code, 0);
        assert!(out.starts_with(&format!("redriven {id}")), "{out}");
        eventually("the forced redrive to be answered", || async {
            (answers(&fabric, record).await.len() == 2).then_some(())
        })
        .await;
        let entry = dead_letters(&fabric.log, &fabric.topology)
            .await
            .expect("list")
            .pop()
            .expect("the entry");
        let by: Vec<(String, bool)> = entry
            .redrives
            .iter()
            .map(|r| (r.by.to_string(), r.forced))
            .collect();
        assert_eq!(by, [("cli".to_owned(), false), ("ops".to_owned(), true)]);

        // The same list for programs: one JSON object a line.
        let (code, list, stderr) = fabric.run_agdx(&["dlq", "list", "--json"]).await;
        assert_eq!(code, 0, "{stderr}");
        let objects = support::json_lines(&list);
        assert_eq!(objects.len(), 1, "{list}");
        let listed = &objects[0];
        assert_eq!(
            (
                &listed["id"],
                &listed["position"],
                &listed["reason"],
                &listed["attempts"],
                &listed["agent"],
                &listed["operation"],
            ),
            (
                &serde_json::json!(id),
                &serde_json::json!(entry.position.to_string()),
                &serde_json::json!("rejected"),
                &serde_json::json!(1),
                &serde_json::json!("ledger"),
                &serde_json::json!("post"),
            ),
            "{list}"
        );
        let redrives: Vec<(&str, bool)> = listed["redrives"]
            .as_array()
            .expect("the redrives")
            .iter()
            .map(|r| (r["by"].as_str().unwrap(), r["forced"].as_bool().unwrap()))
            .collect();
        assert_eq!(redrives, [("cli", false), ("ops", true)], "{list}");

        let (code, _, stderr) = fabric
            .run_agdx(&["dlq", "list", "--reason", "retry_exhausted"])
            .await;
        assert_eq!(code, 0);
        assert!(stderr.contains("no dead letters match"), "{stderr}");
        let (code, _, stderr) = fabric.run_agdx(&["dlq", "show", "3/99"]).await;
        assert_eq!(code, 1);
        assert!(stderr.contains("no dead letter 3/99"), "{stderr}");
        fixed.stop().await;
    })
    .await;
}
