//! A leader's term: its number (the fencing token) and until when it surely holds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// One leadership; cheap to clone. Ends when its lease was not renewed in time or
/// another instance took over.
#[derive(Clone, Debug)]
pub(crate) struct Term {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    number: u64,
    /// How long after a renewal request the term surely holds: the lease minus a
    /// reserve in which a send that passed the check still completes before the
    /// database lets another instance take over.
    holds_for: Duration,
    origin: Instant,
    /// Milliseconds after `origin` until which the lease surely holds.
    holds_until_ms: AtomicU64,
    lost: CancellationToken,
}

impl Term {
    /// Term `number`, whose lease was requested at `requested_at`; it holds `holds_for`
    /// after each renewal request (see [`TermTiming`]).
    pub(crate) fn new(number: u64, holds_for: Duration, requested_at: Instant) -> Self {
        let term = Self {
            inner: Arc::new(Inner {
                number,
                holds_for,
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
        let until = requested_at.saturating_duration_since(self.inner.origin) + self.inner.holds_for;
        self.inner.holds_until_ms.fetch_max(crate::time::millis(until), Ordering::AcqRel);
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
        crate::time::millis(self.inner.origin.elapsed())
    }
}

/// How long a lease lasts and how much of it a term may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TermTiming {
    /// `leader.lease_ms`: what the database grants per renewal.
    pub lease: Duration,
    /// The end of the lease no send may start in: the longer of a fifth of the lease
    /// and the send timeout plus half a second, so a send that passed the term check
    /// is answered (or has timed out) before another instance may publish.
    pub reserve: Duration,
}

impl TermTiming {
    pub(crate) fn new(lease: Duration, send_timeout: Duration) -> Self {
        Self { lease, reserve: (lease / 5).max(send_timeout + Duration::from_millis(500)) }
    }

    /// How long a term holds after a renewal request.
    pub(crate) fn holds_for(&self) -> Duration {
        self.lease.saturating_sub(self.reserve)
    }

    /// How often the leader renews: three tries fit in what a term holds.
    pub(crate) fn renew_every(&self) -> Duration {
        (self.holds_for() / 3).max(Duration::from_millis(100))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_term_holds_until_its_reserve_and_no_send_may_outlast_the_lease() {
        let timing = TermTiming::new(Duration::from_secs(10), Duration::from_secs(3));
        assert_eq!(timing.reserve, Duration::from_millis(3_500), "the send timeout decides");
        assert_eq!(TermTiming::new(Duration::from_secs(30), Duration::from_secs(3)).reserve, Duration::from_secs(6));
        let start = Instant::now();
        let term = Term::new(7, timing.holds_for(), start);
        assert!(term.is_current());
        assert_eq!(term.number(), 7);
        let remaining = term.remaining();
        assert!(remaining <= Duration::from_millis(6_500) && remaining > Duration::from_millis(6_400), "{remaining:?}");
        assert!(timing.renew_every() * 3 <= timing.holds_for());
        let expired = Term::new(8, Duration::from_millis(10), start - Duration::from_secs(1));
        assert!(!expired.is_current(), "a lease requested long ago has run out");
    }

    #[test]
    fn renewal_extends_and_never_shortens_and_an_ended_term_is_over() {
        let start = Instant::now() - Duration::from_millis(900);
        let term = Term::new(1, Duration::from_millis(800), start);
        assert!(!term.is_current(), "800 ms of a 1 s lease, 900 ms ago");
        term.renewed(Instant::now());
        assert!(term.is_current());
        term.renewed(start);
        assert!(term.is_current(), "an older renewal does not shorten the term");
        term.end();
        assert!(!term.is_current() && term.is_ended());
    }
}
