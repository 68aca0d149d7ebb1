//! The one task that writes checkpoints: RocksDB first (synced, on a blocking
//! thread so the async workers never wait for the disk), then the mirror row on the
//! primary.
//!
//! Requests are taken in order and coalesced (only the newest of those waiting is
//! written), so neither the local checkpoint nor the mirror can ever go backwards.
//! A caller that must know its checkpoint is durable before it goes on (a topic's
//! queue count pinned before its first send) waits for [`CheckpointWriter::save_now`].
//! A RocksDB write that fails ends the task with the error: the relay stops (exit 5)
//! rather than publish on without a durable position. A failed mirror write is logged
//! and written again with the next checkpoint.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{Checkpoint, CheckpointError, CheckpointStore, Mirror};

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

/// The checkpoint could not be made durable: the writer has stopped.
#[derive(Debug, thiserror::Error)]
#[error("the checkpoint writer has stopped (see the error before this one)")]
pub struct WriterStopped;

impl CheckpointWriter {
    /// The writer task's handle and its loop (to be spawned by the supervisor).
    pub(crate) fn start(
        store: CheckpointStore,
        mirror: Mirror,
    ) -> (Self, impl std::future::Future<Output = Result<(), CheckpointError>>) {
        let (requests, input) = mpsc::unbounded_channel();
        (Self { requests }, run(Arc::new(store), mirror, input))
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

/// Writes requests until every handle is dropped; the last request is written too.
async fn run(
    store: Arc<CheckpointStore>,
    mirror: Mirror,
    mut input: mpsc::UnboundedReceiver<SaveRequest>,
) -> Result<(), CheckpointError> {
    while let Some(first) = input.recv().await {
        let mut newest = first.checkpoint;
        let mut waiting: Vec<oneshot::Sender<()>> = first.saved.into_iter().collect();
        while let Ok(next) = input.try_recv() {
            newest = next.checkpoint;
            waiting.extend(next.saved);
        }
        let (store_ref, checkpoint) = (Arc::clone(&store), newest.clone());
        tokio::task::spawn_blocking(move || store_ref.save(&checkpoint))
            .await
            .map_err(|e| CheckpointError::Write { path: store.path().to_owned(), detail: e.to_string() })??;
        for saved in waiting {
            let _ = saved.send(());
        }
        if let Err(error) = mirror.save(&newest).await {
            tracing::warn!(%error, "cannot mirror the checkpoint to outbox_relay_checkpoint; the next checkpoint retries");
        }
    }
    Ok(())
}
