//! Relay configuration: the typed shape of `relay.toml`.
//!
//! Configuration comes from one TOML file plus environment overrides
//! (`OUTBOX_RELAY__SECTION__KEY=value`, see [`load`]). Every section rejects unknown
//! keys, so a typo is an error at start-up instead of a silently ignored setting.
//! Database URLs are [`DbUrl`]s whose `Debug`/`Display`/serialised forms never show
//! the password, so a config dump or a log line cannot leak it; the same holds for
//! every [`Secret`]. Secrets can also come from files (`password_file`,
//! `secret_key_file`, see [`secret`]); database connections take a [`TlsConfig`].

mod claim;
mod db_url;
mod dedup_table;
mod load;
mod partition;
mod secret;
mod tls;
mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::backoff::Backoff;

pub use claim::ClaimMethod;
pub use db_url::DbUrl;
pub use dedup_table::DedupTable;
pub use load::{load, load_from_str, ConfigError, ENV_PREFIX};
pub use partition::PartitionPeriod;
pub use secret::{url_with_password_file, Secret};
pub use tls::{TlsConfig, TlsMode};

/// How the relay finds new outbox rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Tail the source's binlog; the sweep is only the slow fallback.
    Binlog,
    /// Poll the outbox table alone (servers without binlog access).
    Poll,
}

/// Which queue-selection function maps a biz_key to a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HashFunction {
    /// The relay's documented stable hash (see docs/design.md, "Routing").
    Stable,
    /// The Java client's `SelectMessageQueueByHash`: `abs(String.hashCode()) % n`.
    JavaStringHash,
}

/// The whole relay configuration.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default = "defaults::mode")]
    pub mode: Mode,
    /// Required in binlog mode; unused in poll mode.
    #[serde(default)]
    pub source: Option<SourceConfig>,
    pub primary: PrimaryConfig,
    #[serde(default)]
    pub outbox: OutboxConfig,
    pub rocketmq: RocketMqConfig,
    #[serde(default)]
    pub lanes: LanesConfig,
    #[serde(default)]
    pub retry: RetryConfig,
    #[serde(default)]
    pub sweep: SweepConfig,
    #[serde(default)]
    pub leader: LeaderConfig,
    #[serde(default)]
    pub cleanup: CleanupConfig,
    #[serde(default)]
    pub verify: VerifyConfig,
    #[serde(default)]
    pub reconcile: ReconcileConfig,
    pub checkpoint: CheckpointConfig,
    #[serde(default)]
    pub http: HttpConfig,
    #[serde(default)]
    pub log: LogConfig,
    #[serde(default)]
    pub traces: TracesConfig,
    #[serde(default)]
    pub runtime: RuntimeConfig,
}

/// The server whose binlog is tailed (a replica in production).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// `mysql://user:password@host:port/` of a user with REPLICATION SLAVE/CLIENT.
    pub url: DbUrl,
    /// A file holding the password; it replaces the password in `url`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    #[serde(default)]
    pub tls: TlsConfig,
    /// The replica server_id the relay registers with; unique among the source's replicas.
    pub server_id: u32,
    /// Replication heartbeat period: a connection silent for 3 periods is reconnected.
    #[serde(default = "defaults::heartbeat_ms")]
    pub heartbeat_ms: u64,
    /// How long (seconds) the relay may be down and still resume where it stopped:
    /// a source that purges its binlogs sooner is refused at start and by `check`
    /// (a purged position costs a full sweep of the outbox table).
    #[serde(default = "defaults::max_downtime_secs")]
    pub max_downtime_secs: u64,
}

/// The primary, where statuses are written, the sweep claims rows and the lease lives.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PrimaryConfig {
    pub url: DbUrl,
    /// A file holding the password; it replaces the password in `url`.
    #[serde(default)]
    pub password_file: Option<PathBuf>,
    #[serde(default)]
    pub tls: TlsConfig,
    #[serde(default = "defaults::pool_max")]
    pub pool_max: usize,
    /// Log the relay's own updates (SENT, claims, retries) with `binlog_row_image =
    /// MINIMAL` (primary key and changed columns instead of the whole row twice).
    /// Needs BINLOG ADMIN (MariaDB) or SESSION_VARIABLES_ADMIN (MySQL); without it the
    /// relay warns and writes with the server's setting.
    #[serde(default = "defaults::minimal_row_image")]
    pub minimal_row_image: bool,
}

