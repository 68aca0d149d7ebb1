//! The way into the pipeline, shared by the binlog reader and the sweep, and the
//! in-flight budget that bounds the relay's memory.
//!
//! A batch first takes its share of the budget, one permit per event and one per
//! payload byte (never more than the whole budget, so a batch larger than the budget
//! waits for an empty pipeline instead of forever), then goes to the coordinator. The
//! share travels with the batch as an [`InFlight`] value that the ack tracker holds
//! until the batch and every earlier one are acknowledged; dropping it gives the
//! permits back. Waiting for permits is the backpressure: a source that cannot hand
//! on stops reading, however large the transactions or the backlog.

use std::sync::Arc;

use prometheus_client::metrics::gauge::Gauge;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::{Origin, SourceTx};
use crate::config::LanesConfig;
use crate::metrics::{gauge_value, Path, RelayMetrics};

/// Bytes counted per event besides its payload (ids, key, topic, bookkeeping).
const EVENT_OVERHEAD_BYTES: usize = 256;

/// The pipeline stopped (shutdown or a fatal error elsewhere).
#[derive(Debug, thiserror::Error)]
#[error("the relay pipeline has stopped")]
pub struct PipelineClosed;

/// Limits on what may be read but not yet acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub events: usize,
    pub bytes: usize,
}

/// A batch's share of the budget; given back when dropped (and taken off the
/// in-flight bytes gauge).
#[derive(Debug)]
pub struct InFlight {
    _events: Option<OwnedSemaphorePermit>,
    _bytes: Option<OwnedSemaphorePermit>,
    bytes: i64,
    bytes_gauge: Gauge,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.bytes_gauge.dec_by(self.bytes);
    }
}

/// A batch admitted into the pipeline, with the budget it holds.
#[derive(Debug)]
pub struct Admitted {
    pub tx: SourceTx,
    pub in_flight: InFlight,
}

/// Hands batches to the coordinator under the in-flight budget.
#[derive(Clone)]
pub struct Handoff {
    events: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    budget: Budget,
    output: mpsc::Sender<Admitted>,
    metrics: RelayMetrics,
}

/// Batches admitted and not yet taken by the coordinator. A few suffice: the budget,
/// not this queue, bounds what is in flight.
const QUEUED_BATCHES: usize = 64;

impl Budget {
    /// The in-flight budget the configuration sets.
    pub fn of(lanes: &LanesConfig) -> Self {
        Self { events: lanes.max_in_flight, bytes: lanes.max_in_flight_bytes }
    }
}

impl Handoff {
    /// A hand-off under `budget`, and the coordinator's end of it; it counts the
    /// events read and the bytes in flight in `metrics`.
    pub fn channel(budget: Budget, metrics: RelayMetrics) -> (Self, mpsc::Receiver<Admitted>) {
        let (output, admitted) = mpsc::channel(QUEUED_BATCHES);
        (Self::new(budget, output, metrics), admitted)
    }

    fn new(budget: Budget, output: mpsc::Sender<Admitted>, metrics: RelayMetrics) -> Self {
        metrics.in_flight_bytes_limit.set(gauge_value(budget.bytes));
        Self {
            events: Arc::new(Semaphore::new(budget.events)),
            bytes: Arc::new(Semaphore::new(budget.bytes)),
            budget,
            output,
            metrics,
        }
    }

    /// Waits for the batch's share of the budget, then hands it on.
    pub async fn send(&self, tx: SourceTx) -> Result<(), PipelineClosed> {
        let path = match tx.origin {
            Origin::Binlog { .. } | Origin::BinlogPart | Origin::Moved => Path::Binlog,
            Origin::Sweep { .. } => Path::Sweep,
        };
        self.metrics.read(path, tx.events.len());
        let bytes =
            tx.events.iter().map(|e| e.payload.len() + EVENT_OVERHEAD_BYTES).sum::<usize>().min(self.budget.bytes);
        let events = take(&self.events, tx.events.len(), self.budget.events).await?;
        let bytes_permit = take(&self.bytes, bytes, self.budget.bytes).await?;
        let bytes_gauge = self.metrics.in_flight_bytes.clone();
        bytes_gauge.inc_by(gauge_value(bytes));
        let in_flight = InFlight { _events: events, _bytes: bytes_permit, bytes: gauge_value(bytes), bytes_gauge };
        self.output.send(Admitted { tx, in_flight }).await.map_err(|_| PipelineClosed)
    }
}

