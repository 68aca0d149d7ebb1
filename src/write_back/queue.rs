//! The queue of SENT write-backs, from the pipeline to the SENT writer.
//!
//! A row the broker acknowledged stays PENDING in the table until its batched
//! write-back lands. The sweep must not take such a row for one it still has to send:
//! that is a second send of an event already on the broker, and it happens exactly
//! when the primary or the relay is slow. So the queue carries, besides the rows, a
//! flush: the writer answers it once every row queued before it has been written (or
//! given up on, which leaves the row to the sweep, as it should). The sweep flushes
//! before it claims, and then sees acknowledged rows as SENT.

use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use crate::store::Sent;

/// SENT write-backs that may wait for the primary before the pipeline slows down.
const BACKLOG: usize = 50_000;

/// What the SENT writer takes, in queue order.
#[derive(Debug)]
pub enum WriteBack {
    /// A row to mark SENT.
    Row(Sent),
    /// Answer once every row queued before this is written or given up on.
    Flush(oneshot::Sender<()>),
}

/// The writer is gone (shutdown): the row stays PENDING and is sent again later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the SENT writer has stopped")]
pub struct WriterGone;

/// How [`WriteBacks::try_row`] went.
#[derive(Debug)]
pub enum Queued {
    Yes,
    /// The queue is full: wait with [`WriteBacks::row`].
    Full(Sent),
    /// The writer has stopped (shutdown): the row stays PENDING and is sent again later.
    WriterGone,
}

/// The sending end of the write-back queue; cheap to clone.
#[derive(Debug, Clone)]
pub struct WriteBacks(mpsc::Sender<WriteBack>);

/// How a flush ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flushed {
    /// Every row queued before it is written or given up on.
    Done,
    /// It took longer than the caller would wait.
    TimedOut,
}

impl WriteBacks {
    /// The queue and its writer's end: a full queue makes [`WriteBacks::row`] wait.
    pub fn channel() -> (Self, mpsc::Receiver<WriteBack>) {
        let (tx, rx) = mpsc::channel(BACKLOG);
        (Self(tx), rx)
    }

    /// Queues `row` if the queue has room now; gives it back when the queue is full,
    /// to wait with [`WriteBacks::row`]; says when the writer has stopped.
    pub fn try_row(&self, row: Sent) -> Queued {
        match self.0.try_send(WriteBack::Row(row)) {
            Ok(()) => Queued::Yes,
            Err(mpsc::error::TrySendError::Full(WriteBack::Row(row))) => Queued::Full(row),
            Err(_) => Queued::WriterGone,
        }
    }

    /// Queues `row` for the writer, waiting while the queue is full.
    pub async fn row(&self, row: Sent) -> Result<(), WriterGone> {
        self.0.send(WriteBack::Row(row)).await.map_err(|_| WriterGone)
    }

    /// Waits, at most `within`, until every row queued before the call is written or
    /// given up on. A writer that has stopped has nothing left to write: `Done`.
    pub async fn flush(&self, within: Duration) -> Flushed {
        let (done, answer) = oneshot::channel();
        let flushed = async {
            if self.0.send(WriteBack::Flush(done)).await.is_ok() {
                let _ = answer.await;
            }
        };
        match tokio::time::timeout(within, flushed).await {
            Ok(()) => Flushed::Done,
            Err(_) => Flushed::TimedOut,
        }
    }
}
