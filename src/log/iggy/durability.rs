//! When an append on Iggy counts as durable, and the flushes that make it so.
//!
//! An Iggy 0.8 server with its default settings answers an append once the
//! batch is in memory: it saves a partition's buffer to its segment file
//! only when 1,024 messages or 1 MiB have gathered
//! (`messages_required_to_save`, `size_of_messages_required_to_save`) or
//! every 30 s, and fsyncs only when told to. A server killed in between
//! loses every record it acknowledged since the last save, while consumer
//! offsets, which it writes at once, survive: a commit would outlive the
//! reply it was meant to follow.
//!
//! So by default ([`Durability::Fsync`]) an append is followed by
//! `flush_unsaved_buffer` with fsync for the partition it wrote, and
//! returns only when that flush has. The server handles one partition's
//! requests in order, so a flush sent after an append's answer covers that
//! append. Appends to one partition that finish while a flush is under way
//! share the next one (see [`FlushGroup`]): under load, many appends cost a
//! flush together.
//!
//! A server that already saves and fsyncs every batch before answering
//! (`messages_required_to_save = 1`, `enforce_fsync = true`, as
//! `deploy/docker-compose.yml` sets it) needs no flushes:
//! [`Durability::Server`] leaves them out and trusts the server.

use std::fmt;
use std::future::Future;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::log::LogError;

/// What an Iggy append waits for before it returns, chosen with the
/// connection string option `durability` (`iggy://…?durability=server`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Durability {
    /// `durability=fsync`, the default: after appending, agdx asks the
    /// server to write the partition's unsaved messages to its segment file
    /// and fsync it, and returns when it has. With any server settings, an
    /// append that returned survives a crash of the server process; it
    /// survives a power loss too, except for one case Iggy 0.8 leaves
    /// open: a batch that reached the server's own save threshold
    /// (`messages_required_to_save`, 1,024 messages by default, or
    /// `size_of_messages_required_to_save`, 1 MiB) is written by the server
    /// before the flush comes, and the flush, finding nothing unsaved, then
    /// skips the fsync; on a server with `enforce_fsync = false` that batch
    /// is fsynced by the partition's next flush that finds messages unsaved.
    #[default]
    Fsync,
    /// `durability=server`: the append returns when the server has accepted
    /// the batch. Durable only on a server that saves and fsyncs every batch
    /// before answering (`messages_required_to_save = 1` and
    /// `enforce_fsync = true` under `[system.partition]`).
    Server,
}

impl Durability {
    /// Every mode, the default first.
    pub const ALL: [Durability; 2] = [Durability::Fsync, Durability::Server];

    /// The name of the mode in a connection string.
    pub fn as_str(self) -> &'static str {
        match self {
            Durability::Fsync => "fsync",
            Durability::Server => "server",
        }
    }
}

impl fmt::Display for Durability {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A `durability` option that names no mode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown durability {0:?} in the Iggy connection string: use durability=fsync (the default: agdx flushes and fsyncs every partition it appends to before the append returns) or durability=server (for a server that saves and fsyncs every batch itself, as deploy/docker-compose.yml configures it)"
)]
pub struct UnknownDurability(pub String);

impl FromStr for Durability {
    type Err = UnknownDurability;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Durability::ALL
            .into_iter()
            .find(|mode| mode.as_str() == s)
            .ok_or_else(|| UnknownDurability(s.to_owned()))
    }
}

/// The option's name in a connection string.
const OPTION: &str = "durability";

/// Takes the `durability` option out of a connection string: the string the
/// Iggy client understands (without it) and the mode (the default when
/// absent).
pub(crate) fn split_durability(url: &str) -> Result<(String, Durability), UnknownDurability> {
    let Some((base, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), Durability::default()));
    };
    let mut durability = Durability::default();
    let mut rest = Vec::new();
    for option in query.split('&') {
        match option.split_once('=') {
            Some((OPTION, value)) => durability = value.parse()?,
            _ => rest.push(option),
        }
    }
    let url = if rest.is_empty() {
        base.to_owned()
    } else {
        format!("{base}?{}", rest.join("&"))
    };
    Ok((url, durability))
}

/// Puts a non-default mode back into a connection string without one.
pub(crate) fn join_durability(url: &str, durability: Durability) -> String {
    match durability {
        Durability::Fsync => url.to_owned(),
        Durability::Server => {
            let joint = if url.contains('?') { '&' } else { '?' };
            format!("{url}{joint}{OPTION}={durability}")
        }
    }
}

