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
//!
//! Nothing it is given is dropped silently. A batch that still fails after a few
//! attempts, or that leaves rows unsent (changed fewer rows than it was given, and the
//! table shows them neither SENT nor SKIPPED), is logged with those ids and counted
//! (`relay_write_misses_total`), and the ids go to the sweep: rows the binlog path sent
//! stay PENDING and rows the sweep claimed are put back to PENDING, so the sweep
//! publishes them again (a duplicate, never a loss). Rows found SENT already (an event
//! published again after a restart) are only counted. A write that panics is a bug: it
//! is logged and counted the same way, and stops the relay like any panicking task, as
//! soon as it ends. A flush in the queue (the sweep's, before it claims) closes the batch it is
//! found in and is answered when every write started before it has finished.

use std::collections::HashMap;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio::task::{Id, JoinError, JoinSet};

use super::{Unwritten, WriteBack};
use crate::backoff::Backoff;
use crate::fault::{self, SentWriteFault, Slow};
use crate::metrics::{RelayMetrics, WriteMiss};
use crate::store::{Sent, SentConn, SentStore, IDS_LOGGED};

/// How a failed batch is tried again, up to [`ATTEMPTS`] times.
const RETRY: Backoff = Backoff { initial: Duration::from_millis(100), max: Duration::from_secs(2) };
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
/// first write, and after a failed one).
type Slot = Option<SentConn>;

/// Where the writer reports the rows it could not mark SENT.
#[derive(Clone)]
pub struct Misses {
    pub metrics: RelayMetrics,
    pub unwritten: Unwritten,
}

impl Misses {
    /// Counts and logs `missed`, the rows a write left unsent, and hands their ids to
    /// the sweep.
    fn report(&self, miss: WriteMiss, missed: &[u64], why: &str) {
        self.metrics.write_missed(miss, missed.len());
        let ids = &missed[..missed.len().min(IDS_LOGGED)];
        tracing::error!(miss = miss.name(), rows = missed.len(), ?ids, "{why}");
        self.unwritten.add(missed.iter().copied());
    }

    /// After a write that changed `changed` of `batch`'s rows: the rows it left unsent
    /// are reported; rows SENT already are counted. When the table cannot be asked,
    /// every row of the batch is reported (putting back a SENT row changes nothing).
    async fn after_write(&self, conn: &mut SentConn, batch: &[u64], changed: u64) {
        let unchanged = batch.len().saturating_sub(usize::try_from(changed).unwrap_or(usize::MAX));
        if unchanged == 0 {
            return;
        }
        let why = "a SENT write-back left rows unsent (no longer this relay's, or its leader term ended): they are published again";
        match conn.unsent(batch).await {
            Ok(unsent) => {
                self.metrics.write_missed(WriteMiss::SentAlready, unchanged.saturating_sub(unsent.len()));
                if !unsent.is_empty() {
                    self.report(WriteMiss::SentUnchanged, &unsent, why);
                }
            }
            Err(error) => {
                let why = format!("{why} (which of the batch's rows could not be read: {error})");
                self.report(WriteMiss::SentUnchanged, batch, &why);
            }
        }
    }
}

/// The writes in flight, each with the ids of its batch (named when one panics).
struct Writes {
    running: JoinSet<Slot>,
    batches: HashMap<Id, Vec<u64>>,
    misses: Misses,
}

impl Writes {
    fn spawn(&mut self, store: SentStore, slot: Slot, batch: Vec<Sent>, backoff: Backoff) {
        let ids = batch.iter().map(|row| row.id).collect();
        let misses = self.misses.clone();
        let handle = self.running.spawn(async move { write(&store, slot, &batch, &backoff, &misses).await });
        self.batches.insert(handle.id(), ids);
    }

    /// The slot of the next write to end; `None` when none runs.
    async fn next(&mut self) -> Option<Slot> {
        let ended = self.running.join_next_with_id().await?;
        Some(self.freed(ended))
    }

