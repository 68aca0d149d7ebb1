//! The SENT writer: batches `status = 2, msg_id, sent_at` updates off the send path.
//!
//! While UPDATEs run (two at once: their rows are disjoint, so they overlap their
//! round trips and commits), the next batch accumulates, so the batch size follows
//! the load. Once a slot is free, a batch's first row also waits a few milliseconds
//! for company: under a steady load of small transactions every row would otherwise
//! be its own UPDATE, one transaction on the primary per event. The wait shows in no
//! latency (`sent_at` is the SEND_OK instant) and holds up nothing else: the writer is
//! off the send path, and the checkpoint does not wait for it.
//! A batch that still fails after a few attempts is logged and dropped: its rows stay
//! PENDING and the sweep publishes them again (a duplicate, never a loss). A flush in
//! the queue (the sweep's, before it claims) closes the batch it is found in and is
//! answered when every write started before it has finished.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, Semaphore};
use tokio::task::JoinSet;

use crate::backoff::Backoff;
use crate::fault;
use crate::store::{Sent, StatusStore, WriteBack};

/// Most rows in one UPDATE.
const MAX_BATCH: usize = 1_000;
/// Attempts per batch before it is left to the sweep.
const ATTEMPTS: u32 = 5;

/// UPDATEs in flight at once.
const CONCURRENT: usize = 2;
/// How long a batch's first row waits for more before the UPDATE.
const LINGER: Duration = Duration::from_millis(20);

/// Writes every SENT row that arrives until the queue closes, then waits for the last;
/// answers each flush once every write before it has finished.
pub async fn run(status: StatusStore, mut input: mpsc::Receiver<WriteBack>) {
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let slots = Arc::new(Semaphore::new(CONCURRENT));
    let mut writes = JoinSet::new();
    while let Some(first) = input.recv().await {
        let (mut batch, mut flushes) = (Vec::with_capacity(MAX_BATCH), Vec::new());
        take(first, &mut batch, &mut flushes);
        if !batch.is_empty() {
            let Ok(slot) = Arc::clone(&slots).acquire_owned().await else { break };
            gather(&mut input, &mut batch, &mut flushes).await;
            let status = status.clone();
            writes.spawn(async move {
                write(&status, &batch, &backoff).await;
                drop(slot);
            });
        }
        if !flushes.is_empty() {
            while writes.join_next().await.is_some() {}
            for done in flushes {
                let _ = done.send(());
            }
        }
        while writes.try_join_next().is_some() {}
    }
    while writes.join_next().await.is_some() {}
}

/// Sorts one queue entry into the batch or the flushes waiting for it.
fn take(entry: WriteBack, batch: &mut Vec<Sent>, flushes: &mut Vec<oneshot::Sender<()>>) {
    match entry {
        WriteBack::Row(row) => batch.push(row),
        WriteBack::Flush(done) => flushes.push(done),
    }
}

/// Adds to `batch` what is queued after [`LINGER`] (at once when a whole batch is
/// already queued), up to [`MAX_BATCH`] rows or the first flush. The writer sleeps
/// meanwhile rather than wait on the queue, so rows queued during the linger wake
/// no one: under a steady load, one wake-up per batch instead of one per row.
async fn gather(input: &mut mpsc::Receiver<WriteBack>, batch: &mut Vec<Sent>, flushes: &mut Vec<oneshot::Sender<()>>) {
    if input.len() < MAX_BATCH - batch.len() {
        tokio::time::sleep(LINGER).await;
    }
    while batch.len() < MAX_BATCH && flushes.is_empty() {
        let Ok(entry) = input.try_recv() else { return };
        take(entry, batch, flushes);
    }
}

async fn write(status: &StatusStore, batch: &[Sent], backoff: &Backoff) {
    if let Some(delay) = fault::sent_write_delay() {
        tokio::time::sleep(delay).await;
    }
    for attempt in 1..=ATTEMPTS {
        match status.mark_sent(batch).await {
            Ok(_) => return,
            Err(error) if attempt == ATTEMPTS => {
                tracing::error!(%error, rows = batch.len(), first_id = batch[0].id, "cannot mark rows SENT; they stay PENDING and the sweep will publish them again");
            }
            Err(error) => {
                tracing::warn!(%error, attempt, "SENT write-back failed; retrying");
                tokio::time::sleep(backoff.delay(attempt)).await;
            }
        }
    }
}
