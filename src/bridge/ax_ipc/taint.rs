//! The taint budget: the AX host's check 3.5 (SC-SEC-003), between the
//! strict schema and the dispatch.
//!
//! Followed from AX's `src/host/taint-budget.ts` (the per-session ratio,
//! the profile thresholds, the default sensitive actions, the refusal's
//! text), `src/host/ipc-server.ts` (where the check runs, which actions skip
//! it, the `taintBlocked` answer) and `docs/plans/2026-02-10-taint-propagation.md`
//! (which replies bring external content in: web and browser results, and
//! entries carrying an external taint tag). The AX host also counts the
//! user's inbound messages, which never pass through this bridge; here the
//! session's content is what it takes in through the bridge.
//!
//! Per session (`_sessionId`; calls without one share one account), every
//! answered call's reply is counted, in AX's estimate of tokens (a quarter
//! of its length, rounded up). It is **tainted** when the action is a
//! taint source (by default `web_fetch`, `web_search`, `browser_navigate`,
//! `browser_snapshot`); in any other reply, each object carrying an AX taint
//! tag `"taint":{"trust":"external",...}` (a memory entry written from
//! external content) is tainted and the rest clean. A **sensitive** action
//! (by default `oauth_call`, `scheduler_add_cron`) is refused while the
//! session's tainted share is over the threshold (paranoid 10%, balanced
//! 30%, yolo 60%), answering
//! `{"ok":false,"taintBlocked":true,"error":"Session taint ratio 42.0% exceeds threshold 30%. ..."}`.
//! `identity_write`, `user_write` and `identity_propose` are never checked:
//! in AX their handlers weigh taint themselves.

use std::collections::{BTreeSet, HashMap};
use std::str::FromStr;
use std::sync::Mutex;

use serde_json::{Map, Value};

/// Actions the check skips whatever the configuration: the AX host leaves
/// their taint to their own handlers.
pub const TAINT_EXEMPT: &[&str] = &["identity_write", "user_write", "identity_propose"];

/// The actions refused over the threshold unless configured otherwise (the
/// AX host's defaults).
pub const DEFAULT_SENSITIVE: &[&str] = &["oauth_call", "scheduler_add_cron"];

/// The actions whose replies are external content unless configured
/// otherwise (the AX taint-propagation design's taint-producing actions).
pub const DEFAULT_TAINT_SOURCES: &[&str] = &[
    "web_fetch",
    "web_search",
    "browser_navigate",
    "browser_snapshot",
];

/// The most sessions accounted at once; past it the one touched longest ago
/// is forgotten, so `_sessionId`s (chosen by the peer) cannot grow memory
/// without bound.
pub const MAX_SESSIONS: usize = 100_000;

/// The AX security profiles and their thresholds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaintProfile {
    /// 10%.
    Paranoid,
    /// 30%.
    Balanced,
    /// 60%.
    Yolo,
}

impl TaintProfile {
    /// The share of tainted content above which sensitive actions are refused.
    pub fn threshold(self) -> f64 {
        match self {
            TaintProfile::Paranoid => 0.10,
            TaintProfile::Balanced => 0.30,
            TaintProfile::Yolo => 0.60,
        }
    }
}

impl FromStr for TaintProfile {
    type Err = TaintConfigError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "paranoid" => Ok(TaintProfile::Paranoid),
            "balanced" => Ok(TaintProfile::Balanced),
            "yolo" => Ok(TaintProfile::Yolo),
            other => Err(TaintConfigError::UnknownProfile(other.to_owned())),
        }
    }
}

/// A taint budget that cannot be configured as given.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaintConfigError {
    /// Not one of the AX profiles.
    #[error(
        "unknown taint profile {0:?}; the profiles are paranoid (10%), balanced (30%), yolo (60%)"
    )]
    UnknownProfile(String),
    /// The threshold is not a share from 0 to 1.
    #[error("taint threshold {0} is not a share from 0 to 1 (e.g. 0.3 for 30%)")]
    BadThreshold(f64),
}

/// A sensitive action refused: the session's tainted share is over the
/// threshold. Its text is the AX host's.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "Session taint ratio {:.1}% exceeds threshold {:.0}%. Action \"{action}\" requires user confirmation.",
    ratio * 100.0,
    threshold * 100.0
)]
pub struct TaintBlocked {
    /// The action refused.
    pub action: String,
    /// The session's tainted share.
    pub ratio: f64,
    /// The threshold in force.
    pub threshold: f64,
}