    /// The slot a write gives back when it ends. A write that panicked is reported
    /// with its rows, and its panic goes on in the writer, which ends at once (its
    /// supervisor stops the relay).
    fn freed(&mut self, ended: Result<(Id, Slot), JoinError>) -> Slot {
        match ended {
            Ok((id, slot)) => {
                self.batches.remove(&id);
                slot
            }
            Err(error) => {
                let batch = self.batches.remove(&error.id()).unwrap_or_default();
                let why =
                    "a SENT write-back panicked: its rows stay PENDING or go back to PENDING and are published again";
                self.misses.report(WriteMiss::SentPanicked, &batch, why);
                match error.try_into_panic() {
                    Ok(panic) => std::panic::resume_unwind(panic),
                    // Cancelled: only when the runtime itself shuts down.
                    Err(_) => None,
                }
            }
        }
    }
}

/// Writes every SENT row that arrives until the queue closes, then waits for the last;
/// answers each flush once every write before it has finished. A write that panics ends
/// it at once, with that panic.
pub async fn run(store: SentStore, mut input: mpsc::Receiver<WriteBack>, misses: Misses) {
    let backoff = RETRY;
    let mut idle: Vec<Slot> = (0..CONCURRENT).map(|_| None).collect();
    let mut writes = Writes { running: JoinSet::new(), batches: HashMap::new(), misses };
    loop {
        let first = tokio::select! {
            entry = input.recv() => match entry {
                Some(first) => first,
                None => break,
            },
            Some(ended) = writes.next() => {
                idle.push(ended);
                continue;
            }
        };
        let (mut batch, mut flushes) = (Vec::with_capacity(MAX_BATCH), Vec::new());
        take(first, &mut batch, &mut flushes);
        if !batch.is_empty() {
            let slot = match idle.pop() {
                Some(slot) => slot,
                None => writes.next().await.flatten(),
            };
            gather(&mut input, &mut batch, &mut flushes).await;
            writes.spawn(store.clone(), slot, batch, backoff);
        }
        if !flushes.is_empty() {
            while let Some(ended) = writes.next().await {
                idle.push(ended);
            }
            for done in flushes {
                // The sweep stopped waiting (its own timeout): nothing to answer.
                let _ = done.send(());
            }
        }
    }
    while writes.next().await.is_some() {}
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

/// Writes `batch`, retrying; reports what it could not change; gives back the
/// connection to keep, if any.
async fn write(store: &SentStore, mut slot: Slot, batch: &[Sent], backoff: &Backoff, misses: &Misses) -> Slot {
    fault::slow(Slow::SentWrite).await;
    let rows = match fault::sent_write_fault() {
        SentWriteFault::None => batch,
        SentWriteFault::Short => &batch[1..],
        SentWriteFault::Panic => {
            panic!("injected fault: a SENT write-back panics (OUTBOX_RELAY_FAULT_SENT_WRITE_PANIC_AT)")
        }
    };
    let ids: Vec<u64> = batch.iter().map(|row| row.id).collect();
    for attempt in 1..=ATTEMPTS {
        match mark_sent(store, slot.take(), rows).await {
            Ok((mut conn, changed)) => {
                misses.after_write(&mut conn, &ids, changed).await;
                return Some(conn);
            }
            Err(error) if attempt == ATTEMPTS => {
                let why = format!("cannot mark rows SENT ({error}): they stay PENDING or go back to PENDING, and the sweep publishes them again");
                misses.report(WriteMiss::SentGaveUp, &ids, &why);
            }
            Err(error) => {
                tracing::warn!(%error, attempt, "SENT write-back failed; retrying");
                tokio::time::sleep(backoff.delay(attempt)).await;
            }
        }
    }
    None
}

/// One attempt, on the slot's connection while it is fresh; the rows it changed. A
/// connection whose attempt failed goes back to the pool, which closes it if it is
/// broken.
async fn mark_sent(store: &SentStore, slot: Slot, batch: &[Sent]) -> Result<(SentConn, u64), mysql_async::Error> {
    let mut conn = store.hold(slot).await?;
    let changed = conn.mark_sent(batch).await?;
    Ok((conn, changed))
}
