//! Turning Iggy client errors into [`LogError`]s.

use iggy::prelude::IggyError;

use crate::log::{Cause, LogError, TopicInfo};

/// What to do when no server answers.
pub(crate) const HINT: &str = "is an Iggy server (0.8.x) running there? One starts with `docker compose -f deploy/docker-compose.yml up -d` (see deploy/README.md)";

/// The server at `target` cannot be reached (`source`: the error that
/// said so, if any).
pub(crate) fn unreachable(target: &str, reason: &str, source: Option<Cause>) -> LogError {
    LogError::Unavailable {
        target: target.to_owned(),
        reason: reason.to_owned(),
        source,
    }
}

/// Whether the error means the connection is gone (the client has already
/// tried to reconnect by the time it reports one of these).
fn is_connection_error(e: &IggyError) -> bool {
    matches!(
        e,
        IggyError::CannotEstablishConnection
            | IggyError::Disconnected
            | IggyError::NotConnected
            | IggyError::TcpError
            | IggyError::EmptyResponse
            | IggyError::StaleClient
            | IggyError::ClientShutdown
            | IggyError::ConnectionClosed
    )
}

/// Maps an error of a request about `topic` (`doing` says what was being
/// done, e.g. "appending to partition 3").
pub(crate) fn topic_error(target: &str, topic: &TopicInfo, doing: &str, e: IggyError) -> LogError {
    match e {
        IggyError::StreamIdNotFound(_)
        | IggyError::StreamNameNotFound(_)
        | IggyError::TopicIdNotFound(..)
        | IggyError::TopicNameNotFound(..) => LogError::NoSuchTopic {
            stream: topic.stream.clone(),
            topic: topic.topic.clone(),
        },
        IggyError::PartitionNotFound(partition, ..) => LogError::NoSuchPartition {
            stream: topic.stream.clone(),
            topic: topic.topic.clone(),
            partition: u32::try_from(partition).unwrap_or(u32::MAX),
            partitions: topic.partitions.get(),
        },
        other => request_error(target, doing, other),
    }
}

/// Maps an error of any request (`doing` says what was being done).
pub(crate) fn request_error(target: &str, doing: &str, e: IggyError) -> LogError {
    let reason = format!("{doing}: {e} (Iggy error {})", e.as_code());
    if is_connection_error(&e) {
        return unreachable(target, &format!("{reason}; {HINT}"), Some(e.into()));
    }
    match &e {
        IggyError::InvalidCredentials
        | IggyError::Unauthenticated
        | IggyError::Unauthorized
        | IggyError::InvalidPersonalAccessToken => LogError::AccessDenied {
            target: target.to_owned(),
            reason: format!(
                "{reason}; the user in the connection string needs permission to manage streams and topics, send, poll and join consumer groups (the root user has all)"
            ),
            source: Some(e.into()),
        },
        IggyError::InvalidMessagePayloadLength
        | IggyError::TooBigUserHeaders
        | IggyError::InvalidHeaderKey
        | IggyError::InvalidHeaderValue
        | IggyError::InvalidOffset(_)
        | IggyError::InvalidStreamName
        | IggyError::InvalidTopicName
        | IggyError::InvalidConsumerGroupName
        | IggyError::InvalidPartitionsCount
        | IggyError::TooManyPartitions => LogError::InvalidInput(reason),
        IggyError::CannotAppendMessage
        | IggyError::CannotSaveMessagesToSegment
        | IggyError::CannotSaveIndexToSegment
        | IggyError::CannotWriteToFile
        | IggyError::CannotReadFile
        | IggyError::CannotSyncFile
        | IggyError::IoError(_) => LogError::Storage {
            reason,
            source: Some(e.into()),
        },
        _ => LogError::Backend {
            reason: format!("{reason}; agdx needs an Iggy server 0.8.x"),
            source: Some(e.into()),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_errors_are_unavailable_and_retryable() {
        let e = request_error("iggy://h:1", "polling", IggyError::Disconnected);
        assert!(matches!(e, LogError::Unavailable { .. }));
        assert!(e.is_retryable());
        assert!(e.to_string().contains("iggy://h:1"));
    }

    #[test]
    fn missing_topics_name_the_topic() {
        let topic = TopicInfo {
            stream: "s".into(),
            topic: "t".into(),
            stream_id: 0,
            topic_id: 0,
            partitions: std::num::NonZeroU32::new(2).unwrap(),
        };
        let e = topic_error(
            "iggy://h:1",
            &topic,
            "appending",
            IggyError::TopicIdNotFound(Default::default(), Default::default()),
        );
        assert!(matches!(e, LogError::NoSuchTopic { .. }));
        let e = request_error("iggy://h:1", "signing in", IggyError::InvalidCredentials);
        assert!(matches!(e, LogError::AccessDenied { .. }));
        assert!(!e.is_retryable());
    }

    /// An Iggy log's errors speak of Iggy, never of another backend, and
    /// keep the Iggy client's error underneath.
    #[test]
    fn errors_name_no_other_backend_and_keep_the_clients_error() {
        type Kind = fn(&LogError) -> bool;
        let cases: [(IggyError, Kind); 4] = [
            (IggyError::Disconnected, |e| {
                matches!(e, LogError::Unavailable { .. })
            }),
            (IggyError::Unauthorized, |e| {
                matches!(e, LogError::AccessDenied { .. })
            }),
            (IggyError::CannotWriteToFile, |e| {
                matches!(e, LogError::Storage { .. })
            }),
            (IggyError::Error, |e| matches!(e, LogError::Backend { .. })),
        ];
        for (iggy, kind) in cases {
            let error = request_error("iggy://h:1", "appending", iggy);
            assert!(kind(&error), "{error:?}");
            let text = error.to_string();
            assert!(!text.to_lowercase().contains("kafka"), "{text}");
            assert!(matches!(error.cause(), Some(Cause::Iggy(_))), "{error:?}");
        }
    }
}
