//! The command line: every subcommand and its arguments. `--config`, `--json` and
//! `--log-format` are global: they go before or after the subcommand.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use outbox_relay::config::{LogFormat, PartitionPeriod};
use outbox_relay::ops::position;
use outbox_relay::ops::reconcile::{DedupTable, UtcTime};

#[derive(Parser)]
#[command(
    name = "outbox-relay",
    version,
    about = "Relays transactional-outbox events from the MySQL binlog to RocketMQ"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Configuration file (TOML); OUTBOX_RELAY__SECTION__KEY variables override it.
    #[arg(long, short, global = true, env = "OUTBOX_RELAY_CONFIG", default_value = "config/relay.toml")]
    pub config: PathBuf,
    /// Print the operator commands' results as JSON, for scripts.
    #[arg(long, global = true)]
    pub json: bool,
    /// Log line format, `text` or `json`, for every command; overrides the config's log.format.
    #[arg(long, global = true, value_parser = parse_log_format)]
    pub log_format: Option<LogFormat>,
}

#[derive(Subcommand)]
pub enum Command {
    /// Run the relay.
    Run,
    /// Create or upgrade the outbox table and the relay's tables (idempotent).
    Migrate(MigrateArgs),
    /// Print the effective configuration (file + environment), passwords redacted.
    Config,
    /// Broker operations that need no relay configuration.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Every start check in one report: source settings, grants, tables, broker and
    /// topics, one line each (ok, warn, FAIL with the fix); exits 4 on any FAIL.
    Check,
    /// The operator commands on the outbox table and the relay's position.
    #[command(flatten)]
    Operator(OperatorCommand),
    /// Print a shell completion script, e.g. `outbox-relay completions bash >
    /// /etc/bash_completion.d/outbox-relay`.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: clap_complete::Shell,
    },
    /// Print the man page (roff), e.g. `outbox-relay man | man -l -`.
    Man,
}

/// What operators run against the configured outbox table.
#[derive(Subcommand)]
pub enum OperatorCommand {
    /// Where the relay of the configured table stands: leader, position, rows, backlog,
    /// every instance of the fleet (role, term, readiness) and the local one's own account.
    Status,
    /// FAILED rows.
    #[command(subcommand)]
    Failed(FailedCommand),
    /// Put FAILED rows back to PENDING, retries reset, so the relay sends them again (audited).
    Requeue {
        #[command(flatten)]
        which: Which,
        #[command(flatten)]
        by: ByWhom,
    },
    /// Mark FAILED rows SKIPPED: never sent, and the events of their keys go on (audited).
    Skip {
        /// Row ids (the `id` column), one or more.
        #[arg(long = "id", required = true, num_args = 1..)]
        ids: Vec<u64>,
        #[command(flatten)]
        by: ByWhom,
    },
    /// Send SENT rows created in a window once more, under the same event_id (back to
    /// PENDING; the sweep publishes them; consumers deduplicate) (audited).
    Resend {
        /// Start of the window of created_at (included), UTC: RFC 3339, or YYYY-MM-DD[ HH:MM:SS].
        #[arg(long, value_parser = UtcTime::parse)]
        since: UtcTime,
        /// End of the window (excluded), UTC.
        #[arg(long, value_parser = UtcTime::parse)]
        until: UtcTime,
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Only this biz_key.
        #[arg(long)]
        key: Option<String>,
        #[command(flatten)]
        by: ByWhom,
    },
    /// Stop publishing, fleet-wide and durably: the leader drains its sends, saves its
    /// position and publishes nothing (holding the lease, so no standby starts) until
    /// `resume` (audited).
    Pause {
        #[command(flatten)]
        by: ByWhom,
    },
    /// Publish again after `pause` (audited).
    Resume {
        #[command(flatten)]
        by: ByWhom,
    },
    /// The leader drains and gives its lease up; a standby takes the next term. Waits
    /// until another instance leads and names it (audited).
    Handover {
        /// How long to wait for another instance to lead, seconds.
        #[arg(long, default_value_t = 15)]
        within_secs: u64,
        #[command(flatten)]
        by: ByWhom,
    },
    /// Delete SENT rows older than the retention, by primary key in paced batches (audited).
    Cleanup {
        /// Keep SENT rows this long: 7d, 24h, 30m, 90s.
        #[arg(long, default_value = "7d", value_parser = parse_retention)]
        retention: std::time::Duration,
        /// Rows per DELETE.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Pause between batches, milliseconds.
        #[arg(long, default_value_t = 50)]
        pace_ms: u64,
        #[command(flatten)]
        by: ByWhom,
    },
    /// Look a sample of recent SENT rows up on the broker, by event_id and msg_id;
    /// lists those the broker does not have (reads only; exit 7 when there are any).
    Verify {
        /// Rows to check, drawn at random from the newest 10 times as many SENT rows.
        #[arg(long, default_value_t = 100)]
        sample: usize,
    },
    /// Compare SENT outbox rows with the consumer kit's dedup table in a time window;
    /// lists events on one side only (reads only; exit 7 when there are any).
    Reconcile(ReconcileArgs),
    /// The relay's binlog position: local checkpoint, mirror and leader.
    #[command(subcommand)]
    Position(PositionCommand),
}

