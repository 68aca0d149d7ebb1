//! The SENT write-back: after SEND_OK, each row is marked SENT with its msg_id off
//! the send path. The coordinator queues acknowledged rows ([`WriteBacks`]); the
//! writer batches them into UPDATEs on connections of its own; rows whose write did
//! not land go to the sweep ([`Unwritten`]), which publishes them again.

mod queue;
mod unwritten;
mod writer;

pub(crate) use queue::{Flushed, Queued, WriteBack, WriteBacks};
pub(crate) use unwritten::Unwritten;
pub(crate) use writer::{run, Misses, CONCURRENT};
