//! Business keys held behind a FAILED event (`retry.failed_key_policy = "hold"`).
//!
//! When an event of a key fails for good, the key's later events must not overtake
//! it: the lane leaves them unsent (PENDING) until an operator requeues or skips the
//! FAILED one, and the sweep, which never claims a row behind a FAILED row of its key,
//! delivers them afterwards in order. The set lives in memory so the lanes can check
//! it per event; the sweep refreshes it from the table (the truth) every period, so an
//! operator's release is seen within one period. A key added by a lane after a
//! refresh began is kept, so a refresh cannot forget a FAILED row it did not see yet.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

/// (topic, biz_key) of a held key.
pub type HeldKey = (String, String);

/// The held keys; cheap to clone (clones share the set).
#[derive(Debug, Clone, Default)]
pub struct HeldKeys {
    keys: Arc<Mutex<HashMap<HeldKey, Instant>>>,
}

impl HeldKeys {
    /// Holds `key` from now on.
    pub fn hold(&self, key: HeldKey) {
        self.lock().insert(key, Instant::now());
    }

    /// Whether events of `topic`/`biz_key` are held.
    pub fn is_held(&self, topic: &str, biz_key: &str) -> bool {
        let keys = self.lock();
        !keys.is_empty() && keys.contains_key(&(topic.to_owned(), biz_key.to_owned()))
    }

    /// Replaces the set with `in_table` (the keys with a FAILED row, read from the
    /// table starting at `read_at`), keeping keys held since then.
    pub fn refresh(&self, in_table: Vec<HeldKey>, read_at: Instant) {
        let mut keys = self.lock();
        keys.retain(|_, since| *since >= read_at);
        for key in in_table {
            keys.entry(key).or_insert(read_at);
        }
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<HeldKey, Instant>> {
        self.keys.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> HeldKey {
        ("t".to_owned(), k.to_owned())
    }

    #[test]
    fn a_refresh_releases_keys_the_table_no_longer_holds_but_keeps_newer_ones() {
        let held = HeldKeys::default();
        held.hold(key("a"));
        let read_at = Instant::now();
        held.hold(key("b"));
        held.refresh(vec![key("c")], read_at);
        assert!(!held.is_held("t", "a"), "released by an operator: not in the table any more");
        assert!(held.is_held("t", "b"), "held after the read began: kept");
        assert!(held.is_held("t", "c"), "in the table: held");
        assert_eq!(held.len(), 2);
    }
}
