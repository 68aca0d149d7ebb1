//! A push consumer that turns RocketMQ messages into [`Delivery`](super::Delivery) values and hands
//! them to a [`Handler`], orderly or concurrently (see `consumption`), with the group's
//! dead-letter topic watched when given a gauge (see `dead_letters`).

use rocketmq_client_rust::DefaultMQPushConsumer;
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;

use super::consumption::Consumption;
use super::dead_letters::{self, DeadLetterWatch};
use super::delivery::Handler;
use super::metrics::ConsumerMetrics;
use crate::client::{client_config, ClientError, ClientHost};

/// The tag expression that selects every message.
pub const EVERY_TAG: &str = "*";

/// `expression` with the spaces around its tags removed (`"PAID || REFUNDED"` becomes
/// `"PAID||REFUNDED"`). The broker filters by the tags' hash codes, which the RocketMQ
/// client 1.0.0 computes from the tags as written, spaces included, so a spaced
/// expression matched nothing.
fn tag_expression(expression: &str) -> String {
    expression.split("||").map(str::trim).collect::<Vec<_>>().join("||")
}

/// Where a new consumer group starts reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFrom {
    First,
    Last,
    /// Messages stored at or after this local time.
    Since(chrono::DateTime<chrono::Local>),
}

/// What a subscription consumes, and how.
#[derive(Clone)]
pub struct Subscribe<'a> {
    pub namesrv: &'a str,
    pub group: &'a str,
    pub topic: &'a str,
    /// Which tags to receive: `*` for every message, or tags joined by `||`
    /// (`"PAID || REFUNDED"`), which the broker filters by.
    pub tags: &'a str,
    pub from: StartFrom,
    pub consumption: Consumption,
    /// Under [`Consumption::Concurrent`]: how many redeliveries a message gets before
    /// the broker moves it to the group's dead-letter topic (`None`: the client's 16).
    pub dead_letter_after: Option<u32>,
    /// Where the group's dead-letter watch reports (`None`: no watch).
    pub dead_letters: Option<ConsumerMetrics>,
}

impl<'a> Subscribe<'a> {
    /// `group` reading every message of `topic` from `from`, each queue in order, no
    /// dead-letter watch.
    pub fn new(namesrv: &'a str, group: &'a str, topic: &'a str, from: StartFrom) -> Self {
        Self {
            namesrv,
            group,
            topic,
            tags: EVERY_TAG,
            from,
            consumption: Consumption::default(),
            dead_letter_after: None,
            dead_letters: None,
        }
    }
}

/// A started push consumer.
pub struct Subscription {
    consumer: DefaultMQPushConsumer,
    host: ClientHost,
    watch: Option<DeadLetterWatch>,
}

impl Subscription {
    /// Subscribes the group to the topic's messages of the tags `spec` names and starts
    /// consuming them as it says.
    pub async fn start<H: Handler>(spec: Subscribe<'_>, handler: H) -> Result<Self, ClientError> {
        let watch = match spec.dead_letters.clone() {
            Some(metrics) => {
                Some(DeadLetterWatch::start(spec.namesrv, spec.group, metrics, dead_letters::EVERY).await?)
            }
            None => None,
        };
        let host = ClientHost::start("rocketmq-consumer")?;
        let Subscribe { namesrv, group, topic, tags, from, consumption, dead_letter_after, .. } = spec;
        let builder = DefaultMQPushConsumer::builder(host.runtime())
            .client_config(client_config(namesrv))
            .name_server_addr(namesrv.to_owned())
            .consumer_group(group.to_owned())
            .consume_message_batch_max_size(1);
        let builder = match dead_letter_after {
            Some(times) => builder.max_reconsume_times(i32::try_from(times).unwrap_or(i32::MAX)),
            None => builder,
        };
        let builder = match from {
            StartFrom::First => builder.consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset),
            StartFrom::Last => builder.consume_from_where(ConsumeFromWhere::ConsumeFromLastOffset),
            StartFrom::Since(time) => builder
                .consume_from_where(ConsumeFromWhere::ConsumeFromTimestamp)
                .consume_timestamp(time.format("%Y%m%d%H%M%S").to_string()),
        };
        let mut consumer = builder.build();
        let started = async {
            consumer.subscribe(topic, &tag_expression(tags)).await?;
            consumption.register(&mut consumer, handler);
            consumer.start().await
        };
        if let Err(error) = started.await {
            host.shutdown().await;
            if let Some(watch) = watch {
                watch.shutdown().await;
            }
            return Err(ClientError::from_client("start consumer", &error));
        }
        Ok(Self { consumer, host, watch })
    }

    /// Stops consuming and the dead-letter watch, and releases the client runtimes.
    pub async fn shutdown(mut self) {
        self.consumer.shutdown().await;
        self.host.shutdown().await;
        if let Some(watch) = self.watch {
            watch.shutdown().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tag_expression_loses_the_spaces_around_its_tags() {
        assert_eq!(tag_expression("PAID || REFUNDED"), "PAID||REFUNDED");
        assert_eq!(tag_expression(" PAID"), "PAID");
        assert_eq!(tag_expression(EVERY_TAG), "*");
    }
}
