//! Testing a handler on its own: the [`Request`] a worker would hand it,
//! built without a log server, and what the handler published on the way.

use std::sync::{Arc, Mutex};

use agdx_wire::{AgentEnvelope, AgentId, ContentType, Kind};

use super::MemoryLog;
use crate::log::{LogRecord, SharedLog, TopicInfo};
use crate::producer::{CommandRequest, ProduceError, Producer, ReplyTo, Sent};
use crate::record::{content_type_of, envelope_of};
use crate::topology::{DEFAULT_PARTITIONS, DEFAULT_STREAM, TopicNames, Topology};
use crate::worker::Request;

/// The agent that sends the commands of a [`HandlerTest`] unless told
/// otherwise ([`HandlerTest::caller`]).
pub const DEFAULT_CALLER: &str = "tester";

/// Builds the requests a worker for one agent hands its handlers, on a
/// [`MemoryLog`] of its own, and shows what the handlers published.
///
/// A command goes through the same steps as in a worker: it is built and
/// validated by a [`Producer`] of the caller, appended, read back and
/// decoded, and handed over with its position, timestamp and content type.
/// Whatever the handler publishes through the request (a chunk stream, task
/// status) lands on the in-memory log, where [`HandlerTest::published`]
/// finds it. The handler's own answer is what its call returns.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use agdx::CommandRequest;
/// use agdx::testing::HandlerTest;
/// use agdx::wire::{AgentId, TaskState};
/// use agdx::worker::{Handler, HandlerReply, handler_fn};
///
/// let shout = handler_fn(|request| async move {
///     request.status(TaskState::Working).await.ok();
///     Ok(HandlerReply::raw(request.body.to_ascii_uppercase()))
/// });
/// let test = HandlerTest::new(AgentId::new("shouter")?);
/// let request = test.command(CommandRequest::new("shout", b"hello".to_vec())).await?;
/// assert_eq!(request.source().as_str(), "tester");
/// assert_eq!(shout.handle(request).await?, HandlerReply::raw(b"HELLO".to_vec()));
/// assert_eq!(test.published().len(), 1, "the status the handler reported");
/// # Ok(()) }
/// ```
pub struct HandlerTest {
    log: MemoryLog,
    agent: Producer,
    caller: Producer,
}

impl HandlerTest {
    /// Requests for the handlers of `agent`, sent by [`DEFAULT_CALLER`].
    pub fn new(agent: AgentId) -> Self {
        let log = MemoryLog::new();
        let topology = topology(&log);
        let shared: SharedLog = Arc::new(log.clone());
        let caller = AgentId::new(DEFAULT_CALLER).unwrap_or_else(|_| agent.clone());
        Self {
            agent: Producer::new(shared.clone(), topology.clone(), agent),
            caller: Producer::new(shared, topology, caller),
            log,
        }
    }

    /// Sends the commands as `caller` instead.
    pub fn caller(mut self, caller: AgentId) -> Self {
        self.caller = Producer::new(
            self.caller.log().clone(),
            self.caller.topology().clone(),
            caller,
        );
        self
    }

    /// The in-memory log the requests and what the handlers publish go to.
    pub fn log(&self) -> SharedLog {
        Arc::new(self.log.clone())
    }

    /// The topics on [`HandlerTest::log`].
    pub fn topology(&self) -> &Topology {
        self.agent.topology()
    }

    /// The request a worker would hand a handler for `command`, sent by the
    /// caller to the agent (unless the command names another target). An
    /// invalid command is refused as a producer refuses it.
    pub async fn command(&self, mut command: CommandRequest) -> Result<Request, ProduceError> {
        command
            .target
            .get_or_insert_with(|| self.agent.source().clone());
        let sent = self.caller.command(command).await?;
        Ok(self.request(&sent))
    }

    /// The request a worker would hand a handler for an `event` the caller
    /// sends (nobody waits for a reply to it).
    pub async fn event(
        &self,
        operation: Option<&str>,
        body: Vec<u8>,
        content_type: ContentType,
    ) -> Result<Request, ProduceError> {
        let sent = self
            .caller
            .event(None, operation, body, content_type)
            .await?;
        Ok(self.request(&sent))
    }

    /// Everything published on the responses topic so far (chunks, task
    /// status, replies), in the order each conversation's records were
    /// appended.
    pub fn published(&self) -> Vec<AgentEnvelope> {
        let responses = &self.topology().responses;
        (0..responses.partitions.get())
            .flat_map(|partition| self.records(responses, partition, 0))
            .filter_map(|record| envelope_of(&record).ok())
            .collect()
    }

