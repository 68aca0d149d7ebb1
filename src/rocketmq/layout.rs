//! A topic's pinned queue layout: which broker and queue id each routing index is.
//!
//! Routing sends `hash(biz_key) % queue_count` to index `i`, the i-th queue of the
//! topic in (broker name, queue id) order. In a cluster the NameServer's route leaves
//! out the queues of a broker that is down, so the live route cannot say what index
//! `i` is while one broker is away: the layout is pinned durably at the topic's first
//! use and the live route is only compared with it. A broker of the layout missing
//! from the route is down (its queues wait); a broker that is up with other queue ids
//! than pinned, or a broker the layout does not know, is a real change of the topic,
//! which would move keys between queues: a person decides.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use rocketmq_model::common::message::message_queue::MessageQueue;
use serde::{Deserialize, Serialize};

/// Queue ids per broker name; the index order is (broker name, queue id).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct QueueLayout(BTreeMap<String, BTreeSet<i32>>);

impl QueueLayout {
    /// The layout of `queues` (any order).
    pub fn of(queues: &[MessageQueue]) -> Self {
        let mut layout = Self::default();
        for queue in queues {
            layout.0.entry(queue.broker_name().to_string()).or_default().insert(queue.queue_id());
        }
        layout
    }

    /// How many queues it has: the topic's pinned queue count.
    pub fn len(&self) -> usize {
        self.0.values().map(BTreeSet::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The queues of `topic`, index `i` at position `i`.
    pub fn queues(&self, topic: &str) -> Vec<MessageQueue> {
        self.0
            .iter()
            .flat_map(|(broker, ids)| ids.iter().map(move |&id| MessageQueue::from_parts(topic, broker.as_str(), id)))
            .collect()
    }

    /// The broker names it spreads over.
    pub fn brokers(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }
}

impl fmt::Display for QueueLayout {
    /// `broker-a: 0-3, broker-b: 0-3` (runs of consecutive ids shortened).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("no queues");
        }
        for (n, (broker, ids)) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{broker}: {}", id_runs(ids))?;
        }
        Ok(())
    }
}

/// `0-3,6` for {0, 1, 2, 3, 6}.
fn id_runs(ids: &BTreeSet<i32>) -> String {
    let mut runs: Vec<(i32, i32)> = Vec::new();
    for &id in ids {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == id => *end = id,
            _ => runs.push((id, id)),
        }
    }
    let text: Vec<String> =
        runs.iter().map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") }).collect();
    text.join(",")
}

/// What the live route says about a topic, against what is pinned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// Routing uses `layout`; the brokers in `down` have no route now (their queues wait).
    Ready { layout: QueueLayout, down: Vec<String> },
    /// No layout is pinned yet and the route shows fewer queues than the pinned count:
    /// a broker may be down. The topic waits until the whole layout is seen.
    Incomplete { live: QueueLayout, pinned: u32 },
}

/// The route contradicts what is pinned on a broker that is up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the route shows {seen} but {pinned} is pinned")]
pub struct LayoutChanged {
    /// What is pinned, in words (a layout, or a count when only that is known).
    pub pinned: String,
    /// What the route shows now.
    pub seen: String,
}

