//! What an outbox row may add to its message, each from an optional column of its
//! own: the tag consumers filter on, the event's type, headers (user properties, a
//! trace context among them) and a delivery time (a timer message).
//!
//! A table without these columns keeps working, and a row that leaves them NULL is
//! a plain message. Values are kept as the row holds them; whether the broker can take
//! them is decided when the message is built, so a bad value fails its event alone.

use mysql_async::Value;

use super::local_micros;

/// The optional columns, in the order [`Extras::from_values`] takes them.
pub const EXTRA_COLUMNS: [&str; 4] = ["tag", "event_type", "headers", "deliver_at"];

/// The optional columns of one row.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extras {
    /// The message's tag (`TAGS`), which consumers subscribe by.
    pub tag: Option<String>,
    /// The event's type, sent as the `event_type` property.
    pub event_type: Option<String>,
    /// The `headers` column as JSON text: an object whose string values become user
    /// properties.
    pub headers: Option<String>,
    /// When the broker is to deliver it, in Unix microseconds (the column holds UTC).
    pub deliver_at_us: Option<i64>,
}

impl Extras {
    /// No optional value at all.
    pub const NONE: Extras = Extras { tag: None, event_type: None, headers: None, deliver_at_us: None };

    /// From the values of [`EXTRA_COLUMNS`] in order (NULL or absent: none); an empty
    /// tag or event type is none too.
    pub fn from_values([tag, event_type, headers, deliver_at]: [Value; 4]) -> Self {
        Self {
            tag: text(tag).filter(|tag| !tag.is_empty()),
            event_type: text(event_type).filter(|kind| !kind.is_empty()),
            headers: text(headers),
            deliver_at_us: local_micros(&deliver_at),
        }
    }

    /// These values, boxed, or `None` when there are none (what a plain event carries).
    pub fn boxed(self) -> Option<Box<Self>> {
        (self != Self::NONE).then(|| Box::new(self))
    }
}

/// A text column's value; bytes that are not UTF-8 are replaced, as a client would
/// print them.
fn text(value: Value) -> Option<String> {
    match value {
        Value::Bytes(bytes) => {
            Some(String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_and_empty_values_are_no_extras() {
        let none = Extras::from_values([Value::NULL, Value::Bytes(Vec::new()), Value::NULL, Value::NULL]);
        assert_eq!(none, Extras::NONE);
        assert_eq!(none.boxed(), None, "a plain event carries no box");
    }

    #[test]
    fn each_column_is_read_as_the_row_holds_it() {
        let extras = Extras::from_values([
            Value::Bytes(b"PAID".to_vec()),
            Value::Bytes(b"OrderPaid".to_vec()),
            Value::Bytes(br#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}"#.to_vec()),
            Value::Date(2026, 12, 7, 10, 0, 0, 250_000),
        ]);
        assert_eq!(extras.tag.as_deref(), Some("PAID"));
        assert_eq!(extras.event_type.as_deref(), Some("OrderPaid"));
        assert!(extras.headers.as_deref().is_some_and(|h| h.contains("traceparent")));
        assert_eq!(extras.deliver_at_us, Some(1_796_637_600_250_000));
        assert!(extras.boxed().is_some());
    }
}
