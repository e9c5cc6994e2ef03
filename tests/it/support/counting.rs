//! A log that counts what is polled through it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agdx::log::{Log, LogDecorator, LogError, LogRecord, SharedLog, TopicInfo};
use async_trait::async_trait;

/// Counts the polls of one topic (or of every topic) and the records
/// they return.
pub struct CountingLog {
    inner: SharedLog,
    topic: Option<String>,
    polls: AtomicU64,
    read: AtomicU64,
}

impl CountingLog {
    /// Counts the polls of every topic.
    pub fn all(inner: SharedLog) -> Arc<Self> {
        Self::new(inner, None)
    }

    /// Counts the polls of `topic` only.
    pub fn of(inner: SharedLog, topic: &TopicInfo) -> Arc<Self> {
        Self::new(inner, Some(topic.topic.clone()))
    }

    fn new(inner: SharedLog, topic: Option<String>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            topic,
            polls: AtomicU64::new(0),
            read: AtomicU64::new(0),
        })
    }

    /// Polls counted so far.
    pub fn polls(&self) -> u64 {
        self.polls.load(Ordering::SeqCst)
    }

    /// Records the counted polls returned.
    pub fn read(&self) -> u64 {
        self.read.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl LogDecorator for CountingLog {
    fn inner(&self) -> &dyn Log {
        self.inner.as_ref()
    }

    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        let counted = self.topic.as_ref().is_none_or(|t| *t == topic.topic);
        if counted {
            self.polls.fetch_add(1, Ordering::SeqCst);
        }
        let records = self.inner.poll(topic, partition, from, max, wait).await?;
        if counted {
            self.read.fetch_add(records.len() as u64, Ordering::SeqCst);
        }
        Ok(records)
    }
}
