//! A leader's term: its number (the fencing token) and until when it surely holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// The share of the lease kept in reserve: the term ends locally this much before the
/// database lets another instance take over, so a send or checkpoint that passed the
/// check still happens while the lease holds.
const SAFETY_SHARE: u32 = 5;

/// One leadership; cheap to clone. Ends when its lease was not renewed in time or
/// another instance took over.
#[derive(Clone, Debug)]
pub(crate) struct Term {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    number: u64,
    lease: Duration,
    origin: Instant,
    /// Milliseconds after `origin` until which the lease surely holds.
    holds_until_ms: AtomicU64,
    lost: CancellationToken,
}

impl Term {
    /// Term `number`, whose lease of `lease` was requested at `requested_at`.
    pub(crate) fn new(number: u64, lease: Duration, requested_at: Instant) -> Self {
        let term = Self {
            inner: Arc::new(Inner {
                number,
                lease,
                origin: requested_at,
                holds_until_ms: AtomicU64::new(0),
                lost: CancellationToken::new(),
            }),
        };
        term.renewed(requested_at);
        term
    }

    /// The term number, written on every message and fencing every write.
    pub(crate) fn number(&self) -> u64 {
        self.inner.number
    }

    /// Whether this instance may still send and checkpoint under this term.
    pub(crate) fn is_current(&self) -> bool {
        !self.inner.lost.is_cancelled() && self.elapsed_ms() < self.inner.holds_until_ms.load(Ordering::Acquire)
    }

    /// The lease was renewed by a request sent at `requested_at`: the database set
    /// `lease_until` to its own now plus the lease, which is later than this.
    pub(crate) fn renewed(&self, requested_at: Instant) {
        let lease = self.inner.lease - self.inner.lease / SAFETY_SHARE;
        let until = requested_at.saturating_duration_since(self.inner.origin) + lease;
        self.inner.holds_until_ms.fetch_max(millis(until), Ordering::AcqRel);
    }

    /// How long until the term ends unless renewed (zero once it has).
    pub(crate) fn remaining(&self) -> Duration {
        let until = self.inner.holds_until_ms.load(Ordering::Acquire);
        Duration::from_millis(until.saturating_sub(self.elapsed_ms()))
    }

    /// Ends the term now (the lease was lost or given back).
    pub(crate) fn end(&self) {
        self.inner.lost.cancel();
    }

    /// Whether the term was ended (rather than still running).
    pub(crate) fn is_ended(&self) -> bool {
        self.inner.lost.is_cancelled()
    }

    fn elapsed_ms(&self) -> u64 {
        millis(self.inner.origin.elapsed())
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_holds_until_shortly_before_its_lease_ends() {
        let start = Instant::now();
        let term = Term::new(7, Duration::from_secs(10), start);
        assert!(term.is_current());
        assert_eq!(term.number(), 7);
        let remaining = term.remaining();
        assert!(remaining <= Duration::from_secs(8) && remaining > Duration::from_millis(7_900), "{remaining:?}");
        let expired = Term::new(8, Duration::from_millis(10), start - Duration::from_secs(1));
        assert!(!expired.is_current(), "a lease requested long ago has run out");
    }

    #[test]
    fn renewal_extends_and_never_shortens_and_an_ended_term_is_over() {
        let start = Instant::now() - Duration::from_millis(900);
        let term = Term::new(1, Duration::from_secs(1), start);
        assert!(!term.is_current(), "800 ms of a 1 s lease, 900 ms ago");
        term.renewed(Instant::now());
        assert!(term.is_current());
        term.renewed(start);
        assert!(term.is_current(), "an older renewal does not shorten the term");
        term.end();
        assert!(!term.is_current() && term.is_ended());
    }
}