/// Where the outbox table lives.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct OutboxConfig {
    /// Schema (database) of the outbox table; defaults to the primary URL's database.
    pub schema: Option<String>,
    pub table: String,
    /// Partition the table by `created_at` (`daily`, `hourly`; `minutely` for tests):
    /// what `migrate` creates, and what `check` expects. The leader keeps partitions
    /// ahead and, with `[cleanup]` scheduled, drops expired ones instead of deleting rows.
    pub partition: Option<PartitionPeriod>,
}

/// One topic the relay publishes to, with its pinned queue count.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TopicConfig {
    /// Pinned number of queues. Routing is `hash(biz_key) % queue_count`; it never
    /// follows the live route list, which shrinks while a broker is down.
    pub queue_count: u32,
}

/// The RocketMQ cluster.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct RocketMqConfig {
    /// NameServer address list, `host:port;host:port`.
    pub namesrv: String,
    #[serde(default = "defaults::producer_group")]
    pub producer_group: String,
    #[serde(default = "defaults::send_timeout_ms")]
    pub send_timeout_ms: u64,
    /// The broker's maxMessageSize; larger bodies are FAILED at once.
    #[serde(default = "defaults::max_message_bytes")]
    pub max_message_bytes: usize,
    /// The broker's `timerMaxDelaySec`: a row whose `deliver_at` is further ahead is
    /// FAILED at once.
    #[serde(default = "defaults::timer_max_delay_s")]
    pub timer_max_delay_s: u64,
    #[serde(default = "defaults::hash")]
    pub hash: HashFunction,
    /// Topics with pinned queue counts, keyed by topic name.
    #[serde(default)]
    pub topics: BTreeMap<String, TopicConfig>,
    /// ACL access key; requests are signed when it and a secret key are set.
    #[serde(default)]
    pub access_key: Option<String>,
    /// ACL secret key (or `secret_key_file`).
    #[serde(default)]
    pub secret_key: Option<Secret>,
    /// A file holding the ACL secret key.
    #[serde(default)]
    pub secret_key_file: Option<PathBuf>,
}

/// RocketMQ ACL credentials: requests are signed with the secret key (HMAC), which
/// itself never leaves the process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclCredentials {
    pub access_key: String,
    pub secret_key: Secret,
}

/// The ordered per-queue senders.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LanesConfig {
    /// Most events in one synchronous batch send.
    pub batch_size: usize,
    /// How long a lane waits to fill a batch once it holds one event.
    pub linger_ms: u64,
    /// Cap on events read but not yet acknowledged; the binlog reader waits when reached.
    pub max_in_flight: usize,
    /// Cap on the payload bytes of those events (plus a small overhead per event).
    pub max_in_flight_bytes: usize,
}

/// Retry and backoff for sends that failed for an unknown reason (outages are
/// waited out without counting; events the broker can never take fail at once).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    pub max_retry: u32,
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
    /// What a FAILED event means for the later events of its key.
    pub failed_key_policy: FailedKeyPolicy,
}

/// What a FAILED event means for the later events of its business key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailedKeyPolicy {
    /// Later events are not sent until an operator requeues or skips the FAILED one:
    /// the key's order is kept; the key waits for a person.
    Hold,
    /// Later events flow; the FAILED one waits for an operator and, once requeued,
    /// arrives after them.
    Continue,
}

/// The polling sweep (fallback in binlog mode, the whole relay in poll mode).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SweepConfig {
    /// Time between sweeps; unset: 30 s in binlog mode, 500 ms in poll mode.
    pub interval_ms: Option<u64>,
    /// Most rows per claim (claims repeat at once while they come back full).
    pub batch: usize,
    /// Rows newer than the binlog watermark minus this are left to the binlog path.
    pub grace_ms: u64,
    /// How long a claimed (SENDING) row belongs to its claimer.
    pub lease_ms: u64,
    /// Binlog path down this long: the sweep takes over.
    pub takeover_after_ms: u64,
    /// `auto` (SKIP LOCKED when the server has it), `skip_locked` or `optimistic`.
    pub claim: ClaimMethod,
}

