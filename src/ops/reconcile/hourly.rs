//! The leader's reconciliation, hour by hour and topic by topic: the last line of
//! defence against a silent loss. Every `reconcile.interval_ms` it counts, for each
//! hour of the lookback and each topic, the events created, SENT and SKIPPED (the
//! rest, still PENDING, SENDING or FAILED after the settle time, are "unsent"), and,
//! with a consumer's dedup table configured, how many of the SENT ones the consumer
//! recorded as handled (the rest are "unprocessed"). Each (hour, topic) is written to
//! `outbox_relay_reconciliation` (replaced at every run while the hour is in the
//! lookback, final after) and the per-topic sums are exported as
//! `relay_reconcile_unsent_events` and `relay_reconcile_unprocessed_events`. A
//! difference that stays run after run is a systematic bug; one that goes away was an
//! event on its way.
//!
//! It only reads the outbox and the dedup table. The outbox is read by primary key
//! from the first row of the lookback (found by a binary search on the id, as ids and
//! creation times grow together), in chunks; each chunk's SENT event_ids are looked
//! up in the dedup table with one `IN (...)`.

use std::collections::BTreeMap;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Params, Pool, Value};
use outbox_kit::{OutboxTable, RowStatus};
use tokio_util::sync::CancellationToken;

use super::{present, CHUNK};
use crate::config::{DedupTable, ReconcileConfig, TlsConfig};
use crate::db;
use crate::metrics::UpkeepMetrics;

/// Rows this much older than the lookback's start are read too: ids and creation
/// times grow together only as closely as transactions commit in insert order.
const SKEW_SECS: u32 = 60;

/// An hour (`YYYY-MM-DD HH:00:00`, the database's time) and a topic.
pub type Bucket = (String, String);

/// The counts of one hour and topic.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    pub created: u64,
    pub sent: u64,
    pub skipped: u64,
    /// SENT events the dedup table has (`None` without one).
    pub processed: Option<u64>,
}

impl Tally {
    /// Created and neither SENT nor SKIPPED after the settle time.
    pub fn unsent(&self) -> u64 {
        self.created.saturating_sub(self.sent + self.skipped)
    }

    /// SENT and not recorded by the consumer.
    pub fn unprocessed(&self) -> Option<u64> {
        self.processed.map(|processed| self.sent.saturating_sub(processed))
    }
}

/// The consumer's side: its database and dedup table.
struct ConsumerSide {
    pool: Pool,
    dedup: DedupTable,
}

/// How soon a consumer database that did not answer is tried again.
const CONNECT_AGAIN: Duration = Duration::from_secs(60);

/// The scheduled reconciliation of one term.
pub struct Hourly {
    pub primary: Pool,
    pub outbox: OutboxTable,
    pub settings: ReconcileConfig,
    /// TLS to the consumer's database (the primary's settings).
    pub tls: TlsConfig,
    pub metrics: UpkeepMetrics,
}

