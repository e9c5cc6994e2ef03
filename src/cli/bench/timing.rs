//! A log that notes when appends and polls happen: the ask bench
//! reads an ask's path off these notes (where its time goes) and takes the
//! exact records an ask wrote for the plain client to send the same bytes.
//!
//! Noting costs an atomic load per call while it is off, and a short lock
//! while it is on, so the bench keeps it off while it measures latencies.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;

use agdx::log::{
    Append, Log, LogDecorator, LogError, LogRecord, OffsetCommit, OutgoingRecord, SharedLog,
    TopicInfo,
};

/// One call the timed log saw end.
#[derive(Debug, Clone)]
pub(super) enum Note {
    /// An append to `topic`, from call to answer, with its records.
    Append {
        topic: String,
        started: Instant,
        ended: Instant,
        records: Vec<OutgoingRecord>,
    },
    /// A poll of `topic` that returned `count` records at `ended`.
    Poll {
        topic: String,
        ended: Instant,
        count: usize,
    },
}

/// [`Log`] over another log, noting calls while noting is on.
pub(super) struct TimedLog {
    inner: SharedLog,
    notes: Arc<Notes>,
}

/// The notes of one or more timed logs, in the order the calls ended.
#[derive(Default)]
struct Notes {
    on: AtomicBool,
    notes: Mutex<Vec<Note>>,
}

impl TimedLog {
    pub(super) fn new(inner: SharedLog) -> Self {
        Self {
            inner,
            notes: Arc::default(),
        }
    }

    /// Another log noting into the notes of `other`.
    pub(super) fn sharing(inner: SharedLog, other: &TimedLog) -> Self {
        Self {
            inner,
            notes: other.notes.clone(),
        }
    }

    /// Starts noting, forgetting earlier notes.
    pub(super) fn start(&self) {
        self.lock().clear();
        self.notes.on.store(true, Ordering::SeqCst);
    }

    /// Stops noting and hands out the notes.
    pub(super) fn stop(&self) -> Vec<Note> {
        self.notes.on.store(false, Ordering::SeqCst);
        std::mem::take(&mut *self.lock())
    }

    /// The notes so far, noting on.
    pub(super) fn take(&self) -> Vec<Note> {
        std::mem::take(&mut *self.lock())
    }

    /// The notes so far, once they show both the append of a command (to
    /// `commands`) and that of a reply (to `responses`), or after a
    /// second; noting on. An asker can have its reply before the worker's
    /// append call has returned, so the note of that comes a little later.
    pub(super) async fn take_round_trip(&self, commands: &str, responses: &str) -> Vec<Note> {
        for _ in 0..1000 {
            let (command, reply) =
                self.lock()
                    .iter()
                    .fold((false, false), |seen, note| match note {
                        Note::Append { topic, .. } if topic == commands => (true, seen.1),
                        Note::Append { topic, .. } if topic == responses => (seen.0, true),
                        _ => seen,
                    });
            if command && reply {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        self.take()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Note>> {
        self.notes
            .notes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn noting(&self) -> bool {
        self.notes.on.load(Ordering::Relaxed)
    }

    fn note(&self, note: Note) {
        self.lock().push(note);
    }
}

/// Notes appends (also those of [`Log::append_and_commit`]) and polls;
/// everything else goes straight through.
#[async_trait]
impl LogDecorator for TimedLog {
    fn inner(&self) -> &dyn Log {
        self.inner.as_ref()
    }

    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError> {
        if !self.noting() {
            return self.inner.append(topic, partition, records).await;
        }
        let kept = records.clone();
        let started = Instant::now();
        let appended = self.inner.append(topic, partition, records).await;
        self.note(Note::Append {
            topic: topic.topic.clone(),
            started,
            ended: Instant::now(),
            records: kept,
        });
        appended
    }

    async fn append_and_commit(
        &self,
        appends: Vec<Append>,
        commit: OffsetCommit,
    ) -> Result<(), LogError> {
        if !self.noting() {
            return self.inner.append_and_commit(appends, commit).await;
        }
        let kept: Vec<(String, Vec<OutgoingRecord>)> = appends
            .iter()
            .map(|append| (append.topic.topic.clone(), append.records.clone()))
            .collect();
        let started = Instant::now();
        let written = self.inner.append_and_commit(appends, commit).await;
        let ended = Instant::now();
        // One write: each batch is noted with the commit's time included.
        for (topic, records) in kept {
            self.note(Note::Append {
                topic,
                started,
                ended,
                records,
            });
        }
        written
    }

    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        let polled = self.inner.poll(topic, partition, from, max, wait).await;
        if self.noting()
            && let Ok(records) = &polled
        {
            self.note(Note::Poll {
                topic: topic.topic.clone(),
                ended: Instant::now(),
                count: records.len(),
            });
        }
        polled
    }
}
