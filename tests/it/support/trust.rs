//! Keys for trust tests: a key registry with signers enrolled in it, saved
//! as a file (and key files) for child `agdx` processes.

use std::path::{Path, PathBuf};

use agdx::log::{LogRecord, OutgoingRecord};
use agdx::trust::{KeyEntry, KeyKind, KeyRegistry, Signer, Verifier};
use agdx::wire::{AgentEnvelope, ContentType, record_headers};
use agdx::{Clock, SystemClock};

use super::fabric::{Fabric, agent_id};

/// An hour, in microseconds.
pub const HOUR: u64 = 3_600_000_000;

/// A key registry under construction, and where it is saved.
pub struct Keys {
    pub registry: KeyRegistry,
    pub path: PathBuf,
}

impl Keys {
    /// An empty registry saved as `keys.json` in `dir`.
    pub fn new(dir: &Path) -> Keys {
        Keys {
            registry: KeyRegistry::new(),
            path: dir.join("keys.json"),
        }
    }

    /// Enrolls a new key for `principal`, valid from an hour ago on.
    pub fn enroll(&mut self, principal: &str, kind: KeyKind) -> Signer {
        self.enroll_with(principal, kind, |_| {})
    }

    /// Enrolls a new key, letting `adjust` change its entry (window,
    /// revocation) first.
    pub fn enroll_with(
        &mut self,
        principal: &str,
        kind: KeyKind,
        adjust: impl FnOnce(&mut KeyEntry),
    ) -> Signer {
        let signer = Signer::generate().expect("a new key");
        let now = SystemClock.now_micros();
        let mut entry = KeyEntry::new(
            agent_id(principal),
            kind,
            signer.public_key(),
            Some(now - HOUR),
            None,
        );
        adjust(&mut entry);
        self.registry.insert(entry).expect("enroll the key");
        self.registry
            .save(&self.path)
            .expect("save the key registry");
        signer
    }

    /// A verifier over the registry as it is now.
    pub fn verifier(&self) -> Verifier {
        Verifier::new(self.registry.clone())
    }

    /// The registry file's path as text, for `--keys`.
    pub fn arg(&self) -> String {
        self.path.display().to_string()
    }
}

/// Appends `envelope` to `topic` as it is (no signing, no checks), with the
/// headers a producer would give it.
pub async fn append_raw(
    fabric: &Fabric,
    topic: &agdx::log::TopicInfo,
    envelope: &AgentEnvelope,
    content_type: ContentType,
) {
    let partition = agdx::routing::partition_of(topic, envelope.conversation);
    fabric
        .log
        .append(
            topic,
            partition,
            vec![OutgoingRecord {
                headers: record_headers(envelope, content_type),
                payload: envelope.encode().into(),
            }],
        )
        .await
        .expect("append");
}

/// The record of `topic` whose envelope has `record` as its record id.
pub async fn record_with_id(
    fabric: &Fabric,
    topic: &agdx::log::TopicInfo,
    record: agdx::wire::RecordId,
) -> LogRecord {
    super::eventually("the record on the log", || async {
        fabric
            .records(topic)
            .await
            .into_iter()
            .find(|r| AgentEnvelope::decode(&r.payload).is_ok_and(|e| e.record == Some(record)))
    })
    .await
}
