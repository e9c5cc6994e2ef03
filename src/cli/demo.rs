//! `agdx demo`: the whole runtime in one command, on a throwaway log.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use clap::Args;
use tokio_util::sync::CancellationToken;

use agdx::cards::LiveAgents;
use agdx::log::{LogSpec, SharedLog};
use agdx::replay::{Direction, GraphStart, NodeKey, Replay, causal_graph, dead_letters};
use agdx::wire::{AgentId, ConversationId, IdempotencyKey, StreamPurpose};
use agdx::worker::{
    EchoHandler, Handler, HandlerError, HandlerReply, Worker, WorkerConfig, handler_fn,
};
use agdx::{
    Answer, AskError, Clock, CommandRequest, Producer, ReplyEvent, Requester, RetryPolicy,
    SystemClock, Topology, TopologyConfig,
};

use super::context::{Failure, Global};
use super::view::{Timeline, graph_text};

/// Runs a small worker pool in this process on a fresh embedded log in a
/// temporary directory and shows what happens: an echo agent, an agent
/// that streams its answer, a planner whose sub-commands form a causal
/// tree, a failing agent whose command is dead-lettered, and a keyed
/// command sent twice (handled once). Then the conversation's timeline,
/// its causal graph, the dead letter and the live agent cards. Nothing is
/// left behind unless --keep, or unless --log is given on the command line
/// (`AGDX_LOG` is not used): then the demo runs in a stream of its own
/// there, and its records stay.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Keep the log in DIR (an embedded log) to look at it afterwards with
    /// `agdx --log embedded:DIR timeline ...`.
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
}

/// How long the demo waits for any one answer.
const ANSWER: Duration = Duration::from_secs(20);

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("the demo's agent names are valid")
}

pub async fn run(global: &Global, args: DemoArgs) -> Result<(), Failure> {
    let started = Instant::now();
    // A --log given on this command line is used as it is, in a stream of
    // the demo's own; otherwise a fresh embedded log, whatever AGDX_LOG
    // says (a demo writes into no log it was not pointed at here).
    let temp = tempfile::tempdir()?;
    let (spec, stream) = match (&args.keep, global.log_given) {
        (Some(dir), _) => (LogSpec::Embedded(dir.clone()), global.stream.clone()),
        (None, true) => (
            global.spec()?,
            format!("demo-{}", ulid::Ulid::new().to_string().to_lowercase()),
        ),
        (None, false) => (
            LogSpec::Embedded(temp.path().join("log")),
            global.stream.clone(),
        ),
    };
    let log = spec.open().await?;
    let topology = TopologyConfig::new(&stream).open(log.as_ref()).await?;
    println!("agdx demo on {} (stream '{stream}')\n", log.describe());

    let pool = Pool::start(&log, &topology, temp.path().join("state"));
    let shown = show(&log, &topology).await;
    pool.stop().await;
    let conversation = shown?;
    match &args.keep {
        Some(dir) => println!(
            "\nkept the log in {}: agdx --log embedded:{} timeline {conversation}",
            dir.display(),
            dir.display()
        ),
        None if global.log_given => println!(
            "\ndone in {:.1} s; its records stay on {} in stream '{stream}'",
            started.elapsed().as_secs_f64(),
            log.describe()
        ),
        None => println!(
            "\ndone in {:.1} s; nothing left behind (--keep DIR keeps the log)",
            started.elapsed().as_secs_f64()
        ),
    }
    Ok(())
}

/// The demo's workers, running in this process.
struct Pool {
    shutdown: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<Result<(), agdx::worker::WorkerError>>>,
}

