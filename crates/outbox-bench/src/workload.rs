//! The events every case sends: same body size, same biz_key distribution, so the
//! cases differ only in how the events reach the broker.

use bytes::Bytes;
use outbox_relay::event::{Extras, OutboxEvent};
use outbox_test_support::rows::MessageColumns;

/// Events `{prefix}-{i}` for `topic`, keys round-robin over `keys`, bodies of `body_bytes`.
#[derive(Debug, Clone)]
pub struct Workload {
    pub prefix: String,
    pub topic: String,
    pub keys: usize,
    pub body_bytes: usize,
    /// The optional message columns every row gets, if any.
    pub message_columns: Option<MessageColumns>,
}

/// What `--message-columns` writes into every row: a tag, an event type, and headers
/// with a W3C trace context and one more entry.
pub fn filled_message_columns() -> MessageColumns {
    MessageColumns {
        tag: "PAID".to_owned(),
        event_type: "OrderPaid".to_owned(),
        headers: r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"rojo=00f067aa0ba902b7","tenant":"acme"}"#.to_owned(),
    }
}

impl Workload {
    pub fn event_id(&self, i: usize) -> String {
        format!("{}-{i:08}", self.prefix)
    }

    pub fn biz_key(&self, i: usize) -> String {
        format!("key-{}", i % self.keys.max(1))
    }

    /// A JSON body of exactly `body_bytes` (at least the JSON around the padding).
    pub fn payload(&self, i: usize) -> String {
        let head = format!(r#"{{"i":{i},"pad":""#);
        let pad = self.body_bytes.saturating_sub(head.len() + 2);
        format!("{head}{}\"}}", "x".repeat(pad))
    }

    /// Event `i` as the relay holds it in memory.
    pub fn event(&self, i: usize) -> OutboxEvent {
        OutboxEvent {
            id: i as u64 + 1,
            event_id: self.event_id(i),
            biz_key: self.biz_key(i),
            topic: self.topic.clone(),
            payload: Bytes::from(self.payload(i)),
            created_local_us: None,
            extras: self.message_columns.as_ref().and_then(|columns| {
                Extras {
                    tag: Some(columns.tag.clone()),
                    event_type: Some(columns.event_type.clone()),
                    headers: Some(columns.headers.clone()),
                    deliver_at_us: None,
                }
                .boxed()
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Workload;

    #[test]
    fn bodies_have_the_requested_size_and_are_json() {
        let w = Workload { prefix: "p".into(), topic: "t".into(), keys: 3, body_bytes: 1_024, message_columns: None };
        for i in [0, 7, 123_456] {
            let body = w.payload(i);
            assert_eq!(body.len(), 1_024);
            assert!(serde_json::from_str::<serde_json::Value>(&body).is_ok(), "{body}");
        }
        assert_eq!((w.biz_key(0), w.biz_key(4)), ("key-0".to_owned(), "key-1".to_owned()));
    }
}
