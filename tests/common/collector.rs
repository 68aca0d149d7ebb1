//! A real push consumer that records every delivery, for assertions.

use std::sync::{Arc, Mutex};

use outbox_kit::consumer::{Ack, Consumption, Delivery, StartFrom, Subscribe, Subscription, EVERY_TAG};

/// A started consumer and the deliveries it has seen so far.
pub struct Collector {
    subscription: Subscription,
    seen: Arc<Mutex<Vec<Delivery>>>,
}

impl Collector {
    /// Subscribes a fresh consumer group to `topic`, asking for messages stored since a
    /// minute before now (tests give each consumer a topic of its own besides).
    /// It consumes concurrently: it only records, and the relay tests judge order by
    /// the queue offsets the deliveries carry, not by their arrival.
    pub async fn start(namesrv: &str, topic: &str, group: &str) -> Self {
        Self::start_tagged(namesrv, topic, group, EVERY_TAG).await
    }

    /// As [`Self::start`], receiving only the messages of the tags in `tags`.
    pub async fn start_tagged(namesrv: &str, topic: &str, group: &str, tags: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let since = chrono::Local::now() - chrono::Duration::seconds(60);
        let record = move |d: &Delivery| {
            sink.lock().expect("collector lock").push(d.clone());
            Ack::Done
        };
        let spec = Subscribe {
            consumption: Consumption::Concurrent,
            tags,
            ..Subscribe::new(namesrv, group, topic, StartFrom::Since(since))
        };
        let subscription = Subscription::start(spec, record).await.expect("consumer starts");
        Collector { subscription, seen }
    }

    /// Everything received so far whose event_id satisfies `keep`.
    pub fn received(&self, keep: impl Fn(&str) -> bool) -> Vec<Delivery> {
        self.seen.lock().expect("collector lock").iter().filter(|r| keep(&r.event_id)).cloned().collect()
    }

    /// Waits until `expected` distinct events whose id starts with `prefix` were
    /// consumed (each at least once); returns all their deliveries so far.
    pub async fn wait_distinct(&self, prefix: &str, expected: usize, deadline: std::time::Duration) -> Vec<Delivery> {
        super::eventually(&format!("{expected} distinct events with prefix {prefix} consumed"), deadline, || async {
            let got = self.received(|id| id.starts_with(prefix));
            let distinct = got.iter().map(|r| r.event_id.as_str()).collect::<std::collections::HashSet<_>>().len();
            (distinct >= expected).then_some(got)
        })
        .await
    }

    pub async fn shutdown(self) {
        self.subscription.shutdown().await;
    }
}
