//! A push consumer that turns RocketMQ messages into [`Delivery`](super::Delivery) values and hands
//! them to a [`Handler`], orderly or concurrently (see `consumption`).

use rocketmq_client_rust::DefaultMQPushConsumer;
use rocketmq_model::common::consumer::consume_from_where::ConsumeFromWhere;

use super::consumption::Consumption;
use super::delivery::Handler;
use crate::client::{client_config, ClientError, ClientHost};

/// Where a new consumer group starts reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartFrom {
    First,
    Last,
    /// Messages stored at or after this local time.
    Since(chrono::DateTime<chrono::Local>),
}

/// A started push consumer.
pub struct Subscription {
    consumer: DefaultMQPushConsumer,
    host: ClientHost,
}

impl Subscription {
    /// Subscribes `group` to every message of `topic` and starts consuming it as
    /// `consumption` says.
    pub async fn start<H: Handler>(
        namesrv: &str,
        group: &str,
        topic: &str,
        from: StartFrom,
        consumption: Consumption,
        handler: H,
    ) -> Result<Self, ClientError> {
        let host = ClientHost::start("rocketmq-consumer")?;
        let builder = DefaultMQPushConsumer::builder(host.runtime())
            .client_config(client_config(namesrv))
            .name_server_addr(namesrv.to_owned())
            .consumer_group(group.to_owned())
            .consume_message_batch_max_size(1);
        let builder = match from {
            StartFrom::First => builder.consume_from_where(ConsumeFromWhere::ConsumeFromFirstOffset),
            StartFrom::Last => builder.consume_from_where(ConsumeFromWhere::ConsumeFromLastOffset),
            StartFrom::Since(time) => builder
                .consume_from_where(ConsumeFromWhere::ConsumeFromTimestamp)
                .consume_timestamp(time.format("%Y%m%d%H%M%S").to_string()),
        };
        let mut consumer = builder.build();
        let started = async {
            consumer.subscribe(topic, "*").await?;
            consumption.register(&mut consumer, handler);
            consumer.start().await
        };
        if let Err(error) = started.await {
            host.shutdown().await;
            return Err(ClientError::from_client("start consumer", &error));
        }
        Ok(Self { consumer, host })
    }

    /// Stops consuming and releases the client runtime.
    pub async fn shutdown(mut self) {
        self.consumer.shutdown().await;
        self.host.shutdown().await;
    }
}
