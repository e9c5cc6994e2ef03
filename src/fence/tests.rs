//! The fence claims and checks, against the in-memory log.
use super::*;
use crate::testing::MemoryLog;

async fn fixture() -> (SharedLog, TopicInfo, TopicInfo) {
    let log: SharedLog = Arc::new(MemoryLog::new());
    let commands = log
        .ensure_topic("agents", "agent.commands", 4)
        .await
        .expect("commands");
    let snapshots = log
        .ensure_topic("agents", "agent.snapshots", 4)
        .await
        .expect("snapshots");
    (log, commands, snapshots)
}

#[tokio::test]
async fn a_later_claim_of_the_same_partition_and_group_makes_the_earlier_stale() {
    let (log, commands, snapshots) = fixture().await;
    let old_holder = Fences::new(log.clone(), snapshots.clone());
    let new_holder = Fences::new(log.clone(), snapshots.clone());
    let reader = Fences::new(log.clone(), snapshots.clone());
    let old = old_holder.claim(&commands, "pool", 2, "m1").await.unwrap();
    // Other partitions and groups do not fence this holder.
    let other_partition = new_holder.claim(&commands, "pool", 3, "m2").await.unwrap();
    let other_group = new_holder.claim(&commands, "other", 2, "m2").await.unwrap();
    assert!(old_holder.is_current(old).await.unwrap());
    assert!(reader.is_current(old).await.unwrap());

    let new = new_holder.claim(&commands, "pool", 2, "m2").await.unwrap();
    assert!(new > old, "tokens grow: {old} then {new}");
    assert!(old_holder.is_stale(old).await.unwrap());
    assert!(reader.is_stale(old).await.unwrap());
    assert!(reader.is_current(new).await.unwrap());
    assert!(reader.is_current(other_partition).await.unwrap());
    assert!(reader.is_current(other_group).await.unwrap());
}

/// Polls return nothing while `silent` is set, as a reader that just
/// reconnected can.
struct SilentPolls {
    inner: SharedLog,
    silent: std::sync::atomic::AtomicBool,
}

#[async_trait::async_trait]
impl crate::log::LogDecorator for SilentPolls {
    fn inner(&self) -> &dyn crate::log::Log {
        self.inner.as_ref()
    }

    async fn poll(
        &self,
        topic: &TopicInfo,
        partition: u32,
        from: u64,
        max: u32,
        wait: Duration,
    ) -> Result<Vec<LogRecord>, LogError> {
        if self.silent.load(std::sync::atomic::Ordering::SeqCst) {
            return Ok(Vec::new());
        }
        self.inner.poll(topic, partition, from, max, wait).await
    }
}

#[tokio::test]
async fn claims_a_poll_did_not_return_are_read_later_not_skipped() {
    let (log, commands, snapshots) = fixture().await;
    let quiet = Arc::new(SilentPolls {
        inner: log.clone(),
        silent: Default::default(),
    });
    let holder = Fences::new(quiet.clone(), snapshots.clone());
    let old = holder.claim(&commands, "pool", 2, "m1").await.unwrap();
    assert!(holder.is_current(old).await.unwrap());

    let newer = Fences::new(log.clone(), snapshots.clone());
    newer.claim(&commands, "pool", 2, "m2").await.unwrap();
    quiet
        .silent
        .store(true, std::sync::atomic::Ordering::SeqCst);
    assert!(
        holder.is_stale(old).await.is_err(),
        "claims that could not be read are no answer"
    );
    quiet
        .silent
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert!(
        holder.is_stale(old).await.unwrap(),
        "the newer claim is read once polls return it"
    );
}

