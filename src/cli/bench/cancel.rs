//! The cancel bench: how long after an ask gives up its handler is told to
//! stop, and what task states cost an ask that asks for them.
//!
//! In a fresh stream, one in-process pool serves two operations: `sleep`
//! waits until its request is cancelled and notes when it was told, `echo`
//! answers at once. **Stop latency**: each round sends `sleep`, waits out a
//! timeout on its watch as an ask does, then cancels it as a giving-up ask
//! does; the figure is from the timeout to the handler seeing
//! `Request::cancelled`. Its baseline is a plain round trip of `echo`
//! measured in the same run (a cancel is one record the worker reads, as
//! a command is). **Task states**: asks of `echo` with task states and
//! without take turns, one in flight; the ratio of their percentiles.

use std::fmt;
use std::time::{Duration, Instant};

use agdx::log::SharedLog;
use agdx::wire::AgentId;
use agdx::worker::{EchoHandler, HandlerReply, Worker, WorkerConfig, handler_fn};
use agdx::{AskError, CommandRequest, Producer, Requester, TopologyConfig};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{BenchError, ms, percentile};

/// What to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelBenchOptions {
    /// Asks cancelled after their timeout.
    pub cancels: u64,
    /// How long each of them waits before it gives up.
    pub timeout: Duration,
    /// Asks of each kind (with and without task states).
    pub asks: u64,
}

/// How long the bench waits for a handler to be told, or for an answer.
const PATIENCE: Duration = Duration::from_secs(30);

/// The figures of one run.
#[derive(Debug, Clone)]
pub struct CancelFigures {
    /// The log measured.
    pub log: String,
    /// From each ask's timeout to its handler being told, sorted.
    pub stop: Vec<Duration>,
    /// Plain round trips of the echo operation, sorted.
    pub round_trip: Vec<Duration>,
    /// Asks with task states, sorted.
    pub with_states: Vec<Duration>,
    /// Asks without, sorted.
    pub without_states: Vec<Duration>,
}

impl fmt::Display for CancelFigures {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let row = |f: &mut fmt::Formatter<'_>, what: &str, of: &[Duration]| {
            writeln!(
                f,
                "  {what:<34} p50 {:>8.2} ms   p99 {:>8.2} ms   ({} samples)",
                ms(percentile(of, 0.5)),
                ms(percentile(of, 0.99)),
                of.len()
            )
        };
        writeln!(f, "cancel bench on {}", self.log)?;
        row(f, "ask timeout → handler told", &self.stop)?;
        row(f, "baseline: echo round trip", &self.round_trip)?;
        row(f, "ask with task states", &self.with_states)?;
        row(f, "ask without task states", &self.without_states)?;
        let ratio = |a: &[Duration], b: &[Duration], at: f64| {
            percentile(a, at).as_secs_f64() / percentile(b, at).as_secs_f64().max(1e-9)
        };
        writeln!(
            f,
            "  stop/round trip: p50 {:.2}×, p99 {:.2}×",
            ratio(&self.stop, &self.round_trip, 0.5),
            ratio(&self.stop, &self.round_trip, 0.99)
        )?;
        write!(
            f,
            "  with/without task states: p50 {:.2}×, p99 {:.2}×",
            ratio(&self.with_states, &self.without_states, 0.5),
            ratio(&self.with_states, &self.without_states, 0.99)
        )
    }
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("bench agent names are valid")
}

/// Runs the bench on `log`.
pub async fn run_cancel_bench(
    log: SharedLog,
    options: CancelBenchOptions,
) -> Result<CancelFigures, BenchError> {
    if options.cancels == 0 || options.asks == 0 {
        return Err(BenchError::Options(
            "--cancels and --asks must be at least 1".into(),
        ));
    }
    let topology = TopologyConfig::new(super::fresh_stream("cancel"))
        .ensure(log.as_ref())
        .await?;
    let (told, mut told_at) = mpsc::unbounded_channel::<Instant>();
    let sleeper = handler_fn(move |request| {
        let told = told.clone();
        async move {
            tokio::select! {
                () = request.cancelled() => {
                    let at = Instant::now();
                    let _ = told.send(at);
                }
                () = tokio::time::sleep(PATIENCE) => {}
            }
            Ok(HandlerReply::raw("stopped"))
        }
    });
    let worker = Worker::new(
        Producer::new(log.clone(), topology.clone(), agent("bench-worker")),
        WorkerConfig::default(),
    )
    .handle("sleep", sleeper)
    .fallback(EchoHandler);
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(worker.run(shutdown.clone()));
    let requester = Requester::new(Producer::new(
        log.clone(),
        topology.clone(),
        agent("bench-asker"),
    ));
    let ask = |operation: &str, states: bool| {
        let request = CommandRequest::new(operation, b"bench".to_vec()).to(agent("bench-worker"));
        if states {
            request.task_states()
        } else {
            request
        }
    };
    let timed_ask = |states: bool| {
        let requester = &requester;
        async move {
            let started = Instant::now();
            requester
                .ask(ask("echo", states), PATIENCE)
                .await
                .map_err(|e| BenchError::Ask(Box::new(e)))?;
            Ok::<_, BenchError>(started.elapsed())
        }
    };
    let figures = async {
        // Warm up: the pool has joined and the reply reader runs.
        timed_ask(false).await?;
        let (mut stop, mut round_trip) = (Vec::new(), Vec::new());
        for _ in 0..options.cancels {
            let mut watch = requester
                .send(ask("sleep", false))
                .await
                .map_err(|e| BenchError::Ask(Box::new(e)))?;
            match watch.next(options.timeout).await {
                Err(AskError::Timeout { .. }) => {}
                other => {
                    return Err(BenchError::Options(format!(
                        "the sleeping handler answered before the timeout: {other:?}"
                    )));
                }
            }
            let gave_up = Instant::now();
            watch
                .cancel()
                .await
                .map_err(|e| BenchError::Ask(Box::new(e)))?;
            let at = tokio::time::timeout(PATIENCE, told_at.recv())
                .await
                .ok()
                .flatten()
                .ok_or_else(|| BenchError::Options("a cancelled handler was never told".into()))?;
            stop.push(at.saturating_duration_since(gave_up));
            round_trip.push(timed_ask(false).await?);
        }
        let (mut with_states, mut without_states) = (Vec::new(), Vec::new());
        for _ in 0..options.asks {
            with_states.push(timed_ask(true).await?);
            without_states.push(timed_ask(false).await?);
        }
        for sorted in [
            &mut stop,
            &mut round_trip,
            &mut with_states,
            &mut without_states,
        ] {
            sorted.sort();
        }
        Ok(CancelFigures {
            log: log.describe(),
            stop,
            round_trip,
            with_states,
            without_states,
        })
    }
    .await;
    shutdown.cancel();
    let stopped = running.await;
    requester.close().await;
    let figures = figures?;
    match stopped {
        Ok(result) => result?,
        Err(join) => {
            return Err(BenchError::Options(format!(
                "the bench worker failed: {join}"
            )));
        }
    }
    Ok(figures)
}
