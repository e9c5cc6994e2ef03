//! Fencing: a partition's holder writes under a token that a newer holder's
//! claim makes stale (docs/runtime.md, "Fencing").
//!
//! When a pool member starts work on a partition of its group it appends a
//! *claim* record to partition [`CLAIM_PARTITION`] of `agent.snapshots`;
//! the claim's offset is the holder's fence token. Offsets of one partition
//! only grow, on every backend and across every process and host, so the
//! log itself orders the claims: no coordinator but the log. A holder is
//! current while no later claim names the same stream, topic, group and
//! partition; once one does, every write it has not made yet must not take
//! effect.
//!
//! A partition changes hands in three records. The member taking it over
//! first appends a *request*: the current holder, seeing it (or losing the
//! partition in its group), stops starting work, publishes and commits
//! what it handled, and appends a *release* of its token. A request counts
//! against any holder that asked before it, even one whose claim comes
//! after it: two members taking a partition over at once (a group's
//! assignment moving while both start) settle it the same way, the later
//! asker asking again and waiting for the earlier one's release. The
//! newcomer claims once the release is there, or once
//! [`Fences::handover`]'s wait has passed without one (a holder that
//! crashed or is cut off); its claim names what it took over and its
//! request, and counts only when nothing overtook them ([`Terms`]). A holder
//! that is still finishing says so (a *handing* record, about every
//! quarter of the wait) and the wait starts over from each, so a live but
//! slow holder (a loaded machine, a slow handler) is not taken for a dead
//! one, up to [`HANDOVER_PATIENCE`] times the wait. So a
//! holder that hands over in time has nothing in hand for the newcomer to
//! run again, and a token released before the next claim is never stale:
//! everything its holder wrote came before the release.
//!
//! Claims, requests and releases are small CBOR maps that no snapshot
//! reader decodes as a fold snapshot, so snapshots and claims share the
//! topic without noticing each other. [`Fences`] follows the claims: it learns the claim behind a
//! token, and what was claimed after it, by reading forward from the lowest
//! token it was asked about, never from the start of the topic.
//!
//! The token travels as the pinned envelope metadata key `agdx.fence`
//! ([`agdx_wire::META_FENCE`]) on every reply, status, chunk and error a
//! holder writes, and as the record header [`FENCE_HEADER`] (same name, a
//! `u64`) on its dead-letter capsules, whose format has no metadata.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use agdx_wire::{HeaderBytes, HeaderKind, HeaderName, HeaderValue};
use tokio::sync::Mutex;

use crate::log::{LogError, LogRecord, OutgoingRecord, SharedLog, TopicInfo};

mod record;

use record::{CLAIM_MARK, ClaimRecord, Claimed, Kind, Terms, TermsRecord, claim_of};

/// The partition of `agent.snapshots` that holds every claim.
pub const CLAIM_PARTITION: u32 = 0;

/// The record header carrying a dead letter's fence token: the same name as
/// the pinned metadata key; a raw header of the token's 8 bytes,
/// little-endian. Raw, because Kafka headers carry no kind and give back
/// only the AGDX record headers typed: a typed one could not be written
/// there.
pub const FENCE_HEADER: &str = agdx_wire::META_FENCE;

/// Where a holder stands, from what the claim partition says of its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Standing {
    /// Nothing later concerns its partition.
    Current,
    /// Another member asked for the partition: hand it over.
    Asked,
    /// A newer holder claimed the partition before this one released it.
    Stale,
}

/// How a wait for the previous holder ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Handover {
    /// Nobody held the partition, or its holder released it.
    Released,
    /// The wait passed without a release.
    TimedOut,
    /// Another member claimed the partition after the request: a claim on
    /// its terms would count for nothing (see [`Terms`]); ask again.
    Overtaken,
}

