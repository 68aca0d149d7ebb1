//! How far behind the binlog path is, kept as points in time and turned into ages
//! when `/metrics` is read, so an age keeps growing while nothing updates it (a
//! stalled reader, a checkpoint that cannot move) instead of freezing at its last
//! value.
//!
//! Two points: the source time the reader has read through (the primary's commit time
//! of the last transaction it read: a replica that stopped applying shows as lag; an
//! idle primary still commits the leader's lease renewals every few seconds) and the
//! source time the saved checkpoint covers. Both are unix
//! milliseconds; 0 means not known (poll mode, a standby, before the first read).
//!
//! It also keeps how far the primary's local clock reading is ahead of this host's
//! clock (its time zone, and any skew), which turns an outbox row's `created_at` (a
//! DATETIME, in the database's local time) into an instant of this host's clock.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// The expiry setting is not known yet.
const EXPIRY_UNKNOWN: u64 = u64::MAX;
/// How far the primary's clock is ahead is not known yet.
const AHEAD_UNKNOWN: i64 = i64::MIN;

/// The binlog path's points in time; shared by the reader, the checkpoint writer and
/// the source poller.
#[derive(Debug)]
pub struct LagClocks {
    read_through_ms: AtomicU64,
    saved_through_ms: AtomicU64,
    /// Seconds the source keeps a binlog file (0: forever).
    expire_secs: AtomicU64,
    /// The reader's position: the end of the last transaction it read.
    read_position: Mutex<Option<(String, u64)>>,
    /// Microseconds the primary's local clock reading is ahead of this host's clock.
    db_ahead_us: AtomicI64,
}

impl Default for LagClocks {
    fn default() -> Self {
        Self {
            read_through_ms: AtomicU64::new(0),
            saved_through_ms: AtomicU64::new(0),
            expire_secs: AtomicU64::new(EXPIRY_UNKNOWN),
            read_position: Mutex::new(None),
            db_ahead_us: AtomicI64::new(AHEAD_UNKNOWN),
        }
    }
}

/// The ages, in seconds, at one instant (NaN when not known).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ages {
    pub binlog_lag: f64,
    pub checkpoint_age: f64,
    pub expiry_headroom: f64,
}

impl LagClocks {
    /// The reader read through `file:pos`, whose last transaction committed at
    /// `unix_secs` (the binlog's whole second) and, when it held outbox rows, no
    /// earlier than the newest row's `created_at` (`created_local_us`, the database's
    /// local reading, milliseconds with DATETIME(3)): within its second, the lag is
    /// then known to the millisecond.
    pub fn read_through(&self, file: &str, pos: u64, unix_secs: Option<u32>, created_local_us: Option<i64>) {
        if let Some(secs) = unix_secs {
            let created_ms = created_local_us
                .and_then(|local| self.created_unix_us(local))
                .and_then(|us| u64::try_from(us / 1000).ok())
                .filter(|ms| ms / 1000 == u64::from(secs));
            self.read_through_ms.store(created_ms.unwrap_or(u64::from(secs) * 1000), Ordering::Relaxed);
        }
        let mut position = self.read_position.lock().unwrap_or_else(PoisonError::into_inner);
        match position.as_mut() {
            Some((f, p)) if f == file => *p = pos,
            _ => *position = Some((file.to_owned(), pos)),
        }
    }

    /// A checkpoint covering transactions committed up to `unix_secs` is durable.
    pub fn saved_through(&self, unix_secs: Option<u32>) {
        if let Some(secs) = unix_secs {
            self.saved_through_ms.store(u64::from(secs) * 1000, Ordering::Relaxed);
        }
    }

    /// The source keeps binlog files `secs` seconds (0: it never purges them).
    pub fn expire_after(&self, secs: u64) {
        self.expire_secs.store(secs, Ordering::Relaxed);
    }

    /// The primary's local clock reads `us` microseconds ahead of this host's clock.
    pub fn db_ahead(&self, us: i64) {
        self.db_ahead_us.store(us, Ordering::Relaxed);
    }

