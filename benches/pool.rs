//! What a worker pool's own code costs a command, with no log server and
//! no disk: an echo pool of one member answers commands already on the
//! in-memory log, whose replies are dropped as they are published (so
//! memory stays flat and nothing but the pool is measured); it prints the
//! process's CPU time a command and commands/s, round by round.
//!
//! `cargo bench --bench pool -- [COMMANDS] [ROUNDS]` (100,000 and 5 by
//! default). On a shared machine the CPU time moves by a third from run to
//! run; the instructions the pool's partition tasks execute move by about
//! 1%, so builds are best compared by counting them, with the executable
//! `cargo bench --bench pool --no-run` names:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*partition_loop*' \
//!     target/release/deps/pool-<hash> 20000 1
//! ```

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use agdx::log::{Append, Log, LogDecorator, LogError, OffsetCommit, SharedLog};
use agdx::testing::MemoryLog;
use agdx::wire::AgentId;
use agdx::worker::{EchoHandler, Worker, WorkerConfig};
use agdx::{CommandRequest, Producer, TopologyConfig, new_conversation_id};
use tokio_util::sync::CancellationToken;

// The allocator the `agdx` command line runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PARTITIONS: u32 = 8;
const BODY_BYTES: usize = 1024;

/// The in-memory log, except that a flush's replies are dropped: only its
/// offset commit is kept.
struct DroppingReplies {
    inner: SharedLog,
}

#[async_trait::async_trait]
impl LogDecorator for DroppingReplies {
    fn inner(&self) -> &dyn Log {
        self.inner.as_ref()
    }

    async fn append_and_commit(
        &self,
        appends: Vec<Append>,
        commit: OffsetCommit,
    ) -> Result<(), LogError> {
        drop(std::hint::black_box(appends));
        self.inner
            .store_offset(
                &commit.topic,
                &commit.group,
                commit.partition,
                commit.offset,
            )
            .await
    }
}

/// User and system CPU time of this process so far.
fn cpu_time() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let time = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec.max(0) as u64) + Duration::from_micros(t.tv_usec.max(0) as u64)
    };
    time(usage.ru_utime) + time(usage.ru_stime)
}

fn agent(name: &str) -> AgentId {
    AgentId::new(name).expect("a valid agent id")
}

async fn round(round: usize, commands: u64) {
    let log: SharedLog = Arc::new(DroppingReplies {
        inner: Arc::new(MemoryLog::new()),
    });
    let topology = TopologyConfig::new(format!("bench-pool-{round}"))
        .with_partitions(PARTITIONS)
        .ensure(log.as_ref())
        .await
        .expect("topics on the in-memory log");
    let asker = Producer::new(log.clone(), topology.clone(), agent("bench-asker"));
    let mut left = commands;
    while left > 0 {
        let n = left.min(500);
        let requests = (0..n)
            .map(|_| {
                CommandRequest::new("echo", vec![b'x'; BODY_BYTES])
                    .to(agent("bench-echo"))
                    .conversation(new_conversation_id())
            })
            .collect();
        let batch = asker.prepare_commands(requests).await.expect("commands");
        asker.publish_prepared(batch).await.expect("published");
        left -= n;
    }
    let producer = Producer::new(log.clone(), topology, agent("bench-echo"));
    let config = WorkerConfig {
        concurrency: PARTITIONS as usize,
        ..WorkerConfig::default()
    };
    let worker = Worker::new(producer, config).fallback(EchoHandler);
    let stats = worker.stats();
    let shutdown = CancellationToken::new();
    let (started, cpu) = (Instant::now(), cpu_time());
    let pool = tokio::spawn(worker.run(shutdown.clone()));
    while stats.committed_records.load(Ordering::Relaxed) < commands {
        assert!(!pool.is_finished(), "the pool stopped early");
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    let (wall, spent) = (started.elapsed(), cpu_time().saturating_sub(cpu));
    shutdown.cancel();
    pool.await
        .expect("the pool's task")
        .expect("the pool's result");
    println!(
        "round {round}: {:.2} µs CPU a command, {:.0} commands/s",
        spent.as_secs_f64() * 1e6 / commands as f64,
        commands as f64 / wall.as_secs_f64()
    );
}

fn main() {
    // `cargo bench` passes `--bench`; the numbers are what is left.
    let mut numbers = std::env::args()
        .skip(1)
        .filter_map(|arg| arg.parse::<u64>().ok());
    let commands = numbers.next().unwrap_or(100_000).max(1);
    let rounds = numbers.next().unwrap_or(5);
    let runtime = tokio::runtime::Runtime::new().expect("a Tokio runtime");
    runtime.block_on(async {
        for n in 0..rounds as usize {
            round(n, commands).await;
        }
    });
}
