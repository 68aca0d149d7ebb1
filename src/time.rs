//! Times as the relay's parts exchange them: instants as milliseconds or microseconds
//! since the Unix epoch (RocketMQ's stamps, `sent_at`, the lag gauges, the database
//! clock's samples) and durations as whole milliseconds. Every conversion saturates:
//! a clock before 1970 reads as 0, a value past `u64` as its largest.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds from the Unix epoch to `at`.
pub fn unix_micros(at: SystemTime) -> u64 {
    u64::try_from(at.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros()).unwrap_or(u64::MAX)
}

/// Milliseconds from the Unix epoch to `at`, truncated.
pub fn unix_millis(at: SystemTime) -> u64 {
    unix_micros(at) / 1_000
}

/// Microseconds since the Unix epoch on this host's clock.
pub fn unix_micros_now() -> u64 {
    unix_micros(SystemTime::now())
}

/// Milliseconds since the Unix epoch on this host's clock.
pub fn unix_millis_now() -> u64 {
    unix_millis(SystemTime::now())
}

/// `duration` in whole milliseconds.
pub fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// `duration` in whole microseconds.
pub fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// `duration` in whole microseconds, to add to or take from a local clock reading
/// (signed microseconds, as `created_at` reads).
pub fn local_micros(duration: Duration) -> i64 {
    i64::try_from(duration.as_micros()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_truncate_and_saturate() {
        let at = UNIX_EPOCH + Duration::from_micros(1_234_567);
        assert_eq!((unix_micros(at), unix_millis(at)), (1_234_567, 1_234));
        assert_eq!(unix_micros(UNIX_EPOCH - Duration::from_secs(1)), 0, "before the epoch");
        assert_eq!(millis(Duration::MAX), u64::MAX);
        assert_eq!(millis(Duration::from_micros(2_999)), 2);
    }
}
