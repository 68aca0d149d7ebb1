//! The wire form of an outbox event: KEYS = event_id and biz_key (both indexed by the
//! broker, so `queryMsgByKey` finds the message by either), user properties
//! `event_id`, `biz_key` and (from the relay) `relay_term`, the leader term that sent
//! it; body = payload. What the row's optional columns add: TAGS = `tag`, the
//! `event_type` property, each header as a user property, and `deliver_at` as the
//! broker's delivery time (a timer message).
//!
//! One event goes to the broker as a plain message: its payload as the request's
//! body and its properties encoded here; several go as one batch message (see
//! `batch`), with the same properties. A value the broker cannot take fails its event
//! alone, with the column and the problem named.

use std::time::{Duration, SystemTime};

use bytes::BytesMut;
use cheetah_string::CheetahString;
use rocketmq_model::common::message::{MessageConst, STRING_HASH_SET};

use outbox_kit::wire::{
    PROPERTY_BIZ_KEY, PROPERTY_EVENT_ID, PROPERTY_EVENT_TYPE, PROPERTY_RELAY_TERM, RESERVED_PROPERTIES,
};

use super::PublishError;
use crate::event::OutboxEvent;

/// The most bytes a message's properties may take: the broker stores their length
/// in two bytes.
const PROPERTIES_MAX: usize = i16::MAX as usize;

/// One event's properties, checked and ready to encode (as often as needed).
pub(super) struct Properties<'a> {
    event: &'a OutboxEvent,
    term: Option<&'a str>,
    id: &'a str,
    /// KEYS: the event id and the business key, separated as RocketMQ separates keys.
    keys: String,
    /// The `headers` column's names and values.
    headers: Vec<(String, String)>,
    /// The delivery time, Unix milliseconds, for a timer message.
    deliver_ms: Option<String>,
}

impl<'a> Properties<'a> {
    /// The properties of `event`'s message with id `id`, sent under `term`; refused
    /// when a column holds what the broker cannot take.
    pub(super) fn of(event: &'a OutboxEvent, term: Option<&'a str>, id: &'a str) -> Result<Self, PublishError> {
        let extras = event.extras();
        if let Some(tag) = &extras.tag {
            check_tag(tag).map_err(|problem| illegal(event, format!("column `tag`: {problem}")))?;
        }
        if let Some(kind) = &extras.event_type {
            check_value(kind).map_err(|problem| illegal(event, format!("column `event_type`: {problem}")))?;
        }
        let headers = match &extras.headers {
            Some(json) => {
                parse_headers(json).map_err(|problem| illegal(event, format!("column `headers`: {problem}")))?
            }
            None => Vec::new(),
        };
        let properties = Self {
            event,
            term,
            id,
            keys: format!("{}{}{}", event.event_id, MessageConst::KEY_SEPARATOR, event.biz_key),
            headers,
            deliver_ms: extras.deliver_at_us.map(|us| us.div_euclid(1_000).to_string()),
        };
        let len = properties.encoded_len();
        if len > PROPERTIES_MAX {
            let problem = format!("its properties take {len} bytes, over the broker's {PROPERTIES_MAX}: make the `headers` column smaller");
            return Err(illegal(event, problem));
        }
        Ok(properties)
    }

    /// The name and value pairs, in the order they are written.
    pub(super) fn pairs(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        let extras = self.event.extras();
        [
            (MessageConst::PROPERTY_KEYS, self.keys.as_str()),
            (PROPERTY_EVENT_ID, self.event.event_id.as_str()),
            (PROPERTY_BIZ_KEY, self.event.biz_key.as_str()),
            (MessageConst::PROPERTY_WAIT_STORE_MSG_OK, "true"),
            (MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX, self.id),
        ]
        .into_iter()
        .chain(extras.tag.as_deref().map(|tag| (MessageConst::PROPERTY_TAGS, tag)))
        .chain(extras.event_type.as_deref().map(|kind| (PROPERTY_EVENT_TYPE, kind)))
        .chain(self.deliver_ms.as_deref().map(|ms| (MessageConst::PROPERTY_TIMER_DELIVER_MS, ms)))
        .chain(self.term.map(|term| (PROPERTY_RELAY_TERM, term)))
        .chain(self.headers.iter().map(|(name, value)| (name.as_str(), value.as_str())))
    }

    /// The bytes the properties take on the wire.
    pub(super) fn encoded_len(&self) -> usize {
        self.pairs()
            .map(|(name, value)| name.len() + NAME_VALUE_SEPARATOR.len() + value.len() + PROPERTY_SEPARATOR.len())
            .sum()
    }

