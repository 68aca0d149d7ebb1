//! Prometheus text rendering, shared by the relay's /metrics and applications that
//! expose the kit's counters.

use prometheus_client::registry::Registry;

/// A registry in the Prometheus text format.
pub fn render(registry: &Registry) -> String {
    let mut text = String::new();
    // Writing into a String cannot fail.
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    text
}
