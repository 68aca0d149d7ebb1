//! The configured topics' routes at the start of a term: each is checked against the
//! layout pinned for it, and one without a usable route is watched until it has one,
//! so readiness names it while it waits and turns green again by itself.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::error::RelayError;
use crate::health::{Health, Part};
use crate::rocketmq::{PublishError, Publisher, QueueLayout, Resolved};

/// Checks a configured topic's route at the start of a term against its pinned
/// `layout` (if one is pinned) and count; `false` when it has no usable route.
/// A changed layout would move keys between queues: a person decides (the error stops
/// the relay). A topic without a route, or with only part of its queues while no
/// layout is pinned, is also what the NameServer answers while a broker is down (or
/// the NameServer itself is), so it is never a reason to exit: readiness names it,
/// and the coordinator holds the topic's events until it has one. A broker of the
/// pinned layout that is down holds only its own queues (its lanes report it).
pub(crate) async fn routed(
    publisher: &Publisher,
    topic: &str,
    pin: &TopicPin,
    health: &Health,
) -> Result<bool, RelayError> {
    let count = pin.count;
    match publisher.resolve(topic, pin.layout.as_ref(), Some(count)).await {
        Ok(Resolved::Ready { down, layout }) => {
            health.clear(&Part::Route(topic.to_owned()));
            super::warn_brokers_down(topic, &layout, &down);
            Ok(true)
        }
        Ok(Resolved::Incomplete { live, pinned }) => {
            let problem = format!("broker: configured topic {topic} shows {} of its {pinned} queues ({live}) and no layout is pinned yet: a broker of the cluster is down, or the topic has fewer queues than rocketmq.topics.{topic}.queue_count; its events wait until the whole route is seen", live.len());
            tracing::error!(topic, %live, pinned, "a configured topic shows only part of its queues; its events are held until it shows them all");
            health.problem(Part::Route(topic.to_owned()), problem);
            Ok(false)
        }
        Err(error @ PublishError::LayoutChanged { .. }) => Err(error.into()),
        Err(error) => {
            let problem = format!("broker: configured topic {topic} has no usable route: the broker or the NameServer is down, or the topic is missing (create it with {count} queues): {error}");
            tracing::error!(topic, %error, "a configured topic has no route now; its events are held until it has one");
            health.problem(Part::Route(topic.to_owned()), problem);
            Ok(false)
        }
    }
}

/// What is pinned for a configured topic: its count, and its layout once known.
#[derive(Clone)]
pub(crate) struct TopicPin {
    pub count: u32,
    pub layout: Option<QueueLayout>,
}

/// Runs `task` until it ends or `stop` is cancelled.
pub(crate) async fn until_stopped(
    task: impl std::future::Future<Output = Result<(), RelayError>>,
    stop: CancellationToken,
) -> Result<(), RelayError> {
    tokio::select! {
        result = task => result,
        () = stop.cancelled() => Ok(()),
    }
}

/// Re-checks a configured topic without a route until it has one, so readiness turns
/// green again even when none of its events arrives meanwhile.
pub(crate) async fn watch(
    publisher: Arc<Publisher>,
    topic: String,
    pin: TopicPin,
    health: Health,
) -> Result<(), RelayError> {
    loop {
        tokio::time::sleep(ROUTE_RECHECK).await;
        if routed(&publisher, &topic, &pin, &health).await? {
            return Ok(());
        }
    }
}

/// How often a configured topic without a route is looked up again.
const ROUTE_RECHECK: Duration = Duration::from_secs(2);