    /// Appends the properties to `out` the way RocketMQ writes them: `name 0x01 value 0x02`.
    pub(super) fn write(&self, out: &mut impl PropertiesOut) {
        write_properties(self.pairs(), out);
    }
}

/// The `headers` column's pairs: a JSON object whose values are strings, under names
/// that are neither RocketMQ's own nor the relay's.
fn parse_headers(json: &str) -> Result<Vec<(String, String)>, String> {
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(json)
        .map_err(|e| format!("not a JSON object of strings ({e}); write e.g. {{\"traceparent\":\"00-...\"}}"))?;
    object
        .into_iter()
        .map(|(name, value)| {
            let serde_json::Value::String(value) = value else {
                return Err(format!("the value of {name:?} is {value}, not a string: header values must be strings"));
            };
            if name.is_empty() {
                return Err("a header has an empty name".to_owned());
            }
            if STRING_HASH_SET.contains(name.as_str()) || RESERVED_PROPERTIES.contains(&name.as_str()) {
                return Err(format!("{name:?} is a property name RocketMQ or the relay reserves: rename the header"));
            }
            check_value(&name)
                .and_then(|()| check_value(&value))
                .map_err(|problem| format!("header {name:?}: {problem}"))?;
            Ok((name, value))
        })
        .collect()
}

/// A tag consumers can subscribe by: a tag expression separates tags with `||`.
fn check_tag(tag: &str) -> Result<(), String> {
    if tag.contains("||") {
        return Err(format!("{tag:?} holds `||`, which separates tags in a subscription: no consumer could select it"));
    }
    check_value(tag)
}

/// A property name or value: it may not hold the characters that separate properties.
fn check_value(text: &str) -> Result<(), String> {
    match text.contains([NAME_VALUE_SEPARATOR_CHAR, PROPERTY_SEPARATOR_CHAR]) {
        true => Err(format!("{text:?} holds control character 0x01 or 0x02, which separate RocketMQ properties")),
        false => Ok(()),
    }
}

/// Refuses a delivery time further ahead of `now` than the broker's timer takes
/// (`timerMaxDelaySec`); a time already past is delivered at once.
pub fn check_delivery_time(event: &OutboxEvent, max_delay: Duration, now: SystemTime) -> Result<(), PublishError> {
    let Some(deliver_at_us) = event.extras().deliver_at_us else { return Ok(()) };
    let now_us = now
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |since| i64::try_from(since.as_micros()).unwrap_or(i64::MAX));
    let ahead = Duration::from_micros(u64::try_from(deliver_at_us.saturating_sub(now_us)).unwrap_or(0));
    if ahead > max_delay {
        let problem = format!(
            "column `deliver_at`: {} s ahead, over the broker's maximum timer delay of {} s (rocketmq.timer_max_delay_s, the broker's timerMaxDelaySec)",
            ahead.as_secs(),
            max_delay.as_secs()
        );
        return Err(illegal(event, problem));
    }
    Ok(())
}

/// Between a property's name and its value (RocketMQ's `NAME_VALUE_SEPARATOR`).
const NAME_VALUE_SEPARATOR_CHAR: char = '\u{1}';
const NAME_VALUE_SEPARATOR: &str = "\u{1}";
/// After a property's value (RocketMQ's `PROPERTY_SEPARATOR`).
const PROPERTY_SEPARATOR_CHAR: char = '\u{2}';
const PROPERTY_SEPARATOR: &str = "\u{2}";

/// Where properties are written: a request header's text or a batch's body. Both
/// append without a check that can fail.
pub(super) trait PropertiesOut {
    fn append(&mut self, text: &str);
}

impl PropertiesOut for String {
    fn append(&mut self, text: &str) {
        self.push_str(text);
    }
}

impl PropertiesOut for BytesMut {
    fn append(&mut self, text: &str) {
        self.extend_from_slice(text.as_bytes());
    }
}

/// Appends `pairs` to `out` the way RocketMQ writes properties: `name 0x01 value 0x02`.
pub(super) fn write_properties<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>, out: &mut impl PropertiesOut) {
    for (name, value) in pairs {
        out.append(name);
        out.append(NAME_VALUE_SEPARATOR);
        out.append(value);
        out.append(PROPERTY_SEPARATOR);
    }
}

/// `pairs` as the properties field of a request header.
pub(super) fn properties_text<'a>(pairs: impl Iterator<Item = (&'a str, &'a str)>) -> CheetahString {
    let mut text = String::new();
    write_properties(pairs, &mut text);
    CheetahString::from_string(text)
}