/// The leader lease: one instance per outbox table publishes, the others wait.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LeaderConfig {
    /// The lease row's name; instances with the same name form one fleet. Defaults to
    /// `schema.table` of the outbox table.
    pub name: Option<String>,
    /// How long a lease lasts without renewal (renewed every third of it). A standby
    /// takes over at most this long after the leader died.
    pub lease_ms: u64,
}

/// Deleting SENT rows past their retention, on a schedule inside the leader (the
/// `cleanup` command does the same by hand). Off unless `interval_ms` is set. On a
/// partitioned outbox the leader drops whole expired partitions instead.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct CleanupConfig {
    /// How often the leader runs a cleanup; 0 (the default) never.
    pub interval_ms: u64,
    /// SENT rows are kept this long after they were sent.
    pub retention_secs: u64,
    /// Rows per DELETE (at most 1,000).
    pub batch: usize,
    /// Pause between batches, so the primary and its replicas keep up.
    pub pace_ms: u64,
}

/// The leader's sampler of SENT rows looked up on the broker (`outbox-relay verify`
/// does the same by hand).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct VerifyConfig {
    /// How often the leader checks a sample of the rows sent since its last check; 0 never.
    pub interval_ms: u64,
    /// Rows per check (each is one key-index query to the broker).
    pub sample: usize,
}

/// The leader's reconciliation, hour by hour and topic by topic: events created vs
/// SENT and, with a consumer's dedup table, SENT vs processed; written to the table
/// `outbox_relay_reconciliation` and exported as metrics. It only reads.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct ReconcileConfig {
    /// How often the leader reconciles; 0 never.
    pub interval_ms: u64,
    /// Rows younger than this are still on their way and are not counted yet.
    pub settle_secs: u64,
    /// How far back each run counts, from the start of that hour.
    pub lookback_secs: u64,
    /// The consumer kit's dedup table (`event_dedup`, or `schema.event_dedup`); unset:
    /// created vs SENT only.
    pub consumer_table: Option<DedupTable>,
    /// The consumer's database, when the dedup table is not on the primary.
    pub consumer_url: Option<DbUrl>,
}

/// The local RocksDB checkpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    pub path: PathBuf,
    #[serde(default = "defaults::checkpoint_interval_ms")]
    pub interval_ms: u64,
}

/// The metrics and health endpoint.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    pub listen: String,
}

/// The async runtime the relay and its RocketMQ client share.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Worker threads, about the cores the relay can use at once. One (the default)
    /// keeps every hand-off between the relay's tasks and the client's on that thread:
    /// no cross-thread wake-ups, the cheapest at a steady trickle.
    pub worker_threads: usize,
}

/// Log output.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// `text` or `json`.
    pub format: LogFormat,
    /// A tracing filter, e.g. `info` or `outbox_relay=debug,info`.
    pub level: String,
}

/// Spans of the sends of events whose headers carry a W3C trace context.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct TracesConfig {
    /// The OTLP/HTTP endpoint spans are exported to (`/v1/traces` is appended), e.g.
    /// `http://otel-collector:4318`; none (the default): no spans are built.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the exported spans.
    pub service_name: String,
}

impl Default for TracesConfig {
    fn default() -> Self {
        Self { otlp_endpoint: None, service_name: "outbox-relay".to_owned() }
    }
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

impl Config {
    /// The binlog source; `validate` guarantees it in binlog mode.
    pub fn source(&self) -> Result<&SourceConfig, ConfigError> {
        self.source.as_ref().ok_or_else(|| {
            ConfigError::invalid(
                "source",
                "no [source] section",
                "a [source] section (url, server_id) when mode = \"binlog\", or mode = \"poll\"",
            )
        })
    }

    /// The leader lease's name: `leader.name`, else `schema.table` of the outbox table.
    pub fn lease_name(&self) -> String {
        self.leader
            .name
            .clone()
            .unwrap_or_else(|| format!("{}.{}", self.outbox_schema().unwrap_or_default(), self.outbox.table))
    }

    /// The schema holding the outbox table: `outbox.schema`, else the primary URL's database.
    pub fn outbox_schema(&self) -> Option<&str> {
        self.outbox.schema.as_deref().or_else(|| self.primary.url.database())
    }

