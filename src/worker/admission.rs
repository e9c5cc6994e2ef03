//! What becomes of a decoded record before anything runs: steps 2 to 5 and
//! 7 of docs/runtime.md §4 (target, `must_understand`, the signature gate,
//! the deadline, dispatch), decided from the record and the time alone.
//!
//! [`Admission::decide`] reads nothing but its arguments: no log, no store,
//! no clock, no file. The worker ([`super::process`]) does the I/O around
//! it: it reads the clock and the key registry, checks the idempotency key
//! of an admitted record (step 6) and runs the handler.

use std::collections::HashMap;
use std::sync::Arc;

use agdx_wire::{AgentEnvelope, AgentId, DeadLetterReason, ErrorBody, ErrorCode, Kind};

use crate::log::LogRecord;
use crate::trust::{Grants, KeyRegistry};

use super::handler::Handler;

/// The registered handlers of one agent.
#[derive(Default, Clone)]
pub(crate) struct Handlers {
    pub by_operation: HashMap<String, Arc<dyn Handler>>,
    pub fallback: Option<Arc<dyn Handler>>,
}

impl Handlers {
    fn get(&self, operation: Option<&str>) -> Option<Arc<dyn Handler>> {
        operation
            .and_then(|op| self.by_operation.get(op))
            .or(self.fallback.as_ref())
            .cloned()
    }

    /// The `operation` label of the metrics for `operation`: itself when a
    /// handler is registered for it, else [`crate::metrics::OTHER_OPERATION`],
    /// so a fallback handler's peer-chosen operations cannot grow the label set.
    pub(crate) fn metric_label(&self, operation: Option<&str>) -> &str {
        operation
            .and_then(|op| self.by_operation.get_key_value(op))
            .map_or(crate::metrics::OTHER_OPERATION, |(op, _)| op.as_str())
    }

    /// The handled operations, sorted.
    pub fn operations(&self) -> Vec<String> {
        let mut ops: Vec<String> = self.by_operation.keys().cloned().collect();
        ops.sort_unstable();
        ops
    }

    /// The handled operations, sorted, for error messages.
    fn list(&self) -> String {
        let ops = self.operations();
        if ops.is_empty() {
            "nothing".to_owned()
        } else {
            ops.join(", ")
        }
    }
}

/// The rules a pool admits records by.
pub(crate) struct Admission<'a> {
    /// The pool's agent.
    pub agent: &'a AgentId,
    /// The `must_understand` bits it implements.
    pub understood_features: u64,
    /// Step 4, when configured: the key registry as it is now, and the grants.
    pub gate: Option<(&'a KeyRegistry, Option<&'a Grants>)>,
    /// Step 7: who handles what.
    pub handlers: &'a Handlers,
}

/// What the steps before the handler decided.
pub(crate) enum Decision {
    /// Addressed to another agent, or a record a pool has nothing to do
    /// with (a reply, a status): committed, no effect.
    Skip,
    /// Refused: dead-lettered, and answered with `error` when someone waits.
    Refuse(Refused),
    /// On to the idempotency key (step 6), then to `dispatch`.
    Admit(Dispatch),
}

/// A refused record: how it is dead-lettered and answered.
pub(crate) struct Refused {
    pub reason: DeadLetterReason,
    /// Why, for the dead letter and the log.
    pub detail: String,
    /// The `error` reply for whoever waits.
    pub error: ErrorBody,
    /// The check that failed at the signature gate, when it was the gate.
    pub gate_check: Option<&'static str>,
}

impl Refused {
    fn new(reason: DeadLetterReason, code: ErrorCode, detail: String) -> Self {
        Self {
            error: ErrorBody::new(code).with_message(detail.clone()),
            reason,
            detail,
            gate_check: None,
        }
    }
}

/// Step 7: what handles an admitted record.
pub(crate) enum Dispatch {
    /// This handler.
    Handler(Arc<dyn Handler>),
    /// Nothing: a command is answered `unsupported` with this message (an
    /// event is skipped).
    Unsupported(String),
}

