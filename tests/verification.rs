//! The three checks an outbox is verified with before it goes live, as an operator runs
//! them, with Apache RocketMQ's own mqadmin as the judge of what the brokers hold:
//! - an order rolled back leaves neither its business row nor its outbox row, and
//!   `mqadmin queryMsgByKey` finds no message for its event_id;
//! - an order committed while the relay is stopped stays PENDING, is SENT once the relay
//!   runs, the consumer gets one logical event and mqadmin finds one message (and
//!   `outbox-relay verify` agrees);
//! - a SENT row set back to PENDING by hand is sent again (mqadmin finds two messages);
//!   the consumer's deduplication by event_id acknowledges the second and the business
//!   table changes once.
#![recursion_limit = "512"]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::command::{cli_with, stdout};
use common::consumer_db::{benefits_db, count};
use common::mqadmin::{query_msg_by_key, Found};
use common::outbox::TestOutbox;
use common::relay::{RelayOptions, RelayProcess};
use common::{eventually, fresh_topic, throughout, unique, Stack};
use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Transaction};
use outbox_kit::consumer::{
    ConsumerMetrics, DedupKey, Delivery, EventHandler, HandlerError, HandlerFuture, IdempotentConsumer, StartFrom,
    Subscription,
};
use outbox_kit::RowStatus;

/// How long the broker's key index may take to find a message just sent.
const INDEXED_WITHIN: Duration = Duration::from_secs(30);

/// The benefits service: one benefit row per paid order, written in the transaction
/// that marks the event processed.
struct Benefits;

impl EventHandler for Benefits {
    fn handle<'a>(&'a self, tx: &'a mut Transaction<'static>, delivery: &'a Delivery) -> HandlerFuture<'a> {
        Box::pin(async move {
            let order: serde_json::Value =
                serde_json::from_slice(&delivery.body).map_err(|e| HandlerError::NonRetryable(e.to_string()))?;
            let order_id =
                order["order_id"].as_u64().ok_or_else(|| HandlerError::NonRetryable("no order_id".into()))?;
            tx.exec_drop("INSERT INTO benefits (order_id, event_id) VALUES (?, ?)", (order_id, &delivery.event_id))
                .await?;
            Ok(())
        })
    }
}

/// A shop: its orders table beside its outbox, on a topic of its own.
struct Shop {
    stack: Stack,
    outbox: TestOutbox,
    topic: String,
    orders: String,
}

impl Shop {
    async fn new() -> Self {
        let stack = Stack::from_env();
        let outbox = TestOutbox::create(&stack).await;
        let topic = fresh_topic(&stack).await;
        let orders = format!("app.`{}_orders`", outbox.name());
        outbox.exec(&format!("CREATE TABLE {orders} (id BIGINT PRIMARY KEY, state VARCHAR(16))")).await;
        Self { stack, outbox, topic, orders }
    }