    /// The instant (unix microseconds, this host's clock) of a primary's DATETIME read
    /// as if it were UTC, once the primary's clock has been read.
    pub fn created_unix_us(&self, local_us: i64) -> Option<i64> {
        match self.db_ahead_us.load(Ordering::Relaxed) {
            AHEAD_UNKNOWN => None,
            ahead => Some(local_us - ahead),
        }
    }

    /// Where the reader is, if it has read anything.
    pub fn read_position(&self) -> Option<(String, u64)> {
        self.read_position.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Forgets everything: this instance no longer reads (standby, poll mode).
    pub fn clear(&self) {
        self.read_through_ms.store(0, Ordering::Relaxed);
        self.saved_through_ms.store(0, Ordering::Relaxed);
        self.expire_secs.store(EXPIRY_UNKNOWN, Ordering::Relaxed);
        *self.read_position.lock().unwrap_or_else(PoisonError::into_inner) = None;
    }

    /// The ages now.
    pub fn ages(&self) -> Ages {
        self.ages_at(crate::time::unix_millis_now())
    }

    /// The ages at `now_ms`. The headroom is what is left of the expiry once the
    /// checkpoint's age is spent: a lower bound, since a file is purged only after
    /// it has been closed for the expiry time and the checkpoint lies inside it.
    pub fn ages_at(&self, now_ms: u64) -> Ages {
        let age = |point: &AtomicU64| match point.load(Ordering::Relaxed) {
            0 => f64::NAN,
            at => now_ms.saturating_sub(at) as f64 / 1000.0,
        };
        let checkpoint_age = age(&self.saved_through_ms);
        let expiry_headroom = match self.expire_secs.load(Ordering::Relaxed) {
            EXPIRY_UNKNOWN => f64::NAN,
            0 => f64::INFINITY,
            secs => secs as f64 - checkpoint_age,
        };
        Ages { binlog_lag: age(&self.read_through_ms), checkpoint_age, expiry_headroom }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_known_is_nan() {
        let ages = LagClocks::default().ages_at(5_000);
        assert!(ages.binlog_lag.is_nan() && ages.checkpoint_age.is_nan() && ages.expiry_headroom.is_nan());
    }

    #[test]
    fn ages_grow_from_the_last_point_until_a_newer_one() {
        let clocks = LagClocks::default();
        clocks.read_through("b.000001", 400, Some(100), None);
        clocks.saved_through(Some(90));
        clocks.expire_after(3_600);
        let ages = clocks.ages_at(130_500);
        assert_eq!((ages.binlog_lag, ages.checkpoint_age, ages.expiry_headroom), (30.5, 40.5, 3_559.5));
        clocks.read_through("b.000002", 4, Some(130), None);
        assert_eq!(clocks.ages_at(130_500).binlog_lag, 0.5);
        assert_eq!(clocks.read_position(), Some(("b.000002".to_owned(), 4)));
        clocks.db_ahead(1_000_000);
        clocks.read_through("b.000002", 90, Some(130), Some(131_250_000));
        assert_eq!(clocks.ages_at(130_500).binlog_lag, 0.25, "the row's created_at places the commit in its second");
        clocks.read_through("b.000002", 99, Some(130), Some(150_000_000));
        assert_eq!(clocks.ages_at(130_500).binlog_lag, 0.5, "a created_at outside the commit's second is not used");
    }

    #[test]
    fn created_at_is_shifted_by_the_primarys_clock_once_known() {
        let clocks = LagClocks::default();
        assert_eq!(clocks.created_unix_us(3_600_000_000), None);
        clocks.db_ahead(3_600_000_000);
        assert_eq!(clocks.created_unix_us(3_600_000_500), Some(500));
    }

    #[test]
    fn a_source_that_never_purges_leaves_infinite_headroom() {
        let clocks = LagClocks::default();
        clocks.expire_after(0);
        clocks.saved_through(Some(1));
        assert_eq!(clocks.ages_at(10_000).expiry_headroom, f64::INFINITY);
        clocks.clear();
        assert!(clocks.ages_at(10_000).expiry_headroom.is_nan());
    }
}
