//! Message ids in the producer's unique-id format (the `UNIQ_KEY` consumers see as the
//! message id), written without the client's per-id work.
//!
//! An id is hexadecimal: the host's address, the process id and a fixed hash (the
//! prefix, the same for every id of a process), then the milliseconds since the start
//! of the local month and a counter. The client's generator builds each id as a
//! vector of characters collected into a string, some 1,600 instructions an id: a
//! fourteenth of what a drained event costs the relay. Here an id is one string of
//! the right size. The prefix is taken from one id of the client's own generator, so
//! it is exactly the client's. The relay builds every send request itself, so in its
//! process this generator is the only one and its counter the only counter.

use std::sync::atomic::{AtomicI64, AtomicU16, Ordering};
use std::sync::LazyLock;

use chrono::{DateTime, Datelike, Local, LocalResult, Months, TimeZone};
use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;

/// Hex digits after the prefix: 8 for the milliseconds, 4 for the counter.
const VARYING_DIGITS: usize = 12;

/// The process's generator.
static IDS: LazyLock<MsgIds> = LazyLock::new(MsgIds::new);

/// A new message id, unique in this process.
pub(crate) fn next() -> String {
    IDS.at(now_millis())
}

/// Ids with one prefix, counted from the start of the current local month.
struct MsgIds {
    prefix: String,
    month_start: AtomicI64,
    next_month_start: AtomicI64,
    counter: AtomicU16,
}

impl MsgIds {
    fn new() -> Self {
        let mut prefix = MessageClientIDSetter::create_uniq_id();
        prefix.truncate(prefix.len().saturating_sub(VARYING_DIGITS));
        let (start, next) = month_around(now_millis());
        Self {
            prefix,
            month_start: AtomicI64::new(start),
            next_month_start: AtomicI64::new(next),
            counter: AtomicU16::new(0),
        }
    }

    /// The id of a message sent at `now` (milliseconds since the epoch).
    fn at(&self, now: i64) -> String {
        if now >= self.next_month_start.load(Ordering::Acquire) {
            let (start, next) = month_around(now);
            self.month_start.store(start, Ordering::Release);
            self.next_month_start.store(next, Ordering::Release);
        }
        // The low 32 bits of the gap, as the client writes it; a clock set back a little
        // across the month's start counts as its start.
        let mut since_month_start = (now - self.month_start.load(Ordering::Acquire)) as i32;
        if since_month_start < 0 && since_month_start > -1_000_000 {
            since_month_start = 0;
        }
        let counter = self.counter.fetch_add(1, Ordering::Relaxed);
        let mut id = String::with_capacity(self.prefix.len() + VARYING_DIGITS);
        id.push_str(&self.prefix);
        push_hex(&mut id, u64::from(since_month_start as u32), 8);
        push_hex(&mut id, u64::from(counter), 4);
        id
    }
}

/// Appends the low `digits` hex digits of `value`, upper case, most significant first.
fn push_hex(out: &mut String, value: u64, digits: u32) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for shift in (0..digits).rev().map(|digit| digit * 4) {
        out.push(char::from(HEX[((value >> shift) & 0xf) as usize]));
    }
}

/// The start of the local month that holds `millis`, and of the month after it.
fn month_around(millis: i64) -> (i64, i64) {
    let at = Local.timestamp_millis_opt(millis).single().unwrap_or_else(Local::now);
    let start = month_start(at);
    let next = start.checked_add_months(Months::new(1)).unwrap_or(start);
    (start.timestamp_millis(), next.timestamp_millis())
}

fn month_start(at: DateTime<Local>) -> DateTime<Local> {
    match Local.with_ymd_and_hms(at.year(), at.month(), 1, 0, 0, 0) {
        LocalResult::Single(start) | LocalResult::Ambiguous(start, _) => start,
        LocalResult::None => at,
    }
}

/// Milliseconds since the Unix epoch, as RocketMQ stamps times.
pub(super) fn now_millis() -> i64 {
    i64::try_from(crate::time::unix_millis_now()).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    /// The hex digits of `id` after the prefix, as numbers: milliseconds, counter.
    fn varying(id: &str) -> (u32, u16) {
        let tail = &id[id.len() - VARYING_DIGITS..];
        let millis = u32::from_str_radix(&tail[..8], 16).expect("hex milliseconds");
        let counter = u16::from_str_radix(&tail[8..], 16).expect("hex counter");
        (millis, counter)
    }

    #[test]
    fn an_id_is_laid_out_as_the_clients_own_ids_are() {
        let ours = next();
        let theirs = MessageClientIDSetter::create_uniq_id();
        assert_eq!(ours.len(), theirs.len(), "{ours} against {theirs}");
        assert_eq!(ours[..ours.len() - VARYING_DIGITS], theirs[..theirs.len() - VARYING_DIGITS], "the same prefix");
        assert!(ours.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_lowercase()), "{ours}");
        let pid = MessageClientIDSetter::get_pid_from_id(&ours).expect("the client reads our process id");
        assert_eq!(Some(pid), MessageClientIDSetter::get_pid_from_id(&theirs).ok());
        let ip = MessageClientIDSetter::get_ip_from_id(&ours).expect("the client reads our address");
        assert_eq!(Some(ip), MessageClientIDSetter::get_ip_from_id(&theirs).ok());
        let (ours_ms, theirs_ms) = (varying(&ours).0, varying(&theirs).0);
        assert!(theirs_ms.abs_diff(ours_ms) < 60_000, "the same month start: {ours_ms} against {theirs_ms} ms");
    }

    #[test]
    fn ids_count_milliseconds_from_the_local_months_start_and_their_counter_goes_up() {
        let ids = MsgIds::new();
        let (start, next_start) = month_around(now_millis());
        let first = ids.at(start + 1_234);
        let second = ids.at(start + 1_234);
        assert_eq!(varying(&first), (1_234, 0));
        assert_eq!(varying(&second), (1_234, 1), "same millisecond, next count");
        assert_eq!(varying(&ids.at(next_start + 5)), (5, 2), "a new month counts from its own start");
        assert_eq!(
            varying(&ids.at(next_start - 10)).0,
            0,
            "a clock set back across the month's start counts as its start"
        );
        assert_eq!(varying(&ids.at(next_start - 999_999)).0, 0);
        assert_eq!(
            varying(&ids.at(next_start - 1_000_000)).0,
            (-1_000_000_i32) as u32,
            "further back, as the client writes it"
        );
        assert_eq!(varying(&ids.at(next_start + 2_200_000_000)).0, 2_200_000_000, "past 2^31 ms, the low 32 bits");
    }

    #[test]
    fn ids_in_a_row_are_unique() {
        let ids: HashSet<String> = (0..20_000).map(|_| next()).collect();
        assert_eq!(ids.len(), 20_000);
    }

    #[test]
    fn hex_is_written_upper_case_with_leading_zeros() {
        let mut out = String::new();
        push_hex(&mut out, 0xAB, 4);
        push_hex(&mut out, 0xFFFF_FFFF, 8);
        assert_eq!(out, "00ABFFFFFFFF");
    }
}
