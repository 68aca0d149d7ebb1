//! The unit that flows through the pipeline: one outbox row to publish.

mod extras;

use bytes::Bytes;
use mysql_async::Value;

pub use extras::{Extras, EXTRA_COLUMNS};

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
    /// The row's `created_at` in microseconds (as precise as the column), read as if
    /// the database's local time were UTC (a DATETIME carries no zone); `None` for a
    /// table without the column.
    pub created_local_us: Option<i64>,
    /// What the row's optional columns add to the message (tag, event type, headers,
    /// delivery time); `None` when it has none of them, as every row of a table
    /// without those columns.
    pub extras: Option<Box<Extras>>,
}

impl OutboxEvent {
    /// The row's optional columns (all empty for a plain event).
    pub fn extras(&self) -> &Extras {
        self.extras.as_deref().unwrap_or(&Extras::NONE)
    }

    /// Whether the broker delivers it at a time of its own (a timer message): it is
    /// sent alone, and its key does not wait for it.
    pub fn is_timed(&self) -> bool {
        self.extras().deliver_at_us.is_some()
    }
}

/// A DATETIME value as microseconds, read as if it were UTC; `None` for anything else.
pub fn local_micros(value: &Value) -> Option<i64> {
    let Value::Date(year, month, day, hour, minute, second, micros) = *value else { return None };
    let date = chrono::NaiveDate::from_ymd_opt(i32::from(year), u32::from(month), u32::from(day))?;
    let time = date.and_hms_micro_opt(u32::from(hour), u32::from(minute), u32::from(second), micros)?;
    Some(time.and_utc().timestamp_micros())
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
            created_local_us: None,
            extras: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_datetime_is_read_to_the_microsecond() {
        let value = Value::Date(2026, 12, 1, 10, 30, 5, 123_456);
        assert_eq!(local_micros(&value), Some(1_796_121_005_123_456));
        assert_eq!(local_micros(&Value::Int(5)), None);
    }
}