/// Why a fence could not be claimed or checked.
#[derive(Debug, thiserror::Error)]
pub enum FenceError {
    /// Reading or appending claims failed.
    #[error("reading or appending partition claims failed: {0}")]
    Log(#[from] LogError),
    /// A claim could not be encoded.
    #[error("a partition claim could not be encoded: {0}")]
    Encode(String),
    /// A claim just appended was not there when read back.
    #[error(
        "the claim just appended to partition {partition} of '{topic}' was not there when read back; the log lost it or another writer rewrote the partition"
    )]
    ClaimNotFound {
        /// The claims topic.
        topic: String,
        /// The claims partition.
        partition: u32,
    },
}

impl FenceError {
    /// Whether trying again may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            FenceError::Log(e) => e.is_retryable(),
            FenceError::Encode(_) => false,
            FenceError::ClaimNotFound { .. } => true,
        }
    }
}

/// Claims read per poll.
const CLAIM_POLL: u32 = 512;

/// How many handover waits a newcomer waits at most for a holder that
/// keeps saying it is finishing.
pub const HANDOVER_PATIENCE: u32 = 6;

/// The claims a process knows about, read from the log on demand.
///
/// Cheap to share: one per pool or requester. Every check that must be
/// current reads the claim partition up to its end first (one
/// `last_offset`, and a poll only when something was appended).
pub struct Fences {
    log: SharedLog,
    claims: TopicInfo,
    known: Mutex<Known>,
    /// Reads of the claim partition to its end begun so far, counted when
    /// each begins: a check that waited for the lock while a read begun
    /// after it asked ran takes that read's answer, instead of its own.
    reads_begun: AtomicU64,
}

/// Claims read so far: every record at offsets `range.0..range.1`.
#[derive(Default)]
struct Known {
    range: Option<(u64, u64)>,
    /// The number (in [`Fences::reads_begun`]) of the last read to the
    /// partition's end that succeeded.
    read_to_end: u64,
    /// When that read began.
    read_at: Option<tokio::time::Instant>,
    /// The terms of each claim that states them.
    terms: HashMap<u64, Terms>,
    /// What each claim (and request) is for, by offset.
    by_token: HashMap<u64, Claimed>,
    /// The offsets of the claims of each partition.
    claims: HashMap<Claimed, BTreeSet<u64>>,
    /// The requests for each partition: where each sits, and whose.
    requests: HashMap<Claimed, BTreeMap<u64, String>>,
    /// The member of each claim.
    claimant: HashMap<u64, String>,
    /// Where each released token's first release sits.
    released: HashMap<u64, u64>,
    /// Where each token's newest handing record sits.
    handing: HashMap<u64, u64>,
    /// Where each record read sits, by nonce: how a writer finds its own.
    by_nonce: HashMap<String, u64>,
}

impl Known {
    fn learn(&mut self, offset: u64, record: ClaimRecord) {
        match record.kind {
            Kind::Claim => {
                if let Some(terms) = record.terms {
                    self.terms.insert(offset, terms.into());
                }
                self.claims
                    .entry(record.claimed.clone())
                    .or_default()
                    .insert(offset);
                self.by_token.insert(offset, record.claimed);
                self.claimant.insert(offset, record.member.clone());
            }
            Kind::Request => {
                self.requests
                    .entry(record.claimed.clone())
                    .or_default()
                    .insert(offset, record.member.clone());
                self.by_token.insert(offset, record.claimed);
            }
            Kind::Release => {
                if let Some(token) = record.released {
                    let first = self.released.entry(token).or_insert(offset);
                    *first = (*first).min(offset);
                }
            }
            Kind::Handing => {
                if let Some(token) = record.released {
                    let newest = self.handing.entry(token).or_insert(offset);
                    *newest = (*newest).max(offset);
                }
            }
        }
        self.by_nonce.insert(record.nonce, offset);
    }