#[tokio::test]
async fn a_reader_asked_about_an_older_token_later_still_finds_it_stale() {
    let (log, commands, snapshots) = fixture().await;
    let holders = Fences::new(log.clone(), snapshots.clone());
    let first = holders.claim(&commands, "pool", 0, "m1").await.unwrap();
    let second = holders.claim(&commands, "pool", 1, "m1").await.unwrap();
    let third = holders.claim(&commands, "pool", 0, "m2").await.unwrap();
    let reader = Fences::new(log.clone(), snapshots.clone());
    assert!(reader.is_current(second).await.unwrap());
    // `first` lies before what the reader has read so far.
    assert!(reader.is_stale(first).await.unwrap());
    assert!(reader.is_current(third).await.unwrap());
}

#[tokio::test]
async fn snapshots_and_unknown_tokens_are_not_claims() {
    let (log, commands, snapshots) = fixture().await;
    log.append(
        &snapshots,
        CLAIM_PARTITION,
        vec![crate::testing::record(b"not a claim".to_vec())],
    )
    .await
    .unwrap();
    let fences = Fences::new(log.clone(), snapshots.clone());
    // Offset 0 holds no claim: nothing to compare with.
    assert!(fences.is_current(0).await.unwrap());
    assert!(fences.is_current(1000).await.unwrap());
    let token = fences.claim(&commands, "pool", 0, "m1").await.unwrap();
    assert_eq!(token, 1);
    assert!(fences.is_current(token).await.unwrap());
}

const SOON: Duration = Duration::from_millis(10);

#[tokio::test]
async fn a_holder_that_hands_over_before_the_next_claim_is_never_stale() {
    let (log, commands, snapshots) = fixture().await;
    let holder = Fences::new(log.clone(), snapshots.clone());
    let newcomer = Fences::new(log.clone(), snapshots.clone());
    let old = holder.claim(&commands, "pool", 1, "m1").await.unwrap();
    // A request for another partition asks nothing of this holder.
    newcomer.request(&commands, "pool", 2, "m2").await.unwrap();
    assert_eq!(holder.standing(old).await.unwrap(), Standing::Current);

    let request = newcomer.request(&commands, "pool", 1, "m2").await.unwrap();
    assert_eq!(holder.standing(old).await.unwrap(), Standing::Asked);
    assert!(!holder.is_stale(old).await.unwrap(), "asked is not stale");
    holder.release(old, "m1").await.unwrap();
    let waited = newcomer
        .handover(request, Duration::from_secs(30), SOON)
        .await;
    assert_eq!(waited, Handover::Released);
    let new = newcomer.claim(&commands, "pool", 1, "m2").await.unwrap();

    // What the old holder wrote came before its release: readers keep it.
    let reader = Fences::new(log.clone(), snapshots.clone());
    assert!(!reader.is_stale(old).await.unwrap());
    assert_eq!(reader.standing(new).await.unwrap(), Standing::Current);
}

#[tokio::test]
async fn a_holder_that_never_hands_over_is_claimed_after_the_wait_and_stale() {
    let (log, commands, snapshots) = fixture().await;
    let holder = Fences::new(log.clone(), snapshots.clone());
    let newcomer = Fences::new(log.clone(), snapshots.clone());
    let old = holder.claim(&commands, "pool", 0, "m1").await.unwrap();
    let request = newcomer.request(&commands, "pool", 0, "m2").await.unwrap();
    let wait = Duration::from_millis(200);
    let started = std::time::Instant::now();
    assert_eq!(
        newcomer.handover(request, wait, SOON).await,
        Handover::TimedOut
    );
    assert!(started.elapsed() >= wait, "waited {:?}", started.elapsed());
    let new = newcomer.claim(&commands, "pool", 0, "m2").await.unwrap();
    assert_eq!(holder.standing(old).await.unwrap(), Standing::Stale);
    // A release after the newer claim comes too late to count.
    holder.release(old, "m1").await.unwrap();
    assert!(holder.is_stale(old).await.unwrap());
    assert!(newcomer.is_current(new).await.unwrap());
}

