//! The kit's counters, in Prometheus form.
//!
//! dedup hit ratio = `outbox_consumer_dedup_hits_total / (processed + dedup_hits + rejected)`:
//! a little is normal (relay resends, broker redelivery); a sudden rise means the relay
//! is resending or a replay is running.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// The consumer group a series is about.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupLabel {
    pub group: String,
}

/// Counters of one idempotent consumer.
#[derive(Clone, Default)]
pub struct ConsumerMetrics {
    /// Events whose handler committed with their dedup mark.
    pub processed: Counter,
    /// Deliveries of events already PROCESSED or REJECTED (ACKed without the handler).
    pub dedup_hits: Counter,
    /// Events judged unprocessable: quarantined and marked REJECTED.
    pub rejected: Counter,
    /// Deliveries handed back for redelivery (retryable failure).
    pub retries: Counter,
    /// Per consumer group: messages its dead-letter topic ever received.
    pub dead_letters: Family<GroupLabel, Gauge>,
}

impl ConsumerMetrics {
    /// Counters registered in `registry` as `outbox_consumer_*_total`.
    pub fn register(registry: &mut Registry) -> Self {
        let metrics = Self::default();
        registry.register(
            "outbox_consumer_processed",
            "Events processed (business write and dedup mark committed)",
            metrics.processed.clone(),
        );
        registry.register(
            "outbox_consumer_dedup_hits",
            "Duplicate deliveries acknowledged without processing",
            metrics.dedup_hits.clone(),
        );
        registry.register(
            "outbox_consumer_rejected",
            "Events rejected as unprocessable and quarantined",
            metrics.rejected.clone(),
        );
        registry.register(
            "outbox_consumer_retries",
            "Deliveries returned for redelivery after a retryable failure",
            metrics.retries.clone(),
        );
        registry.register(
            "outbox_consumer_dead_letter_max_offset",
            "Messages the consumer group's dead-letter topic (%DLQ%group) ever received: any growth is an event the business never processed",
            metrics.dead_letters.clone(),
        );
        metrics
    }

    /// Messages `group`'s dead-letter topic ever received, as last read (`None` before
    /// the first read).
    pub fn dead_letters_of(&self, group: &str) -> Option<i64> {
        self.dead_letters.get(&GroupLabel { group: group.to_owned() }).map(|gauge| gauge.get())
    }

    /// Records a read of `group`'s dead-letter topic.
    pub fn dead_letters_seen(&self, group: &str, count: i64) {
        self.dead_letters.get_or_create(&GroupLabel { group: group.to_owned() }).set(count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::render;

    #[test]
    fn counters_render_with_the_documented_names() {
        let mut registry = Registry::default();
        let metrics = ConsumerMetrics::register(&mut registry);
        metrics.processed.inc();
        metrics.dedup_hits.inc_by(4);
        metrics.dead_letters_seen("benefits", 2);
        let text = render(&registry);
        for line in [
            "outbox_consumer_processed_total 1",
            "outbox_consumer_dedup_hits_total 4",
            "outbox_consumer_rejected_total 0",
            "outbox_consumer_retries_total 0",
            "outbox_consumer_dead_letter_max_offset{group=\"benefits\"} 2",
        ] {
            assert!(text.contains(line), "{line} missing in:\n{text}");
        }
    }
}
