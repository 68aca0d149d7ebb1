//! Deliberate faults, compiled in only with the `fault-injection` feature (the tests
//! enable it): they let a test prove that a panicking task stops the relay with exit
//! code 1 and that a restart loses nothing, that a deposed leader's late writes
//! change nothing, and (for the fault-injection harness) that a relay which marks
//! events SENT without sending them is caught. Without the feature every hook is empty.

use std::time::Duration;

/// Called by a lane after each SEND_OK of `events` events. With the feature and
/// `OUTBOX_RELAY_FAULT_LANE_PANIC_AFTER=N` set, the lane that brings the process's
/// total past N events panics.
#[cfg(feature = "fault-injection")]
pub(crate) fn lane_sent(events: usize) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SENT: AtomicU64 = AtomicU64::new(0);
    let Some(limit) = std::env::var("OUTBOX_RELAY_FAULT_LANE_PANIC_AFTER").ok().and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let before = SENT.fetch_add(events as u64, Ordering::Relaxed);
    if before < limit && before + events as u64 >= limit {
        panic!("injected fault: a lane panics after {limit} events (OUTBOX_RELAY_FAULT_LANE_PANIC_AFTER)");
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn lane_sent(_events: usize) {}

/// How long the SENT writer waits before each write-back, as if the primary were slow
/// for it: `OUTBOX_RELAY_FAULT_SENT_WRITE_DELAY_MS=N` with the feature, else none.
#[cfg(feature = "fault-injection")]
pub(crate) fn sent_write_delay() -> Option<Duration> {
    let millis = std::env::var("OUTBOX_RELAY_FAULT_SENT_WRITE_DELAY_MS").ok()?.parse().ok()?;
    Some(Duration::from_millis(millis))
}

#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn sent_write_delay() -> Option<Duration> {
    None
}

/// True for the send that must be acknowledged without reaching the broker, as if a
/// timeout had been taken for SEND_OK: every Nth send with the feature and
/// `OUTBOX_RELAY_FAULT_ACK_WITHOUT_SEND_EVERY=N`, else never. A deliberately broken
/// relay, for proving that the harness's verdict fails.
#[cfg(feature = "fault-injection")]
pub(crate) fn ack_without_send() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static EVERY: OnceLock<Option<u64>> = OnceLock::new();
    static SENDS: AtomicU64 = AtomicU64::new(0);
    let every = EVERY.get_or_init(|| {
        let value = std::env::var("OUTBOX_RELAY_FAULT_ACK_WITHOUT_SEND_EVERY").ok()?;
        value.parse::<u64>().ok().filter(|n| *n > 0)
    });
    every.is_some_and(|every| (SENDS.fetch_add(1, Ordering::Relaxed) + 1) % every == 0)
}

#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn ack_without_send() -> bool {
    false
}

/// What the SENT writer's next batch is to do wrong, with the feature:
/// `OUTBOX_RELAY_FAULT_SENT_WRITE_PANIC_AT=N` makes the Nth batch of the process panic,
/// `OUTBOX_RELAY_FAULT_SENT_WRITE_SHORT_AT=N` leaves the Nth batch's first row out of its
/// UPDATE (so it changes one row fewer than it was given). Without the feature, nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "fault-injection"), allow(dead_code))]
pub(crate) enum SentWriteFault {
    None,
    Panic,
    Short,
}

#[cfg(feature = "fault-injection")]
pub(crate) fn sent_write_fault() -> SentWriteFault {
    use std::sync::atomic::{AtomicU64, Ordering};
    static BATCHES: AtomicU64 = AtomicU64::new(0);
    let batch = BATCHES.fetch_add(1, Ordering::Relaxed) + 1;
    let at = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok()) == Some(batch);
    if at("OUTBOX_RELAY_FAULT_SENT_WRITE_PANIC_AT") {
        SentWriteFault::Panic
    } else if at("OUTBOX_RELAY_FAULT_SENT_WRITE_SHORT_AT") {
        SentWriteFault::Short
    } else {
        SentWriteFault::None
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) fn sent_write_fault() -> SentWriteFault {
    SentWriteFault::None
}
