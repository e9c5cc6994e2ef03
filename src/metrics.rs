//! Counters and latencies, through the `metrics` facade: nothing is
//! recorded until a program installs a recorder, any the facade takes.
//! With the `metrics` feature, [`serve_prometheus`] installs the Prometheus
//! exporter (as `agdx worker --metrics ADDR` does). A worker pool
//! registers its per-record series once, as it starts, so install the
//! recorder before. Every name is here, in one place.
//!
//! | name | kind | labels |
//! | --- | --- | --- |
//! | `agdx_worker_records_total` | counter | `agent`, `outcome` (handled, deduplicated, skipped, unsupported, dead_lettered, cancelled) |
//! | `agdx_worker_retries_total` | counter | `agent` |
//! | `agdx_worker_handler_seconds` | histogram | `agent`, `operation`: a registered operation, or [`OTHER_OPERATION`] for every command a fallback handler took |
//! | `agdx_worker_commit_lag` | gauge | `agent`, `partition`, `topic` (`agent.commands` or the agent's inbox): records on the log after the group's committed offset |
//! | `agdx_worker_tokens_total` | counter | `agent`, `operation`, `direction` (`input`, `output`): the `usage` of every response and final chunk a pool published |
//! | `agdx_worker_cost` | gauge (a running sum) | `agent`, `operation`: the [`COST_KEY`] metadata of those replies, when they name one |
//! | `agdx_ask_reply_seconds` | histogram | `target`: send to first terminal reply |
//! | `agdx_ask_timeouts_total` | counter | `target` |

use std::time::Duration;

/// Records a worker finished with, by outcome.
pub const WORKER_RECORDS: &str = "agdx_worker_records_total";
/// Retries of retryable handler failures.
pub const WORKER_RETRIES: &str = "agdx_worker_retries_total";
/// How long handlers ran.
pub const WORKER_HANDLER_SECONDS: &str = "agdx_worker_handler_seconds";
/// Records after the committed offset, per partition.
pub const WORKER_COMMIT_LAG: &str = "agdx_worker_commit_lag";
/// Tokens replies reported spending, by direction.
pub const WORKER_TOKENS: &str = "agdx_worker_tokens_total";
/// What replies reported costing (the [`COST_KEY`] metadata), summed.
pub const WORKER_COST: &str = "agdx_worker_cost";
/// The metadata key a reply names its cost with (a number, in whatever
/// unit the deployment counts in).
pub const COST_KEY: &str = "cost";
/// Send to first terminal reply.
pub const ASK_REPLY_SECONDS: &str = "agdx_ask_reply_seconds";
/// Asks that timed out.
pub const ASK_TIMEOUTS: &str = "agdx_ask_timeouts_total";

/// The `operation` label of a command a fallback handler took. Its
/// operation is whatever the sender wrote, so naming it would let any
/// sender add series without bound; the label names only the operations
/// registered with [`Worker::handle`](crate::worker::Worker::handle), and
/// this one stands for all the others.
pub const OTHER_OPERATION: &str = "other";

/// Why [`serve_prometheus`] could not start.
#[cfg(feature = "metrics")]
#[derive(Debug, thiserror::Error)]
#[error("cannot serve metrics on {addr}: {source}")]
pub struct ServeError {
    /// The address asked for.
    pub addr: std::net::SocketAddr,
    /// What the exporter said: the address is taken, or a recorder is
    /// installed already.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

/// Installs the Prometheus exporter as the process's recorder and serves
/// every metric above in the Prometheus text format on `addr`
/// (`GET /metrics`). Called within a Tokio runtime, the listener is one of
/// its tasks; elsewhere it runs on a thread of its own.
#[cfg(feature = "metrics")]
pub fn serve_prometheus(addr: std::net::SocketAddr) -> Result<(), ServeError> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .map_err(|e| ServeError {
            addr,
            source: Box::new(e),
        })
}