#[derive(Subcommand)]
pub enum PositionCommand {
    /// The local RocksDB checkpoint, the mirrored one on the primary and who leads.
    Show,
    /// Set where the relay resumes (mirror and local checkpoint; audited).
    Set {
        #[command(flatten)]
        target: PositionTarget,
        #[command(flatten)]
        by: ByWhom,
    },
}

#[derive(Subcommand)]
pub enum FailedCommand {
    /// FAILED rows, oldest first, with why they failed.
    List {
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        topic: Option<String>,
        /// Only this biz_key.
        #[arg(long)]
        key: Option<String>,
    },
}

/// The broker commands. Each reaches the NameServer of `--namesrv`, or else of
/// `rocketmq.namesrv` in the configuration, and signs with its ACL keys when it has them.
#[derive(Subcommand)]
pub enum AdminCommand {
    /// Create a topic with a pinned number of queues and wait until it is routable.
    CreateTopic {
        #[command(flatten)]
        namesrv: NamesrvArg,
        /// The broker cluster to create it on.
        #[arg(long, default_value = "DefaultCluster")]
        cluster: String,
        #[arg(long)]
        topic: String,
        /// Queues in all, spread evenly over the cluster's brokers (8 over two: 4 each).
        #[arg(long)]
        queues: u32,
        /// Fail unless the cluster has this many master brokers registered.
        #[arg(long)]
        brokers: Option<usize>,
    },
    /// Find messages by KEYS (the event_id) in the broker's index, like `mqadmin queryMsgByKey`.
    Find {
        #[command(flatten)]
        namesrv: NamesrvArg,
        #[arg(long)]
        topic: String,
        /// The event_id (the relay puts it in KEYS).
        #[arg(long)]
        key: String,
    },
    /// Send one probe message to the first queue of each broker of a topic; succeeds
    /// only when every broker answers SEND_OK.
    Ping {
        #[command(flatten)]
        namesrv: NamesrvArg,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        queues: u32,
        /// Also find each probe by its key within this many seconds (the broker's key index).
        #[arg(long, value_name = "SECS")]
        find_within: Option<u64>,
    },
}

/// `--namesrv`: the NameServer, when not the configuration's.
#[derive(Args)]
pub struct NamesrvArg {
    /// host:port of the NameServer; default: rocketmq.namesrv of --config.
    #[arg(long)]
    pub namesrv: Option<String>,
}

/// What `migrate` runs as, and on what.
#[derive(Args)]
pub struct MigrateArgs {
    /// Run the DDL as this user instead of primary.url (one with CREATE and ALTER);
    /// it connects with primary.tls.
    #[arg(long, env = "OUTBOX_RELAY_ADMIN_URL", hide_env_values = true)]
    pub admin_url: Option<String>,
    /// A file holding --admin-url's password (a mounted secret), so the URL on the
    /// command line has none.
    #[arg(long, requires = "admin_url")]
    pub admin_password_file: Option<PathBuf>,
    /// Partition the outbox table by created_at (daily, hourly; minutely for tests);
    /// defaults to outbox.partition. A new table is created partitioned; a
    /// partitioned one gets its partitions ahead.
    #[arg(long)]
    pub partition: Option<PartitionPeriod>,
    /// Convert an existing unpartitioned outbox table in place (the server copies
    /// the table while writes to it wait; see docs/operations.md).
    #[arg(long)]
    pub convert: bool,
    /// Print the statements it would run, in order, and run none (it still connects,
    /// to see what exists).
    #[arg(long)]
    pub dry_run: bool,
}