impl Hourly {
    /// Reconciles at once and then every interval until `stop`; a failed run is
    /// logged and the next one tries again.
    pub async fn run(self, stop: CancellationToken) {
        let every = Duration::from_millis(self.settings.interval_ms);
        let consumer = tokio::select! {
            consumer = self.consumer_side() => consumer,
            () = stop.cancelled() => return,
        };
        loop {
            let run = async {
                let tallies = self.tally(consumer.as_ref()).await?;
                self.export(&tallies);
                self.report(&tallies).await
            };
            tokio::select! {
                done = run => if let Err(error) = done {
                    tracing::warn!(%error, "the hourly reconciliation failed; the next run tries again; fix: the primary user needs SELECT on the outbox and INSERT, UPDATE on outbox_relay_reconciliation (`outbox-relay migrate` creates it), and the consumer's database must answer");
                },
                () = stop.cancelled() => return,
            }
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                () = stop.cancelled() => return,
            }
        }
    }

    /// The dedup table's side: on the database of `reconcile.consumer_url` (tried until
    /// it answers), or on the primary; none without `reconcile.consumer_table`.
    async fn consumer_side(&self) -> Option<ConsumerSide> {
        let dedup = self.settings.consumer_table.clone()?;
        let Some(url) = &self.settings.consumer_url else {
            return Some(ConsumerSide { pool: self.primary.clone(), dedup: dedup.in_schema(&self.outbox.schema) });
        };
        loop {
            match db::connect_with("consumer", url, &self.tls, 1, &[]).await {
                Ok(pool) => return Some(ConsumerSide { pool, dedup }),
                Err(error) => {
                    tracing::warn!(%error, retry_in = ?CONNECT_AGAIN, "the hourly reconciliation cannot reach the consumer's database (reconcile.consumer_url); it reconciles nothing until it can")
                }
            }
            tokio::time::sleep(CONNECT_AGAIN).await;
        }
    }

    /// The counts of every hour and topic of the lookback.
    async fn tally(&self, consumer: Option<&ConsumerSide>) -> Result<BTreeMap<Bucket, Tally>, mysql_async::Error> {
        let mut conn = self.primary.get_conn().await?;
        let mut consumer = match consumer {
            Some(side) => Some((side.pool.get_conn().await?, side.dedup.qualified())),
            None => None,
        };
        let (from, until) = self.window(&mut conn).await?;
        let mut after = first_id_since(&mut conn, &self.outbox, &from).await?;
        let mut tallies: BTreeMap<Bucket, Tally> = BTreeMap::new();
        loop {
            let rows = self.chunk(&mut conn, after, &from, &until).await?;
            let Some(last) = rows.last().map(|row| row.0) else { break };
            let full = rows.len() == CHUNK;
            after = last;
            let mut sent: Vec<(String, Bucket)> = Vec::new();
            for (_, event_id, topic, status, hour) in rows {
                let bucket = (hour, topic);
                let tally = tallies.entry(bucket.clone()).or_default();
                tally.created += 1;
                if status == RowStatus::Sent.code() {
                    tally.sent += 1;
                    sent.push((event_id, bucket));
                } else if status == RowStatus::Skipped.code() {
                    tally.skipped += 1;
                }
            }
            if let Some((consumer, dedup)) = consumer.as_mut() {
                count_processed(consumer, dedup, sent, &mut tallies).await?;
            }
            if !full {
                break;
            }
        }
        if consumer.is_some() {
            tallies.values_mut().for_each(|tally| _ = tally.processed.get_or_insert(0));
        }
        Ok(tallies)
    }

    /// The lookback's start (an hour's start) and the settle time's end, as the
    /// database's DATETIMEs.
    async fn window(&self, conn: &mut Conn) -> Result<(String, String), mysql_async::Error> {
        let bounds: Option<(String, String)> = conn
            .query_first(format!(
                "SELECT DATE_FORMAT(NOW() - INTERVAL {} SECOND, '%Y-%m-%d %H:00:00'), \
                 DATE_FORMAT(NOW(3) - INTERVAL {} SECOND, '%Y-%m-%d %H:%i:%s.%f')",
                self.settings.lookback_secs, self.settings.settle_secs
            ))
            .await?;
        Ok(bounds.unwrap_or_default())
    }

    /// Up to [`CHUNK`] rows after id `after` created in `[from, until)`: id, event_id,
    /// topic, status, hour.
    async fn chunk(
        &self,
        conn: &mut Conn,
        after: u64,
        from: &str,
        until: &str,
    ) -> Result<Vec<(u64, String, String, u8, String)>, mysql_async::Error> {
        conn.exec(
            format!(
                "SELECT id, event_id, topic, status, DATE_FORMAT(created_at, '%Y-%m-%d %H:00:00') FROM {} \
                 WHERE id > ? AND created_at >= ? AND created_at < ? ORDER BY id LIMIT {CHUNK}",
                self.outbox.qualified()
            ),
            (after, from, until),
        )
        .await
    }

    /// Writes every (hour, topic) of the run into the report table.
    async fn report(&self, tallies: &BTreeMap<Bucket, Tally>) -> Result<(), mysql_async::Error> {
        let mut conn = self.primary.get_conn().await?;
        let rows: Vec<_> = tallies.iter().collect();
        for chunk in rows.chunks(500) {
            let mut params: Vec<Value> = Vec::with_capacity(chunk.len() * 9);
            for ((hour, topic), tally) in chunk {
                params.extend([
                    Value::from(self.outbox.qualified()),
                    Value::from(hour.as_str()),
                    Value::from(topic.as_str()),
                    Value::from(tally.created),
                    Value::from(tally.sent),
                    Value::from(tally.skipped),
                    Value::from(tally.unsent()),
                    Value::from(tally.processed),
                    Value::from(tally.unprocessed()),
                ]);
            }
            let values = vec!["(?, ?, ?, ?, ?, ?, ?, ?, ?)"; chunk.len()].join(", ");
            conn.exec_drop(
                format!(
                    "INSERT INTO `{}`.`outbox_relay_reconciliation` \
                     (outbox_table, hour_start, topic, created, sent, skipped, unsent, processed, unprocessed) \
                     VALUES {values} ON DUPLICATE KEY UPDATE created = VALUES(created), sent = VALUES(sent), \
                     skipped = VALUES(skipped), unsent = VALUES(unsent), processed = VALUES(processed), \
                     unprocessed = VALUES(unprocessed), checked_at = NOW(3)",
                    self.outbox.schema
                ),
                Params::Positional(params),
            )
            .await?;
        }
        Ok(())
    }

    /// Sets the per-topic sums of the lookback, and when this run ended.
    fn export(&self, tallies: &BTreeMap<Bucket, Tally>) {
        let mut unsent: BTreeMap<&str, u64> = BTreeMap::new();
        let mut unprocessed: BTreeMap<&str, u64> = BTreeMap::new();
        for ((_, topic), tally) in tallies {
            *unsent.entry(topic).or_default() += tally.unsent();
            if let Some(missing) = tally.unprocessed() {
                *unprocessed.entry(topic).or_default() += missing;
            }
        }
        self.metrics.reconciled(&unsent, &unprocessed);
        let (unsent, unprocessed): (u64, u64) = (unsent.values().sum(), unprocessed.values().sum());
        if unsent + unprocessed > 0 {
            tracing::warn!(unsent, unprocessed, "the hourly reconciliation found differences; `SELECT * FROM outbox_relay_reconciliation WHERE unsent > 0 OR unprocessed > 0` lists them by hour and topic");
        }
    }
}