#[tokio::test]
async fn a_holder_that_says_it_is_finishing_is_waited_for_past_the_wait() {
    let (log, commands, snapshots) = fixture().await;
    let holder = Fences::new(log.clone(), snapshots.clone());
    let newcomer = Fences::new(log.clone(), snapshots.clone());
    let old = holder.claim(&commands, "pool", 0, "m1").await.unwrap();
    let request = newcomer.request(&commands, "pool", 0, "m2").await.unwrap();
    let wait = Duration::from_millis(300);
    // Finishing for three waits, saying so every third of one, then
    // releasing.
    let finishing = {
        let holder = holder.clone();
        tokio::spawn(async move {
            for _ in 0..9 {
                tokio::time::sleep(wait / 3).await;
                holder.handing(old, "m1").await.unwrap();
            }
            holder.release(old, "m1").await.unwrap();
        })
    };
    let started = std::time::Instant::now();
    assert_eq!(
        newcomer.handover(request, wait, SOON).await,
        Handover::Released,
        "a live holder's release is waited for"
    );
    assert!(started.elapsed() >= 2 * wait, "{:?}", started.elapsed());
    finishing.await.unwrap();
    let new = newcomer.claim(&commands, "pool", 0, "m2").await.unwrap();
    assert!(!holder.is_stale(old).await.unwrap(), "it released in time");
    assert!(newcomer.is_current(new).await.unwrap());

    // A holder that goes silent is claimed a wait after its last word,
    // and one that never stops saying it is not waited for forever.
    let request = holder.request(&commands, "pool", 0, "m1").await.unwrap();
    newcomer.handing(new, "m2").await.unwrap();
    let started = std::time::Instant::now();
    assert_eq!(
        holder.handover(request, wait, SOON).await,
        Handover::TimedOut
    );
    let waited = started.elapsed();
    assert!(waited >= wait && waited < 3 * wait, "{waited:?}");
    let request = holder.request(&commands, "pool", 0, "m1").await.unwrap();
    let chatty = {
        let newcomer = newcomer.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(wait / 3).await;
                newcomer.handing(new, "m2").await.unwrap();
            }
        })
    };
    let started = std::time::Instant::now();
    assert_eq!(
        holder.handover(request, wait, SOON).await,
        Handover::TimedOut
    );
    chatty.abort();
    let waited = started.elapsed();
    assert!(
        waited >= wait * HANDOVER_PATIENCE && waited < wait * (HANDOVER_PATIENCE + 2),
        "{waited:?}"
    );
}

/// Two members take a partition over at once: the first asks, then the
/// second, then the first (finding no holder) claims. The first is asked
/// by the second's request, though it came before its claim, and the
/// second waits for the first's release instead of claiming over it.
#[tokio::test]
async fn a_request_before_an_earlier_askers_claim_waits_for_that_claim() {
    let (log, commands, snapshots) = fixture().await;
    let first = Fences::new(log.clone(), snapshots.clone());
    let second = Fences::new(log.clone(), snapshots.clone());
    let asked_first = first.request(&commands, "pool", 7, "m1").await.unwrap();
    let asked_second = second.request(&commands, "pool", 7, "m2").await.unwrap();
    assert_eq!(
        first
            .handover(asked_first, Duration::from_secs(30), SOON)
            .await,
        Handover::Released,
        "nobody held the partition"
    );
    let token = first.claim(&commands, "pool", 7, "m1").await.unwrap();
    assert_eq!(
        first.standing(token).await.unwrap(),
        Standing::Asked,
        "the second member's request stands, though it came before the claim"
    );
    let wait = Duration::from_millis(200);
    assert_eq!(
        second.handover(asked_second, wait, SOON).await,
        Handover::Overtaken,
        "a claim after the request: a claim on its terms would count for nothing"
    );
    let asked_again = second.request(&commands, "pool", 7, "m2").await.unwrap();
    assert_eq!(
        second.handover(asked_again, wait, SOON).await,
        Handover::TimedOut,
        "the first member's claim is waited for"
    );
    first.release(token, "m1").await.unwrap();
    assert_eq!(
        second.handover(asked_again, wait, SOON).await,
        Handover::Released
    );
    let next = second.claim(&commands, "pool", 7, "m2").await.unwrap();
    assert!(!first.is_stale(token).await.unwrap(), "released in time");
    assert_eq!(second.standing(next).await.unwrap(), Standing::Current);
    // The holder's own request, and one of its own from before, ask
    // nothing of it.
    let (log, commands, snapshots) = fixture().await;
    let alone = Fences::new(log, snapshots);
    alone.request(&commands, "pool", 1, "m1").await.unwrap();
    let asked = alone.request(&commands, "pool", 1, "m1").await.unwrap();
    assert_eq!(alone.handover(asked, wait, SOON).await, Handover::Released);
    let token = alone.claim(&commands, "pool", 1, "m1").await.unwrap();
    assert_eq!(alone.standing(token).await.unwrap(), Standing::Current);
}