impl Admission<'_> {
    /// Decides what becomes of `envelope`, read from `record`, at
    /// `now_micros` (epoch microseconds).
    pub fn decide(
        &self,
        envelope: &AgentEnvelope,
        record: &LogRecord,
        now_micros: u64,
    ) -> Decision {
        // 3. addressed to someone else. Checked before step 2 so that a pool
        // never answers, and never dead-letters, what another agent must
        // judge; the order of the two has no other effect.
        if envelope.target.as_ref().is_some_and(|t| t != self.agent) {
            return Decision::Skip;
        }
        // 2. features the receiver must understand
        if envelope.requires_unknown_features(self.understood_features) {
            return Decision::Refuse(Refused::new(
                DeadLetterReason::Rejected,
                ErrorCode::Unsupported,
                format!(
                    "agent '{}' does not implement the features this message requires (must_understand bits {:#x}; it understands {:#x}); send it without those bits or to an agent that has them",
                    self.agent, envelope.must_understand, self.understood_features
                ),
            ));
        }
        // 4. the signature gate and the grants, when a verifier is configured
        if let Some((registry, grants)) = self.gate
            && let Err(refusal) = crate::trust::admit_with(registry, grants, envelope, record)
        {
            return Decision::Refuse(Refused {
                reason: DeadLetterReason::Rejected,
                detail: refusal.message(self.agent),
                error: refusal.error_body(self.agent),
                gate_check: Some(refusal.check()),
            });
        }
        // 5. deadline
        if let Some(deadline) = envelope.deadline_micros.filter(|d| *d < now_micros) {
            return Decision::Refuse(Refused::new(
                DeadLetterReason::DeadlineExceeded,
                ErrorCode::DeadlineExceeded,
                format!(
                    "the deadline passed {} ms before agent '{}' took the message up; send it again with a later deadline",
                    (now_micros - deadline) / 1000,
                    self.agent
                ),
            ));
        }
        if !matches!(envelope.kind, Kind::Command | Kind::Event) {
            return Decision::Skip;
        }
        // The input a waiting handler asked for is that handler's to read.
        if crate::task_states::input_for(envelope).is_some() {
            return Decision::Skip;
        }
        // 7. dispatch by operation
        Decision::Admit(match self.handlers.get(envelope.operation.as_deref()) {
            Some(handler) => Dispatch::Handler(handler),
            None => Dispatch::Unsupported(match envelope.operation.as_deref() {
                Some(op) => format!(
                    "no handler for operation '{op}' on agent '{}'; it handles: {}",
                    self.agent,
                    self.handlers.list()
                ),
                None => format!(
                    "the command names no operation and agent '{}' has no default handler; it handles: {}",
                    self.agent,
                    self.handlers.list()
                ),
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use agdx_wire::{ConversationId, CorrelationId, LogPosition, RecordId};
    use bytes::Bytes;

    use super::*;
    use crate::trust::{KeyEntry, KeyKind, Signer};
    use crate::worker::EchoHandler;

    const NOW: u64 = 1_700_000_000_000_000;

    fn agent(name: &str) -> AgentId {
        AgentId::new(name).unwrap()
    }

    fn command(operation: &str) -> AgentEnvelope {
        AgentEnvelope::command(
            RecordId::from_u128(1),
            ConversationId::from_u128(2),
            agent("planner"),
            CorrelationId::from_u128(3),
            Some(operation),
            b"body".to_vec(),
        )
        .with_target(agent("billing"))
    }

    fn record_of(envelope: &AgentEnvelope) -> LogRecord {
        LogRecord {
            position: LogPosition {
                stream: 1,
                topic: 1,
                partition: 0,
                offset: 7,
            },
            timestamp_micros: NOW,
            headers: Vec::new(),
            payload: Bytes::from(envelope.encode()),
        }
    }

    fn handlers(operations: &[&str], fallback: bool) -> Handlers {
        let handler: Arc<dyn Handler> = Arc::new(EchoHandler);
        Handlers {
            by_operation: operations
                .iter()
                .map(|op| ((*op).to_owned(), handler.clone()))
                .collect(),
            fallback: fallback.then_some(handler),
        }
    }

    /// Decides `envelope` for agent `billing`, handling `charge`, with
    /// `gate` and without unknown-feature support.
    fn decide(envelope: &AgentEnvelope, gate: Option<&KeyRegistry>, now: u64) -> Decision {
        let billing = agent("billing");
        let handlers = handlers(&["charge"], false);
        let admission = Admission {
            agent: &billing,
            understood_features: 0b1,
            gate: gate.map(|registry| (registry, None)),
            handlers: &handlers,
        };
        admission.decide(envelope, &record_of(envelope), now)
    }

    fn refusal(decision: Decision) -> Refused {
        match decision {
            Decision::Refuse(refused) => refused,
            Decision::Skip => panic!("skipped, not refused"),
            Decision::Admit(_) => panic!("admitted, not refused"),
        }
    }

    fn unsupported(decision: Decision) -> String {
        match decision {
            Decision::Admit(Dispatch::Unsupported(message)) => message,
            _ => panic!("not admitted as unsupported"),
        }
    }

    #[test]
    fn a_command_for_another_agent_is_skipped_whatever_else_is_wrong() {
        let elsewhere = command("charge")
            .with_target(agent("shipping"))
            .with_must_understand(0b10)
            .with_deadline_micros(NOW - 1);
        assert!(matches!(decide(&elsewhere, None, NOW), Decision::Skip));
    }

    #[test]
    fn unknown_must_understand_bits_are_refused_as_unsupported() {
        let refused = refusal(decide(
            &command("charge").with_must_understand(0b11),
            None,
            NOW,
        ));
        assert_eq!(refused.reason, DeadLetterReason::Rejected);
        assert_eq!(refused.error.code, ErrorCode::Unsupported);
        assert!(
            refused
                .detail
                .contains("must_understand bits 0x3; it understands 0x1"),
            "{}",
            refused.detail
        );
        assert!(matches!(
            decide(&command("charge").with_must_understand(0b1), None, NOW),
            Decision::Admit(Dispatch::Handler(_))
        ));
    }

    #[test]
    fn a_deadline_is_judged_at_the_time_given() {
        let due = command("charge").with_deadline_micros(NOW);
        assert!(matches!(decide(&due, None, NOW), Decision::Admit(_)));
        let refused = refusal(decide(&due, None, NOW + 2_500));
        assert_eq!(refused.reason, DeadLetterReason::DeadlineExceeded);
        assert_eq!(refused.error.code, ErrorCode::DeadlineExceeded);
        assert!(
            refused
                .detail
                .starts_with("the deadline passed 2 ms before agent 'billing'"),
            "{}",
            refused.detail
        );
        assert!(refused.gate_check.is_none());
    }

    #[test]
    fn the_gate_admits_an_enrolled_signer_and_refuses_before_the_deadline() {
        let signer = Signer::from_seed(&[5; 32]);
        let mut registry = KeyRegistry::new();
        registry
            .insert(KeyEntry::new(
                agent("planner"),
                KeyKind::Agent,
                signer.public_key(),
                None,
                None,
            ))
            .unwrap();
        let signed = signer.sign(command("charge"), None);
        assert!(matches!(
            decide(&signed, Some(&registry), NOW),
            Decision::Admit(Dispatch::Handler(_))
        ));
        let late_and_unsigned = command("charge").with_deadline_micros(NOW - 1);
        let refused = refusal(decide(&late_and_unsigned, Some(&registry), NOW));
        assert_eq!(refused.reason, DeadLetterReason::Rejected);
        assert_eq!(refused.error.code, ErrorCode::Unauthorized);
        assert_eq!(refused.gate_check, Some("unsigned"));
    }

    #[test]
    fn replies_and_statuses_are_skipped() {
        let response = AgentEnvelope::response(
            RecordId::from_u128(4),
            ConversationId::from_u128(2),
            agent("shipping"),
            CorrelationId::from_u128(3),
            b"done".to_vec(),
        );
        assert!(matches!(decide(&response, None, NOW), Decision::Skip));
    }

    #[test]
    fn dispatch_names_what_the_agent_handles_when_nothing_handles_the_operation() {
        let message = unsupported(decide(&command("refund"), None, NOW));
        assert_eq!(
            message,
            "no handler for operation 'refund' on agent 'billing'; it handles: charge"
        );
        let billing = agent("billing");
        let nothing = handlers(&[], false);
        let admission = Admission {
            agent: &billing,
            understood_features: 0,
            gate: None,
            handlers: &nothing,
        };
        let mut anonymous = command("charge");
        anonymous.operation = None;
        let Decision::Admit(Dispatch::Unsupported(message)) =
            admission.decide(&anonymous, &record_of(&anonymous), NOW)
        else {
            panic!("a command without operation or handler was not unsupported");
        };
        assert!(message.contains("names no operation"), "{message}");
        assert!(message.ends_with("it handles: nothing"), "{message}");
        let fallback = handlers(&["charge"], true);
        let admission = Admission {
            handlers: &fallback,
            ..admission
        };
        assert!(matches!(
            admission.decide(&command("refund"), &record_of(&command("refund")), NOW),
            Decision::Admit(Dispatch::Handler(_))
        ));
    }
}
