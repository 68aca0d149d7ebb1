//! The demo's two applications, around the relay that `scripts/demo` starts:
//!
//! - the **order service** pays orders: the order row and its `OrderPaid` outbox row
//!   are written in ONE transaction (`outbox::enqueue` takes that transaction);
//! - the **benefits service** consumes `OrderPaid` with the idempotency kit: the
//!   benefit and the dedup mark commit together, duplicates are ACKed once.
//!
//! It then shows the events consumed, the benefits granted once each, the outbox rows
//! SENT with their msg_id, and the kit's counters.
//!
//! Usage: cargo run --example order_demo -- [ORDERS]
//! Environment: DEMO_DB_URL (default mysql://root@127.0.0.1:13306/app),
//! DEMO_NAMESRV (default 127.0.0.1:19876).
#![recursion_limit = "512"]

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Transaction, TxOpts};
use outbox_kit::consumer::{
    schema, ConsumerMetrics, DedupKey, Delivery, EventHandler, HandlerError, HandlerFuture, IdempotentConsumer,
    StartFrom,
};
use outbox_kit::{enqueue, render_metrics, NewEvent, OutboxTable};
use prometheus_client::registry::Registry;
use serde::{Deserialize, Serialize};

const TOPIC: &str = "t-order-event";

/// The event the order service publishes.
#[derive(Serialize, Deserialize)]
struct OrderPaid {
    r#type: String,
    order_id: u64,
    amount_cents: u64,
}

/// The benefits service: grants one benefit per paid order, in the kit's transaction.
struct GrantBenefit;

impl EventHandler for GrantBenefit {
    fn handle<'a>(&'a self, tx: &'a mut Transaction<'static>, delivery: &'a Delivery) -> HandlerFuture<'a> {
        Box::pin(async move {
            let paid: OrderPaid = serde_json::from_slice(&delivery.body)
                .map_err(|e| HandlerError::NonRetryable(format!("not an OrderPaid: {e}")))?;
            tx.exec_drop(
                "INSERT INTO benefits (order_id, points) VALUES (?, ?)",
                (paid.order_id, paid.amount_cents / 100),
            )
            .await?;
            Ok(())
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let orders: u64 =
        std::env::args().nth(1).map(|n| n.parse()).transpose().context("ORDERS must be a number")?.unwrap_or(10);
    let db_url = std::env::var("DEMO_DB_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:13306/app".into());
    let namesrv = std::env::var("DEMO_NAMESRV").unwrap_or_else(|_| "127.0.0.1:19876".into());
    let pool = Pool::new(db_url.as_str());
    schema::migrate(&pool).await.context("create the consumer kit's tables")?;
    let mut conn = pool.get_conn().await.context("connect to the demo database")?;
    conn.query_drop("CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY, amount_cents BIGINT NOT NULL, status VARCHAR(16) NOT NULL)").await?;
    conn.query_drop("CREATE TABLE IF NOT EXISTS benefits (id BIGINT PRIMARY KEY AUTO_INCREMENT, order_id BIGINT NOT NULL, points BIGINT NOT NULL)").await?;

    let mut registry = Registry::default();
    let metrics = ConsumerMetrics::register(&mut registry);
    let benefits = Arc::new(IdempotentConsumer::new(pool.clone(), GrantBenefit, DedupKey::EventId, metrics.clone()));
    // A stable group, as a real service has: a rerun continues where the last one stopped.
    let subscription = benefits.subscribe(&namesrv, "benefits-service", TOPIC, StartFrom::First).await?;

    let outbox = OutboxTable { schema: "app".into(), table: "outbox_event".into() };
    let first_order = u64::try_from(uuid::Uuid::now_v7().as_u128() % 1_000_000_000).unwrap_or_default() * 1_000;
    let mut event_ids = Vec::new();
    for order_id in first_order..first_order + orders {
        let amount_cents = 1_000 + order_id % 1_000;
        // The order service: business change and outbox row, one transaction.
        let mut tx = pool.start_transaction(TxOpts::default()).await?;
        tx.exec_drop("INSERT INTO orders (id, amount_cents, status) VALUES (?, ?, 'PAID')", (order_id, amount_cents))
            .await?;
        let paid = OrderPaid { r#type: "OrderPaid".into(), order_id, amount_cents };
        let event_id = enqueue(
            &mut tx,
            &outbox,
            NewEvent::new(TOPIC, &format!("order-{order_id}"), &paid).tag("PAID").event_type("OrderPaid"),
        )
        .await?;
        tx.commit().await?;
        event_ids.push(event_id);
    }
    println!("order service: paid {orders} orders, each with its OrderPaid outbox row in the same transaction");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let benefited = "SELECT COUNT(DISTINCT order_id) FROM benefits WHERE order_id BETWEEN ? AND ?";
    while conn.exec_first::<u64, _, _>(benefited, (first_order, first_order + orders - 1)).await?.unwrap_or(0) < orders
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not every event was consumed within 60 s: is the relay running? (scripts/demo starts it)"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    subscription.shutdown().await;

    let granted: Vec<(u64, u64, u64)> = conn
        .exec(
            "SELECT o.id, COUNT(b.id), COALESCE(SUM(b.points), 0) FROM orders o LEFT JOIN benefits b ON b.order_id = o.id \
             WHERE o.id BETWEEN ? AND ? GROUP BY o.id ORDER BY o.id",
            (first_order, first_order + orders - 1),
        )
        .await?;
    for (order_id, count, points) in &granted {
        println!("benefits service: order {order_id} -> {count} benefit ({points} points)");
    }
    let placeholders = vec!["?"; event_ids.len()].join(",");
    let query = format!("SELECT event_id, status, msg_id, CAST(sent_at AS CHAR) FROM outbox_event WHERE event_id IN ({placeholders}) ORDER BY id");
    let rows = loop {
        // SENT is written just after SEND_OK, off the send path: wait for it briefly.
        let rows: Vec<(String, u8, Option<String>, Option<String>)> = conn.exec(&query, event_ids.clone()).await?;
        if rows.iter().all(|r| r.1 == 2) || tokio::time::Instant::now() >= deadline {
            break rows;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    for (event_id, status, msg_id, sent_at) in rows {
        println!(
            "outbox: event_id={event_id} status={status} msg_id={} sent_at={}",
            msg_id.unwrap_or_default(),
            sent_at.unwrap_or_default()
        );
    }
    println!("benefits service counters (this run; a first run also drains older messages of the topic):");
    print!("{}", render_metrics(&registry));
    anyhow::ensure!(granted.iter().all(|(_, count, _)| *count == 1), "an order did not get exactly one benefit");
    drop(conn);
    pool.disconnect().await?;
    Ok(())
}