#[tokio::test]
async fn a_new_process_finds_the_previous_holder_far_back_in_the_claims() {
    let (log, commands, snapshots) = fixture().await;
    let holder = Fences::new(log.clone(), snapshots.clone());
    let old = holder.claim(&commands, "pool", 3, "m1").await.unwrap();
    // More claims of other partitions than one read returns.
    let others = (0..CLAIM_POLL + 20)
        .map(|_| crate::testing::record(b"not a claim".to_vec()))
        .collect();
    log.append(&snapshots, CLAIM_PARTITION, others)
        .await
        .unwrap();
    let newcomer = Fences::new(log.clone(), snapshots.clone());
    let request = newcomer.request(&commands, "pool", 3, "m2").await.unwrap();
    assert_eq!(
        newcomer
            .handover(request, Duration::from_millis(100), SOON)
            .await,
        Handover::TimedOut,
        "the unreleased holder at offset {old} is found"
    );
    holder.release(old, "m1").await.unwrap();
    let fresh = Fences::new(log.clone(), snapshots.clone());
    let request = fresh.request(&commands, "pool", 3, "m3").await.unwrap();
    assert_eq!(
        fresh.handover(request, Duration::from_secs(30), SOON).await,
        Handover::Released
    );
}

#[tokio::test]
async fn a_partition_nobody_held_is_claimed_without_waiting() {
    let (log, commands, snapshots) = fixture().await;
    let fences = Fences::new(log.clone(), snapshots.clone());
    let request = fences.request(&commands, "pool", 0, "m1").await.unwrap();
    assert_eq!(
        fences
            .handover(request, Duration::from_secs(30), SOON)
            .await,
        Handover::Released
    );
}

/// The keys of `record`'s CBOR map, in order.
fn keys_of(record: &ClaimRecord) -> Vec<String> {
    let mut bytes = Vec::new();
    ciborium::into_writer(record, &mut bytes).unwrap();
    let value: ciborium::Value = ciborium::from_reader(&bytes[..]).unwrap();
    value
        .as_map()
        .unwrap()
        .iter()
        .filter_map(|(k, _)| k.as_text().map(str::to_owned))
        .collect()
}

#[test]
fn a_claim_record_has_no_kind_so_it_reads_as_before_handovers() {
    let record = ClaimRecord {
        agdx_claim: CLAIM_MARK,
        kind: Kind::Claim,
        claimed: Claimed {
            stream: "s".into(),
            topic: "t".into(),
            group: "g".into(),
            partition: 0,
        },
        member: "m".into(),
        nonce: "n".into(),
        released: None,
        terms: None,
    };
    assert_eq!(
        keys_of(&record),
        [
            "agdx_claim",
            "stream",
            "topic",
            "group",
            "partition",
            "member",
            "nonce"
        ]
    );
}

