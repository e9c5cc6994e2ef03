//! What the command line adds to the library's errors: the flag,
//! environment variable or subcommand that helps. The library says what
//! went wrong in its own terms; only the command line knows its flags.

use std::error::Error;
use std::time::Duration;

use agdx::bridge::axon::{AxonIdError, ExposeError};
use agdx::log::LogError;
use agdx::replay::ReplayError;
use agdx::trust::{KeyFileError, RegistryError};
use agdx::worker::WorkerError;
use agdx::{AskError, BlobError, ClaimCheckError, ProduceError, StoreError};

/// `error`'s message, followed by the command line's advice when it has
/// some for an error in its chain.
pub fn explain(error: &(dyn Error + 'static)) -> String {
    match advice(error) {
        Some(advice) => format!("{error}; {advice}"),
        None => error.to_string(),
    }
}

/// The advice for the first error of `error`'s chain that has some.
fn advice(error: &(dyn Error + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(error) = next {
        if let Some(advice) = known(error) {
            return Some(advice);
        }
        next = error.source();
    }
    None
}

/// The advice for `error` itself, looking through the wrappers that show
/// the error they wrap as their own (`#[error(transparent)]`).
fn known(error: &(dyn Error + 'static)) -> Option<String> {
    if let Some(error) = error.downcast_ref::<LogError>() {
        return log(error);
    }
    if let Some(error) = error.downcast_ref::<ProduceError>() {
        return produce(error);
    }
    if let Some(error) = error.downcast_ref::<WorkerError>() {
        return match error {
            WorkerError::Log(error) => log(error),
            WorkerError::Store(error) => store(error),
            WorkerError::GrantsWithoutVerifier => Some("that is --verify".to_owned()),
        };
    }
    if let Some(error) = error.downcast_ref::<ReplayError>() {
        return match error {
            ReplayError::Log(error) => log(error),
            ReplayError::Produce(error) => produce(error),
            ReplayError::ForeignPosition { .. } => Some("that is --stream NAME".to_owned()),
            _ => None,
        };
    }
    if let Some(AskError::Produce(error)) = error.downcast_ref::<AskError>() {
        return produce(error);
    }
    if let Some(error) = error.downcast_ref::<ClaimCheckError>() {
        return claim_check(error);
    }
    if let Some(error) = error.downcast_ref::<StoreError>() {
        return store(error);
    }
    if let Some(error) = error.downcast_ref::<KeyFileError>() {
        return match error {
            KeyFileError::Malformed { .. } => Some("`agdx keys generate` writes one".to_owned()),
            KeyFileError::Exists { .. } => Some("choose another --out".to_owned()),
            _ => None,
        };
    }
    if error.is::<AxonIdError>()
        || matches!(
            error.downcast_ref::<ExposeError>(),
            Some(ExposeError::Peer(_))
        )
    {
        return Some(
            "`axon identity --json` shows an AXON daemon's id; `agdx bridge axon` prints its own when it starts"
                .to_owned(),
        );
    }
    if let Some(error) = error.downcast_ref::<RegistryError>() {
        return match error {
            RegistryError::Format { .. } => Some("`agdx keys generate` writes one".to_owned()),
            RegistryError::UnknownKey(_) => {
                Some("`agdx keys list` shows the enrolled keys".to_owned())
            }
            _ => None,
        };
    }
    None
}

/// What `agdx bridge axon` says when it starts about the `timeout` replies
/// its peers get (they hear only what happened).
pub fn axon_timeouts(timeout: Duration) -> String {
    format!(
        "a request no worker answers within --timeout ({}) gets a `timeout` reply: run `agdx worker --agent AGENT` for each agent the requests go to",
        humantime::format_duration(timeout)
    )
}

/// What `agdx bridge ax-ipc` says when it starts about the calls no route
/// takes (the caller hears only that no route matches).
pub const AX_IPC_UNROUTED: &str = "a call whose action no route matches is answered \"No handler\": add --route ACTION=AGENT for it";

/// What `agdx bridge ioa` says when it starts about the bodies it refuses
/// (the client hears only the limit).
pub fn ioa_body_limit(bytes: usize) -> String {
    format!(
        "request bodies over {bytes} bytes are refused (413); --max-body BYTES changes the limit"
    )
}

fn log(error: &LogError) -> Option<String> {
    Some(match error {
        LogError::Unavailable { .. } => {
            "or point --log (or AGDX_LOG) at a log that is running".to_owned()
        }
        LogError::NoSuchTopic { .. } => "`agdx init` creates the agent topics".to_owned(),
        LogError::NoPartitions { .. } => {
            "`agdx init` creates the agent topics once they are deleted".to_owned()
        }
        LogError::PartitionMismatch { existing, .. } => {
            format!("that is --partitions {existing} or --stream NAME")
        }
        _ => return None,
    })
}

fn produce(error: &ProduceError) -> Option<String> {
    match error {
        ProduceError::Log(error) => log(error),
        ProduceError::ClaimCheck(error) => claim_check(error),
        _ => None,
    }
}

fn claim_check(error: &ClaimCheckError) -> Option<String> {
    match error {
        ClaimCheckError::NoStore => Some("that is --blobs STORE".to_owned()),
        ClaimCheckError::Blob(BlobError::NotFound { .. }) => Some(
            "a directory holds one machine's blobs: give every host one store with --blobs log or --blobs s3://bucket/prefix".to_owned(),
        ),
        ClaimCheckError::Blob(BlobError::TooLarge { .. }) => {
            Some("keep bodies this large in an object store: --blobs s3://bucket/prefix".to_owned())
        }
        _ => None,
    }
}

fn store(error: &StoreError) -> Option<String> {
    match error {
        StoreError::Newer { .. } => Some("that is --state-dir DIR".to_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advice_reaches_a_log_error_through_its_wrappers() {
        let missing = LogError::NoSuchTopic {
            stream: "agents".into(),
            topic: "agent.commands".into(),
        };
        let wrapped = WorkerError::Log(missing.clone());
        assert_eq!(
            explain(&wrapped),
            "topic 'agents/agent.commands' does not exist; create it first; `agdx init` creates the agent topics"
        );
        let replay = ReplayError::Produce(ProduceError::Log(missing));
        assert!(explain(&replay).ends_with("; `agdx init` creates the agent topics"));
        let plain = LogError::InvalidInput("a poll asked for 0 records".into());
        assert_eq!(explain(&plain), "a poll asked for 0 records");
    }
}
