//! The relay's own metrics, in Prometheus form (served by `http` at /metrics).
//!
//! From these alone an on-call engineer must see whether events flow
//! (`relay_events_published_total`, `relay_commit_to_ack_seconds`), how late they are
//! (`outbox_oldest_pending_seconds`, the delay consumers feel, and the binlog,
//! replica and checkpoint lags) and why not (`relay_send_batches_total`,
//! `relay_batch_retries_total`, `relay_failed_events_total`, `relay_held_keys`, `relay_leader`,
//! `relay_ready`), and whether the process has the CPU it needs (`process`). Label
//! values are closed sets (see `labels`), all shown from the start. Gauges that only
//! the leader can know are NaN on a standby.

mod histogram;
mod labels;
mod lag;
pub mod process;
mod upkeep;

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use outbox_kit::RowStatus;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use histogram::LatencyHistogram;
use labels::{
    BrokerAnswerLabel, BrokerLabel, BuildLabel, ClassLabel, MissLabel, PathLabel, QueueLabel, ReasonLabel,
    RowStatusLabel, RowStatusValue, SendStatusLabel,
};
pub use labels::{FailReason, Path, WriteMiss};
pub use lag::{Ages, LagClocks};
pub use upkeep::UpkeepMetrics;

/// A count as a gauge's value; a count past `i64` reads as its largest.
pub fn gauge_value(count: impl TryInto<i64>) -> i64 {
    count.try_into().unwrap_or(i64::MAX)
}

use crate::rocketmq::{ErrorClass, SendStatus};

/// A gauge of fractional values (seconds, bytes), NaN when not known.
pub type FloatGauge = Gauge<f64, AtomicU64>;