    /// Whether the claim at `offset` of `claimed`'s partition counts (see
    /// [`Terms`]): one without terms always does.
    fn counts(&self, claimed: &Claimed, offset: u64) -> bool {
        let Some(terms) = self.terms.get(&offset) else {
            return true;
        };
        if terms.over.is_some_and(|over| over >= offset) {
            // Names a claim that came after it: made up.
            return false;
        }
        let since = terms.over.map_or(0, |over| over + 1);
        let overtaken = self
            .claims
            .get(claimed)
            .is_some_and(|claims| claims.range(since..offset).next().is_some());
        !overtaken && terms.over.is_none_or(|over| terms.request > over)
    }

    fn standing(&self, token: u64) -> Standing {
        let Some(claimed) = self.by_token.get(&token) else {
            return Standing::Current;
        };
        let next_claim = self.claims.get(claimed).and_then(|claims| {
            claims
                .range(token + 1..)
                .find(|&&claim| self.counts(claimed, claim))
        });
        if let Some(&next) = next_claim {
            return match self.released.get(&token) {
                Some(&release) if release < next => Standing::Current,
                _ => Standing::Stale,
            };
        }
        // Asked by any request after the holder's own: also one that came
        // between its request and its claim (two members taking the
        // partition over at once, as a group's assignment moves), whose
        // member waits for this claim's release.
        let Some(requests) = self.requests.get(claimed) else {
            return Standing::Current;
        };
        let holder = self.claimant.get(&token);
        let own = requests
            .range(..token)
            .rev()
            .find(|(_, member)| Some(*member) == holder)
            .map_or(token, |(&offset, _)| offset);
        match requests.range(own + 1..).next_back() {
            Some(_) => Standing::Asked,
            None => Standing::Current,
        }
    }

    /// The newest claim that counts of the partition `request` asks for:
    /// the holder to wait for.
    fn holder_for(&self, request: u64) -> Option<u64> {
        let claimed = self.by_token.get(&request)?;
        self.claims
            .get(claimed)
            .and_then(|claims| claims.iter().rev().find(|&&c| self.counts(claimed, c)))
            .copied()
    }

    /// The newest claim of any kind of the partition `request` (a request
    /// or a claim) is about: what a claim made now takes over.
    fn newest_for(&self, request: u64) -> Option<u64> {
        let claimed = self.by_token.get(&request)?;
        self.claims
            .get(claimed)
            .and_then(|claims| claims.last())
            .copied()
    }

    /// The wait the holder `request` waits for declared, if any.
    fn declared_wait_for(&self, request: u64) -> Option<Duration> {
        self.holder_for(request)
            .and_then(|token| self.terms.get(&token))
            .map(|terms| terms.wait)
    }

    /// Whether `token` is stale, answered from what was read last when
    /// that can be trusted at `now`: a stale holder stays stale, and one
    /// found neither asked nor fenced by a read begun less than half its
    /// declared wait ago is still not fenced (see [`Terms`]). `None` when
    /// only a read can tell.
    fn stale_lately(&self, token: u64, now: tokio::time::Instant) -> Option<bool> {
        let (start, _) = self.range?;
        if start > token {
            return None;
        }
        match self.standing(token) {
            Standing::Stale => Some(true),
            Standing::Asked => None,
            Standing::Current => {
                let wait = self.terms.get(&token)?.wait;
                let read_at = self.read_at?;
                (now.saturating_duration_since(read_at) < wait / 2).then_some(false)
            }
        }
    }

    /// Whether the holder `request` waits for, if any, released the
    /// partition.
    fn released_for(&self, request: u64) -> bool {
        self.holder_for(request)
            .is_none_or(|token| self.released.contains_key(&token))
    }

    /// Whether the newest claim of the partition `token` was claimed under
    /// (`token` itself or a later one) is released: nobody holds it.
    fn released_since(&self, token: u64) -> bool {
        self.newest_for(token)
            .is_some_and(|newest| newest >= token && self.released.contains_key(&newest))
    }

    /// Where the newest handing record of the holder `request` waits for
    /// sits.
    fn handing_for(&self, request: u64) -> Option<u64> {
        self.holder_for(request)
            .and_then(|token| self.handing.get(&token).copied())
    }
}

