//! `kafka://` connection strings and the librdkafka settings built from them.

use std::str::FromStr;
use std::time::Duration;

use rdkafka::ClientConfig;

use crate::log::LogError;

/// How long a dead member keeps its partitions, unless `session_timeout` says otherwise.
const DEFAULT_SESSION_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a revoked partition waits for its member to finish, unless `handover` says otherwise.
const DEFAULT_HANDOVER: Duration = Duration::from_secs(30);
/// How long an append may take before it fails, unless `delivery_timeout` says otherwise.
const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the broker may hold a fetch while nothing is there, unless `fetch_wait` says otherwise.
const DEFAULT_FETCH_WAIT: Duration = Duration::from_millis(100);
/// The largest payload of one record, unless `max_record_bytes` says otherwise:
/// under the 1 MiB that Kafka brokers and librdkafka accept by default in one
/// batch, with room for headers and framing.
pub(crate) const DEFAULT_MAX_RECORD_BYTES: usize = 1_000_000;
/// Room for headers and batch framing above the largest payload.
const FRAMING_ROOM: usize = 64 * 1024;

/// The options a connection string may set, with what they mean.
const OPTIONS: &str = "session_timeout (e.g. 10s), handover (30s), delivery_timeout (30s), fetch_wait (100ms), replication (a number, or default), max_record_bytes (1000000), or any librdkafka setting by its dotted name (security.protocol=sasl_ssl, sasl.mechanism=PLAIN, sasl.username=..., sasl.password=...)";

/// A parsed `kafka://HOST:PORT[,HOST:PORT...][?option=value&...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KafkaTarget {
    brokers: Vec<String>,
    /// A member that stops heartbeating loses its partitions after this.
    pub(crate) session_timeout: Duration,
    /// A revoked partition moves on after this even if its member has not finished.
    pub(crate) handover: Duration,
    /// An append that the cluster has not acknowledged by then fails.
    pub(crate) delivery_timeout: Duration,
    /// `fetch.wait.max.ms` of the readers.
    pub(crate) fetch_wait: Duration,
    /// Replicas of new topics; `None` leaves it to the broker's default.
    pub(crate) replication: Option<i32>,
    /// The largest payload of one record.
    pub(crate) max_record_bytes: usize,
    /// librdkafka settings given by their own names.
    settings: Vec<(String, String)>,
}

