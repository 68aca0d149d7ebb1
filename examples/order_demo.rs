//! The demo's application side: pays orders, each in ONE local transaction with its
//! outbox row, then shows the events arriving at a consumer and the outbox rows SENT
//! with their msg_id. The relay (started by `scripts/demo`) does the publishing.
//!
//! Usage: cargo run --example order_demo -- [ORDERS]
//! Environment: DEMO_DB_URL (default mysql://root@127.0.0.1:13306/app),
//! DEMO_NAMESRV (default 127.0.0.1:19876).
#![recursion_limit = "512"]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use mysql_async::prelude::Queryable;
use outbox_relay::consumer::{Ack, Delivery, StartFrom, Subscription};

const TOPIC: &str = "t-order-event";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let orders: u32 = std::env::args().nth(1).map(|n| n.parse()).transpose().context("ORDERS must be a number")?.unwrap_or(10);
    let db_url = std::env::var("DEMO_DB_URL").unwrap_or_else(|_| "mysql://root@127.0.0.1:13306/app".into());
    let namesrv = std::env::var("DEMO_NAMESRV").unwrap_or_else(|_| "127.0.0.1:19876".into());
    let pool = mysql_async::Pool::new(db_url.as_str());
    let mut conn = pool.get_conn().await.context("connect to the demo database")?;
    conn.query_drop("CREATE TABLE IF NOT EXISTS orders (id BIGINT PRIMARY KEY, amount_cents BIGINT NOT NULL, status VARCHAR(16) NOT NULL)").await?;

    let received: Arc<Mutex<BTreeMap<String, Delivery>>> = Arc::default();
    let sink = Arc::clone(&received);
    let subscription = Subscription::start(&namesrv, &format!("demo-{}", uuid::Uuid::now_v7().simple()), TOPIC, StartFrom::Since(chrono::Local::now() - chrono::Duration::seconds(5)), move |d: &Delivery| {
        sink.lock().map(|mut seen| seen.insert(d.event_id.clone(), d.clone())).ok();
        Ack::Done
    })
    .await?;

    let run = uuid::Uuid::now_v7().as_u128() as u64 % 1_000_000_000 * 1000;
    let mut event_ids = Vec::new();
    for n in 0..u64::from(orders) {
        let order_id = run + n;
        let event_id = uuid::Uuid::now_v7().to_string();
        // The business change and the outbox row commit together, or not at all.
        let mut tx = conn.start_transaction(Default::default()).await?;
        tx.exec_drop("INSERT INTO orders (id, amount_cents, status) VALUES (?, ?, 'PAID')", (order_id, 1_000 + n)).await?;
        tx.exec_drop(
            "INSERT INTO outbox_event (event_id, biz_key, topic, payload) VALUES (?, ?, ?, ?)",
            (&event_id, format!("order-{order_id}"), TOPIC, format!(r#"{{"type":"OrderPaid","order_id":{order_id},"amount_cents":{}}}"#, 1_000 + n)),
        )
        .await?;
        tx.commit().await?;
        event_ids.push(event_id);
    }
    println!("wrote {orders} paid orders, each with its outbox row in the same transaction");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while received.lock().map(|seen| event_ids.iter().filter(|id| seen.contains_key(*id)).count()).unwrap_or(0) < event_ids.len() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "not every event was consumed within 60 s: is the relay running? (scripts/demo starts it)");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if let Ok(seen) = received.lock() {
        for id in &event_ids {
            if let Some(d) = seen.get(id) {
                println!("consumed  event_id={} biz_key={} queue={} body={}", d.event_id, d.biz_key, d.queue_id, String::from_utf8_lossy(&d.body));
            }
        }
    }
    subscription.shutdown().await;

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
        println!("outbox    event_id={event_id} status={status} msg_id={} sent_at={}", msg_id.unwrap_or_default(), sent_at.unwrap_or_default());
    }
    drop(conn);
    pool.disconnect().await?;
    Ok(())
}
