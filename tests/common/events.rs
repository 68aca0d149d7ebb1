//! Test events with checkable ids, and the assertions the relay tests share: every
//! row SENT, every event consumed, per-key order in the key's queue.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use outbox_kit::consumer::Delivery as Received;
use outbox_kit::RowStatus;
use outbox_relay::config::HashFunction;
use outbox_relay::route::queue_for;

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

/// How many times the broker stored each event (at distinct broker, queue and offset):
/// how often it was published. A consumer's own redeliveries (of the same stored
/// message, or through its retry topic) are not counted.
pub fn stored_times(deliveries: &[Received]) -> HashMap<&str, usize> {
    let mut places: HashMap<&str, std::collections::HashSet<(&str, i32, i64)>> = HashMap::new();
    for d in deliveries.iter().filter(|d| d.reconsume_times == 0) {
        places.entry(d.event_id.as_str()).or_default().insert((d.broker_name.as_str(), d.queue_id, d.queue_offset));
    }
    places.into_iter().map(|(id, stored)| (id, stored.len())).collect()
}

/// Events the broker stored more than once: published twice.
pub fn stored_twice(deliveries: &[Received]) -> Vec<&str> {
    stored_times(deliveries).into_iter().filter(|(_, times)| *times > 1).map(|(id, _)| id).collect()
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

/// Per key: first deliveries in commit order (by queue offset), all in the key's queue:
/// index `hash % TEST_TOPIC_QUEUES` of the topic's route in (broker, queue id) order.
///
/// A delivery through the consumer's retry topic (the Rust push consumer 1.0.0 sends a
/// few messages back under load, seen here) carries the retry queue's id and offset;
/// for an event seen only that way, the broker's key index says where it is stored.
pub async fn assert_per_key_order(stack: &Stack, topic: &str, deliveries: &[Received]) {
    let mut first: HashMap<&str, Place> = HashMap::new();
    for d in deliveries.iter().filter(|d| d.reconsume_times == 0) {
        let place =
            Place { broker: d.broker_name.clone(), queue_id: d.queue_id, offset: d.queue_offset, key: &d.biz_key };
        first
            .entry(d.event_id.as_str())
            .and_modify(|f| {
                if (&place.broker, place.queue_id) == (&f.broker, f.queue_id) && place.offset < f.offset {
                    *f = place.clone()
                }
            })
            .or_insert(place);
    }
    let producer = stack.producer("order_check").await;
    let route = producer.live_queues(topic).await.expect("the topic's route");
    assert_eq!(route.len(), TEST_TOPIC_QUEUES as usize, "every broker of {topic} is up for the order check");
    let redelivered_only: Vec<&Received> =
        deliveries.iter().filter(|d| d.reconsume_times > 0 && !first.contains_key(d.event_id.as_str())).collect();
    for d in redelivered_only {
        let stored =
            eventually(&format!("the broker's key index to find {}", d.event_id), Duration::from_secs(30), || async {
                let found = producer.find_by_key(topic, &d.event_id).await.ok()?;
                found
                    .iter()
                    .min_by_key(|m| m.queue_offset())
                    .map(|m| (m.broker_name().to_owned(), m.queue_id(), m.queue_offset()))
            })
            .await;
        let place = Place { broker: stored.0, queue_id: stored.1, offset: stored.2, key: &d.biz_key };
        first.insert(d.event_id.as_str(), place);
    }
    producer.shutdown().await;
    let mut by_key: BTreeMap<&str, Vec<(&Place, &str)>> = BTreeMap::new();
    for (event_id, place) in &first {
        by_key.entry(place.key).or_default().push((place, event_id));
    }
    for (key, mut events) in by_key {
        let queue = &route[queue_for(HashFunction::Stable, key, TEST_TOPIC_QUEUES) as usize];
        let expected = (queue.broker_name().to_string(), queue.queue_id());
        let queues: std::collections::BTreeSet<(String, i32)> =
            events.iter().map(|(p, _)| (p.broker.clone(), p.queue_id)).collect();
        assert_eq!(queues, [expected.clone()].into(), "key {key}: every event in queue {expected:?}");
        events.sort_by_key(|(p, _)| p.offset);
        let seqs: Vec<&str> = events.iter().map(|(_, id)| id.rsplit('-').next().unwrap_or_default()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "key {key}: first deliveries out of commit order: {seqs:?}");
    }
}

/// Where a delivery was stored: broker, queue id, offset; and its key.
#[derive(Clone)]
struct Place<'a> {
    broker: String,
    queue_id: i32,
    offset: i64,
    key: &'a str,
}

/// Per term, the first and last broker store time of its messages (first deliveries).
fn term_spans(deliveries: &[Received]) -> BTreeMap<u64, (i64, i64)> {
    let mut spans: BTreeMap<u64, (i64, i64)> = BTreeMap::new();
    for d in deliveries.iter().filter(|d| d.reconsume_times == 0) {
        let term = d.relay_term.unwrap_or_else(|| panic!("{} carries no relay_term", d.event_id));
        let span = spans.entry(term).or_insert((d.store_timestamp, d.store_timestamp));
        span.0 = span.0.min(d.store_timestamp);
        span.1 = span.1.max(d.store_timestamp);
    }
    spans
}

/// Checks, by the broker's store times, that the terms that published did so one
/// after the other (no message of a term stored after the first of a later one); the
/// terms that published, in order.
pub fn terms_one_after_another(deliveries: &[Received]) -> Vec<u64> {
    let ordered: Vec<(u64, (i64, i64))> = term_spans(deliveries).into_iter().collect();
    for pair in ordered.windows(2) {
        let ((earlier, (_, last)), (later, (first_of_later, _))) = (pair[0], pair[1]);
        assert!(
            last <= first_of_later,
            "term {earlier} still published at {last} after term {later} began at {first_of_later}"
        );
    }
    ordered.into_iter().map(|(term, _)| term).collect()
}
