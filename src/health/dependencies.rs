//! One log line per change of a dependency's state: down, still down every few
//! minutes, back. Every lane of a broker and every retry of a reconnect sees the same
//! outage; the person reading the log wants to see it once, with how long it lasted.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// While a dependency stays down, a reminder this often.
pub(crate) const STILL_DOWN_EVERY: Duration = Duration::from_secs(300);

/// Something outside the relay that it cannot work without.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Dependency {
    /// A RocketMQ broker, by name.
    Broker(String),
    /// The database whose binlog the relay reads, by address.
    BinlogSource(String),
}

impl Dependency {
    /// What the relay does while it is down.
    fn meanwhile(&self) -> &'static str {
        match self {
            Dependency::Broker(_) => {
                "its queues' events are held in order and sent again until it takes them; nothing is lost"
            }
            Dependency::BinlogSource(_) => {
                "reconnecting; the sweep delivers PENDING rows older than sweep.grace_ms meanwhile; nothing is skipped"
            }
        }
    }
}

impl fmt::Display for Dependency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Dependency::Broker(name) => write!(f, "broker {name}"),
            Dependency::BinlogSource(address) => write!(f, "binlog source {address}"),
        }
    }
}

/// Since when a dependency is down, and when that was last said.
#[derive(Debug)]
struct Down {
    since: Instant,
    said: Instant,
}

/// The dependencies that are down now.
#[derive(Debug, Default)]
pub(crate) struct DependencyLog {
    down: Mutex<BTreeMap<Dependency, Down>>,
}

impl DependencyLog {
    /// `dependency` failed because of `reason`: a WARN line the first time, and again
    /// every [`STILL_DOWN_EVERY`] while it lasts.
    pub(crate) fn down(&self, dependency: &Dependency, reason: &dyn fmt::Display) {
        let now = Instant::now();
        let mut down = self.lock();
        match down.get_mut(dependency) {
            None => {
                down.insert(dependency.clone(), Down { since: now, said: now });
                tracing::warn!(%dependency, %reason, "{dependency} is down: {}", dependency.meanwhile());
            }
            Some(state) if now.duration_since(state.said) >= STILL_DOWN_EVERY => {
                state.said = now;
                let down_secs = now.duration_since(state.since).as_secs();
                tracing::warn!(%dependency, %reason, down_secs, "{dependency} is still down after {down_secs} s");
            }
            Some(_) => {}
        }
    }

    /// `dependency` works: an INFO line if it was down.
    pub(crate) fn up(&self, dependency: &Dependency) {
        let mut down = self.lock();
        if down.is_empty() {
            return;
        }
        if let Some(state) = down.remove(dependency) {
            let down_secs = state.since.elapsed().as_secs_f64();
            tracing::info!(%dependency, down_secs, "{dependency} is back after {down_secs:.1} s");
        }
    }

    /// Whether `dependency` is down now.
    #[cfg(test)]
    fn is_down(&self, dependency: &Dependency) -> bool {
        self.lock().contains_key(dependency)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Dependency, Down>> {
        self.down.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn down_until_up_once_per_dependency() {
        let log = DependencyLog::default();
        let (a, b) = (Dependency::Broker("a".into()), Dependency::Broker("b".into()));
        log.down(&a, &"refused");
        log.down(&a, &"refused again");
        assert!(log.is_down(&a) && !log.is_down(&b));
        log.up(&b);
        assert!(log.is_down(&a));
        log.up(&a);
        assert!(!log.is_down(&a));
    }
}