impl Pool {
    fn start(log: &SharedLog, topology: &Topology, state: PathBuf) -> Self {
        let shutdown = CancellationToken::new();
        let producer = |name: &str| Producer::new(log.clone(), topology.clone(), agent(name));
        let config = WorkerConfig {
            retry: RetryPolicy {
                max_attempts: 2,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(50),
            },
            state_dir: Some(state),
            rebalance_every: Duration::from_millis(50),
            ..WorkerConfig::default()
        };
        let charges = Arc::new(AtomicU32::new(0));
        let planner = Arc::new(Requester::new(producer("planner")));
        let workers = vec![
            Worker::new(producer("echo"), config.clone()).handle("hello", EchoHandler),
            Worker::new(producer("story"), config.clone()).handle("tell", storyteller()),
            Worker::new(producer("planner"), config.clone()).handle("plan", plan(planner)),
            Worker::new(producer("ledger"), config.clone()).handle(
                "post",
                handler_fn(|_| async {
                    Err(HandlerError::fatal("the ledger is closed for the night"))
                }),
            ),
            Worker::new(producer("payments"), config).handle("charge", charge(charges)),
        ];
        let tasks = workers
            .into_iter()
            .map(|w| tokio::spawn(w.run(shutdown.clone())))
            .collect();
        Pool { shutdown, tasks }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        for task in self.tasks {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(error)) => eprintln!("agdx demo: a worker stopped with an error: {error}"),
                Err(error) => eprintln!("agdx demo: a worker failed: {error}"),
            }
        }
    }
}