/// The flushes of one partition, shared by the appends to it.
///
/// Each append that got its answer takes a ticket ([`FlushGroup::sent`]);
/// a flush started after that covers it. Flushes run one at a time; an
/// append waiting for its turn returns at once when a flush that started
/// after its ticket has finished meanwhile.
#[derive(Debug, Default)]
pub(crate) struct FlushGroup {
    /// Tickets handed out: appends answered so far.
    sent: AtomicU64,
    /// The highest ticket a finished flush covers. Held while flushing.
    flushed: tokio::sync::Mutex<u64>,
}

impl FlushGroup {
    /// Records that an append was answered; its ticket.
    pub(crate) fn sent(&self) -> u64 {
        self.sent.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Returns once a flush that started after `ticket` was taken has
    /// succeeded, running `flush` when none has.
    pub(crate) async fn covering<F, Fut>(&self, ticket: u64, flush: F) -> Result<(), LogError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<(), LogError>>,
    {
        let mut flushed = self.flushed.lock().await;
        if *flushed >= ticket {
            return Ok(());
        }
        // Every ticket up to here belongs to an append already answered, so
        // the flush about to start covers them all.
        let covers = self.sent.load(Ordering::SeqCst);
        flush().await?;
        *flushed = covers;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    #[test]
    fn the_option_is_taken_out_and_put_back() {
        let split = |url: &str| split_durability(url).unwrap();
        assert_eq!(
            split("iggy://u:p@h:1"),
            ("iggy://u:p@h:1".into(), Durability::Fsync)
        );
        assert_eq!(
            split("iggy://u:p@h:1?durability=server"),
            ("iggy://u:p@h:1".into(), Durability::Server)
        );
        assert_eq!(
            split("iggy://u:p@h:1?nodelay=false&durability=fsync&heartbeat_interval=1s"),
            (
                "iggy://u:p@h:1?nodelay=false&heartbeat_interval=1s".into(),
                Durability::Fsync
            )
        );
        let err = split_durability("iggy://u:p@h:1?durability=sometimes").unwrap_err();
        assert!(err.to_string().contains("durability=server"), "{err}");
        for url in ["iggy://u:p@h:1", "iggy://u:p@h:1?nodelay=false"] {
            for mode in Durability::ALL {
                assert_eq!(split(&join_durability(url, mode)), (url.into(), mode));
            }
        }
    }

    #[tokio::test]
    async fn appends_answered_during_a_flush_share_the_next_one() {
        let group = Arc::new(FlushGroup::default());
        let flushes = Arc::new(AtomicUsize::new(0));
        let flush = |flushes: Arc<AtomicUsize>| async move {
            flushes.fetch_add(1, Ordering::SeqCst);
            Ok(())
        };
        // The first append starts a flush, which waits until nine more
        // appends have been answered.
        let first = group.sent();
        let (started, flushing) = tokio::sync::oneshot::channel();
        let release = Arc::new(tokio::sync::Notify::new());
        let running = {
            let (group, flushes, release) = (group.clone(), flushes.clone(), release.clone());
            tokio::spawn(async move {
                group
                    .covering(first, || async move {
                        let _ = started.send(());
                        release.notified().await;
                        flush(flushes).await
                    })
                    .await
            })
        };
        flushing.await.unwrap();
        let waiting: Vec<_> = (0..9)
            .map(|_| {
                let ticket = group.sent();
                let (group, flushes) = (group.clone(), flushes.clone());
                tokio::spawn(async move { group.covering(ticket, || flush(flushes)).await })
            })
            .collect();
        release.notify_one();
        running.await.unwrap().unwrap();
        for append in waiting {
            append.await.unwrap().unwrap();
        }
        assert_eq!(flushes.load(Ordering::SeqCst), 2);
        // A ticket taken after every flush finished needs a flush of its own.
        let late = group.sent();
        group
            .covering(late, || flush(flushes.clone()))
            .await
            .unwrap();
        assert_eq!(flushes.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_failed_flush_covers_nothing() {
        let group = FlushGroup::default();
        let ticket = group.sent();
        let failed = group
            .covering(ticket, || async {
                Err(LogError::Backend {
                    reason: "the disk is full".into(),
                    source: None,
                })
            })
            .await;
        assert!(failed.is_err());
        let ran = AtomicUsize::new(0);
        group
            .covering(ticket, || async {
                ran.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(ran.load(Ordering::SeqCst), 1, "the append flushes again");
    }
}
