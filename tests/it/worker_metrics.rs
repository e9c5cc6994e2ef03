//! `agdx worker --metrics ADDR` serves the pool's counters and latencies in
//! the Prometheus text format. On every backend.

use crate::support;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use support::eventually;
use support::fabric::{on_every_fabric, terminate};

/// The body of `GET /metrics` on `addr`, when it answers.
async fn scrape(addr: &str) -> Option<String> {
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    response.starts_with("HTTP/1.1 200").then_some(response)
}

fn free_address() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a free port");
    listener.local_addr().expect("its address").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_serves_its_metrics_in_prometheus_text() {
    on_every_fabric("metrics", |fabric| async move {
        let addr = free_address();
        let mut worker = fabric.spawn_worker_process(&[
            "--agent",
            "tool",
            "--exec",
            "cat; echo '{\"usage\": {\"input_tokens\": 12, \"output_tokens\": 5}, \"metadata\": {\"cost\": 0.25}}' >> \"$AGDX_REPORT\"",
            "--operation",
            "copy",
            "--metrics",
            &addr,
        ]);
        let (code, _, stderr) = fabric
            .run_agdx(&[
                "ask",
                "--to",
                "tool",
                "--operation",
                "copy",
                "--timeout",
                "20s",
                "x",
            ])
            .await;
        assert_eq!(code, 0, "{stderr}");
        let (code, _, _) = fabric
            .run_agdx(&[
                "ask",
                "--to",
                "tool",
                "--operation",
                "nope",
                "--timeout",
                "20s",
                "x",
            ])
            .await;
        assert_eq!(code, 3);
        // The reply is on the log a moment before its outcome is counted
        // (every outcome's counter is there from the start, at 0).
        let text = eventually("the metrics", || async {
            scrape(&addr).await.filter(|t| {
                t.contains("agdx_worker_commit_lag")
                    && t.contains(
                        "agdx_worker_records_total{agent=\"tool\",outcome=\"unsupported\"} 1",
                    )
            })
        })
        .await;
        assert!(
            text.contains("agdx_worker_records_total{agent=\"tool\",outcome=\"handled\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("agdx_worker_records_total{agent=\"tool\",outcome=\"unsupported\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("agdx_worker_handler_seconds_count{agent=\"tool\",operation=\"copy\"} 1"),
            "{text}"
        );
        assert!(
            text.contains("agdx_worker_commit_lag{agent=\"tool\",partition=\""),
            "{text}"
        );
        // What the reply reported spending, by agent and operation.
        for (direction, tokens) in [("input", 12), ("output", 5)] {
            let series = format!(
                "agdx_worker_tokens_total{{agent=\"tool\",operation=\"copy\",direction=\"{direction}\"}} {tokens}"
            );
            assert!(text.contains(&series), "{series} in {text}");
        }
        assert!(
            text.contains("agdx_worker_cost{agent=\"tool\",operation=\"copy\"} 0.25"),
            "{text}"
        );
        terminate(&mut worker).await;
    })
    .await;
}

/// A fallback handler takes whatever operation a sender names; the
/// `operation` label keeps to one value for all of them, so senders cannot
/// add series to the worker's metrics without bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_a_fallback_handler_takes_share_one_label() {
    on_every_fabric("metrics-fallback", |fabric| async move {
        let addr = free_address();
        let mut worker =
            fabric.spawn_worker_process(&["--agent", "any", "--echo", "--metrics", &addr]);
        for operation in ["made-up-1", "made-up-2", "made-up-3"] {
            let (code, _, stderr) = fabric
                .run_agdx(&[
                    "ask",
                    "--to",
                    "any",
                    "--operation",
                    operation,
                    "--timeout",
                    "20s",
                    "x",
                ])
                .await;
            assert_eq!(code, 0, "{stderr}");
        }
        let text = eventually("the metrics", || async {
            scrape(&addr)
                .await
                .filter(|t| t.contains("outcome=\"handled\"} 3"))
        })
        .await;
        assert!(
            text.contains("agdx_worker_handler_seconds_count{agent=\"any\",operation=\"other\"} 3"),
            "{text}"
        );
        assert!(!text.contains("made-up"), "{text}");
        terminate(&mut worker).await;
    })
    .await;
}
