//! The records of the claim partition: claims, requests, releases and
//! handing records, and the terms a claim states.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::log::{LogRecord, TopicInfo};

/// The format version of claim records.
pub(super) const CLAIM_MARK: u8 = 1;

/// The longest handover wait a claim is taken to declare: a claim on the
/// log may say anything, and newcomers and readers must agree on one wait
/// that no arithmetic on it overflows.
pub(super) const MAX_DECLARED_WAIT: Duration = Duration::from_secs(600);

/// What a claim is for: one partition of one topic, read by one group.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(super) struct Claimed {
    pub(super) stream: String,
    pub(super) topic: String,
    pub(super) group: String,
    pub(super) partition: u32,
}

impl Claimed {
    pub(super) fn of(topic: &TopicInfo, group: &str, partition: u32) -> Self {
        Self {
            stream: topic.stream.clone(),
            topic: topic.topic.clone(),
            group: group.to_owned(),
            partition,
        }
    }
}

/// What a record of the claim partition says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Kind {
    /// The writer holds the partition from here on: its fence token.
    #[default]
    Claim,
    /// The writer asks the holder to hand the partition over.
    Request,
    /// The holder of [`ClaimRecord::released`] writes nothing more.
    Release,
    /// The holder of [`ClaimRecord::released`] was asked and is finishing
    /// what it has in hand: its release follows.
    Handing,
}

impl Kind {
    pub(super) fn is_claim(&self) -> bool {
        *self == Kind::Claim
    }
}

/// A claim record's payload (also of requests and releases).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct ClaimRecord {
    /// Always [`CLAIM_MARK`]: tells claims from anything else on the topic.
    pub(super) agdx_claim: u8,
    /// Absent on claims, so they read as they did before handovers.
    #[serde(default, skip_serializing_if = "Kind::is_claim")]
    pub(super) kind: Kind,
    #[serde(flatten)]
    pub(super) claimed: Claimed,
    /// The claiming member, for people reading the topic.
    pub(super) member: String,
    /// Unique per claim: lets its writer find it (appends return no offset).
    pub(super) nonce: String,
    /// On a release: the token released.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) released: Option<u64>,
    /// On a claim made by taking a partition over: what it took over (see
    /// [`Terms`]). Absent on claims that state no terms, which always count.
    #[serde(default, skip_serializing_if = "Option::is_none", flatten)]
    pub(super) terms: Option<TermsRecord>,
}

/// The terms of a claim as written: see [`Terms`].
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(super) struct TermsRecord {
    /// The newest claim of the partition its taker had seen, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) over: Option<u64>,
    /// Where its taker's request sits.
    pub(super) request: u64,
    /// The handover wait its successors give it, in milliseconds.
    pub(super) wait_ms: u64,
}

/// What a claim made by taking a partition over says of how it was made,
/// and what it asks of its successors.
///
/// Such a claim counts (fences its predecessors) only when no other claim
/// of its partition lies between the newest one its taker had seen
/// (`over`; with none, before it at all) and itself, and its taker's
/// request lies after that one. A claim that does not count was decided on
/// an outdated view (a taker paused between deciding and appending, or one
/// whose request another taker's claim overtook): it fences nobody, and
/// its taker takes the partition over anew. So a claim that counts over a
/// holder always follows a request placed after the holder's claim, and
/// then the holder's release or the wait the holder declared (`wait`):
/// a holder that a read found neither asked nor fenced stays unfenced for
/// that wait after the read began, which lets a recent read vouch for it
/// ([`super::Fences::is_stale_lately`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Terms {
    pub(super) over: Option<u64>,
    pub(super) request: u64,
    pub(super) wait: Duration,
}

impl From<TermsRecord> for Terms {
    fn from(record: TermsRecord) -> Self {
        Self {
            over: record.over,
            request: record.request,
            wait: Duration::from_millis(record.wait_ms).min(MAX_DECLARED_WAIT),
        }
    }
}

impl From<Terms> for TermsRecord {
    fn from(terms: Terms) -> Self {
        Self {
            over: terms.over,
            request: terms.request,
            wait_ms: u64::try_from(terms.wait.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// The claim behind `record`, when it is one.
pub(super) fn claim_of(record: &LogRecord) -> Option<ClaimRecord> {
    let claim: ClaimRecord = ciborium::from_reader(&record.payload[..]).ok()?;
    (claim.agdx_claim == CLAIM_MARK).then_some(claim)
}