/// What one session has taken in, in estimated tokens.
#[derive(Debug, Clone, Copy)]
struct Account {
    total: u64,
    tainted: u64,
    /// When it was last counted into, in [`Accounts::tick`]s.
    touched: u64,
}

#[derive(Debug, Default)]
struct Accounts {
    sessions: HashMap<String, Account>,
    tick: u64,
}

/// The per-session taint accounts and the rules they are checked by.
#[derive(Debug)]
pub struct TaintBudget {
    threshold: f64,
    sensitive: BTreeSet<String>,
    sources: BTreeSet<String>,
    accounts: Mutex<Accounts>,
}

impl TaintBudget {
    /// A budget refusing sensitive actions over `threshold` (a share from 0
    /// to 1), with the default sensitive actions and taint sources.
    pub fn new(threshold: f64) -> Result<Self, TaintConfigError> {
        if !(0.0..=1.0).contains(&threshold) {
            return Err(TaintConfigError::BadThreshold(threshold));
        }
        Ok(Self {
            threshold,
            sensitive: DEFAULT_SENSITIVE.iter().map(|a| (*a).to_owned()).collect(),
            sources: DEFAULT_TAINT_SOURCES
                .iter()
                .map(|a| (*a).to_owned())
                .collect(),
            accounts: Mutex::default(),
        })
    }

    /// A budget with `profile`'s threshold.
    pub fn for_profile(profile: TaintProfile) -> Self {
        Self::new(profile.threshold()).expect("the profile thresholds are shares")
    }

    /// Replaces the sensitive actions.
    pub fn with_sensitive(mut self, actions: impl IntoIterator<Item = String>) -> Self {
        self.sensitive = actions.into_iter().collect();
        self
    }

    /// Replaces the actions whose replies count as tainted.
    pub fn with_sources(mut self, actions: impl IntoIterator<Item = String>) -> Self {
        self.sources = actions.into_iter().collect();
        self
    }

    /// The threshold.
    pub fn threshold(&self) -> f64 {
        self.threshold
    }

    /// The sensitive actions.
    pub fn sensitive(&self) -> impl Iterator<Item = &str> {
        self.sensitive.iter().map(String::as_str)
    }

    /// The actions whose replies count as tainted.
    pub fn sources(&self) -> impl Iterator<Item = &str> {
        self.sources.iter().map(String::as_str)
    }

    /// Whether `session` may call `action` now.
    pub fn check(&self, session: &str, action: &str) -> Result<(), TaintBlocked> {
        if TAINT_EXEMPT.contains(&action) || !self.sensitive.contains(action) {
            return Ok(());
        }
        let accounts = self.lock();
        let Some(account) = accounts.sessions.get(session).filter(|a| a.total > 0) else {
            return Ok(());
        };
        // Estimates stay far below 2^52, so the division is exact enough.
        let ratio = account.tainted as f64 / account.total as f64;
        if ratio > self.threshold {
            return Err(TaintBlocked {
                action: action.to_owned(),
                ratio,
                threshold: self.threshold,
            });
        }
        Ok(())
    }

    /// Counts the reply `session` got for `action`.
    pub fn record_reply(&self, session: &str, action: &str, reply: &Map<String, Value>) {
        let reply = Value::Object(reply.clone());
        let total = text_units(&reply);
        let tainted = if self.sources.contains(action) {
            total
        } else {
            tagged_units(&reply)
        };
        self.record(session, total - tainted, tainted);
    }