impl KafkaTarget {
    /// Parses a connection string; the error says what to write instead.
    pub(crate) fn parse(url: &str) -> Result<Self, LogError> {
        let bad = |why: &str| {
            LogError::InvalidInput(format!(
                "invalid Kafka connection string {}: {why}; expected kafka://HOST:PORT[,HOST:PORT...] (e.g. kafka://127.0.0.1:9092,127.0.0.1:9093), optionally followed by ?option=value&... with options {OPTIONS}",
                redact(url)
            ))
        };
        let rest = url
            .strip_prefix("kafka://")
            .ok_or_else(|| bad("it does not start with kafka://"))?;
        let (hosts, query) = rest.split_once('?').unwrap_or((rest, ""));
        if hosts.contains('@') {
            return Err(bad(
                "credentials do not go before the host; pass them as librdkafka settings (?security.protocol=sasl_ssl&sasl.mechanism=PLAIN&sasl.username=USER&sasl.password=PASSWORD)",
            ));
        }
        let mut brokers = Vec::new();
        for broker in hosts.split(',') {
            let (host, port) = broker
                .rsplit_once(':')
                .ok_or_else(|| bad(&format!("broker {broker:?} has no :PORT")))?;
            if host.is_empty() || port.parse::<u16>().is_err() {
                return Err(bad(&format!(
                    "broker {broker:?} is not HOST:PORT with a port from 1 to 65535"
                )));
            }
            brokers.push(broker.to_owned());
        }
        let mut target = Self {
            brokers,
            session_timeout: DEFAULT_SESSION_TIMEOUT,
            handover: DEFAULT_HANDOVER,
            delivery_timeout: DEFAULT_DELIVERY_TIMEOUT,
            fetch_wait: DEFAULT_FETCH_WAIT,
            replication: None,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            settings: Vec::new(),
        };
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            let (name, value) = pair
                .split_once('=')
                .ok_or_else(|| bad(&format!("option {pair:?} has no =value")))?;
            let duration = || {
                humantime::Duration::from_str(value)
                    .map(Duration::from)
                    .map_err(|e| bad(&format!("{name}={value}: {e}")))
            };
            match name {
                "session_timeout" => target.session_timeout = duration()?,
                "handover" => target.handover = duration()?,
                "delivery_timeout" => target.delivery_timeout = duration()?,
                "fetch_wait" => target.fetch_wait = duration()?,
                "replication" if value == "default" => target.replication = None,
                "replication" => {
                    let replicas = value.parse::<i32>().ok().filter(|n| *n >= 1);
                    target.replication = Some(replicas.ok_or_else(|| {
                        bad(&format!("replication={value} is not a number of replicas (1 or more) nor `default`"))
                    })?);
                }
                "max_record_bytes" => {
                    let bytes = value.parse::<usize>().ok().filter(|n| *n >= 1);
                    target.max_record_bytes = bytes.ok_or_else(|| {
                        bad(&format!(
                            "max_record_bytes={value} is not a positive number"
                        ))
                    })?;
                }
                dotted if dotted.contains('.') => {
                    target.settings.push((dotted.to_owned(), value.to_owned()));
                }
                other => return Err(bad(&format!("unknown option {other:?}"))),
            }
        }
        if target.session_timeout < Duration::from_secs(1) {
            return Err(bad("session_timeout must be at least 1s"));
        }
        Ok(target)
    }

    /// The brokers, as given.
    pub(crate) fn brokers(&self) -> String {
        self.brokers.join(",")
    }

    /// The connection string without options (which may hold secrets), for people.
    pub(crate) fn describe(&self) -> String {
        format!("kafka://{}", self.brokers())
    }

    /// Settings every client shares.
    fn common(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config
            .set("bootstrap.servers", self.brokers())
            .set("client.id", "agdx")
            // Requests are small and latency-bound.
            .set("socket.nagle.disable", "true");
        for (name, value) in &self.settings {
            config.set(name, value);
        }
        config
    }

    /// The producer: idempotent, every append acknowledged by all in-sync
    /// replicas before it counts as done.
    pub(crate) fn producer(&self) -> ClientConfig {
        let mut config = self.common();
        config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "1")
            .set("message.timeout.ms", millis(self.delivery_timeout))
            .set(
                "message.max.bytes",
                (self.max_record_bytes + FRAMING_ROOM).to_string(),
            );
        config
    }

    /// A consumer that reads partitions it assigns itself, from any offset,
    /// and never commits.
    pub(crate) fn reader(&self) -> ClientConfig {
        let mut config = self.consumer();
        config
            // librdkafka assigns partitions only to a consumer with a group
            // id; this one never joins its group nor commits in it.
            .set("group.id", "agdx-reader")
            .set("fetch.wait.max.ms", millis(self.fetch_wait))
            // Prefetch a little per partition: readers come and go at any offset.
            .set("queued.min.messages", "1000")
            .set("queued.max.messages.kbytes", "4096")
            .set(
                "fetch.message.max.bytes",
                (self.max_record_bytes + FRAMING_ROOM).to_string(),
            );
        config
    }

    /// A member of consumer group `group`: cooperative-sticky assignment, no
    /// automatic commits.
    pub(crate) fn member(&self, group: &str) -> ClientConfig {
        let session = self.session_timeout;
        // A revocation may wait `handover` for the member's work; the poll
        // interval must outlast it, or the member would be taken for stuck.
        let poll_interval = (self.handover + Duration::from_secs(30)).max(session);
        let mut config = self.consumer();
        config
            .set("group.id", group)
            .set("partition.assignment.strategy", "cooperative-sticky")
            .set("session.timeout.ms", millis(session))
            .set("heartbeat.interval.ms", millis(session / 5))
            .set("max.poll.interval.ms", millis(poll_interval));
        config
    }

    /// A consumer that reads and writes group `group`'s offsets without joining it.
    pub(crate) fn committer(&self, group: &str) -> ClientConfig {
        let mut config = self.consumer();
        config.set("group.id", group);
        config
    }

    /// The admin client.
    pub(crate) fn admin(&self) -> ClientConfig {
        self.common()
    }

    fn consumer(&self) -> ClientConfig {
        let mut config = self.common();
        config
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("auto.offset.reset", "earliest")
            .set("allow.auto.create.topics", "false");
        config
    }
}

