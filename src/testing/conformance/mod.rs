//! The log conformance suite: what every [`Log`](crate::log::Log) does, as
//! checks that run against any implementation.
//!
//! The crate's own backends (embedded, Iggy, Kafka) pass it, and so does
//! [`MemoryLog`](super::MemoryLog); a log of your own runs it the same way.
//! Each check panics, as a failed assertion does, saying what the log did
//! wrong, so it reads as a test failure.
//!
//! ```
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() {
//! use std::sync::Arc;
//! use agdx::testing::MemoryLog;
//! use agdx::testing::conformance::{Opened, Subject, run_all};
//!
//! // Your log here; reopening gives a new handle on the same storage.
//! let log = MemoryLog::new();
//! run_all(|check| {
//!     let log = log.clone();
//!     let again = log.clone();
//!     Subject::new(
//!         Arc::new(log),
//!         Arc::new(move || {
//!             let again = again.clone();
//!             Box::pin(async move { Opened::new(Arc::new(again), ()) })
//!         }),
//!         check,
//!     )
//! })
//! .await;
//! # }
//! ```

use std::any::Any;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::log::SharedLog;

mod checks;
mod listing;

pub use checks::*;
pub use listing::*;

/// A log opened anew on the same storage as the one under test (a new
/// client of the same server, the same directory opened again), with
/// whatever must live as long as it does.
pub struct Opened {
    /// The log.
    pub log: SharedLog,
    _keep: Box<dyn Any + Send>,
}

impl Opened {
    /// `log`, keeping `keep` (a server process, a temporary directory)
    /// alive as long as it is.
    pub fn new(log: SharedLog, keep: impl Any + Send) -> Self {
        Opened {
            log,
            _keep: Box::new(keep),
        }
    }
}

/// Opens the storage of the log under test again, as a restarted process
/// would.
pub type Reopen = Arc<dyn Fn() -> Pin<Box<dyn Future<Output = Opened> + Send>> + Send + Sync>;

/// What a check runs against: the log, a way to open its storage again,
/// and a stream name no other check uses.
pub struct Subject {
    /// The log under test.
    pub log: SharedLog,
    /// Opens its storage again.
    pub reopen: Reopen,
    /// The stream the check creates its topics in.
    pub stream: String,
}

impl Subject {
    /// `log` and `reopen` for `check`, with a stream name of its own
    /// (`t-<check>-<ulid>`), so checks against one server never collide.
    pub fn new(log: SharedLog, reopen: Reopen, check: Check) -> Self {
        Subject {
            log,
            reopen,
            stream: format!(
                "t-{}-{}",
                check.name(),
                ulid::Ulid::new().to_string().to_lowercase()
            ),
        }
    }
}

/// One check of the suite.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Check {
    /// [`append_and_poll_keep_order`].
    Order,
    /// [`typed_headers_round_trip`].
    Headers,
    /// [`records_keyed_by_conversation_land_in_its_partition`].
    Keys,
    /// [`group_members_split_partitions_and_survivors_take_over`].
    Group,
    /// [`leaving_a_group_hands_partitions_over_at_once`].
    Leave,
    /// [`offsets_and_records_persist_across_restart`].
    Restart,
    /// [`a_waiting_poll_wakes_on_append`].
    Wake,
    /// [`a_poll_keeps_to_the_byte_budget`].
    Budget,
    /// [`bad_requests_give_typed_errors`].
    Errors,
    /// [`append_and_commit_is_all_or_nothing`].
    AppendAndCommit,
    /// [`listing_a_stream_names_each_of_its_topics`].
    Topics,
}

impl Check {
    /// Every check, in the order [`run_all`] runs them.
    pub const ALL: [Check; 11] = [
        Check::Order,
        Check::Headers,
        Check::Keys,
        Check::Group,
        Check::Leave,
        Check::Restart,
        Check::Wake,
        Check::Budget,
        Check::Errors,
        Check::AppendAndCommit,
        Check::Topics,
    ];

    /// A short name, used in stream names and failure messages.
    pub fn name(self) -> &'static str {
        match self {
            Check::Order => "order",
            Check::Headers => "headers",
            Check::Keys => "keys",
            Check::Group => "group",
            Check::Leave => "leave",
            Check::Restart => "restart",
            Check::Wake => "wake",
            Check::Budget => "budget",
            Check::Errors => "errors",
            Check::AppendAndCommit => "append-and-commit",
            Check::Topics => "topics",
        }
    }

    /// Runs the check against `subject`; panics when the log fails it.
    pub async fn run(self, subject: Subject) {
        match self {
            Check::Order => append_and_poll_keep_order(subject).await,
            Check::Headers => typed_headers_round_trip(subject).await,
            Check::Keys => records_keyed_by_conversation_land_in_its_partition(subject).await,
            Check::Group => group_members_split_partitions_and_survivors_take_over(subject).await,
            Check::Leave => leaving_a_group_hands_partitions_over_at_once(subject).await,
            Check::Restart => offsets_and_records_persist_across_restart(subject).await,
            Check::Wake => a_waiting_poll_wakes_on_append(subject).await,
            Check::Budget => a_poll_keeps_to_the_byte_budget(subject).await,
            Check::Errors => bad_requests_give_typed_errors(subject).await,
            Check::AppendAndCommit => append_and_commit_is_all_or_nothing(subject).await,
            Check::Topics => listing_a_stream_names_each_of_its_topics(subject).await,
        }
    }
}

/// Runs every check, each against the subject `subject` gives for it and in
/// a task of its own; panics naming the first check the log fails and why.
/// Needs a multi-threaded Tokio runtime.
pub async fn run_all(mut subject: impl FnMut(Check) -> Subject) {
    for check in Check::ALL {
        let running = tokio::spawn(check.run(subject(check)));
        if let Err(failed) = running.await {
            let why = match failed.try_into_panic() {
                Ok(panic) => crate::worker::panic_message(panic.as_ref()),
                Err(error) => error.to_string(),
            };
            panic!("the log fails conformance check '{}': {why}", check.name());
        }
    }
}
