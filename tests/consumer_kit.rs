//! The idempotency kit against the real MariaDB, the real broker and real consumers:
//! the seed's incident 3 cannot happen (orderly and concurrent), duplicates are ACKed
//! once processed, rejected events are quarantined and not retried, racing consumers
//! process once, stale versions are dropped, every PROCESSED mark has its business
//! result, and orderly consumption applies every key's events in order, each once,
//! although handlers fail and retry along the way.
#![recursion_limit = "512"]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::consumer_db::{benefits_db, count};
use common::{eventually, fresh_topic, throughout, unique, Stack, TEST_TOPIC_QUEUES};
use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Transaction};
use outbox_kit::consumer::guards::advance_version;
use outbox_kit::consumer::retention;
use outbox_kit::consumer::{
    ConsumerMetrics, Consumption, DedupKey, Delivery, EventHandler, HandlerError, HandlerFuture, IdempotentConsumer,
    StartFrom, Subscription,
};
use outbox_relay::config::HashFunction;
use outbox_relay::event::OutboxEvent;
use outbox_relay::rocketmq::Producer;
use outbox_relay::route::queue_for;
use tokio::sync::Semaphore;

/// The benefits service's business write: one benefit row per order it processes.
struct Benefits {
    calls: AtomicUsize,
    /// The first N calls write, then fail retryably (the write must roll back).
    fail_first: usize,
    /// Every call fails non-retryably.
    reject: bool,
    /// Time spent inside the transaction (widens races).
    hold: Duration,
    /// Calls after the failing ones start only with a permit: a test holds the retry
    /// back until it has looked at what the failed attempt left.
    after_failures: Semaphore,
}

impl Benefits {
    fn new() -> Self {
        Self {
            calls: AtomicUsize::new(0),
            fail_first: 0,
            reject: false,
            hold: Duration::ZERO,
            after_failures: Semaphore::new(Semaphore::MAX_PERMITS),
        }
    }
}

impl EventHandler for Benefits {
    fn handle<'a>(&'a self, tx: &'a mut Transaction<'static>, delivery: &'a Delivery) -> HandlerFuture<'a> {
        Box::pin(async move {
            let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            let _permit = if call > self.fail_first {
                Some(self.after_failures.acquire().await.map_err(|e| HandlerError::Retryable(e.to_string()))?)
            } else {
                None
            };
            let order: serde_json::Value =
                serde_json::from_slice(&delivery.body).map_err(|e| HandlerError::NonRetryable(e.to_string()))?;
            let order_id =
                order["order_id"].as_u64().ok_or_else(|| HandlerError::NonRetryable("no order_id".into()))?;
            tx.exec_drop("INSERT INTO benefits (order_id, event_id) VALUES (?, ?)", (order_id, &delivery.event_id))
                .await?;
            tokio::time::sleep(self.hold).await;
            if call <= self.fail_first {
                return Err(HandlerError::Retryable(format!("simulated failure on call {call}")));
            }
            if self.reject {
                return Err(HandlerError::NonRetryable("order is not payable".into()));
            }
            Ok(())
        })
    }
}

struct Kit {
    stack: Stack,
    pool: Pool,
    topic: String,
    producer: Producer,
}

impl Kit {
    async fn new() -> Self {
        let stack = Stack::from_env();
        let pool = benefits_db(&stack).await;
        let topic = fresh_topic(&stack).await;
        let producer = stack.producer("kit_producer").await;
        Self { stack, pool, topic, producer }
    }

    /// Starts an idempotent consumer (its own group) with `handler`.
    async fn consumer<H: EventHandler>(
        &self,
        handler: H,
        consumption: Consumption,
    ) -> (Arc<IdempotentConsumer<H>>, ConsumerMetrics, Subscription) {
        let metrics = ConsumerMetrics::default();
        let consumer = Arc::new(
            IdempotentConsumer::new(self.pool.clone(), handler, DedupKey::EventId, metrics.clone())
                .with_consumption(consumption),
        );
        let subscription = Arc::clone(&consumer)
            .subscribe(
                &self.stack.namesrv,
                &unique("benefits"),
                &self.topic,
                StartFrom::Since(chrono::Local::now() - chrono::Duration::seconds(60)),
            )
            .await
            .expect("subscribe");
        (consumer, metrics, subscription)
    }