fn millis(duration: Duration) -> String {
    duration.as_millis().max(1).to_string()
}

/// The connection string with the values of secret-looking options replaced by `***`.
fn redact(url: &str) -> String {
    let Some((base, query)) = url.split_once('?') else {
        return url.to_owned();
    };
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, _)) if name.contains("password") || name.contains("secret") => {
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    format!("{base}?{}", pairs.join("&"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setting<'a>(config: &'a ClientConfig, name: &str) -> Option<&'a str> {
        config.get(name)
    }

    #[test]
    fn parses_brokers_and_defaults() {
        let target = KafkaTarget::parse("kafka://127.0.0.1:9092,broker-2:9093").unwrap();
        assert_eq!(target.brokers(), "127.0.0.1:9092,broker-2:9093");
        assert_eq!(target.describe(), "kafka://127.0.0.1:9092,broker-2:9093");
        assert_eq!(target.session_timeout, DEFAULT_SESSION_TIMEOUT);
        assert_eq!(target.replication, None);
        let producer = target.producer();
        assert_eq!(setting(&producer, "enable.idempotence"), Some("true"));
        assert_eq!(setting(&producer, "acks"), Some("all"));
        let member = target.member("workers");
        assert_eq!(
            setting(&member, "partition.assignment.strategy"),
            Some("cooperative-sticky")
        );
        assert_eq!(setting(&member, "enable.auto.commit"), Some("false"));
        assert_eq!(setting(&member, "group.id"), Some("workers"));
    }

    #[test]
    fn parses_options_and_passes_librdkafka_settings_through() {
        let target = KafkaTarget::parse(
            "kafka://h:1?session_timeout=6s&fetch_wait=5ms&replication=3&security.protocol=sasl_ssl&sasl.password=hunter2",
        )
        .unwrap();
        assert_eq!(target.session_timeout, Duration::from_secs(6));
        assert_eq!(target.fetch_wait, Duration::from_millis(5));
        assert_eq!(target.replication, Some(3));
        assert_eq!(setting(&target.reader(), "fetch.wait.max.ms"), Some("5"));
        assert_eq!(
            setting(&target.producer(), "security.protocol"),
            Some("sasl_ssl")
        );
        assert!(!target.describe().contains("hunter2"));
    }

    #[test]
    fn refuses_what_it_cannot_use_and_says_what_to_write() {
        for (url, says) in [
            ("iggy://h:1", "kafka://"),
            ("kafka://h", "no :PORT"),
            ("kafka://h:99999", "port from 1"),
            ("kafka://:9092", "port from 1"),
            ("kafka://user:pw@h:1", "sasl.username"),
            ("kafka://h:1?linger=5", "unknown option"),
            ("kafka://h:1?replication=0", "replication=0"),
            ("kafka://h:1?session_timeout=soon", "session_timeout=soon"),
            ("kafka://h:1?sasl.password", "no =value"),
        ] {
            match KafkaTarget::parse(url) {
                Err(LogError::InvalidInput(message)) => {
                    assert!(message.contains(says), "{url}: {message}");
                    assert!(message.contains("kafka://HOST:PORT"), "{url}: {message}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
        let err = KafkaTarget::parse("kafka://h:1?sasl.password=hunter2&x=1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
