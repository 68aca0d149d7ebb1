//! A lane held by an outage of its broker, counted in that broker's gauge of held lanes
//! (`relay_broker_held_lanes`) from its first unconfirmed send until a send is
//! confirmed again, or the lane ends.

use std::sync::atomic::{AtomicBool, Ordering};

use prometheus_client::metrics::gauge::Gauge;

/// Whether one lane is held by an outage now; counted once in its broker's gauge.
pub struct OutageFlag {
    on: AtomicBool,
    held_lanes: Gauge,
}

impl OutageFlag {
    pub fn new(held_lanes: Gauge) -> Self {
        Self { on: AtomicBool::new(false), held_lanes }
    }

    pub(super) fn begin(&self) {
        if !self.on.swap(true, Ordering::Relaxed) {
            self.held_lanes.inc();
        }
    }

    pub(super) fn end(&self) {
        if self.on.swap(false, Ordering::Relaxed) {
            self.held_lanes.dec();
        }
    }
}

impl Drop for OutageFlag {
    fn drop(&mut self) {
        self.end();
    }
}
