//! How a subscription hands a queue's messages to its handler, and what a message the
//! handler wants again ([`Ack::Later`]) does to the rest of that queue.
//!
//! The relay sends every event of one business key to one queue, in commit order. That
//! order only reaches the handler if the consumer keeps it: [`Consumption::Orderly`]
//! (the default) has the client lock each queue to one consumer of the group and hand
//! its messages on one after the other; a message handed back suspends its queue for a
//! moment and is then retried in place, so no later event of the queue (and so of the
//! key) is applied before it. [`Consumption::Concurrent`] hands a queue's messages to
//! several threads at once and sends a failed one to the group's retry topic, to come
//! back seconds later while the queue moves on: more throughput, no order.

use std::time::Duration;

use rocketmq_client_rust::{
    ClientResult, ConsumeConcurrentlyContext, ConsumeConcurrentlyStatus, ConsumeOrderlyContext, ConsumeOrderlyStatus,
    DefaultMQPushConsumer, MQPushConsumer, MessageListenerConcurrently, MessageListenerOrderly,
};
use rocketmq_model::common::message::message_ext::MessageExt;

use super::delivery::{Ack, Delivery, Handler};

/// The pause before the first retry of a message handed back under orderly consumption.
const FIRST_RETRY_PAUSE: Duration = Duration::from_millis(100);
/// The longest pause between retries of one message: a queue stuck on a dependency
/// that stays down is retried this often, not in a tight loop.
const MAX_RETRY_PAUSE: Duration = Duration::from_secs(10);

/// How a subscription consumes each queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consumption {
    /// One message at a time per queue, in queue order. [`Ack::Later`] suspends the
    /// queue and retries the same message (after 100 ms, doubling up to 10 s) until the
    /// handler takes it: later messages of the queue wait, none is skipped. Choose it
    /// whenever events of one key must be applied in the order they were committed.
    #[default]
    Orderly,
    /// Several messages of a queue at once; [`Ack::Later`] sends the message to the
    /// consumer group's retry topic (back after 10 s, then longer) and the queue moves
    /// on. Choose it only for events whose order does not matter (each one is
    /// self-contained, or a version guard drops stale ones) and throughput does.
    Concurrent,
}

impl Consumption {
    /// Registers `handler` as the consumer's listener for this kind of consumption.
    pub(super) fn register<H: Handler>(self, consumer: &mut DefaultMQPushConsumer, handler: H) {
        let listener = Listener(handler);
        match self {
            Consumption::Orderly => consumer.register_message_listener_orderly(listener),
            Consumption::Concurrent => consumer.register_message_listener_concurrently(listener),
        }
    }
}

/// The pause before retrying a message the handler handed back after `reconsume_times`
/// earlier retries: [`FIRST_RETRY_PAUSE`] doubled per retry, at most [`MAX_RETRY_PAUSE`].
fn retry_pause(reconsume_times: i32) -> Duration {
    let doublings = u32::try_from(reconsume_times).unwrap_or(0).min(16);
    FIRST_RETRY_PAUSE.saturating_mul(1 << doublings).min(MAX_RETRY_PAUSE)
}

/// One listener for both kinds of consumption: they differ only in what they answer
/// the client when the handler wants a message again.
struct Listener<H>(H);

impl<H: Handler> Listener<H> {
    /// Hands `msgs` to the handler in order and returns the first one it wants again;
    /// the messages after that one are not handed on.
    fn first_wanted_again<'m>(&self, msgs: &[&'m MessageExt]) -> Option<&'m MessageExt> {
        msgs.iter().copied().find(|message| self.0.handle(&Delivery::from_message(message)) == Ack::Later)
    }
}

impl<H: Handler> MessageListenerConcurrently for Listener<H> {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        _context: &ConsumeConcurrentlyContext,
    ) -> ClientResult<ConsumeConcurrentlyStatus> {
        Ok(match self.first_wanted_again(msgs) {
            None => ConsumeConcurrentlyStatus::ConsumeSuccess,
            Some(_) => ConsumeConcurrentlyStatus::ReconsumeLater,
        })
    }
}

