//! Ids of rows whose SENT write-back did not land, from the SENT writer to the sweep.
//!
//! A row the binlog path sent stays PENDING when its write-back misses, and the sweep
//! publishes it again in time. A row the sweep claimed is SENDING, owned by this live
//! leader, which never reclaims its own claims: left alone it would wait for the end of
//! the term. So the writer hands the ids of every missed row here, and the sweep puts
//! this relay's claims among them back to PENDING within a second (a duplicate, never a
//! loss).

use std::sync::{Arc, Mutex, PoisonError};

/// The ids handed over and not yet put back; cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Unwritten(Arc<Mutex<Vec<u64>>>);

impl Unwritten {
    pub fn add(&self, ids: impl IntoIterator<Item = u64>) {
        self.lock().extend(ids);
    }

    /// Every id added so far, leaving none.
    pub fn take(&self) -> Vec<u64> {
        std::mem::take(&mut *self.lock())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
