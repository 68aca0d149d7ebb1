//! Each queue's progress past the checkpoint, so a new pipeline does not send again
//! what a live queue already finished.
//!
//! The checkpoint moves only to the end of the unbroken acknowledged prefix: one
//! queue whose broker is down holds it where that queue's oldest unsent event is,
//! while the other queues go on sending. Without more, a restart then reads all
//! of that again and sends every event the live queues finished meanwhile a second
//! time, as many as the outage is long.
//!
//! A lane finishes its binlog events in the order the binlog has them, so the last
//! one a queue sent (or durably failed) says it finished every earlier event of that
//! queue too. That event's id is the queue's mark, saved with the checkpoint; a
//! pipeline that reads the binlog again from that checkpoint skips each queue's
//! events up to and including its mark, and only then sends that queue's events.
//!
//! An event a lane leaves behind for a held key is not finished (its row waits,
//! PENDING, for the sweep), and a lane reports it ahead of the free events batched
//! with it: from the first one, that queue's mark stands still until the
//! acknowledged prefix has passed the event (a new pipeline then holds its key from
//! the table). Swept rows carry no mark: the binlog does not bring them back.
//! A mark the acknowledged prefix has passed is dropped, as the binlog read from the
//! checkpoint no longer has its event. Marks hold for the binlog of the server they
//! were made on; the start drops them for any other.

use crate::checkpoint::QueueMarks;
use crate::lanes::QueueSlot;

/// Where one queue stands past the checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mark {
    /// Nothing finished past the checkpoint that a replay must skip.
    None,
    /// Saved by an earlier pipeline and not met yet in this one's binlog: every event
    /// of the queue up to and including `id` is skipped.
    Inherited { id: u64 },
    /// Event `id` of transaction `seq` (this pipeline's numbering) finished, and so
    /// did every earlier one of the queue.
    Finished { id: u64, seq: u64 },
    /// An event of transaction `seq` was left behind for a held key: the mark stays
    /// at `last` until the acknowledged prefix passes `seq`.
    LeftBehind { last: Option<(u64, u64)>, seq: u64 },
}

/// Every queue's mark, by the slot its lane was given.
#[derive(Debug, Default)]
pub(crate) struct QueueProgress {
    queues: Vec<Queue>,
    /// Saved marks of queues whose lanes have not started yet.
    inherited: QueueMarks,
}

#[derive(Debug)]
struct Queue {
    topic: String,
    index: u32,
    mark: Mark,
}

impl QueueProgress {
    /// Progress that starts from the marks a checkpoint saved.
    pub(crate) fn new(saved: QueueMarks) -> Self {
        Self { queues: Vec::new(), inherited: saved }
    }

    /// The slot of `topic`'s queue `index`, for a lane that starts now.
    pub(crate) fn slot(&mut self, topic: &str, index: u32) -> QueueSlot {
        let saved = self.inherited.get_mut(topic).and_then(|queues| queues.remove(&index));
        let mark = saved.map_or(Mark::None, |id| Mark::Inherited { id });
        let slot = QueueSlot(u32::try_from(self.queues.len()).unwrap_or(u32::MAX));
        self.queues.push(Queue { topic: topic.to_owned(), index, mark });
        slot
    }

    /// Whether binlog event `id`, read in transaction `seq` and routed to `slot`, was
    /// finished by an earlier pipeline (skip it). Meeting the mark itself ends the
    /// skipping and makes it this pipeline's mark for the queue.
    pub(crate) fn finished_before(&mut self, slot: QueueSlot, id: u64, seq: u64) -> bool {
        let Some(queue) = self.queues.get_mut(slot.0 as usize) else { return false };
        let Mark::Inherited { id: mark } = queue.mark else { return false };
        if id == mark {
            queue.mark = Mark::Finished { id, seq };
            tracing::info!(topic = %queue.topic, queue = queue.index, id, "replay: the queue's events an earlier pipeline finished are skipped; it sends from here");
        }
        true
    }

    /// Binlog event `id` of transaction `seq` on `slot` ended: sent or failed for
    /// good (`finished`), or left behind for a held key.
    pub(crate) fn ended(&mut self, slot: QueueSlot, id: u64, seq: u64, finished: bool) {
        let Some(queue) = self.queues.get_mut(slot.0 as usize) else { return };
        queue.mark = match (queue.mark, finished) {
            (Mark::LeftBehind { last, seq: first }, finished) => {
                // Behind the newest event left behind: the prefix must pass that one too.
                let seq = if finished { first } else { first.max(seq) };
                Mark::LeftBehind { last, seq }
            }
            (_, true) => Mark::Finished { id, seq },
            (Mark::Finished { id, seq: at }, false) => Mark::LeftBehind { last: Some((id, at)), seq },
            (_, false) => Mark::LeftBehind { last: None, seq },
        };
    }

    /// The binlog path went on from another position: marks of an earlier pipeline
    /// will not be met (the queues send everything from here).
    pub(crate) fn forget_inherited(&mut self) {
        self.inherited.clear();
        for queue in &mut self.queues {
            if let Mark::Inherited { .. } = queue.mark {
                queue.mark = Mark::None;
            }
        }
    }

