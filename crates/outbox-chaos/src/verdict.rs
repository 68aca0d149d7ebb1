//! The verdict of a run, computed only from what the database holds and what the
//! independent consumer received, never from the relay's own counters: events lost or
//! delivered from rolled-back transactions, per-key order, keys split across queues,
//! two leader terms publishing at once, rows left SENDING, SENT without a message id or
//! FAILED, and the duplicates each fault kind caused.

use std::collections::{BTreeMap, HashMap, HashSet};

use outbox_kit::RowStatus;

use crate::schedule::FaultKind;

/// What the load generator knows about a transaction's end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fate {
    Committed,
    RolledBack,
    /// The connection broke during COMMIT: the database decides.
    Unknown,
}

/// One event the load generator wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Written {
    pub(crate) event_id: String,
    pub(crate) biz_key: String,
    /// The key's sequence number, in commit order.
    pub(crate) seq: u64,
    pub(crate) fate: Fate,
}

/// One outbox row as the database holds it at the end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredRow {
    pub(crate) event_id: String,
    pub(crate) status: RowStatus,
    pub(crate) has_msg_id: bool,
}

/// One message as the consumer received it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Received {
    pub(crate) event_id: String,
    pub(crate) queue_id: i32,
    pub(crate) queue_offset: i64,
    /// The leader term of the relay that sent it.
    pub(crate) term: Option<u64>,
    /// When the broker stored it (Unix ms).
    pub(crate) stored_ms: i64,
    /// Handed back by the consumer client and delivered again through the group's
    /// retry topic: queue, offset and store time are the retry queue's, so it proves
    /// delivery but is not a copy the relay sent.
    pub(crate) redelivered: bool,
}

/// A fault as it happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Injected {
    pub(crate) kind: FaultKind,
    pub(crate) started_ms: i64,
}

/// Everything the verdict counts.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    pub(crate) committed: usize,
    pub(crate) rolled_back: usize,
    /// Transactions whose COMMIT outcome the writer did not learn (their events).
    pub(crate) unknown: usize,
    pub(crate) delivered: usize,
    /// Deliveries through the consumer group's retry topic.
    pub(crate) redeliveries: usize,
    pub(crate) lost: Vec<String>,
    pub(crate) phantom: Vec<String>,
    /// Events the writer saw committed that the table does not hold.
    pub(crate) vanished: Vec<String>,
    pub(crate) order_violations: Vec<String>,
    pub(crate) split_keys: Vec<String>,
    /// Pairs of terms (older, newer) where the older published after the newer began.
    pub(crate) overlapping_terms: Vec<(u64, u64)>,
    /// Messages that carry no leader term.
    pub(crate) without_term: usize,
    pub(crate) sending_rows: usize,
    /// Rows still PENDING at the end: not known to be sent.
    pub(crate) pending_rows: usize,
    /// Messages that carry no event id.
    pub(crate) without_event_id: usize,
    pub(crate) sent_without_msg_id: usize,
    pub(crate) failed_rows: usize,
    /// Extra copies of an event in the topic, by the fault that last began before the
    /// copy was stored (`None`: before any fault).
    pub(crate) duplicates: BTreeMap<Option<FaultKind>, usize>,
}

impl Verdict {
    pub(crate) fn compute(written: &[Written], rows: &[StoredRow], received: &[Received], faults: &[Injected]) -> Self {
        let in_table: HashSet<&str> = rows.iter().map(|r| r.event_id.as_str()).collect();
        let (retried, sent): (Vec<&Received>, Vec<&Received>) = received.iter().partition(|r| r.redelivered);
        let copies = distinct_copies(&sent);
        let delivered: HashSet<&str> =
            received.iter().map(|r| r.event_id.as_str()).filter(|id| !id.is_empty()).collect();
        let mut verdict = Verdict {
            committed: in_table.len(),
            rolled_back: written.iter().filter(|w| w.fate == Fate::RolledBack).count(),
            unknown: written.iter().filter(|w| w.fate == Fate::Unknown).count(),
            delivered: delivered.len(),
            redeliveries: retried.len(),
            without_event_id: received.iter().filter(|r| r.event_id.is_empty()).count(),
            ..Default::default()
        };
        verdict.lost = sorted(in_table.iter().filter(|id| !delivered.contains(*id)).map(|id| id.to_string()));
        verdict.phantom = sorted(delivered.iter().filter(|id| !in_table.contains(*id)).map(|id| id.to_string()));
        verdict.vanished = sorted(
            written
                .iter()
                .filter(|w| w.fate == Fate::Committed && !in_table.contains(w.event_id.as_str()))
                .map(|w| w.event_id.clone()),
        );
        verdict.check_keys(written, &in_table, &copies);
        verdict.check_terms(&sent);
        verdict.count_rows(rows);
        verdict.duplicates = duplicates(&copies, faults);
        verdict
    }

