//! The consumer group's dead-letter queue, watched. A message the group handed back
//! more times than it allows goes to the topic `%DLQ%{group}`, which nothing consumes:
//! its events are lost to the business unless someone replays them. The watch reads
//! the topic's max offset (the messages it ever received) every few seconds into the
//! gauge `outbox_consumer_dead_letter_max_offset{group}`: absent until the first read, 0 while
//! the topic does not exist (the broker creates it with the first dead letter), and any
//! growth is an event that needs a person (the shipped alert fires on it). A read that
//! fails, or a route that vanishes after the topic was seen, keeps the last value: a
//! dip to 0 would read as growth once the value came back.

use std::time::Duration;

use rocketmq_client_rust::DefaultMQProducer;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use super::metrics::ConsumerMetrics;
use crate::client::{client_config, ClientError, ClientHost};

/// How often the dead-letter topic's offset is read.
pub const EVERY: Duration = Duration::from_secs(5);

/// The dead-letter topic of `group`.
pub fn topic_of(group: &str) -> String {
    format!("%DLQ%{group}")
}

/// A running watch; [`DeadLetterWatch::shutdown`] stops it and its client.
pub struct DeadLetterWatch {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
    host: ClientHost,
}

impl DeadLetterWatch {
    /// Starts reading `%DLQ%{group}` every `every` into `metrics`.
    pub async fn start(
        namesrv: &str,
        group: &str,
        metrics: ConsumerMetrics,
        every: Duration,
    ) -> Result<Self, ClientError> {
        let host = ClientHost::start("rocketmq-dlq-watch")?;
        let mut reader = DefaultMQProducer::builder(host.runtime())
            .client_config(client_config(namesrv))
            .producer_group(format!("{group}-dlq-watch"))
            .name_server_addr(namesrv.to_owned())
            .build();
        if let Err(error) = reader.start().await {
            host.shutdown().await;
            return Err(ClientError::from_client("start the dead-letter watch", &error));
        }
        let (stop, mut stopped) = oneshot::channel();
        let (group, topic) = (group.to_owned(), topic_of(group));
        let task = tokio::spawn(async move {
            loop {
                match stored(&mut reader, &topic).await {
                    Ok(Some(count)) => metrics.dead_letters_seen(&group, count),
                    Ok(None) if metrics.dead_letters_of(&group).is_none() => metrics.dead_letters_seen(&group, 0),
                    Ok(None) => {
                        tracing::warn!(%topic, "the dead-letter topic has no route any more; the gauge keeps its last value")
                    }
                    Err(error) => {
                        tracing::warn!(%topic, %error, "cannot read the dead-letter topic's offset; the gauge keeps its last value")
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    _ = &mut stopped => break,
                }
            }
            reader.shutdown().await;
        });
        Ok(Self { stop, task, host })
    }

    /// Stops the watch and its client.
    pub async fn shutdown(self) {
        // An error here means the task ended already.
        let _ = self.stop.send(());
        if self.task.await.is_err() {
            tracing::warn!("the dead-letter watch ended by a panic");
        }
        self.host.shutdown().await;
    }
}

/// Messages `topic` ever stored: the sum of its queues' max offsets; `None` while it
/// has no route.
async fn stored(reader: &mut DefaultMQProducer, topic: &str) -> Result<Option<i64>, ClientError> {
    let queues = match reader.fetch_publish_message_queues(topic).await {
        Ok(queues) => queues,
        Err(error) => {
            let error = ClientError::from_client("fetch the dead-letter topic's route", &error);
            return if is_missing_route(&error.detail) { Ok(None) } else { Err(error) };
        }
    };
    let mut total = 0;
    for queue in &queues {
        total += reader.max_offset(queue).await.map_err(|e| ClientError::from_client("read a max offset", &e))?;
    }
    Ok(Some(total))
}

fn is_missing_route(detail: &str) -> bool {
    ["No route", "route info", "Can not find Message Queue", "TOPIC_NOT_EXIST", "not exist"]
        .iter()
        .any(|m| detail.contains(m))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dead_letter_topic_is_named_for_the_group() {
        assert_eq!(topic_of("benefits"), "%DLQ%benefits");
    }

    #[test]
    fn a_topic_without_a_route_counts_as_empty() {
        assert!(is_missing_route("fetch topic route failed: No route info of this topic: %DLQ%g"));
        assert!(!is_missing_route("connection refused"));
    }
}
