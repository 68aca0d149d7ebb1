//! The way into the pipeline, shared by the binlog reader and the sweep.
//!
//! A batch first takes one in-flight permit per event (at most the whole budget, so a
//! batch larger than the budget waits for an empty pipeline instead of forever), then
//! goes to the coordinator, which gives the permits back once the batch and every
//! earlier one are acknowledged. Waiting for permits is the backpressure that bounds
//! the relay's memory: a source that cannot hand on stops reading.

use std::sync::Arc;

use tokio::sync::{mpsc, Semaphore};

use super::SourceTx;

/// The pipeline stopped (shutdown or a fatal error elsewhere).
#[derive(Debug, thiserror::Error)]
#[error("the relay pipeline has stopped")]
pub struct PipelineClosed;

/// Hands batches to the coordinator under the in-flight budget.
#[derive(Clone)]
pub struct Handoff {
    permits: Arc<Semaphore>,
    max_in_flight: usize,
    output: mpsc::Sender<SourceTx>,
}

impl Handoff {
    pub fn new(permits: Arc<Semaphore>, max_in_flight: usize, output: mpsc::Sender<SourceTx>) -> Self {
        Self { permits, max_in_flight, output }
    }

    /// Permits a batch of `events` events holds: one per event, at most `max_in_flight`.
    pub fn permits_for(events: usize, max_in_flight: usize) -> usize {
        events.min(max_in_flight)
    }

    /// Waits for the batch's permits, then hands it on.
    pub async fn send(&self, tx: SourceTx) -> Result<(), PipelineClosed> {
        let wanted = Self::permits_for(tx.events.len(), self.max_in_flight);
        let count = u32::try_from(wanted).unwrap_or(u32::MAX);
        if count > 0 {
            self.permits.acquire_many(count).await.map_err(|_| PipelineClosed)?.forget();
        }
        self.output.send(tx).await.map_err(|_| PipelineClosed)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::event::OutboxEvent;
    use crate::source::Origin;

    fn swept(n: u64) -> SourceTx {
        let event = |id: u64| OutboxEvent {
            id,
            event_id: format!("e{id}"),
            biz_key: "k".into(),
            topic: "t".into(),
            payload: Bytes::new(),
        };
        SourceTx { events: (0..n).map(event).collect(), origin: Origin::Sweep { retry_counts: vec![0; n as usize] } }
    }

    #[test]
    fn a_batch_never_needs_more_than_the_whole_budget() {
        assert_eq!(Handoff::permits_for(3, 10), 3);
        assert_eq!(Handoff::permits_for(10_000, 20), 20);
        assert_eq!(Handoff::permits_for(0, 20), 0);
    }

    #[tokio::test]
    async fn a_full_budget_holds_the_next_batch_back_until_permits_return() {
        let permits = Arc::new(Semaphore::new(2));
        let (output, mut input) = mpsc::channel(8);
        let handoff = Handoff::new(Arc::clone(&permits), 2, output);
        handoff.send(swept(2)).await.expect("a batch within the budget goes at once");
        let mut waiting = tokio::spawn({
            let handoff = handoff.clone();
            async move { handoff.send(swept(1)).await }
        });
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut waiting).await.is_err(),
            "the budget is spent: the next batch must wait"
        );
        permits.add_permits(2);
        let sent = waiting.await.expect("task");
        assert!(sent.is_ok(), "permits came back: the batch goes");
        assert_eq!(input.recv().await.map(|tx| tx.events.len()), Some(2));
        assert_eq!(input.recv().await.map(|tx| tx.events.len()), Some(1));
    }
}