impl<H: Handler> MessageListenerOrderly for Listener<H> {
    fn consume_message(
        &self,
        msgs: &[&MessageExt],
        context: &mut ConsumeOrderlyContext,
    ) -> ClientResult<ConsumeOrderlyStatus> {
        Ok(match self.first_wanted_again(msgs) {
            None => ConsumeOrderlyStatus::Success,
            Some(message) => {
                let pause = retry_pause(message.reconsume_times());
                context.set_suspend_current_queue_time_millis(i64::try_from(pause.as_millis()).unwrap_or(i64::MAX));
                ConsumeOrderlyStatus::SuspendCurrentQueueAMoment
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use rocketmq_model::common::message::message_queue::MessageQueue;

    use super::*;

    #[test]
    fn the_retry_pause_doubles_from_100_ms_up_to_10_s() {
        let pauses: Vec<u128> = (0..9).map(|n| retry_pause(n).as_millis()).collect();
        assert_eq!(pauses, [100, 200, 400, 800, 1_600, 3_200, 6_400, 10_000, 10_000]);
        assert_eq!(retry_pause(i32::MAX), MAX_RETRY_PAUSE);
        assert_eq!(retry_pause(-1), FIRST_RETRY_PAUSE);
    }

    /// A handler that records the offsets it is handed and wants `later` again.
    struct Recorder {
        later: i64,
        seen: Mutex<Vec<i64>>,
    }

    impl Handler for Recorder {
        fn handle(&self, delivery: &Delivery) -> Ack {
            self.seen.lock().expect("recorder lock").push(delivery.queue_offset);
            if delivery.queue_offset == self.later {
                Ack::Later
            } else {
                Ack::Done
            }
        }
    }

    /// Messages at offsets 0, 1, 2; the one at offset 1 was retried twice already.
    fn batch() -> Vec<MessageExt> {
        (0..3)
            .map(|offset| {
                let mut message = MessageExt::default();
                message.set_queue_offset(offset);
                message.set_reconsume_times(if offset == 1 { 2 } else { 0 });
                message
            })
            .collect()
    }

    fn recording(later: i64) -> Listener<Recorder> {
        Listener(Recorder { later, seen: Mutex::new(Vec::new()) })
    }

    fn seen(listener: &Listener<Recorder>) -> Vec<i64> {
        listener.0.seen.lock().expect("recorder lock").clone()
    }

    #[test]
    fn orderly_suspends_the_queue_at_the_first_message_handed_back() {
        let messages = batch();
        let msgs: Vec<&MessageExt> = messages.iter().collect();
        let listener = recording(1);
        let mut context = ConsumeOrderlyContext::new(MessageQueue::new());
        let status = MessageListenerOrderly::consume_message(&listener, &msgs, &mut context).expect("status");
        assert_eq!(status, ConsumeOrderlyStatus::SuspendCurrentQueueAMoment);
        assert_eq!(context.get_suspend_current_queue_time_millis(), 400, "third attempt: 100 ms doubled twice");
        assert_eq!(seen(&listener), [0, 1], "a message after the one handed back was handed on");

        let listener = recording(-1);
        let status = MessageListenerOrderly::consume_message(&listener, &msgs, &mut context).expect("status");
        assert_eq!(status, ConsumeOrderlyStatus::Success);
        assert_eq!(seen(&listener), [0, 1, 2]);
    }

    #[test]
    fn concurrent_asks_for_a_later_redelivery_of_a_message_handed_back() {
        let messages = batch();
        let msgs: Vec<&MessageExt> = messages.iter().collect();
        let context = ConsumeConcurrentlyContext::new(MessageQueue::new());
        let listener = recording(1);
        let status = MessageListenerConcurrently::consume_message(&listener, &msgs, &context).expect("status");
        assert_eq!(status, ConsumeConcurrentlyStatus::ReconsumeLater);
        assert_eq!(seen(&listener), [0, 1]);

        let listener = recording(-1);
        let status = MessageListenerConcurrently::consume_message(&listener, &msgs, &context).expect("status");
        assert_eq!(status, ConsumeConcurrentlyStatus::ConsumeSuccess);
    }
}
