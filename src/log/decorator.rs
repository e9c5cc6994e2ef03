//! Wrapping a log: a [`LogDecorator`] is a [`Log`] that hands every call
//! to the log it wraps unless it says otherwise.
//!
//! A wrapper written as a `Log` of its own must forward each method by
//! hand, and one it forgets falls back to the trait's default: a forgotten
//! [`Log::append_and_commit`] splits the embedded log's one transaction in
//! two, a forgotten [`Log::expect`] drops the hint. A decorator forwards
//! every method it does not override, so none is lost.

use std::time::Duration;

use async_trait::async_trait;

use super::{
    Append, GroupMember, Log, LogError, LogRecord, OffsetCommit, OutgoingRecord, Retention,
    TopicInfo,
};

/// A log made by wrapping another ([`LogDecorator::inner`]): each method
/// forwards to the inner log unless the decorator overrides it, and every
/// decorator is a [`Log`].
///
/// Overriding one method leaves the others alone: a decorator that times
/// [`Log::append`] sees the batches of [`Log::append_and_commit`] only if
/// it overrides that method too.
///
/// ```
/// use std::sync::atomic::{AtomicU64, Ordering};
/// use std::time::Duration;
/// use agdx::log::{Log, LogDecorator, LogError, LogRecord, SharedLog, TopicInfo};
///
/// /// Counts the polls made through it; everything else goes straight through.
/// struct CountingPolls {
///     inner: SharedLog,
///     polls: AtomicU64,
/// }
///
/// #[async_trait::async_trait]
/// impl LogDecorator for CountingPolls {
///     fn inner(&self) -> &dyn Log {
///         self.inner.as_ref()
///     }
///
///     async fn poll(
///         &self,
///         topic: &TopicInfo,
///         partition: u32,
///         from: u64,
///         max: u32,
///         wait: Duration,
///     ) -> Result<Vec<LogRecord>, LogError> {
///         self.polls.fetch_add(1, Ordering::Relaxed);
///         self.inner.poll(topic, partition, from, max, wait).await
///     }
/// }
/// ```
#[async_trait]
pub trait LogDecorator: Send + Sync + 'static {
    /// The log this one wraps.
    fn inner(&self) -> &dyn Log;

    /// [`Log::describe`].
    fn describe(&self) -> String {
        self.inner().describe()
    }

    /// [`Log::max_record_bytes`].
    fn max_record_bytes(&self) -> usize {
        self.inner().max_record_bytes()
    }

    /// [`Log::ensure_topic_retained`].
    async fn ensure_topic_retained(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
        retention: Retention,
    ) -> Result<TopicInfo, LogError> {
        self.inner()
            .ensure_topic_retained(stream, topic, partitions, retention)
            .await
    }

    /// [`Log::hold`].
    async fn hold(
        &self,
        topic: &TopicInfo,
        holder: &str,
        from: &[(u32, u64)],
    ) -> Result<(), LogError> {
        self.inner().hold(topic, holder, from).await
    }

    /// [`Log::topic`].
    async fn topic(&self, stream: &str, topic: &str) -> Result<Option<TopicInfo>, LogError> {
        self.inner().topic(stream, topic).await
    }

    /// [`Log::topics`].
    async fn topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError> {
        self.inner().topics(stream).await
    }

    /// [`Log::append`].
    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError> {
        self.inner().append(topic, partition, records).await
    }

    /// [`Log::poll`].
    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        self.inner().poll(topic, partition, from, max, wait).await
    }

    /// [`Log::expect`].
    fn expect(&self, topic: &TopicInfo, partition: u32) {
        self.inner().expect(topic, partition);
    }

    /// [`Log::last_offset`].
    async fn last_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        self.inner().last_offset(topic, partition).await
    }

    /// [`Log::first_offset`].
    async fn first_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        self.inner().first_offset(topic, partition).await
    }

    /// [`Log::join_group`].
    async fn join_group(
        &self,
        topic: &TopicInfo,
        group: &str,
    ) -> Result<Box<dyn GroupMember>, LogError> {
        self.inner().join_group(topic, group).await
    }

    /// [`Log::store_offset`].
    async fn store_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), LogError> {
        self.inner()
            .store_offset(topic, group, partition, offset)
            .await
    }

    /// [`Log::append_and_commit`].
    async fn append_and_commit(
        &self,
        appends: Vec<Append>,
        commit: OffsetCommit,
    ) -> Result<(), LogError> {
        self.inner().append_and_commit(appends, commit).await
    }

    /// [`Log::committed_offset`].
    async fn committed_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        self.inner().committed_offset(topic, group, partition).await
    }
}

