//! A small seeded generator (SplitMix64). The same seed gives the same fault schedule
//! and the same transaction shapes, so a failing run can be replayed with `--seed`.

use std::ops::RangeInclusive;
use std::time::Duration;

#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `range` (both ends included).
    pub(crate) fn within(&mut self, range: RangeInclusive<u64>) -> u64 {
        let span = range.end().saturating_sub(*range.start()).saturating_add(1);
        range.start() + self.next_u64() % span
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&mut self, percent: u64) -> bool {
        self.next_u64() % 100 < percent
    }

    /// A duration of `millis` milliseconds, drawn in that range.
    pub(crate) fn millis(&mut self, millis: RangeInclusive<u64>) -> Duration {
        Duration::from_millis(self.within(millis))
    }

    /// Puts `items` in a random order (Fisher-Yates).
    pub(crate) fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.within(0..=i as u64) as usize;
            items.swap(i, j);
        }
    }

    /// An independent stream for another consumer of randomness (one per writer), so
    /// the schedule does not depend on how many transactions ran.
    pub(crate) fn fork(&mut self) -> Rng {
        Rng(self.next_u64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_numbers_and_another_seed_others() {
        let draw = |seed| {
            let mut rng = Rng::new(seed);
            (0..8).map(|_| rng.next_u64()).collect::<Vec<_>>()
        };
        assert_eq!(draw(7), draw(7));
        assert_ne!(draw(7), draw(8));
    }

    #[test]
    fn within_stays_in_its_range_and_reaches_both_ends() {
        let mut rng = Rng::new(1);
        let values: Vec<u64> = (0..1000).map(|_| rng.within(3..=5)).collect();
        assert!(values.iter().all(|v| (3..=5).contains(v)));
        assert!(values.contains(&3) && values.contains(&5));
        assert_eq!(rng.within(9..=9), 9);
    }

    #[test]
    fn shuffle_keeps_every_item() {
        let mut items: Vec<u32> = (0..50).collect();
        Rng::new(3).shuffle(&mut items);
        assert_ne!(items, (0..50).collect::<Vec<_>>());
        items.sort_unstable();
        assert_eq!(items, (0..50).collect::<Vec<_>>());
    }
}
