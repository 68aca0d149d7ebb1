//! A latency histogram that observes without a lock.
//!
//! The relay observes two latencies for every event it sends. prometheus-client's own
//! histogram takes a lock for each observation and walks its buckets one by one,
//! which was a visible share of a drain's CPU. This one keeps one atomic counter per
//! bucket and the sum as a float in an atomic word, finds a value's bucket by binary
//! search, and renders the same series (`_sum`, `_count`, cumulative `_bucket`s with
//! `+Inf`). `_count` is read as the sum of the buckets, so a scrape never shows a
//! count that its buckets do not add up to. One difference: NaN and +∞ count in
//! `+Inf` (prometheus-client counts them in no bucket).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::{MetricType, TypedMetric};

/// Observations of seconds into fixed buckets; cheap to clone (clones share counts).
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    inner: Arc<Counts>,
}

#[derive(Debug)]
struct Counts {
    /// Upper bounds, ascending; one more bucket than bounds counts the rest (`+Inf`).
    bounds: &'static [f64],
    buckets: Box<[AtomicU64]>,
    /// The sum of the values, an `f64`'s bits.
    sum: AtomicU64,
}

impl LatencyHistogram {
    /// A histogram over `bounds` (seconds, ascending).
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.is_sorted(), "histogram bounds must ascend: {bounds:?}");
        let buckets = (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect();
        Self { inner: Arc::new(Counts { bounds, buckets, sum: AtomicU64::new(0.0f64.to_bits()) }) }
    }

    /// Counts one value: in the first bucket whose bound is at least `seconds`
    /// (`+Inf` for NaN).
    pub fn observe(&self, seconds: f64) {
        let counts = &self.inner;
        let bucket = counts.bounds.partition_point(|bound| !(seconds <= *bound));
        counts.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let add = |sum: u64| Some((f64::from_bits(sum) + seconds).to_bits());
        // The closure always gives a value, so the update cannot fail.
        let _ = counts.sum.fetch_update(Ordering::Relaxed, Ordering::Relaxed, add);
    }

    fn sum(&self) -> f64 {
        f64::from_bits(self.inner.sum.load(Ordering::Relaxed))
    }

    /// Each bucket's own count (not cumulative), with its upper bound; the last is
    /// `+Inf`, written as `f64::MAX` as the encoder expects.
    fn snapshot(&self) -> Vec<(f64, u64)> {
        let counts = &self.inner;
        let bounds = counts.bounds.iter().copied().chain(std::iter::once(f64::MAX));
        bounds.zip(counts.buckets.iter().map(|count| count.load(Ordering::Relaxed))).collect()
    }
}

impl TypedMetric for LatencyHistogram {
    const TYPE: MetricType = MetricType::Histogram;
}

impl EncodeMetric for LatencyHistogram {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        let buckets = self.snapshot();
        let count = buckets.iter().map(|(_, count)| count).sum();
        encoder.encode_histogram::<NoLabelSet>(self.sum(), count, &buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

#[cfg(test)]
mod tests {
    use prometheus_client::encoding::text::encode;
    use prometheus_client::metrics::histogram::Histogram;
    use prometheus_client::registry::Registry;

    use super::*;

    const BOUNDS: [f64; 4] = [0.001, 0.01, 0.1, 1.0];

    fn rendered(
        name: &str,
        metric: impl EncodeMetric + TypedMetric + Send + Sync + std::fmt::Debug + 'static,
    ) -> String {
        let mut registry = Registry::default();
        registry.register(name, "help", metric);
        let mut text = String::new();
        encode(&mut text, &registry).expect("renders");
        text
    }

    #[test]
    fn renders_what_prometheus_clients_histogram_renders_for_the_same_values() {
        let ours = LatencyHistogram::new(&BOUNDS);
        let theirs = Histogram::new(BOUNDS);
        for value in [0.0, 0.0005, 0.001, 0.0010001, 0.05, 0.1, 0.75, 1.0, 2.5, 600.0, 0.25] {
            ours.observe(value);
            theirs.observe(value);
        }
        let ours = rendered("x_seconds", ours);
        assert_eq!(ours, rendered("x_seconds", theirs));
        assert!(ours.contains("x_seconds_bucket{le=\"+Inf\"} 11"), "{ours}");
    }

    #[test]
    fn a_value_on_a_bound_counts_in_that_bound_and_nan_in_inf() {
        let histogram = LatencyHistogram::new(&BOUNDS);
        histogram.observe(0.01);
        histogram.observe(-1.0);
        histogram.observe(f64::NAN);
        let counts: Vec<u64> = histogram.snapshot().into_iter().map(|(_, count)| count).collect();
        assert_eq!(counts, [1, 1, 0, 0, 1], "-1 in the first bucket, 0.01 in le=0.01, NaN in +Inf");
    }

    #[test]
    fn the_sum_goes_past_what_nanoseconds_in_a_u64_hold() {
        let histogram = LatencyHistogram::new(&BOUNDS);
        for _ in 0..20 {
            histogram.observe(1e9);
        }
        assert_eq!(histogram.sum(), 2e10, "no wrap-around");
    }

    #[test]
    fn clones_share_their_counts() {
        let histogram = LatencyHistogram::new(&BOUNDS);
        histogram.clone().observe(0.5);
        assert!(rendered("y_seconds", histogram).contains("y_seconds_count 1\n"));
    }
}