    /// Publishes the OrderPaid event `event_id` for `order_id` (as the relay would).
    async fn publish(&self, event_id: &str, order_id: u64, extra: &str) {
        let queues = self.producer.pinned_queues(&self.topic, TEST_TOPIC_QUEUES).await.expect("queues");
        let event = OutboxEvent {
            id: order_id,
            event_id: event_id.to_owned(),
            biz_key: format!("order-{order_id}"),
            topic: self.topic.clone(),
            payload: Bytes::from(format!(r#"{{"type":"OrderPaid","order_id":{order_id}{extra}}}"#)),
            created_local_us: None,
            extras: None,
        };
        self.producer.send_batch(&queues[0], std::slice::from_ref(&event)).await.expect("SEND_OK");
    }
}

fn handled(metrics: &ConsumerMetrics) -> u64 {
    metrics.processed.get() + metrics.dedup_hits.get() + metrics.rejected.get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_that_fails_once_processes_the_event_exactly_once_and_marks_only_after_success() {
    fails_once_then_succeeds(Consumption::Orderly).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_consumption_also_processes_an_event_that_failed_once_exactly_once() {
    fails_once_then_succeeds(Consumption::Concurrent).await;
}

async fn fails_once_then_succeeds(consumption: Consumption) {
    let kit = Kit::new().await;
    let held_back = Benefits { fail_first: 1, after_failures: Semaphore::new(0), ..Benefits::new() };
    let (consumer, metrics, subscription) = kit.consumer(held_back, consumption).await;
    let event_id = unique("ev");
    kit.publish(&event_id, 1, "").await;

    eventually("the first (failing) attempt", Duration::from_secs(60), || async {
        (metrics.retries.get() == 1).then_some(())
    })
    .await;
    // The seed's incident 3: the mark must not exist while the work is undone.
    assert_eq!(
        count(&kit.pool, "SELECT COUNT(*) FROM event_dedup").await,
        0,
        "dedup mark written although the handler failed"
    );
    assert_eq!(
        count(&kit.pool, "SELECT COUNT(*) FROM benefits").await,
        0,
        "the failed attempt's business write was kept"
    );
    consumer.handler().after_failures.add_permits(1);

    eventually("the redelivery to be processed", Duration::from_secs(90), || async {
        (metrics.processed.get() == 1).then_some(())
    })
    .await;
    assert_eq!(count(&kit.pool, "SELECT COUNT(*) FROM benefits").await, 1);
    assert_eq!(count(&kit.pool, "SELECT COUNT(*) FROM event_dedup WHERE status = 'PROCESSED'").await, 1);
    assert_eq!(consumer_calls(&consumer), 2);
    subscription.shutdown().await;
}

fn consumer_calls(consumer: &IdempotentConsumer<Benefits>) -> usize {
    consumer.handler().calls.load(Ordering::SeqCst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_event_delivered_five_times_has_one_effect_and_four_dedup_hits() {
    let kit = Kit::new().await;
    let (_consumer, metrics, subscription) = kit.consumer(Benefits::new(), Consumption::Orderly).await;
    let event_id = unique("ev");
    for _ in 0..5 {
        kit.publish(&event_id, 7, "").await;
    }
    eventually("all 5 deliveries handled", Duration::from_secs(60), || async {
        (handled(&metrics) == 5).then_some(())
    })
    .await;
    assert_eq!(
        count(&kit.pool, "SELECT COUNT(*) FROM benefits").await,
        1,
        "the business effect happened more than once"
    );
    assert_eq!(
        (metrics.processed.get(), metrics.dedup_hits.get(), metrics.retries.get()),
        (1, 4, 0),
        "1 processed, 4 dedup hits, all ACKed"
    );
    subscription.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_non_retryable_failure_is_quarantined_rejected_acked_and_not_redelivered() {
    let kit = Kit::new().await;
    let (consumer, metrics, subscription) =
        kit.consumer(Benefits { reject: true, ..Benefits::new() }, Consumption::Orderly).await;
    let event_id = unique("ev");
    kit.publish(&event_id, 9, "").await;
    eventually("the event to be rejected", Duration::from_secs(60), || async {
        (metrics.rejected.get() == 1).then_some(())
    })
    .await;
    assert_eq!(
        count(
            &kit.pool,
            &format!("SELECT COUNT(*) FROM event_dedup WHERE event_id = '{event_id}' AND status = 'REJECTED'")
        )
        .await,
        1
    );
    assert_eq!(
        count(
            &kit.pool,
            &format!(
                "SELECT COUNT(*) FROM event_quarantine WHERE event_id = '{event_id}' AND reason LIKE '%not payable%'"
            )
        )
        .await,
        1
    );
    assert_eq!(count(&kit.pool, "SELECT COUNT(*) FROM benefits").await, 0, "the rejected attempt's write rolled back");
    // An orderly redelivery would come after a pause of 100 ms, a concurrent one through
    // the retry topic after 10 s: watch past both.
    throughout("the rejected event is not handed to the handler again", Duration::from_secs(15), || async {
        let calls = consumer_calls(&consumer);
        if calls == 1 {
            vec![]
        } else {
            vec![calls]
        }
    })
    .await;
    // A later copy of it (e.g. a DLQ replay) is a dedup hit, not another attempt.
    kit.publish(&event_id, 9, "").await;
    eventually("the copy to be acknowledged as a duplicate", Duration::from_secs(60), || async {
        (metrics.dedup_hits.get() == 1).then_some(())
    })
    .await;
    assert_eq!(consumer_calls(&consumer), 1);
    subscription.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_consumers_racing_on_one_event_process_it_once() {
    let kit = Kit::new().await;
    let hold = Duration::from_millis(500);
    let (_a, metrics_a, sub_a) = kit.consumer(Benefits { hold, ..Benefits::new() }, Consumption::Orderly).await;
    let (_b, metrics_b, sub_b) = kit.consumer(Benefits { hold, ..Benefits::new() }, Consumption::Orderly).await;
    for n in 0..5 {
        kit.publish(&unique("race"), 100 + n, "").await;
    }
    eventually("both consumers to handle all 5 events", Duration::from_secs(60), || async {
        (handled(&metrics_a) == 5 && handled(&metrics_b) == 5).then_some(())
    })
    .await;
    assert_eq!(count(&kit.pool, "SELECT COUNT(*) FROM benefits").await, 5, "an event was processed twice");
    assert_eq!(metrics_a.processed.get() + metrics_b.processed.get(), 5);
    assert_eq!(metrics_a.dedup_hits.get() + metrics_b.dedup_hits.get(), 5);
    sub_a.shutdown().await;
    sub_b.shutdown().await;
}

/// Applies an order's status update only when its version is newer.
struct VersionedStatus;

impl EventHandler for VersionedStatus {
    fn handle<'a>(&'a self, tx: &'a mut Transaction<'static>, delivery: &'a Delivery) -> HandlerFuture<'a> {
        Box::pin(async move {
            let body: serde_json::Value =
                serde_json::from_slice(&delivery.body).map_err(|e| HandlerError::NonRetryable(e.to_string()))?;
            let version = body["version"].as_u64().ok_or_else(|| HandlerError::NonRetryable("no version".into()))?;
            if advance_version(tx, "order", &delivery.biz_key, version).await? {
                tx.exec_drop("INSERT INTO benefits (order_id, event_id) VALUES (?, ?)", (version, &delivery.event_id))
                    .await?;
            }
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_version_arriving_after_a_newer_one_is_dropped() {
    let kit = Kit::new().await;
    let (_consumer, metrics, subscription) = kit.consumer(VersionedStatus, Consumption::Orderly).await;
    kit.publish(&unique("v3"), 55, r#","version":3"#).await;
    eventually("version 3 applied", Duration::from_secs(60), || async { (metrics.processed.get() == 1).then_some(()) })
        .await;
    kit.publish(&unique("v2"), 55, r#","version":2"#).await;
    eventually("version 2 handled", Duration::from_secs(60), || async { (metrics.processed.get() == 2).then_some(()) })
        .await;
    assert_eq!(
        count(&kit.pool, "SELECT version FROM entity_version WHERE entity = 'order' AND entity_key = 'order-55'").await,
        3
    );
    assert_eq!(
        count(&kit.pool, "SELECT COUNT(*) FROM benefits WHERE order_id = 2").await,
        0,
        "the stale version 2 was applied"
    );
    assert_eq!(count(&kit.pool, "SELECT COUNT(*) FROM benefits WHERE order_id = 3").await, 1);
    subscription.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_processed_dedup_row_has_its_business_result() {
    let kit = Kit::new().await;
    let (_consumer, metrics, subscription) =
        kit.consumer(Benefits { fail_first: 3, ..Benefits::new() }, Consumption::Orderly).await;
    for n in 0..50 {
        kit.publish(&unique("sample"), 1_000 + n, "").await;
    }
    eventually("50 events processed", Duration::from_secs(120), || async {
        (metrics.processed.get() == 50).then_some(())
    })
    .await;
    // The seed's sampling check, over all of them: a PROCESSED mark without its benefit
    // would be an event "handled" but never applied.
    let orphans = count(
        &kit.pool,
        "SELECT COUNT(*) FROM event_dedup d LEFT JOIN benefits b ON b.event_id = d.event_id WHERE d.status = 'PROCESSED' AND b.id IS NULL",
    )
    .await;
    assert_eq!(orphans, 0, "PROCESSED dedup rows without a business result");
    assert_eq!(count(&kit.pool, "SELECT COUNT(*) FROM benefits").await, 50);
    subscription.shutdown().await;
}

/// Keys, events per key and the share of first attempts that fail in the ordering test.
const ORDERED_KEYS: usize = 50;
const EVENTS_PER_KEY: usize = 200;
const FAIL_ONE_IN: u64 = 10;

/// Applies numbered events: records each key's sequence numbers in the order it applies
/// them, in the transaction that holds the dedup mark. About one event in
/// [`FAIL_ONE_IN`] (a different draw each run) fails retryably on its first attempt,
/// after its write, which must roll back.
struct SequenceLog {
    draw: RandomState,
    failed: Mutex<HashSet<String>>,
}

impl EventHandler for SequenceLog {
    fn handle<'a>(&'a self, tx: &'a mut Transaction<'static>, delivery: &'a Delivery) -> HandlerFuture<'a> {
        Box::pin(async move {
            let event: serde_json::Value =
                serde_json::from_slice(&delivery.body).map_err(|e| HandlerError::NonRetryable(e.to_string()))?;
            let seq = event["seq"].as_u64().ok_or_else(|| HandlerError::NonRetryable("no seq".into()))?;
            tx.exec_drop("INSERT INTO applied (biz_key, seq) VALUES (?, ?)", (&delivery.biz_key, seq)).await?;
            let unlucky = self.draw.hash_one(&delivery.event_id) % FAIL_ONE_IN == 0;
            if unlucky && self.failed.lock().expect("failed set lock").insert(delivery.event_id.clone()) {
                return Err(HandlerError::Retryable(format!("simulated failure of {} seq {seq}", delivery.biz_key)));
            }
            Ok(())
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orderly_consumption_applies_every_keys_events_in_order_once_despite_retryable_failures() {
    let kit = Kit::new().await;
    kit.pool
        .get_conn()
        .await
        .expect("conn")
        .query_drop("CREATE TABLE applied (id BIGINT PRIMARY KEY AUTO_INCREMENT, biz_key VARCHAR(64) NOT NULL, seq INT NOT NULL)")
        .await
        .expect("applied table");
    let log = SequenceLog { draw: RandomState::new(), failed: Mutex::new(HashSet::new()) };
    let (consumer, metrics, subscription) = kit.consumer(log, Consumption::Orderly).await;

    // As the relay publishes: every event of a key into the key's queue, in key order;
    // the keys' batches interleave, so a suspended queue holds back several keys.
    let queues = kit.producer.pinned_queues(&kit.topic, TEST_TOPIC_QUEUES).await.expect("queues");
    let prefix = unique("seq");
    let keys: Vec<String> = (0..ORDERED_KEYS).map(|k| format!("key-{k:02}")).collect();
    let batch = 50;
    for first in (0..EVENTS_PER_KEY).step_by(batch) {
        for key in &keys {
            let events: Vec<OutboxEvent> = (first..first + batch)
                .map(|seq| OutboxEvent {
                    id: seq as u64,
                    event_id: format!("{prefix}-{key}-{seq:03}"),
                    biz_key: key.clone(),
                    topic: kit.topic.clone(),
                    payload: Bytes::from(format!(r#"{{"seq":{seq}}}"#)),
                    created_local_us: None,
                    extras: None,
                })
                .collect();
            let queue = &queues[queue_for(HashFunction::Stable, key, TEST_TOPIC_QUEUES) as usize];
            kit.producer.send_batch(queue, &events).await.expect("SEND_OK");
        }
    }

    let total = (ORDERED_KEYS * EVENTS_PER_KEY) as u64;
    eventually(&format!("{total} events applied"), Duration::from_secs(120), || async {
        (count(&kit.pool, "SELECT COUNT(*) FROM applied").await >= total).then_some(())
    })
    .await;
    let rows: Vec<(String, u32)> = kit
        .pool
        .get_conn()
        .await
        .expect("conn")
        .query("SELECT biz_key, seq FROM applied ORDER BY id")
        .await
        .expect("applied");
    let mut applied: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (key, seq) in rows {
        applied.entry(key).or_default().push(seq);
    }
    let expected: Vec<u32> = (0..EVENTS_PER_KEY as u32).collect();
    assert_eq!(applied.keys().cloned().collect::<Vec<_>>(), keys, "every key applied");
    for (key, seqs) in &applied {
        assert!(seqs == &expected, "key {key}: applied out of order or not exactly once: {seqs:?}");
    }
    let failed = consumer.handler().failed.lock().expect("failed set lock").len() as u64;
    assert!(failed >= total / FAIL_ONE_IN / 2, "only {failed} first attempts failed: the test proves little");
    assert_eq!(metrics.retries.get(), failed, "each failed attempt counted once as a retry");
    assert_eq!(metrics.processed.get(), total);
    assert_eq!(count(&kit.pool, "SELECT COUNT(*) FROM event_dedup WHERE status = 'PROCESSED'").await, total);
    subscription.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dedup_cleanup_deletes_only_rows_older_than_the_retention() {
    let stack = Stack::from_env();
    let pool = benefits_db(&stack).await;
    let mut conn = pool.get_conn().await.expect("conn");
    conn.query_drop(
        "INSERT INTO event_dedup (event_id, status, created_at) VALUES \
         ('old-1', 'PROCESSED', NOW(3) - INTERVAL 8 DAY), ('old-2', 'REJECTED', NOW(3) - INTERVAL 9 DAY), \
         ('old-3', 'PROCESSED', NOW(3) - INTERVAL 30 DAY), ('new-1', 'PROCESSED', NOW(3) - INTERVAL 1 DAY)",
    )
    .await
    .expect("seed dedup rows");
    let deleted = retention::cleanup_dedup(&pool, retention::DEFAULT_RETENTION, 2).await.expect("cleanup");
    assert_eq!(deleted, 3);
    let left: Vec<String> = conn.query("SELECT event_id FROM event_dedup").await.expect("select");
    assert_eq!(left, ["new-1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_group_gives_up_on_moves_its_dead_letter_gauge() {
    let kit = Kit::new().await;
    let metrics = ConsumerMetrics::default();
    let group = unique("benefits");
    let always_failing = Benefits { fail_first: usize::MAX, ..Benefits::new() };
    let consumer = Arc::new(
        IdempotentConsumer::new(kit.pool.clone(), always_failing, DedupKey::EventId, metrics.clone())
            .with_consumption(Consumption::Concurrent)
            .with_dead_letter_after(1),
    );
    let since = StartFrom::Since(chrono::Local::now() - chrono::Duration::seconds(60));
    let subscription = consumer.subscribe(&kit.stack.namesrv, &group, &kit.topic, since).await.expect("subscribe");
    eventually("the watch's first read: no dead-letter topic yet", Duration::from_secs(30), || async {
        (metrics.dead_letters_of(&group) == Some(0)).then_some(())
    })
    .await;

    kit.publish(&unique("ev"), 1, "").await;
    eventually("the event given up on, in the group's dead-letter topic", Duration::from_secs(90), || async {
        (metrics.dead_letters_of(&group) >= Some(1)).then_some(())
    })
    .await;
    assert!(metrics.retries.get() >= 2, "handed back at least twice before the dead-letter topic");
    assert_eq!(metrics.processed.get(), 0);
    subscription.shutdown().await;
}
