//! The SENT writer: batches `status = 2, msg_id, sent_at` updates off the send path.
//!
//! While UPDATEs run (two at once, each on a connection the writer holds with its
//! statements prepared: their rows are disjoint, so they overlap their round trips
//! and commits), the next batch accumulates, so the batch size follows
//! the load. Once a slot is free, a batch's first row also waits a few milliseconds
//! for company: under a steady load of small transactions every row would otherwise
//! be its own UPDATE, one transaction on the primary per event. The wait shows in no
//! latency (`sent_at` is the SEND_OK instant) and holds up nothing else: the writer is
//! off the send path, and the checkpoint does not wait for it.
//! A batch that still fails after a few attempts is logged and dropped: its rows stay
//! PENDING and the sweep publishes them again (a duplicate, never a loss). A flush in
//! the queue (the sweep's, before it claims) closes the batch it is found in and is
//! answered when every write started before it has finished.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::{JoinError, JoinSet};

use crate::backoff::Backoff;
use crate::fault;
use crate::store::{Sent, SentConn, SentStore, WriteBack};

/// Most rows in one UPDATE.
const MAX_BATCH: usize = 1_000;
/// Attempts per batch before it is left to the sweep.
const ATTEMPTS: u32 = 5;

/// UPDATEs in flight at once, each on a connection of its own: the size of the
/// writer's pool.
pub(crate) const CONCURRENT: usize = 2;
/// How long a batch's first row waits for more before the UPDATE.
const LINGER: Duration = Duration::from_millis(20);

/// A place for one UPDATE in flight, with the connection it holds (none before the
/// first write, after a failed one, and after a write that panicked).
type Slot = Option<SentConn>;

/// Writes every SENT row that arrives until the queue closes, then waits for the last;
/// answers each flush once every write before it has finished.
pub async fn run(store: SentStore, mut input: mpsc::Receiver<WriteBack>) {
    let backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(2));
    let mut idle: Vec<Slot> = (0..CONCURRENT).map(|_| None).collect();
    let mut writes: JoinSet<Slot> = JoinSet::new();
    while let Some(first) = input.recv().await {
        let (mut batch, mut flushes) = (Vec::with_capacity(MAX_BATCH), Vec::new());
        take(first, &mut batch, &mut flushes);
        if !batch.is_empty() {
            let slot = match idle.pop() {
                Some(slot) => slot,
                None => freed(writes.join_next().await),
            };
            gather(&mut input, &mut batch, &mut flushes).await;
            let store = store.clone();
            writes.spawn(async move { write(&store, slot, &batch, &backoff).await });
        }
        if !flushes.is_empty() {
            while let Some(ended) = writes.join_next().await {
                idle.push(freed(Some(ended)));
            }
            for done in flushes {
                let _ = done.send(());
            }
        }
        while let Some(ended) = writes.try_join_next() {
            idle.push(freed(Some(ended)));
        }
    }
    while writes.join_next().await.is_some() {}
}

/// The slot a write gives back when it ends; a write that panicked gives back none.
fn freed(ended: Option<Result<Slot, JoinError>>) -> Slot {
    ended.and_then(Result::ok).flatten()
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

/// Writes `batch`, retrying; gives back the connection to keep, if any.
async fn write(store: &SentStore, mut slot: Slot, batch: &[Sent], backoff: &Backoff) -> Slot {
    if let Some(delay) = fault::sent_write_delay() {
        tokio::time::sleep(delay).await;
    }
    for attempt in 1..=ATTEMPTS {
        match mark_sent(store, slot.take(), batch).await {
            Ok(conn) => return Some(conn),
            Err(error) if attempt == ATTEMPTS => {
                tracing::error!(%error, rows = batch.len(), first_id = batch[0].id, "cannot mark rows SENT; they stay PENDING and the sweep will publish them again");
            }
            Err(error) => {
                tracing::warn!(%error, attempt, "SENT write-back failed; retrying");
                tokio::time::sleep(backoff.delay(attempt)).await;
            }
        }
    }
    None
}

/// One attempt, on the slot's connection while it is fresh. A connection whose attempt
/// failed goes back to the pool, which closes it if it is broken.
async fn mark_sent(store: &SentStore, slot: Slot, batch: &[Sent]) -> Result<SentConn, mysql_async::Error> {
    let mut conn = store.hold(slot).await?;
    conn.mark_sent(batch).await?;
    Ok(conn)
}