    /// The outbox table: its schema (see [`Config::outbox_schema`]) and name.
    pub fn outbox_table(&self) -> outbox_kit::OutboxTable {
        outbox_kit::OutboxTable {
            schema: self.outbox_schema().unwrap_or_default().to_owned(),
            table: self.outbox.table.clone(),
        }
    }
}

impl RocketMqConfig {
    /// The ACL credentials, when both keys are set (`validate` refuses one alone).
    pub fn acl(&self) -> Option<AclCredentials> {
        let access_key = self.access_key.clone()?;
        let secret_key = self.secret_key.clone()?;
        Some(AclCredentials { access_key, secret_key })
    }
}

impl SweepConfig {
    /// The sweep period for `mode`.
    pub fn interval(&self, mode: Mode) -> Duration {
        let default = match mode {
            Mode::Binlog => 30_000,
            Mode::Poll => 500,
        };
        Duration::from_millis(self.interval_ms.unwrap_or(default))
    }
}

impl RetryConfig {
    /// The pacing of retries: sends of the lanes, and the lanes' database writes.
    pub fn backoff(&self) -> Backoff {
        Backoff::new(Duration::from_millis(self.backoff_initial_ms), Duration::from_millis(self.backoff_max_ms))
    }
}

impl Default for OutboxConfig {
    fn default() -> Self {
        Self { schema: None, table: defaults::table(), partition: None }
    }
}

impl Default for LanesConfig {
    fn default() -> Self {
        Self { batch_size: 128, linger_ms: 1, max_in_flight: 20_000, max_in_flight_bytes: 256 * 1024 * 1024 }
    }
}

impl Default for RetryConfig {
    fn default() -> Self {
        Self {
            max_retry: 8,
            backoff_initial_ms: 1_000,
            backoff_max_ms: 300_000,
            failed_key_policy: FailedKeyPolicy::Hold,
        }
    }
}

impl Default for SweepConfig {
    fn default() -> Self {
        Self {
            interval_ms: None,
            batch: 100,
            grace_ms: 60_000,
            lease_ms: 30_000,
            takeover_after_ms: 60_000,
            claim: ClaimMethod::Auto,
        }
    }
}

impl Default for LeaderConfig {
    fn default() -> Self {
        Self { name: None, lease_ms: 10_000 }
    }
}

impl Default for CleanupConfig {
    fn default() -> Self {
        Self { interval_ms: 0, retention_secs: 7 * 86_400, batch: 1_000, pace_ms: 50 }
    }
}

impl Default for ReconcileConfig {
    fn default() -> Self {
        Self {
            interval_ms: 3_600_000,
            settle_secs: 300,
            lookback_secs: 7_200,
            consumer_table: None,
            consumer_url: None,
        }
    }
}

impl Default for VerifyConfig {
    fn default() -> Self {
        Self { interval_ms: 600_000, sample: 20 }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        Self { listen: "127.0.0.1:9464".to_owned() }
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        Self { worker_threads: 1 }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            format: LogFormat::Text,
            level: "info,rocketmq_client_rust=warn,rocketmq_transport=warn,rocketmq_runtime=warn".to_owned(),
        }
    }
}

mod defaults {
    use super::{HashFunction, Mode};

    pub fn mode() -> Mode {
        Mode::Binlog
    }
    pub fn heartbeat_ms() -> u64 {
        5_000
    }
    pub fn max_downtime_secs() -> u64 {
        86_400
    }
    pub fn minimal_row_image() -> bool {
        true
    }
    pub fn pool_max() -> usize {
        8
    }
    pub fn table() -> String {
        "outbox_event".to_owned()
    }
    pub fn producer_group() -> String {
        "outbox-relay".to_owned()
    }
    pub fn send_timeout_ms() -> u64 {
        3_000
    }
    pub fn max_message_bytes() -> usize {
        4 * 1024 * 1024
    }
    /// Apache RocketMQ 5.x's default `timerMaxDelaySec`: three days.
    pub fn timer_max_delay_s() -> u64 {
        3 * 24 * 3600
    }
    pub fn hash() -> HashFunction {
        HashFunction::Stable
    }
    pub fn checkpoint_interval_ms() -> u64 {
        200
    }
}
