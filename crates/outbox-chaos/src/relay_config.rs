//! The relays' configuration file for one run: the run's outbox table and topic, and
//! short leases, sweep and retry periods so that a fault's effects play out in
//! seconds. What differs per process (source, server id, checkpoint directory, HTTP
//! port) is passed in the environment by the fleet.

use std::path::Path;
use std::time::Duration;

/// How long the sweep waits for a binlog path that is down before it takes over.
pub(crate) const TAKEOVER_AFTER: Duration = Duration::from_secs(10);

/// The settings of a run that the configuration carries.
pub(crate) struct RelaySettings<'a> {
    pub(crate) primary_url: &'a str,
    pub(crate) namesrv: &'a str,
    pub(crate) table: &'a str,
    pub(crate) topic: &'a str,
    pub(crate) queues: u32,
    pub(crate) lease: Duration,
}

impl RelaySettings<'_> {
    /// Writes the configuration to `path`.
    pub(crate) fn write(&self, path: &Path) -> std::io::Result<()> {
        let lease_ms = self.lease.as_millis();
        // A send must end within the lease: lease >= 2 x (send timeout + 500 ms).
        let send_timeout_ms = (lease_ms / 2).saturating_sub(500).max(500);
        let toml = format!(
            r#"mode = "binlog"

[source]
# source.url and source.server_id come from the environment (the fleet switches them).
url = "mysql://set-by-env@127.0.0.1/app"
server_id = 1
heartbeat_ms = 1000

[primary]
url = "{primary}"
pool_max = 8

[outbox]
table = "{table}"

[rocketmq]
namesrv = "{namesrv}"
producer_group = "outbox-chaos"
send_timeout_ms = {send_timeout_ms}

[rocketmq.topics."{topic}"]
queue_count = {queues}

[retry]
backoff_initial_ms = 200
backoff_max_ms = 2000

[sweep]
interval_ms = 2000
grace_ms = 3000
lease_ms = 5000
takeover_after_ms = {takeover_after_ms}

[leader]
lease_ms = {lease_ms}

[checkpoint]
path = "/set-by-env"
interval_ms = 100

[log]
level = "info,rocketmq_client_rust=warn,rocketmq_transport=warn,rocketmq_runtime=warn"
"#,
            primary = self.primary_url,
            table = self.table,
            namesrv = self.namesrv,
            topic = self.topic,
            queues = self.queues,
            takeover_after_ms = TAKEOVER_AFTER.as_millis(),
        );
        std::fs::write(path, toml)
    }
}
