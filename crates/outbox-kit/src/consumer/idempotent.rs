//! The idempotent consumer: "check, process, mark" in ONE database transaction.
//!
//! For each delivery: the dedup row (`event_dedup`, primary key event_id) is inserted
//! first, inside the transaction, then the user's handler runs its business write in
//! the same transaction, then it commits. So the mark exists exactly when the business
//! write does (the seed's incident 3, a mark written before a failed handler, cannot
//! happen), and the primary key, not a pre-check, decides: a second consumer racing
//! on the same event blocks on the first one's uncommitted row and then sees a
//! duplicate. Outcomes:
//! - handler `Ok` -> commit, ACK (`outbox_consumer_processed_total`);
//! - the event was already PROCESSED or REJECTED -> ACK without the handler
//!   (`outbox_consumer_dedup_hits_total`): a duplicate must be acknowledged, or it would be
//!   redelivered until the dead-letter queue;
//! - [`HandlerError::Retryable`] -> roll back both, hand the message back
//!   (`outbox_consumer_retries_total`): under [`Consumption::Orderly`], the default, its
//!   queue is suspended and the same message retried, nothing after it is applied
//!   first; under [`Consumption::Concurrent`] it comes back through the retry topic;
//! - [`HandlerError::NonRetryable`] -> roll back, then store the message in
//!   `event_quarantine` and the dedup row as REJECTED with the reason, ACK
//!   (`outbox_consumer_rejected_total`): never retried forever, and under orderly
//!   consumption the queue moves on past it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, Transaction, TxOpts};

use super::consumption::Consumption;
use super::delivery::{Ack, Delivery};
use super::metrics::ConsumerMetrics;
use super::subscription::{StartFrom, Subscribe, Subscription, EVERY_TAG};
use crate::client::ClientError;
use crate::text::truncate_utf8;

/// MySQL's duplicate-key error.
const ER_DUP_ENTRY: u16 = 1062;
/// `event_quarantine.reason` width.
const REASON_MAX: usize = 1024;

/// Why a handler did not process an event.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// May work later (database busy, a dependency down): roll back and redeliver.
    #[error("retryable: {0}")]
    Retryable(String),
    /// Will never work (malformed payload, impossible state): quarantine and ACK.
    #[error("non-retryable: {0}")]
    NonRetryable(String),
}

impl From<mysql_async::Error> for HandlerError {
    /// A database error inside the handler is retryable: the transaction rolls back.
    fn from(error: mysql_async::Error) -> Self {
        HandlerError::Retryable(error.to_string())
    }
}

/// A future returned by a handler.
pub type HandlerFuture<'a> = Pin<Box<dyn Future<Output = Result<(), HandlerError>> + Send + 'a>>;

/// The business logic: writes through `tx`, the transaction that also holds the dedup mark.
pub trait EventHandler: Send + Sync + 'static {
    fn handle<'a>(&'a self, tx: &'a mut Transaction<'static>, delivery: &'a Delivery) -> HandlerFuture<'a>;
}

/// Which key identifies "the same event".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DedupKey {
    /// The producer's event_id (the `event_id` property, else KEYS). The default.
    EventId,
    /// For producers without a global id: biz_key + the payload's JSON field `field`
    /// (e.g. `type`), joined with ':'.
    BizKeyAndPayloadField(String),
    /// For producers without a global id that fill the outbox row's `event_type`:
    /// biz_key + event type, joined with ':'.
    BizKeyAndEventType,
}

/// What happened to one delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Processed,
    Duplicate,
    Rejected(String),
    Retry(String),
}

impl Outcome {
    /// What to answer the broker.
    pub fn ack(&self) -> Ack {
        match self {
            Outcome::Retry(_) => Ack::Later,
            Outcome::Processed | Outcome::Duplicate | Outcome::Rejected(_) => Ack::Done,
        }
    }
}

/// The idempotent consumer over one database.
pub struct IdempotentConsumer<H> {
    pool: Pool,
    handler: Arc<H>,
    key: DedupKey,
    metrics: ConsumerMetrics,
    consumption: Consumption,
    dead_letter_after: Option<u32>,
    tags: String,
}