/// Compares the live route (`live`, not empty) with the pinned layout, or with the
/// pinned count when no layout is pinned yet.
pub fn resolve(
    pinned: Option<&QueueLayout>,
    count: Option<u32>,
    live: &QueueLayout,
) -> Result<Resolved, LayoutChanged> {
    let changed = |pinned: String| LayoutChanged { pinned, seen: live.to_string() };
    match (pinned, count) {
        (Some(layout), Some(count)) if layout.len() != count as usize => Err(LayoutChanged {
            pinned: format!("a count of {count} (configured)"),
            seen: format!("the pinned layout {layout}"),
        }),
        (Some(layout), _) => {
            if live.0.iter().any(|(broker, ids)| layout.0.get(broker) != Some(ids)) {
                return Err(changed(layout.to_string()));
            }
            let down = layout.brokers().filter(|broker| !live.0.contains_key(*broker)).map(str::to_owned).collect();
            Ok(Resolved::Ready { layout: layout.clone(), down })
        }
        (None, Some(count)) if live.len() < count as usize => {
            Ok(Resolved::Incomplete { live: live.clone(), pinned: count })
        }
        (None, Some(count)) if live.len() > count as usize => Err(changed(format!("a count of {count}"))),
        (None, _) => Ok(Resolved::Ready { layout: live.clone(), down: Vec::new() }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(brokers: &[(&str, &[i32])]) -> QueueLayout {
        let queues: Vec<MessageQueue> = brokers
            .iter()
            .flat_map(|(broker, ids)| ids.iter().map(|&id| MessageQueue::from_parts("t", *broker, id)))
            .collect();
        QueueLayout::of(&queues)
    }

    const TWO_BROKERS: &[(&str, &[i32])] = &[("broker-b", &[0, 1, 2, 3]), ("broker-a", &[3, 2, 1, 0])];

    #[test]
    fn index_order_is_broker_name_then_queue_id() {
        let pinned = layout(TWO_BROKERS);
        let order: Vec<(String, i32)> =
            pinned.queues("t").iter().map(|q| (q.broker_name().to_string(), q.queue_id())).collect();
        assert_eq!(order[0], ("broker-a".to_owned(), 0));
        assert_eq!(order[3], ("broker-a".to_owned(), 3));
        assert_eq!(order[4], ("broker-b".to_owned(), 0));
        assert_eq!(pinned.len(), 8);
        assert_eq!(pinned.to_string(), "broker-a: 0-3, broker-b: 0-3");
    }

    #[test]
    fn a_broker_missing_from_the_route_is_down_and_keeps_its_indexes() {
        let pinned = layout(TWO_BROKERS);
        let live = layout(&[("broker-a", &[0, 1, 2, 3])]);
        let resolved = resolve(Some(&pinned), Some(8), &live).expect("an outage, not a change");
        assert_eq!(resolved, Resolved::Ready { layout: pinned, down: vec!["broker-b".to_owned()] });
    }

    #[test]
    fn other_queues_on_a_broker_that_is_up_or_a_new_broker_is_a_change_named_both_ways() {
        let pinned = layout(TWO_BROKERS);
        let shrunk = layout(&[("broker-a", &[0, 1]), ("broker-b", &[0, 1, 2, 3])]);
        let error = resolve(Some(&pinned), None, &shrunk).expect_err("fewer queues on a live broker");
        assert_eq!(
            error.to_string(),
            "the route shows broker-a: 0-1, broker-b: 0-3 but broker-a: 0-3, broker-b: 0-3 is pinned"
        );
        let grown = layout(&[("broker-a", &[0, 1, 2, 3]), ("broker-c", &[0])]);
        assert!(resolve(Some(&pinned), None, &grown).is_err(), "a broker the layout does not know");
        assert!(resolve(Some(&pinned), Some(4), &pinned).is_err(), "a configured count the layout contradicts");
    }

    #[test]
    fn without_a_layout_the_count_decides_and_a_short_route_waits() {
        let live = layout(TWO_BROKERS);
        assert_eq!(resolve(None, Some(8), &live), Ok(Resolved::Ready { layout: live.clone(), down: Vec::new() }));
        assert_eq!(resolve(None, None, &live), Ok(Resolved::Ready { layout: live.clone(), down: Vec::new() }));
        let half = layout(&[("broker-a", &[0, 1, 2, 3])]);
        assert_eq!(resolve(None, Some(8), &half), Ok(Resolved::Incomplete { live: half, pinned: 8 }));
        assert!(resolve(None, Some(4), &live).is_err(), "more queues than pinned can be no outage");
    }

    #[test]
    fn a_layout_survives_json_as_a_map_of_brokers() {
        let pinned = layout(TWO_BROKERS);
        let json = serde_json::to_string(&pinned).expect("json");
        assert_eq!(json, r#"{"broker-a":[0,1,2,3],"broker-b":[0,1,2,3]}"#);
        assert_eq!(serde_json::from_str::<QueueLayout>(&json).expect("parse"), pinned);
        assert_eq!(id_runs(&[0, 1, 3, 5, 6].into_iter().collect()), "0-1,3,5-6");
    }
}
