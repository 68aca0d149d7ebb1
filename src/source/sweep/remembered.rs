//! The ids of rows the sweep claimed ahead of the binlog path, for the binlog path to
//! skip when it meets them: bounded, forgetting the oldest first.
//!
//! Some of them the binlog path never meets (a full sweep's rows committed before its
//! start position, rows a released key left behind long ago). Forgetting the oldest
//! once the bound is reached keeps the memory bounded without dropping the ids of a
//! takeover still in progress, which the binlog path is about to meet: a forgotten id,
//! if met after all, is published once more (consumers deduplicate).

use std::collections::{HashSet, VecDeque};

/// A set of row ids with a bound, in the order they were added.
#[derive(Debug)]
pub(crate) struct RememberedIds {
    ids: HashSet<u64>,
    /// Every id in the order it was added; ids already taken out stay here until the
    /// oldest are dropped or the queue is compacted.
    order: VecDeque<u64>,
    max: usize,
}

impl RememberedIds {
    /// An empty set that holds at most `max` ids.
    pub(crate) fn new(max: usize) -> Self {
        Self { ids: HashSet::new(), order: VecDeque::new(), max }
    }

    /// Adds `ids`; beyond the bound the oldest are forgotten. How many were.
    pub(crate) fn extend(&mut self, ids: impl IntoIterator<Item = u64>) -> usize {
        for id in ids {
            if self.ids.insert(id) {
                self.order.push_back(id);
            }
        }
        let mut forgotten = 0;
        while self.ids.len() > self.max {
            let Some(oldest) = self.order.pop_front() else { break };
            forgotten += usize::from(self.ids.remove(&oldest));
        }
        if self.order.len() > 2 * self.max.max(1) {
            let ids = &self.ids;
            self.order.retain(|id| ids.contains(id));
        }
        forgotten
    }

    /// Whether `id` was remembered; it is forgotten now.
    pub(crate) fn take(&mut self, id: u64) -> bool {
        self.ids.remove(&id)
    }

    pub(crate) fn clear(&mut self) {
        self.ids.clear();
        self.order.clear();
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::RememberedIds;

    #[test]
    fn beyond_the_bound_the_oldest_ids_are_forgotten_and_the_newest_kept() {
        let mut ids = RememberedIds::new(3);
        assert_eq!(ids.extend([1, 2, 3]), 0);
        assert_eq!(ids.extend([4, 5]), 2);
        assert!(!ids.take(1) && !ids.take(2), "the oldest went first");
        assert!(ids.take(5) && ids.take(4) && ids.take(3), "the newest stay");
        assert!(ids.is_empty());
    }

    #[test]
    fn ids_taken_out_make_room_and_the_order_queue_stays_bounded() {
        let mut ids = RememberedIds::new(2);
        for id in 0..100 {
            ids.extend([id]);
            assert!(ids.take(id));
        }
        assert!(ids.order.len() <= 4, "compacted: {}", ids.order.len());
        assert_eq!(ids.extend([100, 101]), 0, "nothing old left to forget");
        assert!(ids.take(100) && ids.take(101));
    }
}