impl<H: EventHandler> IdempotentConsumer<H> {
    /// `pool` is the consumer's business database (with the kit's tables, see `schema`).
    /// It consumes each queue in order ([`Consumption::Orderly`]) unless told otherwise
    /// with [`Self::with_consumption`].
    pub fn new(pool: Pool, handler: H, key: DedupKey, metrics: ConsumerMetrics) -> Self {
        Self {
            pool,
            handler: Arc::new(handler),
            key,
            metrics,
            consumption: Consumption::default(),
            dead_letter_after: None,
            tags: EVERY_TAG.to_owned(),
        }
    }

    /// The same consumer, receiving only messages of the tags in `expression` (tags
    /// joined by `||`, e.g. `"PAID || REFUNDED"`); the broker filters the rest out.
    pub fn with_tags(self, expression: &str) -> Self {
        Self { tags: expression.to_owned(), ..self }
    }

    /// The same consumer, subscribing with `consumption` (e.g. [`Consumption::Concurrent`]
    /// for events whose order does not matter).
    pub fn with_consumption(self, consumption: Consumption) -> Self {
        Self { consumption, ..self }
    }

    /// The same consumer, letting the broker move a message to the group's dead-letter
    /// topic after `times` redeliveries (concurrent consumption; the client's default is 16).
    pub fn with_dead_letter_after(self, times: u32) -> Self {
        Self { dead_letter_after: Some(times), ..self }
    }

    /// The handler, e.g. to read its own state.
    pub fn handler(&self) -> &H {
        &self.handler
    }

    /// Subscribes `group` to `topic` and processes every delivery through [`Self::process`],
    /// each queue in order unless [`Self::with_consumption`] chose otherwise, and
    /// watches the group's dead-letter topic into the metrics. Call it inside the Tokio
    /// runtime that owns `pool`.
    pub async fn subscribe(
        self: Arc<Self>,
        namesrv: &str,
        group: &str,
        topic: &str,
        from: StartFrom,
    ) -> Result<Subscription, ClientError> {
        let runtime = tokio::runtime::Handle::current();
        let tags = self.tags.clone();
        // The client calls the handler on its blocking threads: block on the async work there.
        let spec = Subscribe {
            consumption: self.consumption,
            dead_letter_after: self.dead_letter_after,
            dead_letters: Some(self.metrics.clone()),
            tags: &tags,
            ..Subscribe::new(namesrv, group, topic, from)
        };
        Subscription::start(spec, move |delivery: &Delivery| runtime.block_on(self.process(delivery)).ack()).await
    }

    /// Handles one delivery to the end; never returns an error, only an outcome.
    pub async fn process(&self, delivery: &Delivery) -> Outcome {
        let outcome = match self.dedup_key(delivery) {
            Ok(key) => self.process_keyed(&key, delivery).await,
            Err(reason) => self.reject(&fallback_key(delivery), delivery, &reason).await,
        };
        let counter = match &outcome {
            Outcome::Processed => &self.metrics.processed,
            Outcome::Duplicate => &self.metrics.dedup_hits,
            Outcome::Rejected(_) => &self.metrics.rejected,
            Outcome::Retry(reason) => {
                tracing::warn!(event_id = %delivery.event_id, %reason, "event will be redelivered");
                &self.metrics.retries
            }
        };
        counter.inc();
        outcome
    }

    async fn process_keyed(&self, key: &str, delivery: &Delivery) -> Outcome {
        let mut tx = match self.pool.start_transaction(TxOpts::default()).await {
            Ok(tx) => tx,
            Err(error) => return Outcome::Retry(error.to_string()),
        };
        let mark = tx
            .exec_drop(
                "INSERT INTO event_dedup (event_id, status, msg_id) VALUES (?, 'PROCESSED', ?)",
                (key, &delivery.msg_id),
            )
            .await;
        match mark {
            Ok(()) => {}
            Err(error) if is_duplicate(&error) => return rollback(tx, Outcome::Duplicate).await,
            Err(error) => return rollback(tx, Outcome::Retry(error.to_string())).await,
        }
        match self.handler.handle(&mut tx, delivery).await {
            Ok(()) => match tx.commit().await {
                Ok(()) => Outcome::Processed,
                Err(error) => Outcome::Retry(format!("commit failed: {error}")),
            },
            Err(HandlerError::Retryable(reason)) => rollback(tx, Outcome::Retry(reason)).await,
            Err(HandlerError::NonRetryable(reason)) => {
                let _ = tx.rollback().await;
                self.reject(key, delivery, &reason).await
            }
        }
    }

