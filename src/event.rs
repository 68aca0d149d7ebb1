//! The unit that flows through the pipeline: one outbox row to publish.

use bytes::Bytes;

/// One outbox row, as read from the binlog or claimed by the sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEvent {
    /// The row's primary key: status write-back addresses it.
    pub id: u64,
    /// Producer-generated unique id: KEYS and the `event_id` property; consumers dedup on it.
    pub event_id: String,
    /// Ordering key: one biz_key always goes to the same queue.
    pub biz_key: String,
    pub topic: String,
    /// The message body, sent as is.
    pub payload: Bytes,
}

#[cfg(test)]
impl OutboxEvent {
    /// A small event of key "k" on topic "t", for unit tests.
    pub(crate) fn for_test(id: u64) -> Self {
        Self {
            id,
            event_id: format!("e{id}"),
            biz_key: "k".into(),
            topic: "t".into(),
            payload: Bytes::from_static(b"{}"),
        }
    }
}
