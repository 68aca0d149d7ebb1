//! What the lanes' sends have shown about each broker of the cluster since it last
//! confirmed a send: whether it could not be connected to (the probe then looks for its
//! return), and which of its queues got an answer of unknown class (an answer every
//! queue gets is the broker's trouble, not an event's).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, PoisonError};

/// Every broker's state, by name.
#[derive(Debug, Default)]
pub(crate) struct Brokers(Mutex<HashMap<String, BrokerState>>);

/// One broker, since its last confirmed send.
#[derive(Debug, Default)]
struct BrokerState {
    /// A send could not connect to it.
    unreachable: bool,
    /// Queue ids whose sends it answered with an error of unknown class.
    refusing: BTreeSet<i32>,
}

impl Brokers {
    /// A send to `broker` was confirmed: it works, whatever it did before.
    pub(crate) fn confirmed(&self, broker: &str) {
        if let Some(state) = self.lock().get_mut(broker) {
            *state = BrokerState::default();
        }
    }

    /// A send could not connect to `broker`.
    pub(crate) fn unreachable(&self, broker: &str) {
        self.with(broker, |state| state.unreachable = true);
    }

    /// The probe reached `broker` again: the lanes try it at once.
    pub(crate) fn reached(&self, broker: &str) {
        self.with(broker, |state| state.unreachable = false);
    }

    /// The brokers no send could connect to since their last confirmed send.
    pub(crate) fn unreachable_now(&self) -> Vec<String> {
        self.lock().iter().filter(|(_, state)| state.unreachable).map(|(name, _)| name.clone()).collect()
    }

    /// `broker` answered a send to queue `queue` with an error of unknown class; how
    /// many of its queues it has answered so since its last confirmed send.
    pub(crate) fn refused(&self, broker: &str, queue: i32) -> usize {
        self.with(broker, |state| {
            state.refusing.insert(queue);
            state.refusing.len()
        })
    }

    fn with<T>(&self, broker: &str, change: impl FnOnce(&mut BrokerState) -> T) -> T {
        let mut brokers = self.lock();
        match brokers.get_mut(broker) {
            Some(state) => change(state),
            None => change(brokers.entry(broker.to_owned()).or_default()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, BrokerState>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_confirmed_send_forgets_what_the_broker_did_before() {
        let brokers = Brokers::default();
        brokers.unreachable("broker-b");
        assert_eq!(brokers.refused("broker-b", 0), 1);
        assert_eq!(brokers.refused("broker-b", 3), 2);
        assert_eq!(brokers.refused("broker-b", 3), 2, "a queue counts once");
        assert_eq!(brokers.refused("broker-a", 3), 1, "each broker on its own");
        assert_eq!(brokers.unreachable_now(), ["broker-b"]);
        brokers.confirmed("broker-b");
        assert!(brokers.unreachable_now().is_empty());
        assert_eq!(brokers.refused("broker-b", 0), 1);
    }

    #[test]
    fn a_broker_the_probe_reached_is_tried_again() {
        let brokers = Brokers::default();
        brokers.unreachable("broker-a");
        brokers.reached("broker-a");
        assert!(brokers.unreachable_now().is_empty());
    }
}
