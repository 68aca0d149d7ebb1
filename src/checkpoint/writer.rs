//! The one task that writes checkpoints to RocksDB (synced, on a blocking thread so
//! the async workers never wait for the disk), and the task that copies each one to
//! the mirror row on the primary.
//!
//! Requests are taken in order and coalesced (only the newest of those waiting is
//! written), so the local checkpoint never goes backwards. The mirror task takes the
//! newest durable checkpoint from a watch channel, so it never goes backwards either,
//! and a slow or hung primary delays only the mirror, never the local checkpoint or
//! the shutdown.
//! A caller that must know its checkpoint is durable before it goes on (a topic's
//! queue count pinned before its first send) waits for [`CheckpointWriter::save_now`].
//! A RocksDB write that fails ends the task with the error: the relay stops (exit 5)
//! rather than publish on without a durable position. A failed mirror write is logged
//! and written again with the next checkpoint. Once the leader term is over nothing
//! is written any more: the next leader owns the position.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot, watch};

use super::{Checkpoint, CheckpointError, CheckpointStore, Mirror};
use crate::leader::Term;
use crate::metrics::LagClocks;

/// How long one mirror write may take: a hung primary must not hold up shutdown.
const MIRROR_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// One checkpoint to write; `saved` hears when it (or a newer one) is durable.
struct SaveRequest {
    checkpoint: Checkpoint,
    saved: Option<oneshot::Sender<()>>,
}

/// The way to the writer task; cheap to clone.
#[derive(Clone)]
pub(crate) struct CheckpointWriter {
    requests: mpsc::UnboundedSender<SaveRequest>,
}

/// The checkpoint could not be made durable: the writer has stopped (after a RocksDB
/// write error, logged before) or refused it because the leader term is over.
#[derive(Debug, thiserror::Error)]
#[error("the checkpoint was not written: the checkpoint writer stopped after a write error (logged before this line), or this instance is no longer the leader")]
pub struct WriterStopped;

impl CheckpointWriter {
    /// The writer's handle, its loop and the mirror's loop (both to be spawned by
    /// the supervisor). The mirror loop ends after the writer's. `lag` hears what
    /// each durable checkpoint covers.
    pub(crate) fn start(
        store: Arc<CheckpointStore>,
        mirror: Mirror,
        term: Term,
        lag: Arc<LagClocks>,
    ) -> (Self, impl Future<Output = Result<(), CheckpointError>>, impl Future<Output = ()>) {
        let (requests, input) = mpsc::unbounded_channel();
        let (durable, newest) = watch::channel(None);
        let writing = write(store, input, Durable { newest: durable, lag }, term.clone());
        (Self { requests }, writing, copy_to_mirror(mirror, newest, term))
    }

    /// Queues `checkpoint`; it is written soon, unless a newer one supersedes it.
    pub(crate) fn save(&self, checkpoint: Checkpoint) {
        // A stopped writer has already failed the relay: nothing more to say here.
        let _ = self.requests.send(SaveRequest { checkpoint, saved: None });
    }

    /// Queues `checkpoint` and waits until it is durable in RocksDB.
    pub(crate) async fn save_now(&self, checkpoint: Checkpoint) -> Result<(), WriterStopped> {
        let (saved, done) = oneshot::channel();
        self.requests.send(SaveRequest { checkpoint, saved: Some(saved) }).map_err(|_| WriterStopped)?;
        done.await.map_err(|_| WriterStopped)
    }
}

/// Where the writer tells that a checkpoint is durable.
struct Durable {
    /// The mirror's input.
    newest: watch::Sender<Option<Checkpoint>>,
    lag: Arc<LagClocks>,
}

/// Writes requests until every handle is dropped; the last request is written too.
async fn write(
    store: Arc<CheckpointStore>,
    mut input: mpsc::UnboundedReceiver<SaveRequest>,
    durable: Durable,
    term: Term,
) -> Result<(), CheckpointError> {
    while let Some(first) = input.recv().await {
        let mut newest = first.checkpoint;
        let mut waiting: Vec<oneshot::Sender<()>> = first.saved.into_iter().collect();
        while let Ok(next) = input.try_recv() {
            newest = next.checkpoint;
            waiting.extend(next.saved);
        }
        if !term.is_current() {
            tracing::warn!(term = term.number(), "term over: checkpoint not written");
            continue;
        }
        let (store_ref, checkpoint) = (Arc::clone(&store), newest.clone());
        tokio::task::spawn_blocking(move || store_ref.save(&checkpoint))
            .await
            .map_err(|e| CheckpointError::Write { path: store.path().to_owned(), detail: e.to_string() })??;
        for saved in waiting {
            let _ = saved.send(());
        }
        durable.lag.saved_through(newest.position.commit_time);
        durable.newest.send_replace(Some(newest));
    }
    Ok(())
}

/// Copies the newest durable checkpoint to the mirror row until the writer ends.
async fn copy_to_mirror(mirror: Mirror, mut newest: watch::Receiver<Option<Checkpoint>>, term: Term) {
    while newest.changed().await.is_ok() {
        let Some(checkpoint) = newest.borrow_and_update().clone() else { continue };
        if !term.is_current() {
            continue;
        }
        match tokio::time::timeout(MIRROR_TIMEOUT, mirror.save(&checkpoint)).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::warn!(%error, "cannot mirror the checkpoint to outbox_relay_checkpoint; the next checkpoint retries")
            }
            Err(_) => {
                tracing::warn!("mirroring the checkpoint took over {MIRROR_TIMEOUT:?}; the next checkpoint retries")
            }
        }
    }
}
