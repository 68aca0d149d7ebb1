//! Business keys whose events wait behind an earlier event of theirs.
//!
//! A key is held when one of its events failed for good (`retry.failed_key_policy =
//! "hold"`) or when a swept event of it went back to the table to be retried later.
//! While a key is held, the lane does not send the key's events from the binlog (nor
//! swept events claimed before the hold): it leaves them PENDING, and the sweep, which
//! never claims a row behind an unsent earlier row of its key, delivers them in order
//! later. Each held key remembers the highest row id left behind (`up_to`): rows the
//! sweep claims again up to that id pass the lane, newer ones are left behind too.
//!
//! The table is the truth. Every sweep period the relay holds every key with a FAILED
//! row (hold policy) and releases a key once the table has no FAILED row of it (hold
//! policy) and no unsent row of it at or below `up_to`: from then on its new events
//! cannot overtake anything.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use crate::store::KeyUpTo;

/// (topic, biz_key) of a held key.
pub type HeldKey = (String, String);

/// The held keys, each with the highest row id left behind; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct HeldKeys {
    keys: Arc<Mutex<HashMap<HeldKey, Waiting>>>,
}

/// What a held key waits for, as of one change: every change gets a new `seen`, so a
/// release decided on an older reading of the table does not undo a newer hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub up_to: u64,
    seen: u64,
}

/// What the lane does with an event of a held key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Send,
    LeaveBehind,
}

impl HeldKeys {
    /// Holds `key` behind row `id` (or a later one it already waits for).
    pub fn hold(&self, key: HeldKey, id: u64) {
        let (topic, biz_key) = key;
        self.hold_all([KeyUpTo { topic, biz_key, up_to: id }]);
    }

    /// Whether event `id` of `topic`/`biz_key` may be sent now. A swept row at or
    /// below `up_to` is one the sweep claimed again in order; anything else of a held
    /// key is left behind (and `up_to` moves to it).
    pub fn verdict(&self, topic: &str, biz_key: &str, id: u64, swept: bool) -> Verdict {
        let mut keys = self.lock();
        if keys.is_empty() {
            return Verdict::Send;
        }
        match keys.get_mut(&(topic.to_owned(), biz_key.to_owned())) {
            None => Verdict::Send,
            Some(waiting) if swept && id <= waiting.up_to => Verdict::Send,
            Some(waiting) => {
                waiting.up_to = waiting.up_to.max(id);
                waiting.seen += 1;
                Verdict::LeaveBehind
            }
        }
    }

    /// Releases `key` if nothing changed for it since `waiting` was read.
    pub fn release(&self, key: &HeldKey, waiting: Waiting) {
        let mut keys = self.lock();
        if keys.get(key) == Some(&waiting) {
            keys.remove(key);
        }
    }

    /// Holds every key of `keys` behind its row (see [`HeldKeys::hold`]), under one
    /// lock: the lanes wait for it once, not once per key.
    pub fn hold_all(&self, keys: impl IntoIterator<Item = KeyUpTo>) {
        let mut held = self.lock();
        for KeyUpTo { topic, biz_key, up_to } in keys {
            let waiting = held.entry((topic, biz_key)).or_insert(Waiting { up_to, seen: 0 });
            waiting.up_to = waiting.up_to.max(up_to);
            waiting.seen += 1;
        }
    }

    /// The held keys not among `kept`, and what each waits for: the ones to check
    /// against the table (a copy of those few, not of every held key).
    pub fn others_than(&self, kept: &std::collections::HashSet<HeldKey>) -> Vec<(HeldKey, Waiting)> {
        self.lock()
            .iter()
            .filter(|(key, _)| !kept.contains(*key))
            .map(|(key, waiting)| (key.clone(), *waiting))
            .collect()
    }

    /// How many keys are held.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<HeldKey, Waiting>> {
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
    fn a_held_key_lets_through_only_the_swept_rows_it_left_behind() {
        let held = HeldKeys::default();
        held.hold(key("a"), 10);
        assert_eq!(held.verdict("t", "b", 99, false), Verdict::Send, "other keys flow");
        assert_eq!(held.verdict("t", "a", 11, false), Verdict::LeaveBehind, "a binlog event waits");
        assert_eq!(held.verdict("t", "a", 12, true), Verdict::LeaveBehind, "claimed before the hold: waits");
        assert_eq!(held.verdict("t", "a", 10, true), Verdict::Send, "the head, claimed again");
        assert_eq!(held.verdict("t", "a", 12, true), Verdict::Send, "left behind, claimed again in order");
    }

    #[test]
    fn the_keys_to_check_are_those_the_table_does_not_hold() {
        let held = HeldKeys::default();
        held.hold_all(["a", "b", "c"].map(|k| KeyUpTo { topic: "t".into(), biz_key: k.into(), up_to: 1 }));
        let kept = [key("a"), key("c")].into_iter().collect();
        let others: Vec<HeldKey> = held.others_than(&kept).into_iter().map(|(key, _)| key).collect();
        assert_eq!(others, [key("b")]);
    }

    #[test]
    fn a_release_is_skipped_when_something_was_left_behind_meanwhile() {
        let held = HeldKeys::default();
        held.hold(key("a"), 10);
        let seen = held.others_than(&Default::default());
        assert_eq!(held.verdict("t", "a", 11, false), Verdict::LeaveBehind);
        held.release(&seen[0].0, seen[0].1);
        assert_eq!(held.len(), 1, "row 11 was left behind after the table was read");
        let seen = held.others_than(&Default::default());
        assert_eq!(seen[0].1.up_to, 11);
        held.release(&seen[0].0, seen[0].1);
        assert_eq!(held.len(), 0);
    }
}
