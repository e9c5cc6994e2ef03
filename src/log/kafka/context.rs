//! What librdkafka says on its own: its log lines and the errors it reports
//! in the background (a broker refusing connections, say, once per broker
//! and retry) go to `tracing` at debug level, under the target `librdkafka`
//! (`AGDX_LOG_LEVEL=librdkafka=debug` shows them). What a request of the log
//! port finally meets comes back as its [`crate::log::LogError`], which is
//! the one line a user needs.

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::ConsumerContext;
use rdkafka::error::KafkaError;

/// The context of every librdkafka client here but group members (whose
/// context also serves their rebalances and says the same).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, level: RDKafkaLogLevel, facility: &str, message: &str) {
        log(level, facility, message);
    }

    fn error(&self, error: KafkaError, reason: &str) {
        background_error(&error, reason);
    }
}

impl ConsumerContext for Quiet {}

/// A log line of librdkafka.
pub(crate) fn log(level: RDKafkaLogLevel, facility: &str, message: &str) {
    tracing::debug!(target: "librdkafka", ?level, facility, "{message}");
}

/// An error librdkafka reports outside any request.
pub(crate) fn background_error(error: &KafkaError, reason: &str) {
    tracing::debug!(target: "librdkafka", %error, "{reason}");
}