    /// Order and queue of every key's committed events.
    fn check_keys(&mut self, written: &[Written], in_table: &HashSet<&str>, copies: &HashMap<&str, Vec<&Received>>) {
        let mut by_key: BTreeMap<&str, Vec<&Written>> = BTreeMap::new();
        for w in written.iter().filter(|w| in_table.contains(w.event_id.as_str())) {
            by_key.entry(&w.biz_key).or_default().push(w);
        }
        for (key, mut events) in by_key {
            events.sort_by_key(|w| w.seq);
            let queues: HashSet<i32> = copies_of(&events, copies).map(|r| r.queue_id).collect();
            if queues.len() > 1 {
                self.split_keys.push(format!("{key} in queues {queues:?}"));
                continue;
            }
            let firsts: Vec<(u64, &Received)> =
                events.iter().filter_map(|w| Some((w.seq, *copies.get(w.event_id.as_str())?.first()?))).collect();
            for pair in firsts.windows(2) {
                let [(earlier_seq, earlier), (later_seq, later)] = pair else { continue };
                if later.queue_offset < earlier.queue_offset {
                    self.order_violations.push(format!(
                        "{key}: seq {later_seq} at offset {} before seq {earlier_seq} at offset {}",
                        later.queue_offset, earlier.queue_offset
                    ));
                }
            }
        }
    }

    /// Each term's publishing window against every newer term's.
    fn check_terms(&mut self, received: &[&Received]) {
        let mut windows: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
        for r in received {
            match r.term {
                Some(term) => {
                    let window = windows.entry(term).or_insert((r.stored_ms, r.stored_ms));
                    *window = (window.0.min(r.stored_ms), window.1.max(r.stored_ms));
                }
                None => self.without_term += 1,
            }
        }
        let terms: Vec<(u64, (i64, i64))> = windows.into_iter().collect();
        for (i, (older, (_, older_last))) in terms.iter().enumerate() {
            for (newer, (newer_first, _)) in &terms[i + 1..] {
                if older_last > newer_first {
                    self.overlapping_terms.push((*older, *newer));
                }
            }
        }
    }

    fn count_rows(&mut self, rows: &[StoredRow]) {
        self.sending_rows = rows.iter().filter(|r| r.status == RowStatus::Sending).count();
        self.pending_rows = rows.iter().filter(|r| r.status == RowStatus::Pending).count();
        self.sent_without_msg_id = rows.iter().filter(|r| r.status == RowStatus::Sent && !r.has_msg_id).count();
        self.failed_rows = rows.iter().filter(|r| r.status == RowStatus::Failed).count();
    }

    /// Every violated criterion, named with its count.
    pub(crate) fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut check = |count: usize, what: &str, examples: &[String]| {
            if count > 0 {
                let shown: Vec<&str> = examples.iter().take(5).map(String::as_str).collect();
                found.push(format!("{what}: {count} {shown:?}"));
            }
        };
        check(self.lost.len(), "lost (committed, never delivered)", &self.lost);
        check(self.phantom.len(), "phantom (delivered, never committed)", &self.phantom);
        check(self.vanished.len(), "committed but absent from the table", &self.vanished);
        check(self.order_violations.len(), "per-key order violations", &self.order_violations);
        check(self.split_keys.len(), "keys split across queues", &self.split_keys);
        let overlaps: Vec<String> =
            self.overlapping_terms.iter().map(|(a, b)| format!("term {a} after {b} began")).collect();
        check(overlaps.len(), "two terms publishing at once", &overlaps);
        check(self.without_term, "messages without a leader term", &[]);
        check(self.sending_rows, "rows left SENDING", &[]);
        check(self.pending_rows, "rows left PENDING", &[]);
        check(self.without_event_id, "messages without an event id", &[]);
        check(self.sent_without_msg_id, "SENT rows without msg_id", &[]);
        check(self.failed_rows, "FAILED rows (no poison was injected)", &[]);
        found
    }
}