/// Refuses an empty payload: the broker takes no message without a body (the client
/// checks single messages for it, not those inside a batch).
pub(super) fn check_body(event: &OutboxEvent) -> Result<(), PublishError> {
    if event.payload.is_empty() {
        return Err(illegal(event, "the payload is empty and a message needs a body: write a payload".to_owned()));
    }
    Ok(())
}

/// An event the broker can never take, for `reason`.
pub(super) fn illegal(event: &OutboxEvent, reason: String) -> PublishError {
    PublishError::Client {
        operation: "build message",
        code: None,
        detail: format!("event {}: {reason}", event.event_id),
        class: super::ErrorClass::Event,
        unreachable: false,
    }
}

/// Rejects a body the broker would refuse, before it can poison a whole batch.
pub fn check_size(event: &OutboxEvent, limit: usize) -> Result<(), PublishError> {
    if event.payload.len() > limit {
        return Err(PublishError::BodyTooLarge { event_id: event.event_id.clone(), size: event.payload.len(), limit });
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;

    use bytes::Bytes;
    use rocketmq_model::common::message::message_builder::MessageBuilder;
    use rocketmq_model::common::message::message_single::Message;
    use rocketmq_model::common::message::MessageTrait;
    use rocketmq_protocol::common::message::message_decoder::string_to_message_properties;

    use super::*;
    use crate::event::Extras;

    /// An event of key "k" on topic "t" with a small JSON body.
    pub(crate) fn event(id: u64) -> OutboxEvent {
        OutboxEvent { payload: Bytes::from(format!("{{\"n\":{id}}}")), ..OutboxEvent::for_test(id) }
    }

    /// The same event with the optional columns `extras`.
    pub(crate) fn with_extras(event: OutboxEvent, extras: Extras) -> OutboxEvent {
        OutboxEvent { extras: extras.boxed(), ..event }
    }

    /// An event whose `headers` column holds `json`.
    fn with_headers(json: &str) -> OutboxEvent {
        with_extras(event(1), Extras { headers: Some(json.to_owned()), ..Extras::NONE })
    }

    /// The message the RocketMQ client itself would build for `event` with id `id`.
    pub(crate) fn client_message(event: &OutboxEvent, term: Option<&str>, id: &str) -> Message {
        let mut message =
            MessageBuilder::new().topic(event.topic.as_str()).body(event.payload.clone()).build().expect("message");
        for (name, value) in Properties::of(event, term, id).expect("properties").pairs() {
            message.put_property(name.to_owned().into(), value.to_owned().into());
        }
        message
    }

    /// A message's properties, as plain strings.
    pub(crate) fn property_map(message: &Message) -> HashMap<String, String> {
        message.properties().as_map().iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// `event`'s properties as the broker decodes them.
    fn decoded(event: &OutboxEvent) -> HashMap<String, String> {
        let properties = Properties::of(event, Some("7"), "ID1").expect("properties");
        let text = properties_text(properties.pairs());
        assert_eq!(text.len(), properties.encoded_len());
        string_to_message_properties(Some(&text)).iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// Why `event` cannot be sent.
    fn refusal(event: &OutboxEvent) -> String {
        let error = Properties::of(event, None, "ID1").err().expect("refused");
        assert_eq!(error.class(), super::super::ErrorClass::Event, "the event's fault, not the batch's");
        error.to_string()
    }

    #[test]
    fn the_properties_text_decodes_to_the_id_keys_and_properties() {
        let decoded = decoded(&event(1));
        let property = |name: &str| decoded.get(name).map(String::as_str);
        assert_eq!(property(MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX), Some("ID1"));
        assert_eq!(property(MessageConst::PROPERTY_KEYS), Some("e1 k"), "both the event id and the business key");
        assert_eq!(property(PROPERTY_EVENT_ID), Some("e1"));
        assert_eq!(property(PROPERTY_BIZ_KEY), Some("k"));
        assert_eq!(property(PROPERTY_RELAY_TERM), Some("7"));
        assert_eq!(property(MessageConst::PROPERTY_WAIT_STORE_MSG_OK), Some("true"));
        assert_eq!(decoded.len(), 6);
    }

    #[test]
    fn the_optional_columns_become_tag_event_type_headers_and_delivery_time() {
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let extras = Extras {
            tag: Some("PAID".into()),
            event_type: Some("OrderPaid".into()),
            headers: Some(format!(
                r#"{{"traceparent":"{traceparent}","tracestate":"rojo=00f067aa0ba902b7","tenant":"t-1"}}"#
            )),
            deliver_at_us: Some(1_796_637_600_250_999),
        };
        let decoded = decoded(&with_extras(event(1), extras));
        let property = |name: &str| decoded.get(name).map(String::as_str);
        assert_eq!(property(MessageConst::PROPERTY_TAGS), Some("PAID"));
        assert_eq!(property(PROPERTY_EVENT_TYPE), Some("OrderPaid"));
        assert_eq!(property("traceparent"), Some(traceparent), "passed through as is");
        assert_eq!(property("tracestate"), Some("rojo=00f067aa0ba902b7"));
        assert_eq!(property("tenant"), Some("t-1"));
        assert_eq!(property(MessageConst::PROPERTY_TIMER_DELIVER_MS), Some("1796637600250"));
        assert_eq!(decoded.len(), 12);
    }

    #[test]
    fn headers_that_are_not_an_object_of_strings_are_refused_naming_the_column() {
        for (json, problem) in [
            ("[1,2]", "not a JSON object of strings"),
            ("{not json", "not a JSON object of strings"),
            (r#"{"retries":3}"#, r#"the value of "retries" is 3, not a string"#),
            (r#"{"a":{"b":"c"}}"#, r#"the value of "a" is {"b":"c"}, not a string"#),
            (r#"{"":"x"}"#, "a header has an empty name"),
        ] {
            let refusal = refusal(&with_headers(json));
            assert!(refusal.contains("event e1: column `headers`: ") && refusal.contains(problem), "{json}: {refusal}");
        }
    }

    #[test]
    fn a_header_may_not_take_a_reserved_property_name() {
        let names = [
            "KEYS",
            "TAGS",
            "UNIQ_KEY",
            "TIMER_DELIVER_MS",
            "__STARTDELIVERTIME",
            "DELAY",
            "event_id",
            "relay_term",
            "event_type",
        ];
        let header = |name: &str| with_headers(&format!(r#"{{"{name}":"x"}}"#));
        let accepted: Vec<&str> =
            names.into_iter().filter(|name| Properties::of(&header(name), None, "ID1").is_ok()).collect();
        assert_eq!(accepted, Vec::<&str>::new(), "reserved names taken as headers");
        for name in names {
            let refusal = refusal(&header(name));
            assert!(
                refusal.contains(&format!("{name:?} is a property name RocketMQ or the relay reserves")),
                "{refusal}"
            );
        }
    }

    #[test]
    fn separators_in_a_tag_event_type_or_header_are_refused() {
        let tag = |tag: &str| with_extras(event(1), Extras { tag: Some(tag.into()), ..Extras::NONE });
        assert!(refusal(&tag("PAID||REFUNDED")).contains("column `tag`: \"PAID||REFUNDED\" holds `||`"));
        assert!(refusal(&tag("PA\u{1}ID")).contains("column `tag`: \"PA\\u{1}ID\" holds control character"));
        let kind = with_extras(event(1), Extras { event_type: Some("a\u{2}b".into()), ..Extras::NONE });
        assert!(refusal(&kind).contains("column `event_type`: "));
        assert!(refusal(&with_headers(r#"{"x":"a\u0002b"}"#)).contains(r#"column `headers`: header "x": "#));
    }

    #[test]
    fn properties_past_what_the_broker_stores_are_refused() {
        let big = "x".repeat(PROPERTIES_MAX);
        let refusal = refusal(&with_headers(&format!(r#"{{"big":"{big}"}}"#)));
        assert!(refusal.contains("over the broker's 32767: make the `headers` column smaller"), "{refusal}");
        let fits = "x".repeat(PROPERTIES_MAX - 200);
        assert!(Properties::of(&with_headers(&format!(r#"{{"big":"{fits}"}}"#)), None, "ID1").is_ok());
    }

    #[test]
    fn a_delivery_time_past_the_brokers_maximum_delay_is_refused() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let at = |secs: i64| with_extras(event(1), Extras { deliver_at_us: Some(secs * 1_000_000), ..Extras::NONE });
        let max = Duration::from_secs(3 * 24 * 3600);
        assert!(check_delivery_time(&at(1_000_000 + 3 * 24 * 3600), max, now).is_ok(), "exactly the maximum");
        assert!(check_delivery_time(&at(10), max, now).is_ok(), "a time already past is delivered at once");
        assert!(check_delivery_time(&event(1), max, now).is_ok(), "not a timer message");
        let error = check_delivery_time(&at(1_000_000 + 3 * 24 * 3600 + 1), max, now).err().expect("too far");
        assert_eq!(error.class(), super::super::ErrorClass::Event);
        assert!(
            error.to_string().contains(
                "event e1: column `deliver_at`: 259201 s ahead, over the broker's maximum timer delay of 259200 s"
            ),
            "{error}"
        );
    }
}
