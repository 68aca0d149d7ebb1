//! Deliberate faults, compiled in only with the `fault-injection` feature (the tests
//! enable it): they let a test prove that a panicking task stops the relay with exit
//! code 1 and that a restart loses nothing, that a deposed leader's late writes
//! change nothing, and (for the fault-injection harness) that a relay which marks
//! events SENT without sending them is caught, and that a slow start does not look
//! ready early. Without the feature every hook is empty.

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

/// A step the relay can be made slow at, as if what it waits for were slow.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Slow {
    /// Each SENT write-back, as if the primary were slow for it:
    /// `OUTBOX_RELAY_FAULT_SENT_WRITE_DELAY_MS=N`.
    SentWrite,
    /// A new leader's first look at the operators' orders, before its pipeline starts:
    /// `OUTBOX_RELAY_FAULT_TERM_START_DELAY_MS=N`.
    TermStart,
    /// A full sweep's first claim, after the binlog path's start position was read:
    /// `OUTBOX_RELAY_FAULT_FULL_SWEEP_DELAY_MS=N`.
    FullSweep,
}

/// Waits as long as `step`'s variable says, with the feature; else not at all.
#[cfg(feature = "fault-injection")]
pub(crate) async fn slow(step: Slow) {
    let variable = match step {
        Slow::SentWrite => "OUTBOX_RELAY_FAULT_SENT_WRITE_DELAY_MS",
        Slow::TermStart => "OUTBOX_RELAY_FAULT_TERM_START_DELAY_MS",
        Slow::FullSweep => "OUTBOX_RELAY_FAULT_FULL_SWEEP_DELAY_MS",
    };
    if let Some(millis) = std::env::var(variable).ok().and_then(|v| v.parse().ok()) {
        tokio::time::sleep(std::time::Duration::from_millis(millis)).await;
    }
}

#[cfg(not(feature = "fault-injection"))]
#[inline]
pub(crate) async fn slow(_step: Slow) {}

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