/// The per-record metrics of one worker pool, registered with the
/// recorder once, as the pool starts: counting a record and timing its
/// handler then build no metric key (each an allocation or several). A
/// recorder installed after a pool started does not see that pool.
pub(crate) struct PoolMetrics {
    /// By `outcome` label.
    records: Vec<(&'static str, metrics::Counter)>,
    retries: metrics::Counter,
    /// By `operation` label: each registered operation and
    /// [`OTHER_OPERATION`].
    handler_seconds: std::collections::HashMap<String, metrics::Histogram>,
}

impl PoolMetrics {
    /// The metrics of `agent`'s pool, whose records end in `outcomes` and
    /// whose handlers take `operations`.
    pub(crate) fn new<'a>(
        agent: &str,
        outcomes: impl IntoIterator<Item = &'static str>,
        operations: impl IntoIterator<Item = &'a str>,
    ) -> Self {
        let histogram = |operation: &str| {
            metrics::histogram!(
                WORKER_HANDLER_SECONDS,
                "agent" => agent.to_owned(),
                "operation" => operation.to_owned()
            )
        };
        let handler_seconds = operations
            .into_iter()
            .chain([OTHER_OPERATION])
            .map(|operation| (operation.to_owned(), histogram(operation)))
            .collect();
        Self {
            records: outcomes
                .into_iter()
                .map(|outcome| {
                    let counter = metrics::counter!(WORKER_RECORDS, "agent" => agent.to_owned(), "outcome" => outcome);
                    (outcome, counter)
                })
                .collect(),
            retries: metrics::counter!(WORKER_RETRIES, "agent" => agent.to_owned()),
            handler_seconds,
        }
    }

    /// Counts a record finished with `outcome`, one of those the pool
    /// was made with.
    pub(crate) fn record_outcome(&self, outcome: &str) {
        if let Some((_, counter)) = self.records.iter().find(|(o, _)| *o == outcome) {
            counter.increment(1);
        }
    }

    pub(crate) fn retry(&self) {
        self.retries.increment(1);
    }

    /// `operation`: a registered operation or [`OTHER_OPERATION`].
    pub(crate) fn handler_time(&self, operation: &str, took: Duration) {
        if let Some(histogram) = self.handler_seconds.get(operation) {
            histogram.record(took.as_secs_f64());
        }
    }
}

/// Counts the usage and cost `reply` reports, when it is a response or a
/// stream's final chunk that names them.
pub(crate) fn reply_usage(agent: &str, operation: &str, reply: &agdx_wire::AgentEnvelope) {
    let answers = reply.kind == agdx_wire::Kind::Response
        || (reply.kind == agdx_wire::Kind::Chunk && reply.last);
    if !answers {
        return;
    }
    if let Some(usage) = &reply.usage {
        for (direction, tokens) in [
            ("input", usage.input_tokens),
            ("output", usage.output_tokens),
        ] {
            metrics::counter!(WORKER_TOKENS, "agent" => agent.to_owned(), "operation" => operation.to_owned(), "direction" => direction)
                .increment(tokens);
        }
    }
    let cost = reply
        .metadata
        .as_ref()
        .and_then(|m| m.get(COST_KEY))
        .and_then(scalar_number);
    if let Some(cost) = cost {
        metrics::gauge!(WORKER_COST, "agent" => agent.to_owned(), "operation" => operation.to_owned())
            .increment(cost);
    }
}

/// A metadata value as a number, when it is one.
fn scalar_number(value: &agdx_wire::Scalar) -> Option<f64> {
    match value {
        agdx_wire::Scalar::Float(f) => Some(f.value()),
        agdx_wire::Scalar::Int(n) => n
            .as_u64()
            .map(|n| n as f64)
            .or_else(|| n.as_i64().map(|n| n as f64)),
        _ => None,
    }
}

pub(crate) fn commit_lag(agent: &str, topic: &str, partition: u32, lag: u64) {
    metrics::gauge!(WORKER_COMMIT_LAG, "agent" => agent.to_owned(), "partition" => partition.to_string(), "topic" => topic.to_owned())
        .set(lag as f64);
}

pub(crate) fn reply_time(target: &str, took: Duration) {
    metrics::histogram!(ASK_REPLY_SECONDS, "target" => target.to_owned())
        .record(took.as_secs_f64());
}

pub(crate) fn ask_timeout(target: &str) {
    metrics::counter!(ASK_TIMEOUTS, "target" => target.to_owned()).increment(1);
}
