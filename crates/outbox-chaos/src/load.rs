//! The load generator: writers that each run business transactions on the primary,
//! at a shared rate. A transaction bumps the per-key sequence of 1 to 50 events in a
//! business table (row locks order each key's transactions, so sequence order is
//! commit order) and inserts their outbox rows carrying that sequence; about one in
//! ten rolls back on purpose, a few stay open for seconds. Each event's fate is
//! recorded; a COMMIT whose answer is lost (the primary died) is `Unknown`, for the
//! verdict to settle against the table.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, TxOpts};
use outbox_kit::OutboxTable;
use outbox_test_support::rows::{insert_sql, Row};
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::rng::Rng;
use crate::verdict::{Fate, Written};

/// Events per transaction.
const EVENTS_PER_TX: std::ops::RangeInclusive<u64> = 1..=50;
/// Percent of transactions rolled back on purpose.
const ROLLBACK_PERCENT: u64 = 10;
/// Percent of transactions held open before they end, and for how long (ms).
const HELD_PERCENT: u64 = 3;
const HELD_MILLIS: std::ops::RangeInclusive<u64> = 1_000..=4_000;
/// Pause of a writer whose database is unreachable.
const RECONNECT_PAUSE: Duration = Duration::from_millis(200);

/// What the load writes, and how fast.
#[derive(Debug, Clone)]
pub(crate) struct LoadSettings {
    /// Events per second, all writers together.
    pub(crate) rate: u32,
    pub(crate) writers: usize,
    pub(crate) keys: usize,
    pub(crate) topic: String,
    /// The business table holding each key's sequence (`biz_key`, `seq`).
    pub(crate) accounts: String,
    pub(crate) outbox: OutboxTable,
}

/// Running writers.
pub(crate) struct Load {
    stop: watch::Sender<bool>,
    writers: Vec<JoinHandle<Vec<Written>>>,
}

impl Load {
    /// Creates the business table with `settings.keys` keys and starts the writers.
    pub(crate) async fn start(pool: &Pool, settings: LoadSettings, rng: &mut Rng) -> anyhow::Result<Self> {
        create_accounts(pool, &settings).await?;
        let (stop, stopped) = watch::channel(false);
        let pacer = Arc::new(Pacer::new(settings.rate));
        let settings = Arc::new(settings);
        let writers = (0..settings.writers)
            .map(|_| {
                let writer = Writer { pool: pool.clone(), settings: Arc::clone(&settings), rng: rng.fork() };
                tokio::spawn(writer.run(Arc::clone(&pacer), stopped.clone()))
            })
            .collect();
        Ok(Self { stop, writers })
    }

    /// Stops the writers after their current transaction; every event written.
    pub(crate) async fn finish(self) -> anyhow::Result<Vec<Written>> {
        self.stop.send_replace(true);
        let mut written = Vec::new();
        for writer in self.writers {
            written.extend(writer.await?);
        }
        Ok(written)
    }
}

async fn create_accounts(pool: &Pool, settings: &LoadSettings) -> anyhow::Result<()> {
    let mut conn = pool.get_conn().await?;
    conn.query_drop(format!(
        "CREATE TABLE {} (biz_key VARCHAR(64) PRIMARY KEY, seq BIGINT UNSIGNED NOT NULL) ENGINE=InnoDB",
        settings.accounts
    ))
    .await?;
    let values: Vec<String> = (0..settings.keys).map(|k| format!("('{}', 0)", key_name(k))).collect();
    conn.query_drop(format!("INSERT INTO {} VALUES {}", settings.accounts, values.join(", "))).await?;
    Ok(())
}

fn key_name(index: usize) -> String {
    format!("key-{index:03}")
}

/// Hands out send slots so that all writers together keep to the rate.
struct Pacer {
    next: Mutex<Instant>,
    per_event: Duration,
}

impl Pacer {
    fn new(rate: u32) -> Self {
        Self { next: Mutex::new(Instant::now()), per_event: Duration::from_secs(1) / rate.max(1) }
    }

    /// Waits for the slot of `events` more events.
    async fn wait(&self, events: u32) {
        let start = {
            let mut next = self.next.lock().await;
            let start = (*next).max(Instant::now());
            *next = start + self.per_event * events;
            start
        };
        tokio::time::sleep_until(start).await;
    }
}

/// One transaction's shape.
struct Plan {
    /// Events per key index, in key order (locks taken in one order: no deadlocks).
    per_key: BTreeMap<usize, u64>,
    roll_back: bool,
    hold: Option<Duration>,
}

struct Writer {
    pool: Pool,
    settings: Arc<LoadSettings>,
    rng: Rng,
}

impl Writer {
    async fn run(mut self, pacer: Arc<Pacer>, stop: watch::Receiver<bool>) -> Vec<Written> {
        let mut written = Vec::new();
        while !*stop.borrow() {
            let plan = self.plan();
            pacer.wait(plan.per_key.values().sum::<u64>() as u32).await;
            match self.execute(&plan).await {
                Ok(events) => written.extend(events),
                Err(events) => {
                    written.extend(events);
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                }
            }
        }
        written
    }

    fn plan(&mut self) -> Plan {
        let mut per_key = BTreeMap::new();
        for _ in 0..self.rng.within(EVENTS_PER_TX) {
            *per_key.entry(self.rng.within(0..=self.settings.keys as u64 - 1) as usize).or_insert(0) += 1;
        }
        let roll_back = self.rng.chance(ROLLBACK_PERCENT);
        let hold = self.rng.chance(HELD_PERCENT).then(|| self.rng.millis(HELD_MILLIS));
        Plan { per_key, roll_back, hold }
    }

    /// Runs one transaction; its events with their fates. `Err` when the database
    /// failed (the events written so far are rolled back or unknown).
    async fn execute(&self, plan: &Plan) -> Result<Vec<Written>, Vec<Written>> {
        let mut events = Vec::new();
        let Ok(mut conn) = self.pool.get_conn().await else { return Err(events) };
        let Ok(mut tx) = conn.start_transaction(TxOpts::default()).await else { return Err(events) };
        for (&key, &count) in &plan.per_key {
            let bump = format!("UPDATE {} SET seq = LAST_INSERT_ID(seq + ?) WHERE biz_key = ?", self.settings.accounts);
            if tx.exec_drop(bump, (count, key_name(key))).await.is_err() {
                return Err(events);
            }
            let Some(last) = tx.last_insert_id().filter(|last| *last >= count) else { return Err(events) };
            events.extend((last + 1 - count..=last).map(|seq| Written {
                event_id: uuid::Uuid::now_v7().simple().to_string(),
                biz_key: key_name(key),
                seq,
                fate: Fate::RolledBack,
            }));
        }
        let rows = events.iter().map(|e| Row {
            event_id: e.event_id.clone(),
            biz_key: e.biz_key.clone(),
            topic: self.settings.topic.clone(),
            payload: serde_json::json!({ "biz_key": e.biz_key, "seq": e.seq }).to_string(),
        });
        let (sql, params) = insert_sql(&self.settings.outbox, rows);
        if tx.exec_drop(sql, params).await.is_err() {
            return Err(events);
        }
        if let Some(hold) = plan.hold {
            tokio::time::sleep(hold).await;
        }
        if plan.roll_back {
            let _ = tx.rollback().await;
            return Ok(events);
        }
        let fate = match tx.commit().await {
            Ok(()) => Fate::Committed,
            Err(_) => Fate::Unknown,
        };
        events.iter_mut().for_each(|e| e.fate = fate);
        if fate == Fate::Unknown {
            return Err(events);
        }
        Ok(events)
    }
}
