//! Exponential backoff: `initial * 2^(attempt-1)`, capped. One definition serves the
//! lanes' in-place retries, the sweep's `next_retry_at` and reconnect loops.

use std::time::Duration;

/// Backoff policy: the delay doubles from `initial` up to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl Backoff {
    pub fn new(initial: Duration, max: Duration) -> Self {
        Self { initial, max: max.max(initial) }
    }

    /// Delay before retry number `attempt` (1-based; 0 is treated as 1).
    pub fn delay(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(1).min(31);
        self.initial.saturating_mul(1u32 << doublings).min(self.max)
    }

    /// What follows a failed attempt when `failures_before` attempts had already
    /// failed: another attempt after a delay, or giving up once more than
    /// `max_retry` retries would be needed (1 attempt + `max_retry` retries in all).
    pub fn after_failure(&self, failures_before: u32, max_retry: u32) -> NextAttempt {
        let failures = failures_before.saturating_add(1);
        if failures > max_retry {
            NextAttempt::GiveUp { attempts: failures }
        } else {
            NextAttempt::RetryIn(self.delay(failures))
        }
    }
}

/// The decision after a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAttempt {
    RetryIn(Duration),
    /// Stop: the row becomes FAILED after `attempts` attempts.
    GiveUp {
        attempts: u32,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gives_up_after_one_attempt_plus_max_retry_retries() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(4));
        let steps: Vec<NextAttempt> = (0..4).map(|before| b.after_failure(before, 3)).collect();
        assert_eq!(
            steps,
            [
                NextAttempt::RetryIn(Duration::from_secs(1)),
                NextAttempt::RetryIn(Duration::from_secs(2)),
                NextAttempt::RetryIn(Duration::from_secs(4)),
                NextAttempt::GiveUp { attempts: 4 },
            ]
        );
        assert_eq!(b.after_failure(0, 0), NextAttempt::GiveUp { attempts: 1 }, "max_retry 0: one attempt only");
    }

    #[test]
    fn doubles_from_initial_to_cap() {
        let b = Backoff::new(Duration::from_secs(1), Duration::from_secs(300));
        let delays: Vec<u64> = (1..=11).map(|a| b.delay(a).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300]);
        assert_eq!(b.delay(0), Duration::from_secs(1));
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(300));
    }

    #[test]
    fn cap_below_initial_is_raised_to_initial() {
        let b = Backoff::new(Duration::from_millis(500), Duration::from_millis(10));
        assert_eq!(b.delay(5), Duration::from_millis(500));
    }
}