impl Fences {
    /// Follows the claims on `snapshots` (the topology's `agent.snapshots`).
    pub fn new(log: SharedLog, snapshots: TopicInfo) -> Arc<Self> {
        Arc::new(Self {
            log,
            claims: snapshots,
            known: Mutex::new(Known::default()),
            reads_begun: AtomicU64::new(0),
        })
    }

    /// Claims `partition` of `topic` for `group` on behalf of `member` and
    /// returns the claim's fence token. Every holder before it that has not
    /// released the partition is stale from now on.
    pub async fn claim(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        member: &str,
    ) -> Result<u64, FenceError> {
        let claimed = Claimed::of(topic, group, partition);
        self.append_own(Kind::Claim, claimed, member, None, None)
            .await
    }

    /// Claims the partition `request` asked for, once its handover ended,
    /// on the terms of [`Terms`]: over the newest claim of the partition,
    /// declaring `wait` as the handover wait its successors give it.
    /// `None` when another member's claim overtook the request (it lies
    /// after the request, or landed between the newest claim and this
    /// one): this claim then counts for nothing, is released, and the
    /// caller asks for the partition again.
    pub(crate) async fn claim_requested(
        &self,
        request: u64,
        member: &str,
        wait: Duration,
    ) -> Result<Option<u64>, FenceError> {
        let (claimed, over) = {
            let mut known = self.known.lock().await;
            self.cover_previous(&mut known, request).await?;
            match known.by_token.get(&request) {
                Some(claimed) => (claimed.clone(), known.newest_for(request)),
                None => {
                    return Err(FenceError::ClaimNotFound {
                        topic: self.claims.topic.clone(),
                        partition: CLAIM_PARTITION,
                    });
                }
            }
        };
        if over.is_some_and(|over| over > request) {
            return Ok(None);
        }
        let terms = Terms {
            over,
            request,
            wait,
        };
        let token = self
            .append_own(Kind::Claim, claimed.clone(), member, None, Some(terms))
            .await?;
        let counts = {
            let mut known = self.known.lock().await;
            self.cover(&mut known, request).await?;
            known.counts(&claimed, token)
        };
        if counts {
            return Ok(Some(token));
        }
        self.release(token, member).await?;
        Ok(None)
    }

    /// Asks the holder of `partition` to hand it over (see
    /// [`Self::handover`]); returns where the request sits.
    pub(crate) async fn request(
        &self,
        topic: &TopicInfo,
        group: &str,
        partition: u32,
        member: &str,
    ) -> Result<u64, FenceError> {
        let claimed = Claimed::of(topic, group, partition);
        self.append_own(Kind::Request, claimed, member, None, None)
            .await
    }

    /// Says that the holder of `token` writes nothing more. A release that
    /// lies before the next claim keeps the token from ever being stale.
    pub(crate) async fn release(&self, token: u64, member: &str) -> Result<(), FenceError> {
        self.append_about(Kind::Release, token, member).await
    }

    /// Says that the holder of `token` was asked for its partition and is
    /// finishing: its next holder's wait starts over (see
    /// [`Self::handover`]).
    pub(crate) async fn handing(&self, token: u64, member: &str) -> Result<(), FenceError> {
        self.append_about(Kind::Handing, token, member).await
    }

    /// Appends a `kind` record about the claim `token` (nothing when its
    /// claim is not on the log).
    async fn append_about(&self, kind: Kind, token: u64, member: &str) -> Result<(), FenceError> {
        let claimed = {
            let mut known = self.known.lock().await;
            self.cover(&mut known, token).await?;
            known.by_token.get(&token).cloned()
        };
        let Some(claimed) = claimed else {
            return Ok(());
        };
        self.append_own(kind, claimed, member, Some(token), None)
            .await
            .map(drop)
    }