/// Bucket bounds of the latency histograms, seconds: narrow where a working relay
/// is (1 ms steps to 10 ms, 2 ms to 30 ms, 5 ms to 60 ms, 10 ms to 100 ms), so a
/// quantile read from them is within a millisecond or two there; then wider up to
/// the outage range.
const LATENCY_BUCKETS: [f64; 44] = [
    0.001, 0.002, 0.003, 0.004, 0.005, 0.006, 0.007, 0.008, 0.009, 0.010, 0.012, 0.014, 0.016, 0.018, 0.020, 0.022,
    0.024, 0.026, 0.028, 0.030, 0.035, 0.040, 0.045, 0.050, 0.055, 0.060, 0.070, 0.080, 0.090, 0.100, 0.150, 0.250,
    0.500, 0.750, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// Counters, gauges and histograms of one relay process.
#[derive(Clone)]
pub struct RelayMetrics {
    published: Family<PathLabel, Counter>,
    read: Family<PathLabel, Counter>,
    send_status: Family<SendStatusLabel, Counter>,
    slave_unconfirmed: Family<BrokerAnswerLabel, Counter>,
    retries: Family<ClassLabel, Counter>,
    failed: Family<ReasonLabel, Counter>,
    write_misses: Family<MissLabel, Counter>,
    outbox_rows: Family<RowStatusLabel, Gauge>,
    lane_inflight: Family<QueueLabel, Gauge>,
    broker_held_lanes: Family<BrokerLabel, Gauge>,
    pub commit_to_ack: LatencyHistogram,
    pub route_to_ack: LatencyHistogram,
    pub send_seconds: LatencyHistogram,
    pub held_keys: Gauge,
    /// Payload bytes (and a fixed overhead per event) read and not yet acknowledged.
    pub in_flight_bytes: Gauge,
    /// `lanes.max_in_flight_bytes`: reading waits while the gauge above is there.
    pub in_flight_bytes_limit: Gauge,
    /// 1 while the binlog reader streams from its source.
    pub binlog_connected: Gauge,
    pub swept: Counter,
    pub write_back_wait: LatencyHistogram,
    pub reclaimed: Counter,
    pub position_lost: Counter,
    /// Binlog connections lost and tried again.
    pub binlog_reconnects: Counter,
    pub full_sweeps: Counter,
    pub leader: Gauge,
    pub leader_term: Gauge,
    /// 1 while an operator's pause holds this leader.
    pub paused: Gauge,
    pub ready: Gauge,
    pub in_flight_transactions: Gauge,
    pub oldest_pending_seconds: FloatGauge,
    pub binlog_lag_seconds: FloatGauge,
    pub checkpoint_age_seconds: FloatGauge,
    pub expiry_headroom_seconds: FloatGauge,
    pub source_replica_lag_seconds: FloatGauge,
    pub binlog_behind_bytes: FloatGauge,
    /// The points in time the lag gauges are computed from.
    pub lag: Arc<LagClocks>,
    pub upkeep: UpkeepMetrics,
}

impl RelayMetrics {
    /// The metrics, registered in `registry`, every label value at 0 and every
    /// leader-only gauge NaN.
    pub fn register(registry: &mut Registry) -> Self {
        let m = Self::unregistered();
        m.describe(registry);
        show(&m.published, Path::ALL.map(|path| PathLabel { path }));
        show(&m.read, Path::ALL.map(|path| PathLabel { path }));
        show(&m.send_status, SendStatus::ALL.map(|status| SendStatusLabel { status }));
        show(
            &m.retries,
            [ErrorClass::Outage, ErrorClass::Event, ErrorClass::Unknown].map(|class| ClassLabel { class }),
        );
        show(&m.failed, FailReason::ALL.map(|reason| ReasonLabel { reason }));
        show(&m.write_misses, WriteMiss::ALL.map(|miss| MissLabel { miss }));
        m.stand_down();
        m
    }

    fn unregistered() -> Self {
        Self {
            published: Family::default(),
            read: Family::default(),
            send_status: Family::default(),
            slave_unconfirmed: Family::default(),
            retries: Family::default(),
            failed: Family::default(),
            write_misses: Family::default(),
            outbox_rows: Family::default(),
            lane_inflight: Family::default(),
            broker_held_lanes: Family::default(),
            commit_to_ack: LatencyHistogram::new(&LATENCY_BUCKETS),
            route_to_ack: LatencyHistogram::new(&LATENCY_BUCKETS),
            send_seconds: LatencyHistogram::new(&LATENCY_BUCKETS),
            held_keys: Gauge::default(),
            in_flight_bytes: Gauge::default(),
            in_flight_bytes_limit: Gauge::default(),
            binlog_connected: Gauge::default(),
            swept: Counter::default(),
            write_back_wait: LatencyHistogram::new(&LATENCY_BUCKETS),
            reclaimed: Counter::default(),
            position_lost: Counter::default(),
            binlog_reconnects: Counter::default(),
            full_sweeps: Counter::default(),
            leader: Gauge::default(),
            leader_term: Gauge::default(),
            paused: Gauge::default(),
            ready: Gauge::default(),
            in_flight_transactions: Gauge::default(),
            oldest_pending_seconds: FloatGauge::default(),
            binlog_lag_seconds: FloatGauge::default(),
            checkpoint_age_seconds: FloatGauge::default(),
            expiry_headroom_seconds: FloatGauge::default(),
            source_replica_lag_seconds: unknown(),
            binlog_behind_bytes: FloatGauge::default(),
            lag: Arc::default(),
            upkeep: UpkeepMetrics::default(),
        }
    }

    fn describe(&self, registry: &mut Registry) {
        let info = Family::<BuildLabel, Gauge>::default();
        info.get_or_create(&BuildLabel { version: env!("CARGO_PKG_VERSION") }).set(1);
        registry.register("relay_build_info", "The relay's version (value 1)", info);
        registry.register(
            "relay_events_published",
            "Events the broker answered SEND_OK for, by the path that read them (binlog, sweep)",
            self.published.clone(),
        );
        registry.register(
            "relay_events_read",
            "Events read and handed into the pipeline, by the path that read them (binlog, sweep)",
            self.read.clone(),
        );
        registry.register(
            "relay_in_flight_bytes",
            "Payload bytes (plus 256 per event) read and not yet acknowledged; reading waits at relay_in_flight_bytes_limit",
            self.in_flight_bytes.clone(),
        );
        registry.register(
            "relay_in_flight_bytes_limit",
            "lanes.max_in_flight_bytes: the in-flight bytes at which reading waits (backpressure)",
            self.in_flight_bytes_limit.clone(),
        );
        registry.register(
            "relay_binlog_connected",
            "1 while the binlog reader streams from its source, else 0 (a standby, poll mode, a lost connection)",
            self.binlog_connected.clone(),
        );
        registry.register(
            "relay_send_batches",
            "Synchronous batch sends by the broker's answer (SEND_OK, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE; ERROR: no status)",
            self.send_status.clone(),
        );
        registry.register(
            "relay_broker_slave_unconfirmed",
            "Batch sends a master broker stored but whose slave did not confirm them (FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE), by broker: held and sent again; the broker's slave is down or behind",
            self.slave_unconfirmed.clone(),
        );
        registry.register(
            "relay_batch_retries",
            "Batch sends not confirmed, by class: outage (broker cannot take anything; waited out), event (the event can never be sent), unknown",
            self.retries.clone(),
        );
        registry.register(
            "relay_failed_events",
            "Events marked FAILED, by reason: alert on any increase",
            self.failed.clone(),
        );
        registry.register(
            "relay_commit_to_ack_seconds",
            "From the outbox row's created_at (milliseconds, the primary's clock) to the broker's SEND_OK",
            self.commit_to_ack.clone(),
        );
        registry.register(
            "relay_route_to_ack_seconds",
            "For every event sent, from the relay's coordinator taking it in to the broker's SEND_OK: its time in the relay after it was read (route lookup, lane queue, linger, send, retries in place)",
            self.route_to_ack.clone(),
        );
        registry.register(
            "relay_send_seconds",
            "Duration of one synchronous batch send to the broker, whatever its answer",
            self.send_seconds.clone(),
        );
        registry.register(
            "relay_held_keys",
            "Business keys whose later events wait behind a FAILED event (failed_key_policy = hold)",
            self.held_keys.clone(),
        );
        registry.register(
            "relay_lane_inflight",
            "Events handed to a queue's sender and not yet ended (sent, failed, deferred or held)",
            self.lane_inflight.clone(),
        );
        registry.register(
            "relay_write_misses",
            "Rows a write on the outbox was meant to change and did not, by what happened (each is logged with its ids; SENT write-backs that missed leave their rows to be published again)",
            self.write_misses.clone(),
        );
        registry.register(
            "relay_broker_held_lanes",
            "Lanes (queues) of a broker whose sends are held now because the broker cannot take them (down, no route, refusing writes); 0 when it takes them",
            self.broker_held_lanes.clone(),
        );
        registry.register("relay_sweep_claimed", "Rows the sweep claimed (SENDING) to publish", self.swept.clone());
        registry.register(
            "relay_sweep_write_back_wait_seconds",
            "How long each sweep waited for the SENT write-backs queued before it (at most 30 s), so that rows already on the broker are not claimed again",
            self.write_back_wait.clone(),
        );
        registry.register(
            "relay_sweep_reclaimed",
            "SENDING rows whose lease expired, put back to PENDING (a sweeper died or stalled)",
            self.reclaimed.clone(),
        );
        registry.register(
            "relay_position_lost",
            "Times the saved binlog position could not be read (purged, another server): a full sweep followed",
            self.position_lost.clone(),
        );
        registry.register(
            "relay_binlog_reconnects",
            "Binlog connections lost (the source restarted, a network cut, a dead connection) and tried again",
            self.binlog_reconnects.clone(),
        );
        registry.register(
            "relay_full_sweeps",
            "Sweeps of every PENDING row before tailing (no usable checkpoint, or a lost position)",
            self.full_sweeps.clone(),
        );
        registry.register(
            "relay_leader",
            "1 while this instance holds the leader lease and publishes, else 0",
            self.leader.clone(),
        );
        registry.register(
            "relay_leader_term",
            "The lease term this instance publishes under (0 as a standby)",
            self.leader_term.clone(),
        );
        registry.register(
            "relay_paused",
            "1 while this leader publishes nothing because an operator paused the fleet (outbox-relay resume)",
            self.paused.clone(),
        );
        registry.register("relay_ready", "1 while /readyz answers 200, else 0", self.ready.clone());
        registry.register(
            "relay_in_flight_transactions",
            "Source transactions read but not yet fully acknowledged",
            self.in_flight_transactions.clone(),
        );
        self.describe_lags(registry);
        self.upkeep.describe(registry);
    }

    fn describe_lags(&self, registry: &mut Registry) {
        registry.register(
            "outbox_oldest_pending_seconds",
            "Age of the oldest row waiting to be sent (PENDING, or SENDING past its lease), in the database's clock: the delay consumers feel",
            self.oldest_pending_seconds.clone(),
        );
        registry.register("outbox_rows", "Outbox rows by status", self.outbox_rows.clone());
        registry.register(
            "relay_binlog_lag_seconds",
            "Now minus the commit time of the last transaction the binlog reader read (a heartbeat at the binlog's end counts as now)",
            self.binlog_lag_seconds.clone(),
        );
        registry.register(
            "relay_checkpoint_age_seconds",
            "Now minus the commit time of the last transaction the saved checkpoint covers (a heartbeat at the binlog's end counts as now)",
            self.checkpoint_age_seconds.clone(),
        );
        registry.register(
            "relay_binlog_expiry_headroom_seconds",
            "How long the relay may stay down before the source purges the binlog its checkpoint needs (+Inf: the source never purges)",
            self.expiry_headroom_seconds.clone(),
        );
        registry.register(
            "relay_source_replica_lag_seconds",
            "Seconds_Behind_Master of the replica the relay reads (0 when the source is not a replica; grows while its replication is stopped)",
            self.source_replica_lag_seconds.clone(),
        );
        registry.register(
            "relay_binlog_behind_bytes",
            "Binlog bytes between the reader and the end of the source's binlog",
            self.binlog_behind_bytes.clone(),
        );
    }

    /// Counts a send that was not confirmed, by what its failure says.
    pub fn retry(&self, class: ErrorClass) {
        self.retries.get_or_create(&ClassLabel { class }).inc();
    }

    /// Counts rows a write was meant to change and did not.
    pub fn write_missed(&self, miss: WriteMiss, rows: usize) {
        self.write_misses.get_or_create(&MissLabel { miss }).inc_by(rows as u64);
    }

    /// Counts events marked FAILED.
    pub fn failed(&self, reason: FailReason, events: usize) {
        self.failed.get_or_create(&ReasonLabel { reason }).inc_by(events as u64);
    }

    /// Counts one batch send to `broker` by how it answered, and how long it took.
    pub fn sent_batch(&self, broker: &str, status: SendStatus, took: Duration) {
        self.send_status.get_or_create(&SendStatusLabel { status }).inc();
        if status.slave_unconfirmed() {
            self.slave_unconfirmed.get_or_create(&BrokerAnswerLabel { broker: broker.to_owned(), status }).inc();
        }
        self.send_seconds.observe(took.as_secs_f64());
    }

    /// Counts events read by `path` and handed into the pipeline.
    pub fn read(&self, path: Path, events: usize) {
        self.read.get_or_create(&PathLabel { path }).inc_by(events as u64);
    }

    /// Counts events the broker confirmed, read by `path`.
    pub fn published(&self, path: Path, events: usize) {
        self.published.get_or_create(&PathLabel { path }).inc_by(events as u64);
    }

    /// The in-flight gauge of one lane.
    pub fn lane_inflight(&self, topic: &str, broker: &str, queue: u32) -> Gauge {
        let label = QueueLabel { topic: topic.to_owned(), broker: broker.to_owned(), queue };
        self.lane_inflight.get_or_create(&label).clone()
    }

    /// The gauge of a broker's lanes held by an outage now.
    pub fn broker_held_lanes(&self, broker: &str) -> Gauge {
        self.broker_held_lanes.get_or_create(&BrokerLabel { broker: broker.to_owned() }).clone()
    }

    /// Row counts per status, as just measured.
    pub fn outbox_rows(&self, counts: &[(RowStatus, u64)]) {
        for (status, rows) in counts {
            let gauge = self.outbox_rows.get_or_create(&RowStatusLabel { status: RowStatusValue(*status) });
            gauge.set(gauge_value(*rows));
        }
    }

    /// The row counts are not known (the primary does not answer).
    pub fn forget_outbox_rows(&self) {
        self.outbox_rows.clear();
    }

    /// Brings the gauges computed on reading up to now; called before every render.
    pub fn refresh(&self, ready: bool) {
        self.ready.set(i64::from(ready));
        let Ages { binlog_lag, checkpoint_age, expiry_headroom } = self.lag.ages();
        self.binlog_lag_seconds.set(binlog_lag);
        self.checkpoint_age_seconds.set(checkpoint_age);
        self.expiry_headroom_seconds.set(expiry_headroom);
    }

    /// This instance no longer leads: what only a leader measures becomes unknown.
    pub fn stand_down(&self) {
        self.leader.set(0);
        self.leader_term.set(0);
        self.paused.set(0);
        self.pipeline_stopped();
    }

    /// The term's pipeline stopped (a pause, the end of the term): what only a running
    /// pipeline measures is not known any more.
    pub fn pipeline_stopped(&self) {
        self.binlog_connected.set(0);
        self.held_keys.set(0);
        self.in_flight_transactions.set(0);
        self.lag.clear();
        for gauge in [
            &self.oldest_pending_seconds,
            &self.source_replica_lag_seconds,
            &self.binlog_behind_bytes,
            &self.binlog_lag_seconds,
            &self.checkpoint_age_seconds,
            &self.expiry_headroom_seconds,
        ] {
            gauge.set(f64::NAN);
        }
        self.outbox_rows.clear();
        self.lane_inflight.clear();
        self.broker_held_lanes.clear();
        self.upkeep.stand_down();
    }
}

/// Creates the series of `labels` in `family` (at 0), so they are exported before
/// their first event.
fn show<S: Clone + std::hash::Hash + Eq, M: Default>(family: &Family<S, M>, labels: impl IntoIterator<Item = S>) {
    for label in labels {
        drop(family.get_or_create(&label));
    }
}

/// A gauge that reads as unknown (NaN) until it is first set: a value not read yet
/// must not look like a measured zero.
fn unknown() -> FloatGauge {
    let gauge = FloatGauge::default();
    gauge.set(f64::NAN);
    gauge
}
