//! A batch made ready to send once, before its first attempt: the message id of every
//! event fixed, and the events built into one message or encoded into one batch
//! message. A retry sends the same message, and the client neither copies, checks nor
//! encodes every event again on every attempt.

use rocketmq_model::common::message::message_batch::MessageBatch;
use rocketmq_model::common::message::message_client_id_setter::MessageClientIDSetter;
use rocketmq_model::common::message::message_single::Message;

use super::batch::batch_of;
use super::message::to_message;
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
    pub(crate) wire: Wire,
    pub msg_ids: Vec<String>,
}

/// What goes to the broker for a prepared batch.
#[derive(Clone)]
pub(crate) enum Wire {
    /// One event, as a plain message: a batch of one would only wrap it.
    Single(Message),
    /// Several events of one topic, encoded as the body of one batch message.
    Batch(MessageBatch),
}

/// Prepares `events` (all of one topic), sent under leader `term` when there is
/// one: assigns their ids and builds their message, or their batch when there are
/// several.
pub fn prepare<'a>(
    events: impl IntoIterator<Item = &'a OutboxEvent>,
    term: Option<u64>,
) -> Result<Prepared, PublishError> {
    let events: Vec<&OutboxEvent> = events.into_iter().collect();
    let term = term.map(|term| term.to_string());
    let msg_ids: Vec<String> = events.iter().map(|_| MessageClientIDSetter::create_uniq_id()).collect();
    let wire = match events.as_slice() {
        [event] => Wire::Single(to_message(event, term.as_deref(), &msg_ids[0])?),
        _ => Wire::Batch(batch_of(&events, term.as_deref(), &msg_ids)?),
    };
    Ok(Prepared { wire, msg_ids })
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::rocketmq::message::tests::event;

    #[test]
    fn one_event_is_a_plain_message_under_the_id_it_reports() {
        let prepared = prepare([&event(1)], Some(7)).expect("prepared");
        let Wire::Single(message) = &prepared.wire else { panic!("a batch of one event") };
        assert_eq!(
            MessageClientIDSetter::get_uniq_id(message).map(|id| id.to_string()),
            Some(prepared.msg_ids[0].clone())
        );
    }

    #[test]
    fn several_events_are_one_batch_with_an_id_for_each() {
        let events = [event(1), event(2), event(3)];
        let prepared = prepare(&events, None).expect("prepared");
        assert!(matches!(prepared.wire, Wire::Batch(_)), "one message for three events");
        assert_eq!(prepared.msg_ids.len(), 3);
        assert!(prepared.msg_ids[0] != prepared.msg_ids[1] && prepared.msg_ids[1] != prepared.msg_ids[2]);
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
