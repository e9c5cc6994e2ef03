//! Turning librdkafka errors into [`LogError`]s.

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use crate::log::{Cause, LogError, TopicInfo};

/// What to do when no broker answers.
pub(crate) const HINT: &str = "is a Kafka-protocol broker running there? A three-node cluster starts with `docker compose -f deploy/kafka-compose.yml up -d` (see deploy/README.md), a single Tansu broker with `tansu broker`";

/// The cluster at `target` cannot be reached (`source`: the error that
/// said so, if any).
pub(crate) fn unreachable(target: &str, reason: &str, source: Option<Cause>) -> LogError {
    LogError::Unavailable {
        target: target.to_owned(),
        reason: format!("{reason}; {HINT}"),
        source,
    }
}

/// Maps an error of a request about `topic` (`doing` says what was being
/// done, e.g. "appending to partition 3").
pub(crate) fn topic_error(
    target: &str,
    topic: &TopicInfo,
    doing: &str,
    e: &KafkaError,
) -> LogError {
    match e.rdkafka_error_code() {
        Some(
            RDKafkaErrorCode::UnknownTopicOrPartition
            | RDKafkaErrorCode::UnknownTopic
            | RDKafkaErrorCode::UnknownPartition,
        ) => LogError::NoSuchTopic {
            stream: topic.stream.clone(),
            topic: topic.topic.clone(),
        },
        _ => request_error(target, doing, e),
    }
}

/// Maps an error of any request (`doing` says what was being done).
pub(crate) fn request_error(target: &str, doing: &str, e: &KafkaError) -> LogError {
    let reason = format!("{doing}: {e}");
    let source = Some(Cause::from(e.clone()));
    let Some(code) = e.rdkafka_error_code() else {
        return match e {
            KafkaError::ClientConfig(..) | KafkaError::Nul(_) => LogError::InvalidInput(format!(
                "{reason}; check the librdkafka settings in the connection string"
            )),
            _ => LogError::Backend { reason, source },
        };
    };
    match code {
        RDKafkaErrorCode::BrokerTransportFailure
        | RDKafkaErrorCode::Resolve
        | RDKafkaErrorCode::MessageTimedOut
        | RDKafkaErrorCode::AllBrokersDown
        | RDKafkaErrorCode::OperationTimedOut
        | RDKafkaErrorCode::RequestTimedOut
        | RDKafkaErrorCode::NetworkException
        | RDKafkaErrorCode::CoordinatorNotAvailable
        | RDKafkaErrorCode::NotCoordinator
        | RDKafkaErrorCode::CoordinatorLoadInProgress
        | RDKafkaErrorCode::LeaderNotAvailable
        | RDKafkaErrorCode::NotLeaderForPartition
        | RDKafkaErrorCode::NotEnoughReplicas
        | RDKafkaErrorCode::NotEnoughReplicasAfterAppend => unreachable(target, &reason, source),
        RDKafkaErrorCode::Authentication
        | RDKafkaErrorCode::SaslAuthenticationFailed
        | RDKafkaErrorCode::IllegalSASLState
        | RDKafkaErrorCode::TopicAuthorizationFailed
        | RDKafkaErrorCode::GroupAuthorizationFailed
        | RDKafkaErrorCode::ClusterAuthorizationFailed => LogError::AccessDenied {
            target: target.to_owned(),
            reason: format!(
                "{reason}; the principal in the connection string's settings needs to describe, create, read and write the topics and to use the consumer groups"
            ),
            source,
        },
        RDKafkaErrorCode::MessageSizeTooLarge
        | RDKafkaErrorCode::InvalidTopic
        | RDKafkaErrorCode::InvalidPartitions
        | RDKafkaErrorCode::InvalidReplicationFactor
        | RDKafkaErrorCode::InvalidConfig
        | RDKafkaErrorCode::PolicyViolation
        | RDKafkaErrorCode::InvalidArgument
        | RDKafkaErrorCode::InvalidRequest => LogError::InvalidInput(reason),
        RDKafkaErrorCode::KafkaStorageError => LogError::Storage { reason, source },
        _ => LogError::Backend { reason, source },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn topic() -> TopicInfo {
        TopicInfo {
            stream: "s".into(),
            topic: "t".into(),
            stream_id: 1,
            topic_id: 2,
            partitions: std::num::NonZeroU32::new(2).unwrap(),
        }
    }

    #[test]
    fn transport_failures_are_unavailable_and_retryable() {
        let e = request_error(
            "kafka://h:1",
            "appending",
            &KafkaError::MessageProduction(RDKafkaErrorCode::MessageTimedOut),
        );
        assert!(matches!(e, LogError::Unavailable { .. }), "{e:?}");
        assert!(e.is_retryable());
        assert!(e.to_string().contains("kafka://h:1"));
    }

    #[test]
    fn unknown_topics_name_the_topic_and_denials_are_final() {
        let e = topic_error(
            "kafka://h:1",
            &topic(),
            "polling",
            &KafkaError::MessageConsumption(RDKafkaErrorCode::UnknownTopicOrPartition),
        );
        assert!(matches!(e, LogError::NoSuchTopic { .. }), "{e:?}");
        let e = request_error(
            "kafka://h:1",
            "appending",
            &KafkaError::MessageProduction(RDKafkaErrorCode::TopicAuthorizationFailed),
        );
        assert!(matches!(e, LogError::AccessDenied { .. }), "{e:?}");
        assert!(!e.is_retryable());
    }

    /// A Kafka log's errors speak of Kafka-protocol brokers, never of
    /// another backend, and keep librdkafka's error underneath.
    #[test]
    fn errors_name_no_other_backend_and_keep_librdkafkas_error() {
        let produce = |code| {
            request_error(
                "kafka://h:1",
                "appending",
                &KafkaError::MessageProduction(code),
            )
        };
        let mapped = [
            produce(RDKafkaErrorCode::MessageTimedOut),
            produce(RDKafkaErrorCode::TopicAuthorizationFailed),
            produce(RDKafkaErrorCode::KafkaStorageError),
            produce(RDKafkaErrorCode::Unknown),
            request_error("kafka://h:1", "polling", &KafkaError::Canceled),
        ];
        let unreached = unreachable("kafka://h:1", "asking", None);
        for error in mapped.iter().chain([&unreached]) {
            let text = error.to_string();
            assert!(!text.to_lowercase().contains("iggy"), "{text}");
        }
        for error in &mapped {
            assert!(matches!(error.cause(), Some(Cause::Kafka(_))), "{error:?}");
        }
        assert!(
            matches!(
                &mapped,
                [
                    LogError::Unavailable { .. },
                    LogError::AccessDenied { .. },
                    LogError::Storage { .. },
                    LogError::Backend { .. },
                    LogError::Backend { .. },
                ]
            ),
            "{mapped:?}"
        );
    }
}
