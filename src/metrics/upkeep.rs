//! The leader's upkeep of the outbox table and its checks of what was delivered, in
//! Prometheus form: the partitions (how far ahead they reach, which expired ones a
//! live row keeps, how many were dropped) and the SENT rows sampled on the broker.
//! Gauges are NaN where unknown: on a standby, or on a table that is not partitioned.

use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::{gauge_value, FloatGauge};

/// A topic the series counts events of.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TopicLabel {
    pub topic: String,
}

/// Gauges and counters of the outbox table's upkeep.
#[derive(Clone, Default)]
pub struct UpkeepMetrics {
    /// Whole periods after the current one that have a partition of their own.
    pub partitions_ahead: FloatGauge,
    /// Partitions past their retention kept because a row in them is not done.
    pub partitions_held: FloatGauge,
    pub partitions_dropped: Counter,
    /// SENT rows the sampler looked up on the broker.
    pub verify_checked: Counter,
    /// Of those, rows the broker does not have.
    pub verify_missing: Counter,
    /// Per topic, over the reconciliation's lookback: created, neither SENT nor SKIPPED.
    reconcile_unsent: Family<TopicLabel, Gauge>,
    /// Per topic, over the lookback: SENT, not in the consumer's dedup table.
    reconcile_unprocessed: Family<TopicLabel, Gauge>,
    /// When the last reconciliation ended (Unix seconds).
    reconcile_last_run: FloatGauge,
}

impl UpkeepMetrics {
    pub(super) fn describe(&self, registry: &mut Registry) {
        registry.register(
            "relay_outbox_partitions_ahead",
            "Whole periods after the current one that have a partition of their own on a partitioned outbox (below 2: the leader cannot add partitions; rows then land in pfuture); NaN when not partitioned or not the leader",
            self.partitions_ahead.clone(),
        );
        registry.register(
            "relay_outbox_partitions_held",
            "Partitions past their retention kept because they hold a PENDING, SENDING or FAILED row (the log names the row); NaN when not known",
            self.partitions_held.clone(),
        );
        registry.register(
            "relay_outbox_partitions_dropped",
            "Expired outbox partitions the leader dropped",
            self.partitions_dropped.clone(),
        );
        registry.register(
            "relay_verify_checked_rows",
            "SENT rows the leader's sampler looked up on the broker by event_id and msg_id ([verify])",
            self.verify_checked.clone(),
        );
        registry.register(
            "relay_verify_missing_rows",
            "Sampled SENT rows the broker does not have (each logged as an ERROR with its id): alert on any",
            self.verify_missing.clone(),
        );
        registry.register(
            "relay_reconcile_unsent_events",
            "Per topic, over the hourly reconciliation's lookback: events created before the settle time and neither SENT nor SKIPPED (outbox_relay_reconciliation has them by hour)",
            self.reconcile_unsent.clone(),
        );
        registry.register(
            "relay_reconcile_unprocessed_events",
            "Per topic, over the lookback: SENT events the consumer's dedup table does not have (only with reconcile.consumer_table)",
            self.reconcile_unprocessed.clone(),
        );
        registry.register(
            "relay_reconcile_last_run_timestamp_seconds",
            "When the last hourly reconciliation ended (Unix seconds); NaN before the first",
            self.reconcile_last_run.clone(),
        );
    }

    /// A reconciliation's per-topic sums; topics it did not see are dropped.
    pub fn reconciled(&self, unsent: &BTreeMap<&str, u64>, unprocessed: &BTreeMap<&str, u64>) {
        for (family, counts) in [(&self.reconcile_unsent, unsent), (&self.reconcile_unprocessed, unprocessed)] {
            family.clear();
            for (topic, count) in counts {
                family.get_or_create(&TopicLabel { topic: (*topic).to_owned() }).set(gauge_value(*count));
            }
        }
        self.reconcile_last_run.set(crate::time::unix_millis_now() as f64 / 1_000.0);
    }

    /// Nothing is known: a standby, or an unpartitioned table.
    pub fn forget(&self) {
        self.partitions_ahead.set(f64::NAN);
        self.partitions_held.set(f64::NAN);
    }

    /// A standby reconciles nothing: the last leader's sums are not its own.
    pub fn stand_down(&self) {
        self.forget();
        self.reconcile_unsent.clear();
        self.reconcile_unprocessed.clear();
        self.reconcile_last_run.set(f64::NAN);
    }
}