    /// Waits until the partition's newest holder releases it, reading the
    /// claims every `every`, for `wait` (or the longer wait the holder
    /// declared) after the request or after the holder's newest handing
    /// record, whichever is later, and never longer than
    /// [`HANDOVER_PATIENCE`] times that wait in all; ends at once when
    /// another member claims the partition after `request` (ask again). A
    /// failed read is tried at the next.
    pub(crate) async fn handover(&self, request: u64, wait: Duration, every: Duration) -> Handover {
        let started = tokio::time::Instant::now();
        let mut deadline = started + wait;
        let mut sign = None;
        loop {
            let (released, handing, declared, overtaken) = {
                let mut known = self.known.lock().await;
                match self.cover_previous(&mut known, request).await {
                    Ok(()) => (
                        known.released_for(request),
                        known.handing_for(request),
                        known.declared_wait_for(request),
                        known.newest_for(request) > Some(request),
                    ),
                    Err(error) => {
                        tracing::debug!(%error, "could not read the partition claims; reading again");
                        (false, None, None, false)
                    }
                }
            };
            if overtaken {
                return Handover::Overtaken;
            }
            if released {
                return Handover::Released;
            }
            // The holder's own declared wait, when longer: what readers
            // trusting a recent read of its standing count on.
            let wait = wait.max(declared.unwrap_or_default());
            let limit = started + wait * HANDOVER_PATIENCE;
            deadline = deadline.max(started + wait);
            if handing > sign {
                // The holder is alive and finishing: wait for it anew.
                sign = handing;
                deadline = limit.min(tokio::time::Instant::now() + wait);
            }
            if tokio::time::Instant::now() >= deadline {
                return Handover::TimedOut;
            }
            tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + every)).await;
        }
    }

    /// Appends a record of this process's and returns its offset.
    async fn append_own(
        &self,
        kind: Kind,
        claimed: Claimed,
        member: &str,
        released: Option<u64>,
        terms: Option<Terms>,
    ) -> Result<u64, FenceError> {
        let nonce = ulid::Ulid::new().to_string();
        let record = ClaimRecord {
            agdx_claim: CLAIM_MARK,
            kind,
            claimed,
            member: member.to_owned(),
            nonce: nonce.clone(),
            released,
            terms: terms.map(TermsRecord::from),
        };
        let mut payload = Vec::new();
        ciborium::into_writer(&record, &mut payload)
            .map_err(|e| FenceError::Encode(e.to_string()))?;
        let before = self.log.last_offset(&self.claims, CLAIM_PARTITION).await?;
        let outgoing = OutgoingRecord {
            headers: crate::record::capsule_record(Vec::new()).headers,
            payload: payload.into(),
        };
        self.log
            .append(&self.claims, CLAIM_PARTITION, vec![outgoing])
            .await?;
        let from = before.map_or(0, |b| b + 1);
        let mut known = self.known.lock().await;
        self.cover(&mut known, from).await?;
        known
            .by_nonce
            .remove(&nonce)
            .ok_or_else(|| FenceError::ClaimNotFound {
                topic: self.claims.topic.clone(),
                partition: CLAIM_PARTITION,
            })
    }

    /// Whether a later claim for the same partition and group makes `token`
    /// stale: one that lies before any release of `token`. A token whose
    /// claim is not on the log (another implementation's, or one given up to
    /// retention) is never stale: there is nothing to compare it with.
    pub async fn is_stale(&self, token: u64) -> Result<bool, LogError> {
        Ok(self.standing(token).await? == Standing::Stale)
    }

    /// Like [`Self::is_stale`], answered without a read while the last read
    /// still tells: a stale holder stays stale, and a holder that a read
    /// begun less than half its declared handover wait ago found neither
    /// asked for its partition nor fenced cannot have been fenced since
    /// (see [`Terms`]). A holder whose claim declares no wait (a claim
    /// made without a handover) is read for every time.
    pub(crate) async fn is_stale_lately(&self, token: u64) -> Result<bool, LogError> {
        {
            let known = self.known.lock().await;
            if let Some(stale) = known.stale_lately(token, tokio::time::Instant::now()) {
                return Ok(stale);
            }
        }
        self.is_stale(token).await
    }

    /// Where the holder of `token` stands (see [`Standing`]).
    pub(crate) async fn standing(&self, token: u64) -> Result<Standing, LogError> {
        let asked = self.reads_begun.load(Ordering::SeqCst);
        let mut known = self.known.lock().await;
        // A read begun after this check asked saw everything this one's
        // own read would: the pool's partitions checking at once share it.
        let fresh =
            known.read_to_end > asked && known.range.is_some_and(|(start, _)| start <= token);
        if !fresh {
            self.cover(&mut known, token).await?;
        }
        Ok(known.standing(token))
    }

    /// Like [`Self::standing`], for a holder about to make an effect: an
    /// answer that took longer than `within` to read is read again, since
    /// it tells how things stood when the read began (a holder cut off from
    /// the log mid-read gets it back only after the cut, when a newer
    /// holder may have claimed the partition). A newer holder waits its
    /// handover wait before claiming a partition that was not released, so
    /// an answer read within less than that wait is still true when it
    /// arrives. Bounded: after a few slow reads, an error.
    pub(crate) async fn standing_within(
        &self,
        token: u64,
        within: Duration,
    ) -> Result<Standing, LogError> {
        const TRIES: u32 = 3;
        let mut took = Duration::ZERO;
        for _ in 0..TRIES {
            let started = tokio::time::Instant::now();
            let standing = self.standing(token).await?;
            took = started.elapsed();
            if took <= within || standing != Standing::Current {
                return Ok(standing);
            }
        }
        Err(LogError::Backend {
            reason: format!(
                "the partition claims on '{}' took {took:?} to read, {TRIES} times; too slow to vouch for holder {token}",
                self.claims.topic
            ),
            source: None,
        })
    }

    /// Whether the partition `token` was claimed under has no holder now:
    /// its newest claim (`token` itself, or a later holder's) is released,
    /// so claiming it again fences no one.
    pub(crate) async fn released_since(&self, token: u64) -> Result<bool, LogError> {
        let mut known = self.known.lock().await;
        self.cover(&mut known, token).await?;
        Ok(known.released_since(token))
    }

    /// Whether the holder of `token` is still current (see [`Self::is_stale`]).
    pub async fn is_current(&self, token: u64) -> Result<bool, LogError> {
        Ok(!self.is_stale(token).await?)
    }

    /// Resolves once `token` is found stale, checking every `every`; a
    /// failed check is tried at the next. Runs as long as it is awaited:
    /// the caller races it against the work it guards.
    pub async fn stale_after(&self, token: u64, every: Duration) {
        loop {
            tokio::time::sleep(every).await;
            match self.is_stale(token).await {
                Ok(true) => return,
                Ok(false) => {}
                Err(error) => {
                    tracing::debug!(%error, "could not check a fence; checking again");
                }
            }
        }
    }

    /// Makes `known` cover the claim partition from `from` to its end:
    /// what lies before the range it covers, then what was appended since.
    async fn cover(&self, known: &mut Known, from: u64) -> Result<(), LogError> {
        let read = self.reads_begun.fetch_add(1, Ordering::SeqCst) + 1;
        let began = tokio::time::Instant::now();
        let Some(last) = self.log.last_offset(&self.claims, CLAIM_PARTITION).await? else {
            known.read_to_end = read;
            known.read_at = Some(began);
            return Ok(());
        };
        let end = last + 1;
        let (start, next) = match known.range {
            Some((start, next)) if start <= from => (start, next),
            Some((start, next)) => {
                self.scan(known, from, start).await?;
                (from, next)
            }
            None => (from, from),
        };
        self.scan(known, next, end).await?;
        known.range = Some((start, end.max(next)));
        known.read_to_end = read;
        known.read_at = Some(began);
        Ok(())
    }

    /// Makes `known` cover the claim partition from the claim before
    /// `request` of the same partition (or from its start) to its end:
    /// reading backwards a poll at a time, so only as far as that claim.
    async fn cover_previous(&self, known: &mut Known, request: u64) -> Result<(), LogError> {
        self.cover(known, request).await?;
        let Some(claimed) = known.by_token.get(&request).cloned() else {
            return Ok(());
        };
        // Bounded: every turn lowers `from`, which stops at 0.
        loop {
            let found = known
                .claims
                .get(&claimed)
                .is_some_and(|claims| claims.range(..request).next_back().is_some());
            let start = known.range.map_or(0, |(start, _)| start);
            if found || start == 0 {
                return Ok(());
            }
            let from = start.saturating_sub(u64::from(CLAIM_POLL));
            self.cover(known, from).await?;
        }
    }

    /// Learns the claims at offsets `from..end` of the claim partition.
    async fn scan(&self, known: &mut Known, from: u64, end: u64) -> Result<(), LogError> {
        let mut next = from;
        // Bounded: every turn moves `next` forward, towards a fixed `end`.
        while next < end {
            let max = u32::try_from(end - next)
                .unwrap_or(u32::MAX)
                .min(CLAIM_POLL);
            let records = match self
                .log
                .poll(&self.claims, CLAIM_PARTITION, next, max, Duration::ZERO)
                .await
            {
                Ok(records) => records,
                // Damaged records hold no claim anyone can rely on.
                Err(LogError::Corrupt(damage)) => {
                    next = damage.next_offset();
                    continue;
                }
                Err(error) => return Err(error),
            };
            // A poll that returns nothing short of the end it reported
            // (a reader reconnecting, a broker lagging) must not count as
            // read: a claim skipped here would never be seen, and a stale
            // holder would take itself for current.
            let Some(after) = records.last().map(|r| r.position.offset + 1) else {
                return Err(LogError::Backend {
                    reason: format!(
                        "reading the partition claims on '{}' partition {CLAIM_PARTITION} stopped at offset {next}, short of its end {end}",
                        self.claims.topic
                    ),
                    source: None,
                });
            };
            for record in records.iter().filter(|r| r.position.offset < end) {
                if let Some(claim) = claim_of(record) {
                    known.learn(record.position.offset, claim);
                }
            }
            next = after;
        }
        Ok(())
    }
}

