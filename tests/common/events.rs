//! Test events with checkable ids, and the assertions the relay tests share: every
//! row SENT, every event consumed, per-key order in the key's queue.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use outbox_kit::consumer::Delivery as Received;
use outbox_kit::RowStatus;
use outbox_relay::config::HashFunction;
use outbox_relay::relay::route::queue_for;

use super::collector::Collector;
use super::outbox::{Row, TestOutbox};
use super::{eventually, fresh_topic, unique, Stack, TEST_TOPIC_QUEUES};

/// Event ids are `{prefix}-{key}-{seq}`; a test's prefix is unique and its topic its own.
pub struct Events {
    pub prefix: String,
    pub topic: String,
}

impl Events {
    pub async fn new(stack: &Stack, name: &str) -> Self {
        Self { prefix: unique(name), topic: fresh_topic(stack).await }
    }

    pub fn row(&self, key: &str, seq: usize) -> Row {
        Row {
            event_id: self.id(key, seq),
            biz_key: key.to_owned(),
            topic: self.topic.clone(),
            payload: format!(r#"{{"key":"{key}","seq":{seq}}}"#),
        }
    }

    pub fn rows(&self, key: &str, seqs: std::ops::Range<usize>) -> Vec<Row> {
        seqs.map(|seq| self.row(key, seq)).collect()
    }

    pub fn id(&self, key: &str, seq: usize) -> String {
        format!("{}-{key}-{seq:05}", self.prefix)
    }
}

/// Waits until `expected` distinct events of `events` were consumed; all their deliveries.
pub async fn consumed_all(
    collector: &Collector,
    events: &Events,
    expected: usize,
    deadline: Duration,
) -> Vec<Received> {
    collector.wait_distinct(&format!("{}-", events.prefix), expected, deadline).await
}

/// How many times each event_id was delivered.
pub fn delivery_counts(deliveries: &[Received]) -> HashMap<&str, usize> {
    let mut counts = HashMap::new();
    for d in deliveries {
        *counts.entry(d.event_id.as_str()).or_default() += 1;
    }
    counts
}

pub async fn all_sent(outbox: &TestOutbox, expected: usize, deadline: Duration) {
    eventually(&format!("{expected} rows SENT with msg_id"), deadline, || async {
        let statuses = outbox.statuses().await;
        let sent = statuses
            .values()
            .filter(|(s, msg)| *s == RowStatus::Sent.code() && msg.as_deref().is_some_and(|m| !m.is_empty()))
            .count();
        (statuses.len() == expected && sent == expected).then_some(())
    })
    .await;
}

/// Per key: first deliveries in commit order (by queue offset), all in the key's queue.
///
/// A delivery through the consumer's retry topic (the Rust push consumer 1.0.0 sends a
/// few messages back under load, seen here) carries the retry queue's id and offset;
/// for an event seen only that way, the broker's key index says where it is stored.
pub async fn assert_per_key_order(stack: &Stack, topic: &str, deliveries: &[Received]) {
    let mut first: HashMap<&str, (i32, i64, &str)> = HashMap::new();
    for d in deliveries.iter().filter(|d| d.reconsume_times == 0) {
        let place = (d.queue_id, d.queue_offset, d.biz_key.as_str());
        first
            .entry(d.event_id.as_str())
            .and_modify(|f| {
                if place.0 == f.0 && place.1 < f.1 {
                    *f = place
                }
            })
            .or_insert(place);
    }
    let producer = stack.producer("order_check").await;
    let redelivered_only: Vec<&Received> =
        deliveries.iter().filter(|d| d.reconsume_times > 0 && !first.contains_key(d.event_id.as_str())).collect();
    for d in redelivered_only {
        let stored =
            eventually(&format!("the broker's key index to find {}", d.event_id), Duration::from_secs(30), || async {
                let found = producer.find_by_key(topic, &d.event_id).await.ok()?;
                found.iter().min_by_key(|m| m.queue_offset()).map(|m| (m.queue_id(), m.queue_offset()))
            })
            .await;
        first.insert(d.event_id.as_str(), (stored.0, stored.1, d.biz_key.as_str()));
    }
    producer.shutdown().await;
    let mut by_key: BTreeMap<&str, Vec<(i64, i32, &str)>> = BTreeMap::new();
    for (event_id, (queue_id, offset, key)) in &first {
        by_key.entry(key).or_default().push((*offset, *queue_id, event_id));
    }
    for (key, mut events) in by_key {
        let queue = queue_for(HashFunction::Stable, key, TEST_TOPIC_QUEUES) as i32;
        let queues: std::collections::BTreeSet<i32> = events.iter().map(|e| e.1).collect();
        assert_eq!(queues, [queue].into(), "key {key}: every event in queue {queue}");
        events.sort();
        let seqs: Vec<&str> = events.iter().map(|e| e.2.rsplit('-').next().unwrap_or_default()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "key {key}: first deliveries out of commit order: {seqs:?}");
    }
}
