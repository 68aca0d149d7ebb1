//! The broker side: every configured topic has a route with exactly its pinned
//! number of writable queues (the check a leader makes before it publishes, with
//! the same `pinned_queues`), and the broker of one of them answers. Nothing is
//! sent: reaching the broker reads a queue's offset.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{one_line, Finding, Group};
use crate::config::Config;
use crate::rocketmq::{Producer, ProducerSettings, PublishError};

/// How long the NameServer or the broker may take to answer one question.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// "reachable" first, then one finding per configured topic.
pub(super) async fn findings(config: &Config) -> Vec<Finding> {
    let mq = &config.rocketmq;
    let settings = ProducerSettings {
        namesrv: mq.namesrv.clone(),
        group: format!("{}-check", mq.producer_group),
        send_timeout: Duration::from_millis(mq.send_timeout_ms),
    };
    let producer = match Producer::start_with(settings, mq.acl().as_ref()).await {
        Ok(producer) => producer,
        Err(error) => {
            return vec![Finding::fail(
                Group::Broker,
                "reachable",
                format!("cannot start a RocketMQ client for {}: {}", mq.namesrv, one_line(error)),
                "check rocketmq.namesrv",
            )]
        }
    };
    let mut topics = Vec::new();
    let mut routable = None;
    let mut namesrv_answered = false;
    let mut last_error = String::new();
    for (topic, pinned) in &mq.topics {
        let name = format!("topic {topic}");
        let count = pinned.queue_count;
        let finding = match tokio::time::timeout(ANSWER_WITHIN, producer.pinned_queues(topic, count)).await {
            Ok(Ok(queues)) => {
                namesrv_answered = true;
                routable.get_or_insert(topic);
                Finding::ok(Group::Broker, name, format!("{} writable queues, as pinned", queues.len()))
            }
            Ok(Err(PublishError::TopicMissing { .. })) => {
                namesrv_answered = true;
                Finding::fail(
                    Group::Broker,
                    name,
                    "does not exist on the cluster",
                    format!(
                        "outbox-relay admin create-topic --namesrv {} --topic {topic} --queues {count}",
                        mq.namesrv
                    ),
                )
            }
            Ok(Err(PublishError::QueueCountMismatch { live, .. })) => {
                namesrv_answered = true;
                Finding::fail(
                    Group::Broker,
                    name,
                    format!("{live} writable queues, but rocketmq.topics.{topic}.queue_count is {count}"),
                    format!("start the brokers of the cluster that are down (the route leaves out their queues), or give the topic {count} writable queues; do not change queue_count to match a topic in use (the relay routes by hash % the pinned count: keys would move to other queues)"),
                )
            }
            Ok(Err(error)) => {
                last_error = one_line(&error);
                Finding::fail(
                    Group::Broker,
                    name,
                    format!("route cannot be read: {last_error}"),
                    "start the NameServer and the broker, or fix rocketmq.namesrv",
                )
            }
            Err(_) => {
                last_error = format!("no answer within {ANSWER_WITHIN:?}");
                Finding::fail(
                    Group::Broker,
                    name,
                    format!("route cannot be read: {last_error}"),
                    "start the NameServer and the broker, or fix rocketmq.namesrv",
                )
            }
        };
        topics.push(finding);
    }
    let reachable = match routable {
        Some(topic) => reach(&producer, &mq.namesrv, topic).await,
        None if mq.topics.is_empty() => Finding::warn(
            Group::Broker,
            "reachable",
            "not probed: no topic under rocketmq.topics",
            "pin the topics the outbox rows use ([rocketmq.topics.NAME] queue_count = N); unpinned topics are pinned at their first event",
        ),
        None if namesrv_answered => Finding::warn(
            Group::Broker,
            "reachable",
            format!("NameServer {} answered; no broker probed: no configured topic is usable", mq.namesrv),
            "fix the topics below, then run the check again",
        ),
        None => Finding::fail(
            Group::Broker,
            "reachable",
            format!("NameServer {} did not answer: {last_error}", mq.namesrv),
            "start the NameServer and the broker, or fix rocketmq.namesrv",
        ),
    };
    producer.shutdown().await;
    std::iter::once(reachable).chain(topics).collect()
}

/// Asks every broker of `topic`'s route for the offset of a queue of it.
async fn reach(producer: &Producer, namesrv: &str, topic: &str) -> Finding {
    let failed = |found: String| {
        Finding::fail(
            Group::Broker,
            "reachable",
            found,
            "start the broker, or make the address it registers (brokerIP1) reachable from this host",
        )
    };
    let asked = async {
        let route = producer.live_queues(topic).await;
        let route = route.map_err(|error| format!("the route of {topic} cannot be read: {}", one_line(error)))?;
        let brokers: BTreeSet<String> = route.iter().map(|queue| queue.broker_name().to_string()).collect();
        for broker in &brokers {
            let reached = producer.reach(topic, broker).await;
            reached.map_err(|error| format!("broker {broker} of {topic} does not answer: {}", one_line(error)))?;
        }
        Ok::<_, String>(brokers)
    };
    match tokio::time::timeout(ANSWER_WITHIN, asked).await {
        Ok(Ok(brokers)) => Finding::ok(
            Group::Broker,
            "reachable",
            format!(
                "NameServer {namesrv} and the brokers of {topic} ({}) answered",
                brokers.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ),
        Ok(Err(found)) => failed(found),
        Err(_) => failed(format!("the brokers of {topic} did not answer within {ANSWER_WITHIN:?}")),
    }
}
