//! `verify`: are SENT rows really on the broker? A SENT row must have a msg_id, and
//! that msg_id must be findable on the broker: a relay that marked rows SENT for sends
//! the broker never stored would otherwise be found only by a consumer that never got
//! them. This samples SENT rows and looks each up on the broker.
//!
//! The lookup goes through the broker's key index by the row's event_id (the
//! message's KEYS, which the relay sets and the broker indexes), then compares the
//! msg_id (UNIQ_KEY) of each message found with the row's. A row is missing when no
//! message of its topic carries its event_id with its msg_id. A first miss is asked
//! again after [`INDEX_LAG`] (the index trails the store by a moment). A broker that
//! cannot be asked fails the check; it never counts as a miss. It only reads, on the
//! primary and on the broker.
//!
//! The same check runs on the leader's schedule (`[verify]`), on rows sent during the
//! leader's term, into `relay_verify_checked_rows_total` and
//! `relay_verify_missing_rows_total`.

use std::time::Duration;

use mysql_async::prelude::Queryable;
use mysql_async::Pool;
use outbox_kit::OutboxTable;
use rocketmq_model::common::message::MessageConst;
use rocketmq_protocol::code::response_code::ResponseCode;
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::config::VerifyConfig;
use crate::metrics::UpkeepMetrics;
use crate::rocketmq::{Producer, PublishError, Publisher};
use crate::store::{delivered_by_now, SENT};

/// How long the key index may trail a stored message.
const INDEX_LAG: Duration = Duration::from_secs(2);

/// Rows sent this recently are left for the next sample: their index entry may not
/// be written yet.
const SETTLE_SECS: u32 = 5;

/// A sample is drawn at random from this many times as many of the newest SENT rows.
const DRAWN_FROM: usize = 10;

/// A SENT row, as the check needs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SentRow {
    pub id: u64,
    pub event_id: String,
    pub topic: String,
    pub msg_id: Option<String>,
}

/// A SENT row the broker does not have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Missing {
    #[serde(flatten)]
    pub row: SentRow,
    /// The msg_ids of the messages the broker has under this event_id (none: the
    /// event never reached the broker; others: the row's msg_id is not one of them).
    pub found_msg_ids: Vec<String>,
}

/// What a check found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verified {
    pub checked: usize,
    pub missing: Vec<Missing>,
}

/// SENT rows not on the broker: the command's outcome, with the exit code of its class.
#[derive(Debug, thiserror::Error)]
#[error("{missing} of {checked} sampled SENT rows are not on the broker (ids {ids}): their events may be lost; read the broker's log around their sent_at, then, once the cause is fixed, set them back to PENDING (UPDATE ... SET status = 0 WHERE id IN (...)) so that the sweep publishes them again")]
pub struct NotOnBroker {
    pub missing: usize,
    pub checked: usize,
    ids: String,
}

impl Verified {
    /// `Err` naming the missing rows when any is.
    pub fn verdict(&self) -> Result<(), NotOnBroker> {
        if self.missing.is_empty() {
            return Ok(());
        }
        let ids = self.missing.iter().map(|m| m.row.id.to_string()).collect::<Vec<_>>().join(", ");
        Err(NotOnBroker { missing: self.missing.len(), checked: self.checked, ids })
    }
}

/// Up to `n` SENT rows with an id above `after`, sent at least [`SETTLE_SECS`] ago,
/// drawn at random from the newest `10 × n` of them; timed events the broker still
/// holds in its timer are left out (they are not on their topic yet).
pub async fn sample(
    pool: &Pool,
    outbox: &OutboxTable,
    n: usize,
    after: u64,
) -> Result<Vec<SentRow>, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    let delivered = delivered_by_now(&mut conn, outbox).await?;
    let rows: Vec<(u64, String, String, Option<String>)> = conn
        .exec(
            format!(
                "SELECT id, event_id, topic, msg_id FROM (\
                   SELECT id, event_id, topic, msg_id FROM {} WHERE status = {SENT} AND id > ?{delivered} \
                   AND sent_at < NOW(3) - INTERVAL {SETTLE_SECS} SECOND ORDER BY id DESC LIMIT {}\
                 ) newest ORDER BY RAND() LIMIT {n}",
                outbox.qualified(),
                n.saturating_mul(DRAWN_FROM)
            ),
            (after,),
        )
        .await?;
    Ok(rows.into_iter().map(|(id, event_id, topic, msg_id)| SentRow { id, event_id, topic, msg_id }).collect())
}

