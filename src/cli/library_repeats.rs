//! The RocketMQ client library's lines, thinned to one a minute. During a broker
//! outage the library logs an error for every connection attempt, from several places
//! of its code; the relay itself says once that the broker is down (with the error),
//! every few minutes that it still is, and once that it is back, and the library's
//! lines only bury that. The first of them in a minute is shown, as a clue.

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// The library's crates are all named `rocketmq-…`; the relay's own targets start
/// with `outbox_relay`.
const LIBRARY_TARGET: &str = "rocketmq_";
/// The library is let through at most once this often.
const ONE_LINE_PER: Duration = Duration::from_secs(60);

/// When the library's last line was let through.
#[derive(Default)]
pub struct LibraryRepeats {
    last: Mutex<Option<Instant>>,
}

impl LibraryRepeats {
    fn let_through(&self, now: Instant) -> bool {
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        match *last {
            Some(at) if now.duration_since(at) < ONE_LINE_PER => false,
            _ => {
                *last = Some(now);
                true
            }
        }
    }
}

impl<S: Subscriber> Layer<S> for LibraryRepeats {
    fn event_enabled(&self, event: &Event<'_>, _: Context<'_, S>) -> bool {
        !event.metadata().target().starts_with(LIBRARY_TARGET) || self.let_through(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_library_line_a_minute() {
        let repeats = LibraryRepeats::default();
        let start = Instant::now();
        assert!(repeats.let_through(start));
        assert!(!repeats.let_through(start + Duration::from_secs(59)));
        assert!(repeats.let_through(start + Duration::from_secs(60)));
    }
}
