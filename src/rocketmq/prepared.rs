//! A batch made ready to send once, before its first attempt: the message id of every
//! event fixed, and what the send request carries (its body and its properties text)
//! encoded. A retry sends the same bytes; nothing is copied, checked or encoded again.

use bytes::Bytes;
use cheetah_string::CheetahString;
use rocketmq_model::common::message::MessageConst;

use super::batch::batch_body;
use super::message::{check_body, properties_text, Properties};
use super::msg_id;
use super::PublishError;
use crate::event::OutboxEvent;

/// A batch ready to send, with the message id of each message fixed in advance.
///
/// The id is the producer's unique id (the `UNIQ_KEY` property consumers see as the
/// message id). It is assigned here, once, so every retry of the batch carries the
/// same ids and the id stored as `msg_id` is exactly what consumers and
/// `queryMsgById` see (the broker's answer to a batch names the batch, not its
/// messages).
#[derive(Clone)]
pub struct Prepared {
    pub(crate) topic: CheetahString,
    pub(crate) shape: Shape,
    /// The request's body: the one event's payload, or the encoded batch.
    pub(crate) body: Bytes,
    /// The request header's properties: the one event's, or the batch message's own.
    pub(crate) properties: CheetahString,
    pub msg_ids: Vec<String>,
}

/// Whether a prepared request carries one message or a batch of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    /// One event, as a plain message: a batch of one would only wrap it.
    Single,
    /// Several events of one topic, encoded as the body of one batch message.
    Batch,
}

/// Prepares `events` (all of one topic), sent under leader `term` when there is
/// one: assigns their ids and encodes their message, or their batch when there are
/// several.
pub fn prepare<'a>(
    events: impl IntoIterator<Item = &'a OutboxEvent>,
    term: Option<u64>,
) -> Result<Prepared, PublishError> {
    let events: Vec<&OutboxEvent> = events.into_iter().collect();
    let term = term.map(|term| term.to_string());
    let msg_ids: Vec<String> = events.iter().map(|_| msg_id::next()).collect();
    let topic = CheetahString::from_slice(events.first().map_or("", |first| first.topic.as_str()));
    let (shape, body, properties) = match events.as_slice() {
        [event] => {
            check_body(event)?;
            let properties = Properties::of(event, term.as_deref(), &msg_ids[0])?;
            (Shape::Single, event.payload.clone(), properties_text(properties.pairs()))
        }
        _ => (Shape::Batch, batch_body(&topic, &events, term.as_deref(), &msg_ids)?, batch_properties()),
    };
    Ok(Prepared { topic, shape, body, properties, msg_ids })
}

/// The properties of a batch message itself: the wait for the store, and no id.
/// The broker appends the batch's properties to every message inside it, so an id of
/// the batch's own would replace each message's: every message of the batch would be
/// stored under that one id, and no SENT row's msg_id would be found on the broker.
fn batch_properties() -> CheetahString {
    properties_text([(MessageConst::PROPERTY_WAIT_STORE_MSG_OK, "true")].into_iter())
}

#[cfg(test)]
mod tests {
    use rocketmq_protocol::common::message::message_decoder::string_to_message_properties;

    use super::*;
    use crate::rocketmq::message::tests::event;

    fn property(prepared: &Prepared, name: &str) -> Option<String> {
        string_to_message_properties(Some(&prepared.properties)).get(name).map(|value| value.to_string())
    }

    #[test]
    fn one_event_is_a_plain_message_under_the_id_it_reports() {
        let prepared = prepare([&event(1)], Some(7)).expect("prepared");
        assert_eq!(prepared.shape, Shape::Single);
        assert_eq!(prepared.body, event(1).payload);
        assert_eq!(prepared.topic.as_str(), "t");
        assert_eq!(
            property(&prepared, MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX),
            Some(prepared.msg_ids[0].clone())
        );
        assert_eq!(property(&prepared, MessageConst::PROPERTY_KEYS).as_deref(), Some("e1 k"));
    }

    #[test]
    fn several_events_are_one_batch_with_an_id_for_each_and_none_of_its_own() {
        let events = [event(1), event(2), event(3)];
        let prepared = prepare(&events, None).expect("prepared");
        assert_eq!(prepared.shape, Shape::Batch);
        assert_eq!(prepared.topic.as_str(), "t");
        assert_eq!(prepared.msg_ids.len(), 3);
        assert!(prepared.msg_ids[0] != prepared.msg_ids[1] && prepared.msg_ids[1] != prepared.msg_ids[2]);
        assert_eq!(property(&prepared, MessageConst::PROPERTY_WAIT_STORE_MSG_OK).as_deref(), Some("true"));
        let batch_id = property(&prepared, MessageConst::PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX);
        assert_eq!(batch_id, None, "an id of the batch's own would replace each message's on the broker");
    }

    #[test]
    fn an_empty_payload_is_refused_as_an_event_the_broker_can_never_take() {
        let empty = OutboxEvent { payload: Bytes::new(), ..OutboxEvent::for_test(2) };
        for events in [vec![&empty], vec![&event(1), &empty]] {
            let error = prepare(events, None).err().expect("refused");
            assert_eq!(error.class(), crate::rocketmq::ErrorClass::Event);
            assert!(error.to_string().contains("event e2: the payload is empty"), "{error}");
        }
    }
}