    /// Pays `order` (its row and its OrderPaid event in one transaction), then commits or
    /// rolls back; the event's id.
    async fn pay(&self, order: u64, commit: bool) -> String {
        let mut conn = self.outbox.pool.get_conn().await.expect("conn");
        let mut tx = conn.start_transaction(mysql_async::TxOpts::default()).await.expect("begin");
        tx.exec_drop(format!("INSERT INTO {} VALUES (?, 'paid')", self.orders), (order,)).await.expect("order row");
        let payload = serde_json::json!({ "type": "OrderPaid", "order_id": order });
        let key = format!("order-{order}");
        let event = outbox_kit::NewEvent::new(&self.topic, &key, &payload);
        let event_id = outbox_kit::enqueue(&mut tx, &self.outbox.table, event).await.expect("enqueue");
        if commit {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
        event_id
    }

    async fn relay(&self) -> RelayProcess {
        let options = RelayOptions::new(self.outbox.name())
            .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 500)
            .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 500);
        let mut relay = RelayProcess::start(&self.stack, &options);
        relay.wait_ready().await;
        relay
    }

    /// The idempotent benefits service, consuming the shop's topic into `pool`.
    async fn benefits_service(&self, pool: &Pool) -> (ConsumerMetrics, Subscription) {
        let metrics = ConsumerMetrics::default();
        let consumer = Arc::new(IdempotentConsumer::new(pool.clone(), Benefits, DedupKey::EventId, metrics.clone()));
        let since = StartFrom::Since(chrono::Local::now() - chrono::Duration::seconds(60));
        let subscription =
            consumer.subscribe(&self.stack.namesrv, &unique("benefits"), &self.topic, since).await.expect("subscribe");
        (metrics, subscription)
    }

    /// What mqadmin finds for `event_id`, once it finds `expected` messages.
    async fn found_by_mqadmin(&self, event_id: &str, expected: usize) -> Vec<Found> {
        eventually(&format!("mqadmin to find {expected} message(s) of {event_id}"), INDEXED_WITHIN, || async {
            let found = query_msg_by_key(&self.topic, event_id);
            (found.len() >= expected).then_some(found)
        })
        .await
    }

    async fn status_of(&self, event_id: &str) -> Option<u8> {
        self.outbox.statuses().await.get(event_id).map(|(status, _)| *status)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_order_leaves_no_row_and_mqadmin_finds_no_message() {
    let shop = Shop::new().await;
    let relay = shop.relay().await;
    let rolled_back = shop.pay(2, false).await;
    let committed = shop.pay(1, true).await;

    // Once mqadmin finds the order committed after it, the key index has passed both.
    assert_eq!(shop.found_by_mqadmin(&committed, 1).await.len(), 1, "the committed order's event, once");
    assert_eq!(query_msg_by_key(&shop.topic, &rolled_back), [], "mqadmin finds the rolled-back event");
    assert_eq!(shop.status_of(&rolled_back).await, None, "the rolled-back event has an outbox row");
    assert_eq!(count(&shop.outbox.pool, &format!("SELECT COUNT(*) FROM {} WHERE id = 2", shop.orders)).await, 0);
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_order_committed_while_the_relay_is_stopped_waits_pending_and_is_consumed_once() {
    let shop = Shop::new().await;
    let service_db = benefits_db(&shop.stack).await;
    let (metrics, subscription) = shop.benefits_service(&service_db).await;
    let event_id = shop.pay(1, true).await;
    throughout("the row stays PENDING while no relay runs", Duration::from_secs(3), || async {
        let status = shop.status_of(&event_id).await;
        (status != Some(RowStatus::Pending.code())).then_some(status).into_iter().collect::<Vec<_>>()
    })
    .await;
    assert_eq!(query_msg_by_key(&shop.topic, &event_id), [], "nothing published before the relay runs");

    let relay = shop.relay().await;
    common::events::all_sent(&shop.outbox, 1, Duration::from_secs(60)).await;
    eventually("the benefits service to process the order", Duration::from_secs(60), || async {
        (metrics.processed.get() == 1).then_some(())
    })
    .await;
    assert_eq!(count(&service_db, "SELECT COUNT(*) FROM benefits").await, 1, "one benefit for one order");
    let found = shop.found_by_mqadmin(&event_id, 1).await;
    assert_eq!(found.len(), 1, "mqadmin finds the event once: {found:?}");

    // `verify` looks the SENT rows up on the brokers (once they are a few seconds old,
    // so the key index has them): it finds what mqadmin found.
    let env = [("OUTBOX_RELAY__ROCKETMQ__NAMESRV", shop.stack.namesrv.clone())];
    let verified = eventually("verify to check the SENT row", Duration::from_secs(30), || async {
        let output = cli_with(&shop.stack, &shop.outbox, &env, &["verify", "--sample", "10", "--json"]);
        assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
        let verified: serde_json::Value = serde_json::from_str(&stdout(&output)).expect("verify --json");
        (verified["checked"].as_u64() == Some(1)).then_some(verified)
    })
    .await;
    assert_eq!(verified["missing"].as_array().map(Vec::len), Some(0), "{verified}");
    drop(relay);
    subscription.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_row_set_back_to_pending_is_sent_again_and_the_consumer_applies_it_once() {
    let shop = Shop::new().await;
    let service_db = benefits_db(&shop.stack).await;
    let (metrics, subscription) = shop.benefits_service(&service_db).await;
    let relay = shop.relay().await;
    let event_id = shop.pay(1, true).await;
    common::events::all_sent(&shop.outbox, 1, Duration::from_secs(60)).await;
    let first = shop.found_by_mqadmin(&event_id, 1).await;

    let id = shop.outbox.id_of(&event_id).await;
    shop.outbox.exec(&format!("UPDATE {} SET status = 0 WHERE id = {id}", shop.outbox.table.qualified())).await;
    let found = shop.found_by_mqadmin(&event_id, 2).await;
    assert_eq!(found.len(), 2, "the event is on the broker twice now: {found:?}");
    assert!(found.contains(&first[0]), "the first message is one of the two: {found:?} {first:?}");
    eventually("the second delivery to be acknowledged as a duplicate", Duration::from_secs(60), || async {
        (metrics.dedup_hits.get() == 1).then_some(())
    })
    .await;
    assert_eq!(metrics.processed.get(), 1, "processed once");
    assert_eq!(count(&service_db, "SELECT COUNT(*) FROM benefits").await, 1, "the business table changed once");
    assert_eq!(shop.status_of(&event_id).await, Some(RowStatus::Sent.code()), "SENT again");
    drop(relay);
    subscription.shutdown().await;
}