/// Who makes the change and why; both are recorded in `outbox_relay_audit`.
#[derive(Args)]
pub struct ByWhom {
    /// Your name, as the audit row should show it.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub operator: String,
    /// Why (a ticket, an incident), as the audit row should show it.
    #[arg(long, value_parser = clap::builder::NonEmptyStringValueParser::new())]
    pub reason: String,
    /// Show what would change, change nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// Which FAILED rows.
#[derive(Args)]
#[group(required = true, multiple = false)]
pub struct Which {
    /// Row ids (the `id` column), one or more.
    #[arg(long = "id", num_args = 1..)]
    pub ids: Vec<u64>,
    /// Every FAILED row.
    #[arg(long)]
    pub all_failed: bool,
}

/// The window and the consumer's side of `reconcile`.
#[derive(Args)]
pub struct ReconcileArgs {
    /// Start of the window (included), UTC: RFC 3339, or YYYY-MM-DD[ HH:MM:SS].
    #[arg(long, value_parser = UtcTime::parse)]
    pub since: UtcTime,
    /// End of the window (excluded), UTC: RFC 3339, or YYYY-MM-DD[ HH:MM:SS].
    #[arg(long, value_parser = UtcTime::parse)]
    pub until: UtcTime,
    /// The consumer's database URL; default: primary.url, with the dedup table in the
    /// outbox table's schema. It is opened with primary.tls.
    #[arg(long, env = "OUTBOX_RELAY_CONSUMER_DB", hide_env_values = true)]
    pub consumer_db: Option<String>,
    /// The consumer kit's dedup table: `table` (in --consumer-db's database) or `schema.table`.
    #[arg(long, default_value = "event_dedup", value_parser = DedupTable::parse)]
    pub consumer_table: DedupTable,
}

/// Where `position set` puts the relay: a GTID position, or a file and offset.
#[derive(Args)]
pub struct PositionTarget {
    /// A MariaDB GTID list (domain-server-seq[,...]) or a MySQL GTID set (uuid:interval[,...]).
    #[arg(long, value_parser = position::parse_gtid, required_unless_present = "file", conflicts_with = "file")]
    pub gtid: Option<String>,
    /// A binlog file of the checkpoint's source server, e.g. mysql-bin.000123.
    #[arg(long, value_parser = position::parse_binlog_file, requires = "pos")]
    pub file: Option<String>,
    /// The offset in --file (4 is its first event).
    #[arg(long, value_parser = clap::value_parser!(u64).range(4..), requires = "file")]
    pub pos: Option<u64>,
    /// Set it even while a relay holds the leader lease: its term ends and it steps down.
    #[arg(long)]
    pub force: bool,
}

/// `--log-format`: `text` or `json`.
fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    match text {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!("{text:?}: give text or json")),
    }
}

/// `7d`, `24h`, `30m`, `90s` (or a bare number of seconds) as a duration.
pub fn parse_retention(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = text.split_at(text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len()));
    let seconds_per = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(format!("{text:?}: use a number with s, m, h or d, e.g. 7d")),
    };
    let number: u64 = number.parse().map_err(|_| format!("{text:?}: use a number with s, m, h or d, e.g. 7d"))?;
    Ok(Duration::from_secs(number.saturating_mul(seconds_per)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retention_reads_days_hours_minutes_and_seconds() {
        assert_eq!(parse_retention("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(parse_retention("24h"), Ok(Duration::from_secs(86_400)));
        assert_eq!(parse_retention("90"), Ok(Duration::from_secs(90)));
        assert!(parse_retention("7w").is_err() && parse_retention("d").is_err());
    }
}