/// Looks every row up on the broker.
pub async fn check(producer: &Producer, rows: Vec<SentRow>) -> Result<Verified, PublishError> {
    let mut verified = Verified { checked: rows.len(), missing: Vec::new() };
    for row in rows {
        let mut found = stored_msg_ids(producer, &row).await?;
        if !holds(&row, &found) {
            tokio::time::sleep(INDEX_LAG).await;
            found = stored_msg_ids(producer, &row).await?;
        }
        if !holds(&row, &found) {
            verified.missing.push(Missing { row, found_msg_ids: found });
        }
    }
    Ok(verified)
}

fn holds(row: &SentRow, found: &[String]) -> bool {
    row.msg_id.as_ref().is_some_and(|msg_id| found.contains(msg_id))
}

/// The broker's answers to a key query that found nothing.
const NOT_FOUND: [i32; 2] = [ResponseCode::NoMessage as i32, ResponseCode::QueryNotFound as i32];

/// The msg_ids of the messages of the row's topic whose KEYS hold its event_id (none
/// when the broker has no such message).
async fn stored_msg_ids(producer: &Producer, row: &SentRow) -> Result<Vec<String>, PublishError> {
    let messages = match producer.find_by_key(&row.topic, &row.event_id).await {
        Ok(messages) => messages,
        Err(PublishError::Client { code: Some(code), .. }) if NOT_FOUND.contains(&code) => return Ok(Vec::new()),
        Err(error) => return Err(error),
    };
    Ok(messages
        .iter()
        .filter_map(|m| {
            m.properties().iter().find(|(k, _)| k.as_str() == MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX)
        })
        .map(|(_, v)| v.to_string())
        .collect())
}

/// A sampler run that could not check its sample.
#[derive(Debug, thiserror::Error)]
enum SampleError {
    #[error("sampling SENT rows on the primary failed: {0}")]
    Primary(#[from] mysql_async::Error),
    #[error(transparent)]
    Broker(#[from] PublishError),
}

/// The newest row's id when the sampler starts: it checks only rows written after its
/// term began (read again at the first run if the primary did not answer then), so rows
/// an earlier relay sent are never judged by this one's rules.
async fn newest_id(pool: &Pool, outbox: &OutboxTable) -> Result<u64, mysql_async::Error> {
    let newest: Option<Option<u64>> =
        pool.get_conn().await?.query_first(format!("SELECT MAX(id) FROM {}", outbox.qualified())).await?;
    Ok(newest.flatten().unwrap_or(0))
}

/// The leader's sampler: every `interval_ms`, checks a sample of the rows sent since
/// the previous run. A failed run is logged and the next one tries again.
pub(crate) async fn run_scheduled(
    pool: Pool,
    outbox: OutboxTable,
    publisher: std::sync::Arc<Publisher>,
    settings: VerifyConfig,
    metrics: UpkeepMetrics,
    stop: CancellationToken,
) {
    let every = Duration::from_millis(settings.interval_ms);
    let mut after = newest_id(&pool, &outbox).await.ok();
    loop {
        tokio::select! {
            () = tokio::time::sleep(every) => {}
            () = stop.cancelled() => return,
        }
        let run = async {
            let from = match after {
                Some(id) => id,
                None => newest_id(&pool, &outbox).await?,
            };
            after.get_or_insert(from);
            let rows = sample(&pool, &outbox, settings.sample, from).await?;
            let newest = rows.iter().map(|r| r.id).max().unwrap_or(from);
            let verified = check(&publisher.producer(), rows).await?;
            Ok::<_, SampleError>((verified, newest))
        };
        let done = tokio::select! {
            done = run => done,
            () = stop.cancelled() => return,
        };
        match done {
            Ok((verified, newest)) => {
                after = after.max(Some(newest));
                metrics.verify_checked.inc_by(verified.checked as u64);
                metrics.verify_missing.inc_by(verified.missing.len() as u64);
                for missing in &verified.missing {
                    tracing::error!(row_id = missing.row.id, event_id = %missing.row.event_id, topic = %missing.row.topic, msg_id = ?missing.row.msg_id, found_msg_ids = ?missing.found_msg_ids, "a SENT row is not on the broker: its event may be lost; fix: run `outbox-relay verify --sample 100` and read the broker's log around the row's sent_at");
                }
            }
            Err(error) => tracing::warn!(%error, "the SENT-on-broker sampler failed; the next run tries again"),
        }
    }
}