    /// Adds `clean` and `tainted` content (in UTF-16 units, as AX measures
    /// text) to `session`'s account, each estimated the AX way: a token per
    /// four units, rounded up.
    fn record(&self, session: &str, clean: u64, tainted: u64) {
        let tokens = |units: u64| units.div_ceil(4);
        let mut accounts = self.lock();
        accounts.tick += 1;
        let tick = accounts.tick;
        if !accounts.sessions.contains_key(session) && accounts.sessions.len() >= MAX_SESSIONS {
            let stalest = accounts
                .sessions
                .iter()
                .min_by_key(|(_, a)| a.touched)
                .map(|(s, _)| s.clone());
            if let Some(stalest) = stalest {
                accounts.sessions.remove(&stalest);
            }
        }
        let account = accounts
            .sessions
            .entry(session.to_owned())
            .or_insert(Account {
                total: 0,
                tainted: 0,
                touched: tick,
            });
        account.total = account
            .total
            .saturating_add(tokens(clean))
            .saturating_add(tokens(tainted));
        account.tainted = account.tainted.saturating_add(tokens(tainted));
        account.touched = tick;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Accounts> {
        // The accounts stay consistent even if a holder panicked: each
        // update is a few additions.
        self.accounts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The length of `value`'s JSON text in UTF-16 units (JavaScript's
/// `length`, which AX's estimate divides).
fn text_units(value: &Value) -> u64 {
    let text = value.to_string();
    text.encode_utf16().count() as u64
}

/// The units of the objects in `value` that carry an external taint tag.
fn tagged_units(value: &Value) -> u64 {
    match value {
        Value::Object(object) if is_external(object) => text_units(value),
        Value::Object(object) => object.values().map(tagged_units).sum(),
        Value::Array(items) => items.iter().map(tagged_units).sum(),
        _ => 0,
    }
}

/// Whether `object` carries AX's `TaintTag` with `trust: "external"`.
fn is_external(object: &Map<String, Value>) -> bool {
    object
        .get("taint")
        .and_then(|tag| tag.get("trust"))
        .and_then(Value::as_str)
        == Some("external")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn reply(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            _ => unreachable!("the tests pass objects"),
        }
    }

    #[test]
    fn the_ratio_is_per_session_and_only_sensitive_actions_are_refused() {
        let budget = TaintBudget::for_profile(TaintProfile::Balanced);
        // 16 units clean (4 tokens), 16 tainted (4 tokens): 50% > 30%.
        budget.record("s1", 16, 16);
        let refused = budget.check("s1", "scheduler_add_cron").unwrap_err();
        assert_eq!(
            refused.to_string(),
            "Session taint ratio 50.0% exceeds threshold 30%. Action \"scheduler_add_cron\" requires user confirmation."
        );
        assert!(budget.check("s1", "memory_write").is_ok(), "not sensitive");
        assert!(
            budget.check("s2", "scheduler_add_cron").is_ok(),
            "no account"
        );
        budget.record("s1", 64, 0);
        assert!(budget.check("s1", "scheduler_add_cron").is_ok(), "20% now");
    }

    #[test]
    fn exempt_actions_are_never_checked_even_when_made_sensitive() {
        let budget = TaintBudget::new(0.0)
            .unwrap()
            .with_sensitive(TAINT_EXEMPT.iter().map(|a| (*a).to_owned()));
        budget.record("s", 0, 40);
        for action in TAINT_EXEMPT {
            assert!(budget.check("s", action).is_ok(), "{action}");
        }
    }

    #[test]
    fn replies_of_sources_and_external_tags_count_as_tainted() {
        let budget = TaintBudget::new(0.5).unwrap();
        let fetched = reply(json!({"body": "x".repeat(100)}));
        budget.record_reply("web", "web_fetch", &fetched);
        let account = budget.lock().sessions["web"];
        assert_eq!((account.total, account.tainted), (28, 28));

        let entry =
            json!({"content": "y".repeat(40), "taint": {"source": "web", "trust": "external"}});
        let read = reply(json!({"entries": [entry.clone(), {"content": "clean"}]}));
        budget.record_reply("mem", "memory_query", &read);
        let account = budget.lock().sessions["mem"];
        let tagged = entry.to_string().len() as u64;
        let all = Value::Object(read).to_string().len() as u64;
        assert_eq!(account.tainted, tagged.div_ceil(4));
        assert_eq!(
            account.total,
            (all - tagged).div_ceil(4) + tagged.div_ceil(4)
        );
    }

    #[test]
    fn sessions_past_the_cap_forget_the_stalest() {
        let budget = TaintBudget::new(0.5).unwrap();
        for n in 0..MAX_SESSIONS {
            budget.record(&n.to_string(), 4, 0);
        }
        budget.record("0", 4, 0);
        budget.record("new", 4, 0);
        let accounts = budget.lock();
        assert_eq!(accounts.sessions.len(), MAX_SESSIONS);
        assert!(accounts.sessions.contains_key("0") && accounts.sessions.contains_key("new"));
        assert!(!accounts.sessions.contains_key("1"));
    }

    #[test]
    fn profiles_and_thresholds_parse_or_say_what_is_allowed() {
        assert_eq!("yolo".parse::<TaintProfile>().unwrap().threshold(), 0.60);
        assert!(
            "lax"
                .parse::<TaintProfile>()
                .unwrap_err()
                .to_string()
                .contains("paranoid")
        );
        assert!(TaintBudget::new(1.5).is_err() && TaintBudget::new(f64::NAN).is_err());
    }
}