/// Adds to each SENT row's bucket whether the dedup table has its event.
async fn count_processed(
    consumer: &mut Conn,
    dedup: &str,
    sent: Vec<(String, Bucket)>,
    tallies: &mut BTreeMap<Bucket, Tally>,
) -> Result<(), mysql_async::Error> {
    let ids: Vec<String> = sent.iter().map(|(id, _)| id.clone()).collect();
    let handled = present(consumer, dedup, &ids).await?;
    for (id, bucket) in &sent {
        if let (true, Some(tally)) = (handled.contains(id), tallies.get_mut(bucket)) {
            *tally.processed.get_or_insert(0) += 1;
        }
    }
    Ok(())
}

/// The id just before the first row created at `since` minus [`SKEW_SECS`] or later:
/// a binary search over the primary key.
async fn first_id_since(conn: &mut Conn, outbox: &OutboxTable, since: &str) -> Result<u64, mysql_async::Error> {
    let table = outbox.qualified();
    let range: Option<(Option<u64>, Option<u64>)> =
        conn.query_first(format!("SELECT MIN(id), MAX(id) FROM {table}")).await?;
    let Some((Some(min), Some(max))) = range else { return Ok(0) };
    let (mut low, mut high) = (min, max + 1);
    while low < high {
        let middle = low + (high - low) / 2;
        let row: Option<(u64, bool)> = conn
            .exec_first(
                format!(
                    "SELECT id, created_at >= ? - INTERVAL {SKEW_SECS} SECOND FROM {table} WHERE id >= ? ORDER BY id LIMIT 1"
                ),
                (since, middle),
            )
            .await?;
        match row {
            Some((id, false)) => low = (id + 1).min(high),
            _ => high = middle,
        }
    }
    Ok(low.saturating_sub(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsent_and_unprocessed_are_what_is_left() {
        let tally = Tally { created: 10, sent: 7, skipped: 1, processed: Some(6) };
        assert_eq!(tally.unsent(), 2);
        assert_eq!(tally.unprocessed(), Some(1));
        assert_eq!(Tally { processed: None, ..tally }.unprocessed(), None);
    }
}