    /// The marks to save with a checkpoint whose acknowledged prefix ends before
    /// transaction `first_pending`; marks it has passed are dropped.
    pub(crate) fn saved(&mut self, first_pending: u64) -> QueueMarks {
        let mut marks = self.inherited.clone();
        for queue in &mut self.queues {
            queue.mark = match queue.mark {
                Mark::Finished { seq, .. } | Mark::LeftBehind { seq, .. } if seq < first_pending => Mark::None,
                Mark::LeftBehind { seq, last } => {
                    Mark::LeftBehind { last: last.filter(|&(_, at)| at >= first_pending), seq }
                }
                mark => mark,
            };
            let id = match queue.mark {
                Mark::Inherited { id } | Mark::Finished { id, .. } | Mark::LeftBehind { last: Some((id, _)), .. } => id,
                Mark::None | Mark::LeftBehind { last: None, .. } => continue,
            };
            marks.entry(queue.topic.clone()).or_default().insert(queue.index, id);
        }
        marks.retain(|_, queues| !queues.is_empty());
        marks
    }
}

#[cfg(test)]
mod tests {
    use super::{QueueMarks, QueueProgress};

    fn marks(entries: &[(&str, u32, u64)]) -> QueueMarks {
        let mut marks = QueueMarks::new();
        for &(topic, index, id) in entries {
            marks.entry(topic.to_owned()).or_default().insert(index, id);
        }
        marks
    }

    #[test]
    fn a_replay_skips_each_queue_through_its_mark_and_no_further() {
        let mut progress = QueueProgress::new(marks(&[("t", 0, 12)]));
        let (q0, q1) = (progress.slot("t", 0), progress.slot("t", 1));
        assert!(progress.finished_before(q0, 10, 0), "before the mark");
        assert!(!progress.finished_before(q1, 11, 0), "a queue without a mark sends everything");
        assert!(progress.finished_before(q0, 12, 1), "the mark itself");
        assert!(!progress.finished_before(q0, 13, 2), "after the mark");
        assert!(!progress.finished_before(q0, 9, 3), "once met, never skipping again");
    }

    #[test]
    fn the_last_finished_event_of_each_queue_is_saved_until_the_prefix_passes_it() {
        let mut progress = QueueProgress::default();
        let (a0, b3) = (progress.slot("a", 0), progress.slot("b", 3));
        progress.ended(a0, 5, 0, true);
        progress.ended(a0, 7, 2, true);
        progress.ended(b3, 6, 1, true);
        assert_eq!(progress.saved(0), marks(&[("a", 0, 7), ("b", 3, 6)]));
        assert_eq!(progress.saved(2), marks(&[("a", 0, 7)]), "transaction 1 is in the prefix: b's mark goes");
        assert_eq!(progress.saved(3), QueueMarks::new());
    }

    #[test]
    fn an_event_left_behind_stops_its_queue_mark_until_the_prefix_passes_it() {
        let mut progress = QueueProgress::default();
        let q = progress.slot("t", 0);
        progress.ended(q, 1, 0, true);
        progress.ended(q, 3, 2, false);
        progress.ended(q, 2, 2, true);
        progress.ended(q, 4, 3, true);
        assert_eq!(progress.saved(0), marks(&[("t", 0, 1)]), "nothing past the held event");
        assert_eq!(progress.saved(1), QueueMarks::new(), "the last finished one is in the prefix");
        progress.ended(q, 5, 4, true);
        assert_eq!(progress.saved(1), QueueMarks::new(), "still behind the held event");
        assert_eq!(progress.saved(3), QueueMarks::new(), "past the held event, the mark moves again");
        progress.ended(q, 6, 5, true);
        assert_eq!(progress.saved(3), marks(&[("t", 0, 6)]));
    }

    #[test]
    fn a_second_event_left_behind_holds_the_mark_until_the_prefix_passes_it_too() {
        let mut progress = QueueProgress::default();
        let q = progress.slot("t", 0);
        progress.ended(q, 1, 0, true);
        progress.ended(q, 6, 6, false);
        progress.ended(q, 9, 9, false);
        progress.ended(q, 10, 10, true);
        assert_eq!(progress.saved(7), QueueMarks::new(), "past the first held event, not the second");
        progress.ended(q, 11, 11, true);
        assert_eq!(progress.saved(7), QueueMarks::new(), "still behind the second held event");
        assert_eq!(progress.saved(10), QueueMarks::new());
        progress.ended(q, 12, 12, true);
        assert_eq!(progress.saved(10), marks(&[("t", 0, 12)]));
    }

    #[test]
    fn a_moved_binlog_path_forgets_the_marks_it_will_not_meet() {
        let mut progress = QueueProgress::new(marks(&[("t", 0, 12), ("u", 1, 4)]));
        let q = progress.slot("t", 0);
        progress.forget_inherited();
        assert!(!progress.finished_before(q, 10, 0), "sent, not skipped");
        assert_eq!(progress.saved(0), QueueMarks::new());
    }

    #[test]
    fn inherited_marks_are_saved_again_until_their_lane_meets_them() {
        let mut progress = QueueProgress::new(marks(&[("t", 0, 12), ("u", 1, 4)]));
        let q = progress.slot("t", 0);
        assert_eq!(progress.saved(5), marks(&[("t", 0, 12), ("u", 1, 4)]), "not met: kept whatever the prefix");
        assert!(progress.finished_before(q, 12, 6));
        assert_eq!(progress.saved(6), marks(&[("t", 0, 12), ("u", 1, 4)]));
        assert_eq!(progress.saved(7), marks(&[("u", 1, 4)]), "met in transaction 6, now in the prefix");
    }
}