/// Each event's distinct copies in the topic (a redelivery of the same queue offset is
/// the consumer's, not a second copy), in queue-offset order.
fn distinct_copies<'a>(received: &[&'a Received]) -> HashMap<&'a str, Vec<&'a Received>> {
    let mut copies: HashMap<&str, Vec<&Received>> = HashMap::new();
    for &r in received {
        let list = copies.entry(r.event_id.as_str()).or_default();
        if !list.iter().any(|c| c.queue_id == r.queue_id && c.queue_offset == r.queue_offset) {
            list.push(r);
        }
    }
    for list in copies.values_mut() {
        list.sort_by_key(|r| (r.queue_offset, r.queue_id));
    }
    copies
}

fn copies_of<'a>(
    events: &'a [&Written],
    copies: &'a HashMap<&str, Vec<&'a Received>>,
) -> impl Iterator<Item = &'a Received> + 'a {
    events.iter().filter_map(|w| copies.get(w.event_id.as_str())).flatten().copied()
}

/// The extra copies, each counted against the fault that last began before it was stored.
fn duplicates(copies: &HashMap<&str, Vec<&Received>>, faults: &[Injected]) -> BTreeMap<Option<FaultKind>, usize> {
    let mut counts = BTreeMap::new();
    for list in copies.values() {
        for extra in list.iter().skip(1) {
            let cause = faults.iter().filter(|f| f.started_ms <= extra.stored_ms).max_by_key(|f| f.started_ms);
            *counts.entry(cause.map(|f| f.kind)).or_insert(0) += 1;
        }
    }
    counts
}

