//! The relay's own metrics, in Prometheus form (served by `http` at /metrics).
//!
//! The one to alert on first is `outbox_oldest_pending_seconds`: how old the oldest
//! unsent row is, which is the delay consumers feel; a row count alone misses "few
//! rows, but very old". `relay_events_failed_total` rising means rows went FAILED and
//! need a person; `relay_held_keys` above zero means keys wait behind them.

use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::rocketmq::ErrorClass;

/// The `class` label of a retry: outage, event or unknown.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClassLabel {
    pub class: String,
}

/// Counters and gauges of one relay process.
#[derive(Clone, Default)]
pub struct RelayMetrics {
    pub sent: Counter,
    pub failed: Counter,
    pub send_retries: Family<ClassLabel, Counter>,
    pub held_keys: Gauge,
    pub swept: Counter,
    pub reclaimed: Counter,
    pub position_lost: Counter,
    pub full_sweeps: Counter,
    pub leader: Gauge,
    pub leader_term: Gauge,
    pub in_flight_transactions: Gauge,
    pub checkpoint_position: Gauge,
    pub oldest_pending_seconds: Gauge<f64, AtomicU64>,
    pub pending_rows: Gauge,
}

impl RelayMetrics {
    /// The metrics, registered in `registry`.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::default();
        registry.register("relay_events_sent", "Events the broker answered SEND_OK for", m.sent.clone());
        registry.register("relay_events_failed", "Events marked FAILED: alert on any increase", m.failed.clone());
        registry.register(
            "relay_send_retries",
            "Batch sends not confirmed, by class: outage (broker cannot take anything; waited out), event (the event can never be sent), unknown",
            m.send_retries.clone(),
        );
        registry.register(
            "relay_held_keys",
            "Business keys whose later events wait behind a FAILED event (failed_key_policy = hold)",
            m.held_keys.clone(),
        );
        registry.register("relay_sweep_claimed", "Rows the sweep claimed (SENDING) to publish", m.swept.clone());
        registry.register(
            "relay_sweep_reclaimed",
            "SENDING rows whose lease expired, put back to PENDING (a sweeper died or stalled)",
            m.reclaimed.clone(),
        );
        registry.register(
            "relay_binlog_position_lost",
            "Times the saved binlog position could not be read (purged, another server): a full sweep followed",
            m.position_lost.clone(),
        );
        registry.register(
            "relay_full_sweeps",
            "Sweeps of every PENDING row before tailing (no usable checkpoint, or a lost position)",
            m.full_sweeps.clone(),
        );
        registry.register(
            "relay_leader",
            "1 while this instance holds the leader lease and publishes, else 0",
            m.leader.clone(),
        );
        registry.register(
            "relay_leader_term",
            "The lease term this instance publishes under (0 as a standby)",
            m.leader_term.clone(),
        );
        registry.register(
            "relay_in_flight_transactions",
            "Source transactions read but not yet fully acknowledged",
            m.in_flight_transactions.clone(),
        );
        registry.register(
            "relay_checkpoint_position",
            "Binlog position (within its file) of the saved checkpoint",
            m.checkpoint_position.clone(),
        );
        registry.register(
            "outbox_oldest_pending_seconds",
            "Age of the oldest PENDING outbox row (the delay consumers feel)",
            m.oldest_pending_seconds.clone(),
        );
        registry.register("outbox_pending_rows", "PENDING outbox rows", m.pending_rows.clone());
        m
    }
}

impl RelayMetrics {
    /// Counts a send that was not confirmed, by what its failure says.
    pub fn retry(&self, class: ErrorClass) {
        self.send_retries.get_or_create(&ClassLabel { class: class.name().to_owned() }).inc();
    }
}