#[async_trait]
impl<D: LogDecorator> Log for D {
    fn describe(&self) -> String {
        LogDecorator::describe(self)
    }

    fn max_record_bytes(&self) -> usize {
        LogDecorator::max_record_bytes(self)
    }

    async fn ensure_topic_retained(
        &self,
        stream: &str,
        topic: &str,
        partitions: u32,
        retention: Retention,
    ) -> Result<TopicInfo, LogError> {
        LogDecorator::ensure_topic_retained(self, stream, topic, partitions, retention).await
    }

    async fn hold(
        &self,
        topic: &TopicInfo,
        holder: &str,
        from: &[(u32, u64)],
    ) -> Result<(), LogError> {
        LogDecorator::hold(self, topic, holder, from).await
    }

    async fn topic(&self, stream: &str, topic: &str) -> Result<Option<TopicInfo>, LogError> {
        LogDecorator::topic(self, stream, topic).await
    }

    async fn topics(&self, stream: &str) -> Result<Vec<TopicInfo>, LogError> {
        LogDecorator::topics(self, stream).await
    }

    async fn append(
        &self,
        topic: &TopicInfo,
        partition: u32,
        records: Vec<OutgoingRecord>,
    ) -> Result<(), LogError> {
        LogDecorator::append(self, topic, partition, records).await
    }

    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        LogDecorator::poll(self, topic, partition, from, max, wait).await
    }

    fn expect(&self, topic: &TopicInfo, partition: u32) {
        LogDecorator::expect(self, topic, partition);
    }

    async fn last_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        LogDecorator::last_offset(self, topic, partition).await
    }

    async fn first_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        LogDecorator::first_offset(self, topic, partition).await
    }

    async fn join_group(
        &self,
        topic: &TopicInfo,
        group: &str,
    ) -> Result<Box<dyn GroupMember>, LogError> {
        LogDecorator::join_group(self, topic, group).await
    }

    async fn store_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        offset: u64,
    ) -> Result<(), LogError> {
        LogDecorator::store_offset(self, topic, group, partition, offset).await
    }

    async fn append_and_commit(
        &self,
        appends: Vec<Append>,
        commit: OffsetCommit,
    ) -> Result<(), LogError> {
        LogDecorator::append_and_commit(self, appends, commit).await
    }

    async fn committed_offset(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        LogDecorator::committed_offset(self, topic, group, partition).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// A log that only notes which of its methods were called.
    #[derive(Default)]
    struct Calls(Mutex<Vec<&'static str>>);

    impl Calls {
        fn note(&self, method: &'static str) {
            super::super::lock(&self.0).push(method);
        }
    }

    fn refused() -> LogError {
        LogError::InvalidInput("only noted".into())
    }

    #[async_trait]
    impl Log for Calls {
        fn describe(&self) -> String {
            self.note("describe");
            "calls".into()
        }
        fn max_record_bytes(&self) -> usize {
            self.note("max_record_bytes");
            1
        }
        async fn ensure_topic_retained(
            &self,
            _: &str,
            _: &str,
            _: u32,
            _: Retention,
        ) -> Result<TopicInfo, LogError> {
            self.note("ensure_topic_retained");
            Err(refused())
        }
        async fn hold(&self, _: &TopicInfo, _: &str, _: &[(u32, u64)]) -> Result<(), LogError> {
            self.note("hold");
            Ok(())
        }
        async fn topic(&self, _: &str, _: &str) -> Result<Option<TopicInfo>, LogError> {
            self.note("topic");
            Ok(None)
        }
        async fn topics(&self, _: &str) -> Result<Vec<TopicInfo>, LogError> {
            self.note("topics");
            Ok(Vec::new())
        }
        async fn append(
            &self,
            _: &TopicInfo,
            _: u32,
            _: Vec<OutgoingRecord>,
        ) -> Result<(), LogError> {
            self.note("append");
            Ok(())
        }
        async fn poll(
            &self,
            _: &TopicInfo,
            _: u32,
            _: u64,
            _: u32,
            _: Duration,
        ) -> Result<Vec<LogRecord>, LogError> {
            self.note("poll");
            Ok(Vec::new())
        }
        fn expect(&self, _: &TopicInfo, _: u32) {
            self.note("expect");
        }
        async fn last_offset(&self, _: &TopicInfo, _: u32) -> Result<Option<u64>, LogError> {
            self.note("last_offset");
            Ok(None)
        }
        async fn first_offset(&self, _: &TopicInfo, _: u32) -> Result<Option<u64>, LogError> {
            self.note("first_offset");
            Ok(None)
        }
        async fn join_group(
            &self,
            _: &TopicInfo,
            _: &str,
        ) -> Result<Box<dyn GroupMember>, LogError> {
            self.note("join_group");
            Err(refused())
        }
        async fn store_offset(
            &self,
            _: &TopicInfo,
            _: &str,
            _: u32,
            _: u64,
        ) -> Result<(), LogError> {
            self.note("store_offset");
            Ok(())
        }
        async fn append_and_commit(&self, _: Vec<Append>, _: OffsetCommit) -> Result<(), LogError> {
            self.note("append_and_commit");
            Ok(())
        }
        async fn committed_offset(
            &self,
            _: &TopicInfo,
            _: &str,
            _: u32,
        ) -> Result<Option<u64>, LogError> {
            self.note("committed_offset");
            Ok(None)
        }
    }

    /// Overrides nothing.
    struct Plain(Calls);

    impl LogDecorator for Plain {
        fn inner(&self) -> &dyn Log {
            &self.0
        }
    }

    #[tokio::test]
    async fn a_decorator_forwards_every_method_as_it_was_called() {
        let wrapped = Plain(Calls::default());
        let log: &dyn Log = &wrapped;
        let topic = TopicInfo {
            stream: "s".into(),
            topic: "t".into(),
            stream_id: 1,
            topic_id: 1,
            partitions: std::num::NonZeroU32::MIN,
        };
        let commit = OffsetCommit {
            topic: topic.clone(),
            group: "g".into(),
            partition: 0,
            offset: 0,
        };
        log.describe();
        log.max_record_bytes();
        let _ = log
            .ensure_topic_retained("s", "t", 1, Retention::Forever)
            .await;
        let _ = log.hold(&topic, "h", &[(0, 0)]).await;
        let _ = log.topic("s", "t").await;
        let _ = log.topics("s").await;
        let _ = log.append(&topic, 0, Vec::new()).await;
        let _ = log.poll(&topic, 0, 0, 1, Duration::ZERO).await;
        log.expect(&topic, 0);
        let _ = log.last_offset(&topic, 0).await;
        let _ = log.first_offset(&topic, 0).await;
        let _ = log.join_group(&topic, "g").await;
        let _ = log.store_offset(&topic, "g", 0, 0).await;
        let _ = log.append_and_commit(Vec::new(), commit).await;
        let _ = log.committed_offset(&topic, "g", 0).await;
        assert_eq!(
            *super::super::lock(&wrapped.0.0),
            [
                "describe",
                "max_record_bytes",
                "ensure_topic_retained",
                "hold",
                "topic",
                "topics",
                "append",
                "poll",
                "expect",
                "last_offset",
                "first_offset",
                "join_group",
                "store_offset",
                "append_and_commit",
                "committed_offset",
            ]
        );
    }
}