fn sorted(ids: impl Iterator<Item = String>) -> Vec<String> {
    let mut ids: Vec<String> = ids.collect();
    ids.sort();
    ids
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(id: &str, key: &str, seq: u64, fate: Fate) -> Written {
        Written { event_id: id.into(), biz_key: key.into(), seq, fate }
    }

    fn row(id: &str) -> StoredRow {
        StoredRow { event_id: id.into(), status: RowStatus::Sent, has_msg_id: true }
    }

    fn got(id: &str, queue: i32, offset: i64, term: u64, ms: i64) -> Received {
        Received {
            event_id: id.into(),
            queue_id: queue,
            queue_offset: offset,
            term: Some(term),
            stored_ms: ms,
            redelivered: false,
        }
    }

    #[test]
    fn a_redelivery_through_the_retry_topic_proves_delivery_and_is_no_copy() {
        let w = [written("a", "k", 1, Fate::Committed), written("b", "k", 2, Fate::Committed)];
        let retried =
            Received { queue_id: 0, queue_offset: 9, stored_ms: 99, redelivered: true, ..got("a", 0, 0, 1, 0) };
        let r = [retried, got("b", 3, 1, 2, 20), got("a", 3, 0, 2, 19)];
        let verdict = Verdict::compute(&w, &[row("a"), row("b")], &r, &[]);
        assert_eq!(verdict.violations(), Vec::<String>::new());
        assert_eq!((verdict.delivered, verdict.redeliveries), (2, 1));
        assert!(verdict.duplicates.is_empty());
        let only_retried = Verdict::compute(&w[..1], &[row("a")], &r[..1], &[]);
        assert!(only_retried.lost.is_empty(), "a retried delivery is a delivery");
    }

    #[test]
    fn a_clean_run_has_no_violation() {
        let w = [written("a", "k", 1, Fate::Committed), written("b", "k", 2, Fate::Unknown)];
        let rows = [row("a"), row("b")];
        let r = [got("a", 0, 0, 1, 10), got("b", 0, 1, 1, 11), got("b", 0, 1, 1, 11)];
        let verdict = Verdict::compute(&w, &rows, &r, &[]);
        assert_eq!(verdict.violations(), Vec::<String>::new());
        assert_eq!((verdict.committed, verdict.delivered, verdict.unknown), (2, 2, 1));
        assert!(verdict.duplicates.is_empty(), "a redelivery of one offset is no duplicate");
    }

    #[test]
    fn lost_phantom_and_vanished_events_are_named() {
        let w = [
            written("kept", "k", 1, Fate::Committed),
            written("gone", "k", 2, Fate::Committed),
            written("undone", "k", 3, Fate::RolledBack),
        ];
        let rows = [row("kept")];
        let r = [got("undone", 0, 0, 1, 10)];
        let verdict = Verdict::compute(&w, &rows, &r, &[]);
        assert_eq!(verdict.lost, ["kept"]);
        assert_eq!(verdict.phantom, ["undone"]);
        assert_eq!(verdict.vanished, ["gone"]);
        assert_eq!(verdict.violations().len(), 3);
    }

    #[test]
    fn a_later_sequence_first_stored_before_an_earlier_one_breaks_order() {
        let w = [written("a", "k", 1, Fate::Committed), written("b", "k", 2, Fate::Committed)];
        let rows = [row("a"), row("b")];
        let r = [got("b", 3, 5, 1, 10), got("a", 3, 6, 1, 11), got("b", 3, 7, 1, 12)];
        let verdict = Verdict::compute(&w, &rows, &r, &[]);
        assert_eq!(verdict.order_violations, ["k: seq 2 at offset 5 before seq 1 at offset 6"]);
        assert_eq!(verdict.duplicates, BTreeMap::from([(None, 1)]));
    }

    #[test]
    fn a_key_in_two_queues_is_split() {
        let w = [written("a", "k", 1, Fate::Committed), written("b", "k", 2, Fate::Committed)];
        let r = [got("a", 0, 0, 1, 10), got("b", 1, 0, 1, 11)];
        let verdict = Verdict::compute(&w, &[row("a"), row("b")], &r, &[]);
        assert_eq!(verdict.split_keys.len(), 1);
    }

    #[test]
    fn an_older_term_storing_after_a_newer_one_began_overlaps() {
        let w = [written("a", "k", 1, Fate::Committed), written("b", "j", 1, Fate::Committed)];
        let rows = [row("a"), row("b")];
        let apart = Verdict::compute(&w, &rows, &[got("a", 0, 0, 1, 10), got("b", 1, 0, 2, 20)], &[]);
        assert!(apart.overlapping_terms.is_empty());
        let overlapping = Verdict::compute(&w, &rows, &[got("a", 0, 0, 1, 30), got("b", 1, 0, 2, 20)], &[]);
        assert_eq!(overlapping.overlapping_terms, [(1, 2)]);
    }

    #[test]
    fn rows_left_sending_pending_failed_or_sent_without_an_id_are_counted() {
        let rows = [
            StoredRow { event_id: "d".into(), status: RowStatus::Pending, has_msg_id: false },
            StoredRow { event_id: "a".into(), status: RowStatus::Sending, has_msg_id: false },
            StoredRow { event_id: "b".into(), status: RowStatus::Sent, has_msg_id: false },
            StoredRow { event_id: "c".into(), status: RowStatus::Failed, has_msg_id: false },
        ];
        let r = [got("a", 0, 0, 1, 1), got("b", 0, 1, 1, 2), got("c", 0, 2, 1, 3), got("d", 0, 3, 1, 4)];
        let verdict = Verdict::compute(&[], &rows, &r, &[]);
        let counts = (verdict.sending_rows, verdict.pending_rows, verdict.sent_without_msg_id, verdict.failed_rows);
        assert_eq!(counts, (1, 1, 1, 1));
        assert_eq!(verdict.violations().len(), 4);
    }

    #[test]
    fn order_is_judged_between_the_delivered_events_around_a_lost_one() {
        let w = [
            written("a", "k", 1, Fate::Committed),
            written("b", "k", 2, Fate::Committed),
            written("c", "k", 3, Fate::Committed),
        ];
        let r = [got("c", 0, 0, 1, 10), got("a", 0, 1, 1, 11)];
        let verdict = Verdict::compute(&w, &[row("a"), row("b"), row("c")], &r, &[]);
        assert_eq!(verdict.lost, ["b"]);
        assert_eq!(verdict.order_violations, ["k: seq 3 at offset 0 before seq 1 at offset 1"]);
    }

    #[test]
    fn messages_without_an_event_id_are_a_violation() {
        let r = [Received { event_id: String::new(), ..got("x", 0, 0, 1, 1) }];
        let verdict = Verdict::compute(&[], &[], &r, &[]);
        assert_eq!((verdict.without_event_id, verdict.phantom.len()), (1, 0));
        assert_eq!(verdict.violations().len(), 1);
    }

    #[test]
    fn a_duplicate_is_charged_to_the_fault_that_began_last_before_it() {
        let w = [written("a", "k", 1, Fate::Committed)];
        let r = [got("a", 0, 0, 1, 10), got("a", 0, 1, 2, 50)];
        let faults = [
            Injected { kind: FaultKind::BrokerKill, started_ms: 20 },
            Injected { kind: FaultKind::RelayKill, started_ms: 40 },
            Injected { kind: FaultKind::Crowd, started_ms: 60 },
        ];
        let verdict = Verdict::compute(&w, &[row("a")], &r, &faults);
        assert_eq!(verdict.duplicates, BTreeMap::from([(Some(FaultKind::RelayKill), 1)]));
    }
}
