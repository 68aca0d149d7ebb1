//! The producer side: put an event into the outbox inside the application's own
//! transaction, the one that also writes the business change.
//!
//! [`enqueue`] takes the open `Transaction`, so it cannot be called on an autocommit
//! connection: the outbox row commits or rolls back together with the business row.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Transaction, Value};
use serde::Serialize;

use crate::table::OutboxTable;

/// An event to enqueue.
#[derive(Debug, Clone)]
pub struct NewEvent<'a, P: Serialize> {
    pub topic: &'a str,
    /// Ordering key: events of one biz_key reach consumers in commit order.
    pub biz_key: &'a str,
    pub payload: &'a P,
    /// What the outbox table's optional columns add to the message.
    pub extras: NewExtras,
}

/// The optional columns of a new outbox row (the table needs them only when set).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewExtras {
    /// The message's tag: consumers subscribe by tags.
    pub tag: Option<String>,
    /// The event's type; with the business key, a dedup key for consumers.
    pub event_type: Option<String>,
    /// User properties of the message, a W3C `traceparent` among them.
    pub headers: BTreeMap<String, String>,
    /// When the broker is to deliver it (a timer message); it is not held back
    /// behind its key's other events.
    pub deliver_at: Option<DateTime<Utc>>,
}

impl<'a, P: Serialize> NewEvent<'a, P> {
    /// An event of `biz_key` on `topic` with `payload`, and no optional columns.
    pub fn new(topic: &'a str, biz_key: &'a str, payload: &'a P) -> Self {
        Self { topic, biz_key, payload, extras: NewExtras::default() }
    }

    /// The same event with tag `tag`.
    pub fn tag(mut self, tag: &str) -> Self {
        self.extras.tag = Some(tag.to_owned());
        self
    }

    /// The same event with event type `kind`.
    pub fn event_type(mut self, kind: &str) -> Self {
        self.extras.event_type = Some(kind.to_owned());
        self
    }

    /// The same event with header `name` = `value`.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.extras.headers.insert(name.to_owned(), value.to_owned());
        self
    }

    /// The same event, delivered by the broker at `at`.
    pub fn deliver_at(mut self, at: DateTime<Utc>) -> Self {
        self.extras.deliver_at = Some(at);
        self
    }
}

/// Why an event could not be enqueued.
#[derive(Debug, thiserror::Error)]
pub enum EnqueueError {
    #[error("payload of the event for {biz_key} cannot be serialised to JSON: {source}")]
    Payload { biz_key: String, source: serde_json::Error },
    #[error("biz_key {biz_key:?} is {len} bytes; the outbox column holds at most 64")]
    KeyTooLong { biz_key: String, len: usize },
    #[error("inserting the outbox row into {table} failed: {source}")]
    Insert { table: String, source: mysql_async::Error },
}

/// A new time-ordered event id (UUIDv7): unique, and sortable by creation time.
pub fn new_event_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Inserts the outbox row for `event` in `tx` and returns its event_id.
pub async fn enqueue<P: Serialize>(
    tx: &mut Transaction<'_>,
    outbox: &OutboxTable,
    event: NewEvent<'_, P>,
) -> Result<String, EnqueueError> {
    if event.biz_key.len() > 64 {
        return Err(EnqueueError::KeyTooLong { biz_key: event.biz_key.to_owned(), len: event.biz_key.len() });
    }
    let payload = serde_json::to_string(event.payload)
        .map_err(|source| EnqueueError::Payload { biz_key: event.biz_key.to_owned(), source })?;
    let event_id = new_event_id();
    let mut columns = vec!["event_id", "biz_key", "topic", "payload"];
    let mut values =
        vec![Value::from(&event_id), Value::from(event.biz_key), Value::from(event.topic), Value::from(payload)];
    for (column, value) in event.extras.columns() {
        columns.push(column);
        values.push(value);
    }
    let placeholders = vec!["?"; columns.len()].join(", ");
    tx.exec_drop(
        format!("INSERT INTO {} ({}) VALUES ({placeholders})", outbox.qualified(), columns.join(", ")),
        values,
    )
    .await
    .map_err(|source| EnqueueError::Insert { table: outbox.qualified(), source })?;
    Ok(event_id)
}

impl NewExtras {
    /// The optional columns that are set, with their values.
    fn columns(&self) -> Vec<(&'static str, Value)> {
        let headers =
            (!self.headers.is_empty()).then(|| serde_json::Value::from_iter(self.headers.clone()).to_string());
        let deliver_at = self.deliver_at.map(|at| at.format("%Y-%m-%d %H:%M:%S%.3f").to_string());
        [
            ("tag", self.tag.clone()),
            ("event_type", self.event_type.clone()),
            ("headers", headers),
            ("deliver_at", deliver_at),
        ]
        .into_iter()
        .filter_map(|(column, value)| value.map(|value| (column, Value::from(value))))
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    #[test]
    fn only_the_optional_columns_set_are_written() {
        let payload = serde_json::json!({"order": 1});
        assert!(NewEvent::new("t", "k", &payload).extras.columns().is_empty(), "a table without them still works");
        let at = Utc.with_ymd_and_hms(2026, 12, 7, 10, 0, 0).single().expect("time");
        let event = NewEvent::new("t", "k", &payload)
            .tag("PAID")
            .event_type("OrderPaid")
            .header("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
            .deliver_at(at);
        let columns = event.extras.columns();
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        assert_eq!(names, ["tag", "event_type", "headers", "deliver_at"]);
        assert_eq!(
            columns[2].1,
            Value::from(r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#)
        );
        assert_eq!(columns[3].1, Value::from("2026-12-07 10:00:00.000"), "UTC, to the millisecond");
    }

    #[test]
    fn event_ids_are_unique_and_time_ordered() {
        let ids: Vec<String> = (0..100).map(|_| new_event_id()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, ids, "v7 ids sort in creation order and do not repeat");
    }
}