/// The fence token an envelope carries (`agdx.fence`), if any.
pub fn fence_of(envelope: &agdx_wire::AgentEnvelope) -> Option<u64> {
    envelope
        .metadata
        .as_ref()?
        .get(agdx_wire::META_FENCE)?
        .as_u64()
}

/// Puts `fence` in `envelope`'s metadata (replacing any there).
pub(crate) fn set_fence(envelope: &mut agdx_wire::AgentEnvelope, fence: u64) {
    envelope
        .metadata
        .get_or_insert_with(agdx_wire::Metadata::new)
        .insert(agdx_wire::META_FENCE, fence);
}

/// The [`FENCE_HEADER`] value of `fence`.
pub(crate) fn fence_header(fence: u64) -> (HeaderName, HeaderValue) {
    (
        HeaderName::Borrowed(FENCE_HEADER),
        HeaderValue {
            kind: HeaderKind::Raw,
            bytes: HeaderBytes::from_slice(&fence.to_le_bytes()),
        },
    )
}

/// The fence token a record carries in its [`FENCE_HEADER`] (a dead
/// letter's), if any.
pub fn fence_of_record(record: &LogRecord) -> Option<u64> {
    let (_, value) = record
        .headers
        .iter()
        .find(|(name, _)| name == FENCE_HEADER)?;
    let bytes = <[u8; 8]>::try_from(value.bytes.as_slice()).ok()?;
    Some(u64::from_le_bytes(bytes))
}

#[cfg(all(test, feature = "testing"))]
mod tests;