#[test]
fn the_fence_rides_in_the_pinned_metadata_key() {
    let envelope = agdx_wire::AgentEnvelope::command(
        agdx_wire::RecordId::from_u128(1),
        agdx_wire::ConversationId::from_u128(2),
        agdx_wire::AgentId::new("a").unwrap(),
        agdx_wire::CorrelationId::from_u128(3),
        Some("op"),
        b"x".to_vec(),
    );
    assert_eq!(fence_of(&envelope), None);
    let mut fenced = envelope;
    set_fence(&mut fenced, 7);
    assert_eq!(fence_of(&fenced), Some(7));
    assert!(fenced.validate().is_ok());
}

/// Counts the reads of the end of the claim partition.
struct CountedReads {
    inner: SharedLog,
    reads: AtomicU64,
}

#[async_trait::async_trait]
impl crate::log::LogDecorator for CountedReads {
    fn inner(&self) -> &dyn crate::log::Log {
        self.inner.as_ref()
    }

    async fn last_offset(
        &self,
        topic: &TopicInfo,
        partition: u32,
    ) -> Result<Option<u64>, LogError> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.last_offset(topic, partition).await
    }
}

/// Appends a claim of `partition` by `member` stating `over` and
/// `request` as its terms (and a 10 s wait), whatever the claims say: a
/// taker's claim decided on a view that may since have changed.
async fn claim_on(
    fences: &Fences,
    commands: &TopicInfo,
    partition: u32,
    member: &str,
    (over, request): (Option<u64>, u64),
) -> u64 {
    let terms = Terms {
        over,
        request,
        wait: Duration::from_secs(10),
    };
    let claimed = Claimed::of(commands, "pool", partition);
    fences
        .append_own(Kind::Claim, claimed, member, None, Some(terms))
        .await
        .unwrap()
}