/// `wanted` permits of `semaphore`, at most `limit` (its size); none for zero.
async fn take(
    semaphore: &Arc<Semaphore>,
    wanted: usize,
    limit: usize,
) -> Result<Option<OwnedSemaphorePermit>, PipelineClosed> {
    let count = u32::try_from(wanted.min(limit)).unwrap_or(u32::MAX);
    if count == 0 {
        return Ok(None);
    }
    Arc::clone(semaphore).acquire_many_owned(count).await.map(Some).map_err(|_| PipelineClosed)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::event::OutboxEvent;
    use crate::source::Origin;

    fn metrics() -> RelayMetrics {
        RelayMetrics::register(&mut prometheus_client::registry::Registry::default())
    }

    fn swept(n: u64, payload_bytes: usize) -> SourceTx {
        let event = |id: u64| OutboxEvent {
            id,
            event_id: format!("e{id}"),
            biz_key: "k".into(),
            topic: "t".into(),
            payload: Bytes::from(vec![b'x'; payload_bytes]),
            created_local_us: None,
            extras: None,
        };
        SourceTx { events: (0..n).map(event).collect(), origin: Origin::Sweep { retry_counts: vec![0; n as usize] } }
    }

    async fn blocked(handoff: &Handoff, tx: SourceTx) -> tokio::task::JoinHandle<Result<(), PipelineClosed>> {
        let mut waiting = tokio::spawn({
            let handoff = handoff.clone();
            async move { handoff.send(tx).await }
        });
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut waiting).await.is_err(),
            "the budget is spent: the next batch must wait"
        );
        waiting
    }

    #[tokio::test]
    async fn a_full_event_budget_holds_the_next_batch_until_the_first_is_dropped() {
        let (output, mut input) = mpsc::channel(8);
        let handoff = Handoff::new(Budget { events: 2, bytes: 1 << 20 }, output, metrics());
        handoff.send(swept(2, 10)).await.expect("a batch within the budget goes at once");
        let first = input.recv().await.expect("first batch");
        assert_eq!(handoff.events.available_permits(), 0, "the batch holds the whole event budget");
        let waiting = blocked(&handoff, swept(1, 10)).await;
        drop(first);
        assert!(waiting.await.expect("task").is_ok(), "the first batch's permits came back: the next goes");
        assert_eq!(input.recv().await.map(|a| a.tx.events.len()), Some(1));
    }

    #[tokio::test]
    async fn large_payloads_are_bounded_by_bytes_not_only_by_count() {
        let (output, mut input) = mpsc::channel(8);
        let metrics = metrics();
        let handoff = Handoff::new(Budget { events: 1_000, bytes: 10_000 }, output, metrics.clone());
        handoff.send(swept(1, 6_000)).await.expect("fits");
        let first = input.recv().await.expect("first");
        let one = 6_000 + EVENT_OVERHEAD_BYTES as i64;
        assert_eq!((metrics.in_flight_bytes.get(), metrics.in_flight_bytes_limit.get()), (one, 10_000));
        let waiting = blocked(&handoff, swept(1, 6_000)).await;
        drop(first);
        assert!(waiting.await.expect("task").is_ok());
        let second = input.recv().await.expect("second");
        assert_eq!(metrics.in_flight_bytes.get(), one, "the first batch's bytes came back");
        drop(second);
        assert_eq!(metrics.in_flight_bytes.get(), 0);
    }

    #[tokio::test]
    async fn a_batch_larger_than_the_budget_takes_the_whole_budget_instead_of_waiting_forever() {
        let (output, mut input) = mpsc::channel(8);
        let handoff = Handoff::new(Budget { events: 5, bytes: 1_000 }, output, metrics());
        handoff.send(swept(50, 100)).await.expect("a huge batch goes when the pipeline is empty");
        assert_eq!(input.recv().await.map(|a| a.tx.events.len()), Some(50));
    }
}