    /// The request for the record `sent` names, read back as a worker reads it.
    fn request(&self, sent: &Sent) -> Request {
        let commands = &self.topology().commands;
        let record = self
            .records(commands, sent.partition, 0)
            .into_iter()
            .rev()
            .find(|record| {
                envelope_of(record).is_ok_and(|envelope| envelope.record == sent.record)
            });
        // The producer validated the envelope and the log holds it.
        let Some(record) = record else {
            unreachable!("the record just appended to the in-memory log is on it")
        };
        let Ok(envelope) = envelope_of(&record) else {
            unreachable!("the record was found by decoding it")
        };
        let reply_to = match envelope.kind {
            Kind::Command => ReplyTo::for_command(&envelope, Some(record.position)),
            _ => None,
        };
        Request {
            body: envelope.body.clone(),
            envelope: Box::new(envelope),
            position: record.position,
            timestamp_micros: record.timestamp_micros,
            content_type: content_type_of(&record),
            claim_checked: false,
            attempt: 1,
            producer: self.agent.clone(),
            reply_to,
            fence: None,
            recorder: Arc::new(Mutex::new(Vec::new())),
            cancel: tokio_util::sync::CancellationToken::new(),
            commands: None,
        }
    }

    fn records(&self, topic: &TopicInfo, partition: u32, from: u64) -> Vec<LogRecord> {
        self.log
            .read_now(topic, partition, from, u32::MAX)
            .unwrap_or_default()
    }
}

/// The agent topics on `log`, in the default stream.
fn topology(log: &MemoryLog) -> Topology {
    let names = TopicNames::default();
    let topic = |name: &str| {
        log.ensure_now(DEFAULT_STREAM, name, DEFAULT_PARTITIONS)
            .unwrap_or_else(|_| unreachable!("a new in-memory log takes any topic"))
    };
    Topology {
        commands: topic(&names.commands),
        responses: topic(&names.responses),
        registry: topic(&names.registry),
        dlq: topic(&names.dlq),
        snapshots: topic(&names.snapshots),
        inboxes: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use agdx_wire::StreamPurpose;

    use super::*;
    use crate::worker::{Handler, HandlerReply, handler_fn};

    fn agent(name: &str) -> AgentId {
        AgentId::new(name).unwrap()
    }

    #[tokio::test]
    async fn a_command_is_handed_over_as_a_worker_reads_it() {
        let test = HandlerTest::new(agent("summarizer")).caller(agent("planner"));
        let request = test
            .command(
                CommandRequest::new("summarize", b"{\"id\":1}".to_vec())
                    .content_type(ContentType::Json),
            )
            .await
            .unwrap();
        assert_eq!(request.operation(), Some("summarize"));
        assert_eq!(request.source(), &agent("planner"));
        assert_eq!(request.envelope.target, Some(agent("summarizer")));
        assert_eq!(request.content_type, ContentType::Json);
        assert_eq!(request.body, &b"{\"id\":1}"[..]);
        assert_eq!(request.position.topic, test.topology().commands.topic_id);
        let to = request.reply_to().expect("a command is answered");
        assert_eq!(to.target, agent("planner"));
        assert_eq!(Some(to.correlation), request.envelope.correlation);
        assert!(test.published().is_empty());
    }

    #[tokio::test]
    async fn what_a_handler_streams_is_published_in_order() {
        let streamer = handler_fn(|request| async move {
            let mut writer = request
                .stream(StreamPurpose::Chat, None)
                .expect("a command can be answered with a stream");
            for part in ["one", "two"] {
                writer.send(part.as_bytes().to_vec()).await.unwrap();
            }
            writer.finish(b"three".to_vec(), None, None).await.unwrap();
            Ok(HandlerReply::Streamed)
        });
        let test = HandlerTest::new(agent("streamer"));
        let request = test
            .command(CommandRequest::new("tell", b"x".to_vec()))
            .await
            .unwrap();
        let correlation = request.envelope.correlation;
        assert_eq!(
            streamer.handle(request).await.unwrap(),
            HandlerReply::Streamed
        );
        let published = test.published();
        let bodies: Vec<&[u8]> = published.iter().map(|e| &e.body[..]).collect();
        assert_eq!(bodies, [&b"one"[..], b"two", b"three"]);
        assert!(published.iter().all(|e| e.correlation == correlation));
        assert_eq!(
            published.iter().map(|e| e.last).collect::<Vec<_>>(),
            [false, false, true]
        );
    }

    #[tokio::test]
    async fn an_event_has_nobody_to_answer() {
        let test = HandlerTest::new(agent("auditor"));
        let request = test
            .event(Some("noted"), b"it happened".to_vec(), ContentType::Raw)
            .await
            .unwrap();
        assert_eq!(request.envelope.kind, Kind::Event);
        assert!(request.reply_to().is_none());
        assert!(request.stream(StreamPurpose::Chat, None).is_none());
    }

    #[tokio::test]
    async fn an_invalid_command_is_refused_as_a_producer_refuses_it() {
        let test = HandlerTest::new(agent("strict"));
        let refused = test.command(CommandRequest::new("empty", Vec::new())).await;
        assert!(
            matches!(refused, Err(ProduceError::Invalid(_))),
            "{:?}",
            refused.err()
        );
    }
}
