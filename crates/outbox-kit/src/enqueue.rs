//! The producer side: put an event into the outbox inside the application's own
//! transaction, the one that also writes the business change.
//!
//! [`enqueue`] takes the open `Transaction`, so it cannot be called on an autocommit
//! connection: the outbox row commits or rolls back together with the business row.

use mysql_async::prelude::Queryable;
use mysql_async::Transaction;
use serde::Serialize;

use crate::table::OutboxTable;

/// An event to enqueue.
#[derive(Debug, Clone)]
pub struct NewEvent<'a, P: Serialize> {
    pub topic: &'a str,
    /// Ordering key: events of one biz_key reach consumers in commit order.
    pub biz_key: &'a str,
    pub payload: &'a P,
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
    tx.exec_drop(
        format!("INSERT INTO {} (event_id, biz_key, topic, payload) VALUES (?, ?, ?, ?)", outbox.qualified()),
        (&event_id, event.biz_key, event.topic, payload),
    )
    .await
    .map_err(|source| EnqueueError::Insert { table: outbox.qualified(), source })?;
    Ok(event_id)
}

#[cfg(test)]
mod tests {
    use super::new_event_id;

    #[test]
    fn event_ids_are_unique_and_time_ordered() {
        let ids: Vec<String> = (0..100).map(|_| new_event_id()).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted, ids, "v7 ids sort in creation order and do not repeat");
    }
}