/// Takes `partition` over as a pool member does: asks, waits for the
/// handover, claims on the request's terms declaring `wait`.
async fn take(fences: &Fences, commands: &TopicInfo, partition: u32, member: &str) -> u64 {
    let request = fences
        .request(commands, "pool", partition, member)
        .await
        .unwrap();
    assert_eq!(
        fences.handover(request, Duration::from_secs(1), SOON).await,
        Handover::Released
    );
    fences
        .claim_requested(request, member, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("nothing overtook the request")
}

#[test]
fn claims_carry_their_terms_and_read_without_them_as_before() {
    let claimed = Claimed {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        partition: 0,
    };
    let terms = Terms {
        over: Some(4),
        request: 6,
        wait: Duration::from_millis(5_000),
    };
    let record = |terms: Option<Terms>| ClaimRecord {
        agdx_claim: CLAIM_MARK,
        kind: Kind::Claim,
        claimed: claimed.clone(),
        member: "m".into(),
        nonce: "n".into(),
        released: None,
        terms: terms.map(TermsRecord::from),
    };
    let with_terms = record(Some(terms));
    let keys = keys_of(&with_terms);
    assert!(
        ["over", "request", "wait_ms"]
            .iter()
            .all(|key| keys.iter().any(|k| k == key)),
        "{keys:?}"
    );
    let mut bytes = Vec::new();
    ciborium::into_writer(&with_terms, &mut bytes).unwrap();
    let read: ClaimRecord = ciborium::from_reader(&bytes[..]).unwrap();
    assert_eq!(read.terms.map(Terms::from), Some(terms));

    let mut bytes = Vec::new();
    ciborium::into_writer(&record(None), &mut bytes).unwrap();
    let read: ClaimRecord = ciborium::from_reader(&bytes[..]).unwrap();
    assert!(read.terms.is_none(), "a claim without terms has none");
}

#[tokio::test]
async fn a_claim_decided_on_an_outdated_view_fences_nobody() {
    let (log, commands, snapshots) = fixture().await;
    let first = Fences::new(log.clone(), snapshots.clone());
    let late = Fences::new(log.clone(), snapshots.clone());
    let next = Fences::new(log.clone(), snapshots.clone());
    let reader = Fences::new(log.clone(), snapshots.clone());
    let old = take(&first, &commands, 5, "m1").await;

    // A taker decides on a view where `old` is the newest claim, then is
    // paused before it appends; meanwhile `old` hands over to another.
    let late_request = late.request(&commands, "pool", 5, "m3").await.unwrap();
    first.release(old, "m1").await.unwrap();
    let holder = take(&next, &commands, 5, "m2").await;
    let stray = claim_on(&late, &commands, 5, "m3", (Some(old), late_request)).await;
    assert!(stray > holder);
    assert!(
        !reader.is_stale(holder).await.unwrap(),
        "a claim with another between it and what it took over counts for nothing"
    );
    assert_eq!(
        late.claim_requested(late_request, "m3", Duration::from_secs(10))
            .await
            .unwrap(),
        None,
        "claiming on an overtaken request is refused"
    );
    assert!(!reader.is_stale(holder).await.unwrap());

    // A claim whose request lies before what it took over counts for
    // nothing either, though nothing lies between.
    let newest = reader.known.lock().await.newest_for(late_request);
    claim_on(&late, &commands, 5, "m3", (newest, late_request)).await;
    assert!(!reader.is_stale(holder).await.unwrap());

    // Asked again, and the holder not releasing, the taker's claim counts.
    let asked = late.request(&commands, "pool", 5, "m3").await.unwrap();
    assert_eq!(reader.standing(holder).await.unwrap(), Standing::Asked);
    let taken = late
        .claim_requested(asked, "m3", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("nothing overtook the request");
    assert!(reader.is_stale(holder).await.unwrap());
    assert_eq!(reader.standing(taken).await.unwrap(), Standing::Current);
}

#[tokio::test(start_paused = true)]
async fn a_recent_read_vouches_for_a_holder_for_half_its_declared_wait() {
    let (log, commands, snapshots) = fixture().await;
    let counted = Arc::new(CountedReads {
        inner: log.clone(),
        reads: AtomicU64::new(0),
    });
    let holders = Fences::new(log.clone(), snapshots.clone());
    let reader = Fences::new(counted.clone(), snapshots.clone());
    let reads = || counted.reads.load(Ordering::SeqCst);
    let holder = take(&holders, &commands, 1, "m1").await;

    assert!(!reader.is_stale_lately(holder).await.unwrap());
    let after_first = reads();
    assert!(after_first > 0, "the first answer is read");
    tokio::time::advance(Duration::from_millis(4_900)).await;
    assert!(!reader.is_stale_lately(holder).await.unwrap());
    assert_eq!(
        reads(),
        after_first,
        "within half the declared wait: no read"
    );
    tokio::time::advance(Duration::from_millis(200)).await;
    assert!(!reader.is_stale_lately(holder).await.unwrap());
    assert!(reads() > after_first, "past half the wait: read again");

    // A request placed since is not seen until the next read; once seen,
    // the holder may be fenced soon, so every answer is read.
    let newcomer = Fences::new(log.clone(), snapshots.clone());
    let request = newcomer.request(&commands, "pool", 1, "m2").await.unwrap();
    assert!(!reader.is_stale_lately(holder).await.unwrap());
    assert_eq!(reader.standing(holder).await.unwrap(), Standing::Asked);
    let asked = reads();
    assert!(!reader.is_stale_lately(holder).await.unwrap());
    assert!(reads() > asked, "an asked holder is read for every time");

    // Fenced, it stays fenced: no read needed.
    newcomer
        .claim_requested(request, "m2", Duration::from_secs(10))
        .await
        .unwrap()
        .expect("nothing overtook the request");
    assert!(reader.is_stale_lately(holder).await.unwrap());
    let fenced = reads();
    assert!(reader.is_stale_lately(holder).await.unwrap());
    assert_eq!(reads(), fenced);

    // A claim declaring no wait (made without a handover) is read for
    // every time.
    let plain = holders.claim(&commands, "pool", 3, "m1").await.unwrap();
    assert!(!reader.is_stale_lately(plain).await.unwrap());
    let before = reads();
    assert!(!reader.is_stale_lately(plain).await.unwrap());
    assert!(reads() > before);
}

#[tokio::test(start_paused = true)]
async fn a_newcomer_waits_out_the_wait_its_predecessor_declared() {
    let (log, commands, snapshots) = fixture().await;
    let holder = Fences::new(log.clone(), snapshots.clone());
    let newcomer = Fences::new(log.clone(), snapshots.clone());
    take(&holder, &commands, 2, "m1").await;
    let request = newcomer.request(&commands, "pool", 2, "m2").await.unwrap();
    let started = tokio::time::Instant::now();
    assert_eq!(
        newcomer
            .handover(request, Duration::from_secs(1), Duration::from_millis(100))
            .await,
        Handover::TimedOut
    );
    assert!(
        started.elapsed() >= Duration::from_secs(10),
        "waited {:?}, not the holder's declared 10 s",
        started.elapsed()
    );
}

#[tokio::test(start_paused = true)]
async fn made_up_terms_count_for_nothing_and_declare_a_bounded_wait() {
    let (log, commands, snapshots) = fixture().await;
    let holders = Fences::new(log.clone(), snapshots.clone());
    let writer = Fences::new(log.clone(), snapshots.clone());
    let reader = Fences::new(log.clone(), snapshots.clone());
    let holder = take(&holders, &commands, 6, "m1").await;
    let request = writer.request(&commands, "pool", 6, "m2").await.unwrap();
    for over in [holder + 1_000, u64::MAX] {
        claim_on(&writer, &commands, 6, "m2", (Some(over), request)).await;
        assert!(
            !reader.is_stale(holder).await.unwrap(),
            "a claim naming one after itself ({over}) fences nobody"
        );
    }

    // A wait past any bound is taken as the longest a claim declares.
    let greedy = Fences::new(log.clone(), snapshots.clone());
    let asked = greedy.request(&commands, "pool", 2, "m3").await.unwrap();
    let terms = Terms {
        over: None,
        request: asked,
        wait: Duration::MAX,
    };
    let token = greedy
        .append_own(
            Kind::Claim,
            Claimed::of(&commands, "pool", 2),
            "m3",
            None,
            Some(terms),
        )
        .await
        .unwrap();
    assert_eq!(
        reader.known.lock().await.terms.get(&token).map(|t| t.wait),
        None,
        "not read yet"
    );
    assert!(!reader.is_stale(token).await.unwrap());
    assert_eq!(
        reader.known.lock().await.terms.get(&token).map(|t| t.wait),
        Some(record::MAX_DECLARED_WAIT)
    );
    let newcomer = Fences::new(log.clone(), snapshots.clone());
    let request = newcomer.request(&commands, "pool", 2, "m4").await.unwrap();
    let started = tokio::time::Instant::now();
    assert_eq!(
        newcomer
            .handover(request, Duration::from_secs(1), Duration::from_secs(60))
            .await,
        Handover::TimedOut
    );
    let waited = started.elapsed();
    assert!(
        waited >= record::MAX_DECLARED_WAIT && waited < record::MAX_DECLARED_WAIT * 2,
        "waited {waited:?}"
    );
}

/// A record of the claim partition at `offset` holding `payload`.
fn record_at(offset: u64, payload: Vec<u8>) -> LogRecord {
    LogRecord {
        position: agdx_wire::LogPosition {
            stream: 1,
            topic: 1,
            partition: CLAIM_PARTITION,
            offset,
        },
        timestamp_micros: offset,
        headers: Vec::new(),
        payload: payload.into(),
    }
}

/// A claim partition record drawn at random: kind, over, request, wait in
/// milliseconds (terms stated when even), released.
type Drawn = (u8, Option<u64>, u64, u64, Option<u64>);

/// Learns `records` as the claim partition's records at offsets 0.., all
/// of one partition, and asks every question a reader or a newcomer asks
/// of each offset.
fn learn_and_ask(records: &[Drawn]) {
    let mut known = Known::default();
    let claimed = Claimed {
        stream: "s".into(),
        topic: "t".into(),
        group: "g".into(),
        partition: 0,
    };
    for (offset, &(kind, over, request, wait_ms, released)) in records.iter().enumerate() {
        let kind =
            [Kind::Claim, Kind::Request, Kind::Release, Kind::Handing][usize::from(kind % 4)];
        let record = ClaimRecord {
            agdx_claim: CLAIM_MARK,
            kind,
            claimed: claimed.clone(),
            member: format!("m{}", offset % 3),
            nonce: offset.to_string(),
            released,
            terms: (wait_ms % 2 == 0).then_some(TermsRecord {
                over,
                request,
                wait_ms,
            }),
        };
        let mut bytes = Vec::new();
        ciborium::into_writer(&record, &mut bytes).unwrap();
        let read = claim_of(&record_at(offset as u64, bytes)).expect("a claim");
        known.learn(offset as u64, read);
    }
    known.range = Some((0, records.len() as u64));
    known.read_at = Some(tokio::time::Instant::now());
    let now = tokio::time::Instant::now();
    for token in 0..=records.len() as u64 {
        let _ = known.standing(token);
        let _ = known.stale_lately(token, now);
        let _ = known.holder_for(token);
        let _ = known.declared_wait_for(token);
        let _ = known.released_for(token);
        let _ = known.counts(&claimed, token);
    }
}

proptest::proptest! {
    #[test]
    fn hostile_claim_records_never_panic(
        bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)
    ) {
        let _ = claim_of(&record_at(0, bytes));
    }

    #[test]
    fn any_terms_leave_every_answer_defined(
        records in proptest::collection::vec(
            (
                proptest::prelude::any::<u8>(),
                proptest::option::of(proptest::prelude::any::<u64>()),
                proptest::prelude::any::<u64>(),
                proptest::prelude::any::<u64>(),
                proptest::option::of(proptest::prelude::any::<u64>()),
            ),
            0..24,
        )
    ) {
        learn_and_ask(&records);
    }
}

#[tokio::test]
async fn a_partition_whose_newest_claim_is_released_has_no_holder() {
    let (log, commands, snapshots) = fixture().await;
    let first = Fences::new(log.clone(), snapshots.clone());
    let second = Fences::new(log.clone(), snapshots.clone());
    let old = first.claim(&commands, "pool", 1, "m1").await.unwrap();
    assert!(
        !first.released_since(old).await.unwrap(),
        "its holder holds it"
    );
    first.release(old, "m1").await.unwrap();
    assert!(first.released_since(old).await.unwrap());

    let newer = second.claim(&commands, "pool", 1, "m2").await.unwrap();
    // Another partition's or group's release says nothing about this one.
    let elsewhere = second.claim(&commands, "pool", 2, "m2").await.unwrap();
    second.release(elsewhere, "m2").await.unwrap();
    let other_group = second.claim(&commands, "other", 1, "m2").await.unwrap();
    second.release(other_group, "m2").await.unwrap();
    assert!(
        !first.released_since(old).await.unwrap(),
        "the newer holder holds it"
    );
    second.release(newer, "m2").await.unwrap();
    assert!(first.released_since(old).await.unwrap());

    let third = Fences::new(log.clone(), snapshots.clone());
    third.claim(&commands, "pool", 1, "m3").await.unwrap();
    assert!(
        !first.released_since(old).await.unwrap(),
        "claimed again since"
    );
}