    /// Quarantines the message and marks it REJECTED, in one transaction.
    async fn reject(&self, key: &str, delivery: &Delivery, reason: &str) -> Outcome {
        let reason = truncate_utf8(reason, REASON_MAX);
        let result = async {
            let mut tx = self.pool.start_transaction(TxOpts::default()).await?;
            let marked = tx
                .exec_drop(
                    "INSERT INTO event_dedup (event_id, status, msg_id) VALUES (?, 'REJECTED', ?)",
                    (key, &delivery.msg_id),
                )
                .await;
            if let Err(error) = marked {
                let _ = tx.rollback().await;
                return Err(error);
            }
            tx.exec_drop(
                "INSERT INTO event_quarantine (event_id, msg_id, biz_key, body, reason) VALUES (?, ?, ?, ?, ?)",
                (key, &delivery.msg_id, &delivery.biz_key, delivery.body.as_ref(), reason),
            )
            .await?;
            tx.commit().await
        }
        .await;
        match result {
            Ok(()) => {
                tracing::error!(event_id = key, reason, "event rejected and quarantined (status REJECTED)");
                Outcome::Rejected(reason.to_owned())
            }
            Err(error) if is_duplicate(&error) => Outcome::Duplicate,
            Err(error) => Outcome::Retry(format!("cannot quarantine: {error}")),
        }
    }

    fn dedup_key(&self, delivery: &Delivery) -> Result<String, String> {
        match &self.key {
            DedupKey::EventId if !delivery.event_id.is_empty() => Ok(delivery.event_id.clone()),
            DedupKey::EventId => Err("message has no event_id property and no KEYS".into()),
            DedupKey::BizKeyAndPayloadField(field) => {
                let value: serde_json::Value =
                    serde_json::from_slice(&delivery.body).map_err(|e| format!("payload is not JSON: {e}"))?;
                let kind = value
                    .get(field)
                    .and_then(|v| v.as_str())
                    .ok_or_else(|| format!("payload has no string field `{field}`"))?;
                Ok(format!("{}:{kind}", delivery.biz_key))
            }
            DedupKey::BizKeyAndEventType => match &delivery.event_type {
                Some(kind) => Ok(format!("{}:{kind}", delivery.biz_key)),
                None => Err("message has no event_type property (the outbox row's event_type is NULL)".into()),
            },
        }
    }
}

/// The key a message without a usable one is quarantined under.
fn fallback_key(delivery: &Delivery) -> String {
    if delivery.msg_id.is_empty() {
        format!("unkeyed:{}:{}", delivery.queue_id, delivery.queue_offset)
    } else {
        format!("unkeyed:{}", delivery.msg_id)
    }
}

async fn rollback(tx: Transaction<'static>, outcome: Outcome) -> Outcome {
    let _ = tx.rollback().await;
    outcome
}

fn is_duplicate(error: &mysql_async::Error) -> bool {
    matches!(error, mysql_async::Error::Server(e) if e.code == ER_DUP_ENTRY)
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Noop;

    impl EventHandler for Noop {
        fn handle<'a>(&'a self, _tx: &'a mut Transaction<'static>, _delivery: &'a Delivery) -> HandlerFuture<'a> {
            Box::pin(async { Ok(()) })
        }
    }

    #[tokio::test]
    async fn a_new_consumer_subscribes_orderly_unless_told_otherwise() {
        // The pool is never used: nothing connects.
        let pool = Pool::new("mysql://root@127.0.0.1:9/unused");
        let consumer = IdempotentConsumer::new(pool, Noop, DedupKey::EventId, ConsumerMetrics::default());
        assert_eq!(consumer.consumption, Consumption::Orderly);
        let consumer = consumer.with_consumption(Consumption::Concurrent);
        assert_eq!(consumer.consumption, Consumption::Concurrent);
    }
}
