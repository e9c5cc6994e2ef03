//! Claims on keys in flight: the pending entries of the store.
//!
//! A worker claims a key before it looks the key up and holds the claim
//! until the key's outcome is recorded. Two partitions of one process that
//! meet the same key at once (a producer that sent it in two
//! conversations) therefore never run it twice: the second waits for the
//! first, then finds the stored replies and publishes them again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::OwnedMutexGuard;

use super::KeyScope;

/// The keys claimed in this process, each with the lock its claimants queue on.
#[derive(Default)]
pub(super) struct Claims {
    held: Mutex<HashMap<KeyScope, Arc<tokio::sync::Mutex<()>>>>,
}

impl Claims {
    /// Claims `scope`, waiting while someone else holds it.
    pub(super) async fn claim(self: &Arc<Self>, scope: &KeyScope) -> KeyClaim {
        let lock = crate::log::lock(&self.held)
            .entry(scope.clone())
            .or_default()
            .clone();
        KeyClaim {
            guard: Some(lock.lock_owned().await),
            claims: self.clone(),
            scope: scope.clone(),
        }
    }
}

/// A claim on one key, held from before its lookup until its outcome is
/// recorded; dropping it lets the next claimant of the key go on.
pub struct KeyClaim {
    guard: Option<OwnedMutexGuard<()>>,
    claims: Arc<Claims>,
    scope: KeyScope,
}

impl Drop for KeyClaim {
    fn drop(&mut self) {
        let mut held = crate::log::lock(&self.claims.held);
        // The map and this claim's guard hold the lock; a count above two
        // means someone waits for it, and the entry stays for them.
        if held
            .get(&self.scope)
            .is_some_and(|lock| Arc::strong_count(lock) <= 2)
        {
            held.remove(&self.scope);
        }
        drop(self.guard.take());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agdx_wire::{AgentId, IdempotencyKey};

    fn scope(key: &str) -> KeyScope {
        KeyScope {
            agent: AgentId::new("a").unwrap(),
            source: AgentId::new("s").unwrap(),
            key: IdempotencyKey::new(key).unwrap(),
        }
    }

    #[tokio::test]
    async fn a_second_claim_of_a_key_waits_for_the_first_and_others_do_not() {
        let claims = Arc::new(Claims::default());
        let first = claims.claim(&scope("k")).await;
        let other = claims.claim(&scope("other")).await;
        let mut waiting = tokio::spawn({
            let claims = claims.clone();
            async move { claims.claim(&scope("k")).await }
        });
        let held = tokio::time::timeout(std::time::Duration::from_millis(50), &mut waiting).await;
        assert!(
            held.is_err(),
            "the second claim waits while the first is held"
        );
        drop(other);
        drop(first);
        let second = waiting.await.unwrap();
        drop(second);
        assert!(
            crate::log::lock(&claims.held).is_empty(),
            "released claims leave nothing behind"
        );
    }
}