/// Streams a story in four chunks.
fn storyteller() -> impl Handler {
    handler_fn(|request| async move {
        let failed = |e: agdx::ProduceError| HandlerError::retryable(e.to_string());
        let mut writer = request
            .stream(StreamPurpose::Chat, None)
            .ok_or_else(|| HandlerError::fatal("a story needs a command to answer"))?;
        for word in ["Once ", "upon ", "a "] {
            writer
                .send(word.as_bytes().to_vec())
                .await
                .map_err(failed)?;
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        writer
            .finish(b"time.".to_vec(), Some("stop"), None)
            .await
            .map_err(failed)?;
        Ok(HandlerReply::Streamed)
    })
}

/// Asks echo and the storyteller (commands caused by the plan), then answers.
fn plan(requester: Arc<Requester>) -> impl Handler {
    handler_fn(move |request| {
        let requester = requester.clone();
        async move {
            let cause = request
                .envelope
                .record
                .ok_or_else(|| HandlerError::fatal("no record id"))?;
            let step = |operation: &str, to: &str, body: &[u8]| {
                CommandRequest::new(operation, body.to_vec())
                    .to(agent(to))
                    .conversation(request.envelope.conversation)
                    .caused_by(cause, Some(request.position))
            };
            let failed = |e: AskError| HandlerError::retryable(e.to_string());
            requester
                .ask(step("hello", "echo", b"book the train"), ANSWER)
                .await
                .map_err(failed)?;
            requester
                .ask(step("tell", "story", b"a bedtime story"), ANSWER)
                .await
                .map_err(failed)?;
            Ok(HandlerReply::raw("plan ready: train booked, story told"))
        }
    })
}

/// Charges once per idempotency key; says which run it was.
fn charge(runs: Arc<AtomicU32>) -> impl Handler {
    handler_fn(move |request| {
        let run = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move {
            let body = String::from_utf8_lossy(&request.body).into_owned();
            Ok(HandlerReply::raw(format!(
                "charged {body} (handler run #{run})"
            )))
        }
    })
}

/// Asks, prints, and shows the log; returns the conversation.
async fn show(log: &SharedLog, topology: &Topology) -> Result<ConversationId, Failure> {
    let conversation = agdx::new_conversation_id();
    let me = Requester::new(Producer::new(log.clone(), topology.clone(), agent("demo")));
    wait_for_cards(log, topology, 5).await?;
    let ask = |to: &str, operation: &str, body: &str| {
        CommandRequest::new(operation, body.as_bytes().to_vec())
            .to(agent(to))
            .conversation(conversation)
    };

    println!("1. demo → echo hello \"hi\"");
    let reply = me.ask(ask("echo", "hello", "hi"), ANSWER).await?;
    println!("   ← {}", answer_text(&reply));

    println!("2. demo → story tell (the answer streams in chunks)");
    let mut watch = me.ask_stream(ask("story", "tell", "a story")).await?;
    print!("   ←");
    loop {
        match watch.next(ANSWER).await? {
            ReplyEvent::Chunk { body, .. } => {
                print!(" [{}]", String::from_utf8_lossy(&body));
                use std::io::Write as _;
                std::io::stdout().flush()?;
            }
            event if event.is_terminal() => break,
            _ => {}
        }
    }
    println!();

    println!("3. demo → planner plan \"a trip\" (the planner asks echo and story on its behalf)");
    let plan = me.send(ask("planner", "plan", "a trip")).await?;
    let plan_record = plan.sent().record;
    let mut plan = plan;
    loop {
        match plan.next(ANSWER).await? {
            ReplyEvent::Response(reply) => {
                println!("   ← {}", String::from_utf8_lossy(&reply.body));
                break;
            }
            event if event.is_terminal() => {
                println!("   ← {event:?}");
                break;
            }
            _ => {}
        }
    }

    println!("4. demo → ledger post \"invoice 7\" (its handler fails)");
    match me.ask(ask("ledger", "post", "invoice 7"), ANSWER).await {
        Err(AskError::Remote(error)) => println!(
            "   ← error {}: {} — the command is dead-lettered, verbatim",
            error.code.name(),
            error.message.as_deref().unwrap_or("")
        ),
        other => println!("   ← {other:?}"),
    }

    println!("5. demo → payments charge \"42 EUR\", twice with idempotency key order-42");
    let key = IdempotencyKey::new("order-42").expect("a valid key");
    for attempt in ["first", "again"] {
        let reply = me
            .ask(
                ask("payments", "charge", "42 EUR").idempotency_key(key.clone()),
                ANSWER,
            )
            .await?;
        println!("   ← ({attempt}) {}", answer_text(&reply));
    }
    println!("   the handler ran once; the second answer is the stored reply");

    let dead = wait_for_dead_letter(log, topology).await?;
    let mut records = Replay::new(log.clone(), topology, conversation)
        .read_to_end()
        .await?;
    records.retain(|r| r.topic != topology.registry.topic);
    println!(
        "\n── timeline of conversation {conversation} ({} records) ──",
        records.len()
    );
    let mut timeline = Timeline::default();
    for record in &records {
        for line in timeline.push(record) {
            println!("{line}");
        }
    }
    for line in timeline.finish(SystemClock.now_micros()) {
        println!("{line}");
    }

    if let Some(record) = plan_record {
        println!("\n── causal graph below the plan command (agdx graph {record} --down) ──");
        let start = GraphStart {
            node: NodeKey::Record(record),
            conversation: Some(conversation),
        };
        let graph = causal_graph(log, topology, start, Direction::Down).await?;
        print!("{}", graph_text(&graph));
    }

    println!("\n── dead letter (agdx dlq list / show) ──");
    println!(
        "{}/{}  {}  after {} attempt(s): {}",
        dead.position.partition,
        dead.position.offset,
        dead.capsule.reason.name(),
        dead.capsule.attempts,
        dead.capsule.detail.as_deref().unwrap_or("")
    );
    println!(
        "   original: {} bytes, kept verbatim; `agdx dlq redrive {}/{}` appends them again",
        dead.capsule.payload.len(),
        dead.position.partition,
        dead.position.offset
    );

    println!("\n── live agents (agdx agents) ──");
    let mut agents = LiveAgents::resume(log, topology).await;
    agents.catch_up(log, &topology.registry).await?;
    let now = SystemClock.now_micros();
    print!("{}", super::agents::table(&agents.live(now), now));
    Ok(conversation)
}

fn answer_text(answer: &Answer) -> String {
    match answer {
        Answer::Response(reply) => String::from_utf8_lossy(&reply.body).into_owned(),
        Answer::Streamed { body, .. } => String::from_utf8_lossy(body).into_owned(),
    }
}

/// Waits until `count` agents have live cards: their workers have joined.
async fn wait_for_cards(log: &SharedLog, topology: &Topology, count: usize) -> Result<(), Failure> {
    let deadline = Instant::now() + ANSWER;
    let mut agents = LiveAgents::resume(log, topology).await;
    loop {
        agents.catch_up(log, &topology.registry).await?;
        if agents.live(SystemClock.now_micros()).len() >= count {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Failure::new("the demo's workers did not start in time"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_for_dead_letter(
    log: &SharedLog,
    topology: &Topology,
) -> Result<agdx::replay::DeadLetterEntry, Failure> {
    let deadline = Instant::now() + ANSWER;
    loop {
        if let Some(entry) = dead_letters(log, topology).await?.pop() {
            return Ok(entry);
        }
        if Instant::now() > deadline {
            return Err(Failure::new("the dead letter did not appear in time"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
