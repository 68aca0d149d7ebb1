//! Command-line options: every size is a flag; the defaults keep the whole suite under
//! ten minutes on a 2-core machine.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};

/// One kind of measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Case {
    Raw,
    Drain,
    Latency,
    /// `latency` with `--held-keys` distinct keys held behind FAILED rows (not in the
    /// default run).
    Held,
    /// `drain` of a first start: the rows go out by the full sweep, not the binlog
    /// path (not in the default run; binlog mode only).
    SweepDrain,
    Bigtx,
    /// Retiring expired rows, DELETE against partition DROP (not in the default run:
    /// it fills two tables of `--retention-rows`).
    Retention,
}

/// How the relay finds rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Mode {
    Binlog,
    Poll,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Binlog => "binlog",
            Mode::Poll => "poll",
        }
    }
}

/// Benchmarks of outbox-relay against the local stack (`scripts/stack up`).
#[derive(Debug, Clone, Parser)]
#[command(name = "outbox-bench", version)]
pub struct Options {
    /// Cases to run, in order.
    #[arg(long, value_delimiter = ',', default_value = "raw,latency,drain,bigtx")]
    pub cases: Vec<Case>,
    /// Modes for `drain` and `latency`.
    #[arg(long, value_delimiter = ',', default_value = "binlog,poll")]
    pub modes: Vec<Mode>,
    /// Events in `raw` and `drain`.
    #[arg(long, default_value_t = 100_000)]
    pub events: usize,
    /// Payload size of every event, bytes.
    #[arg(long, default_value_t = 1_024)]
    pub body_bytes: usize,
    /// Fill the optional message columns of every row (tag, event type, headers with a
    /// trace context), to compare with a run without.
    #[arg(long)]
    pub message_columns: bool,
    /// Distinct biz_keys (events go round-robin over them).
    #[arg(long, default_value_t = 1_000)]
    pub keys: usize,
    /// `latency`: offered load, events per second (single-row transactions).
    #[arg(long, default_value_t = 1_000)]
    pub rate: u64,
    /// `latency`: how long the load is offered, seconds.
    #[arg(long, default_value_t = 20)]
    pub seconds: u64,
    /// `held`: distinct keys held behind a FAILED row each while the load runs.
    #[arg(long, default_value_t = 100_000)]
    pub held_keys: usize,
    /// `bigtx`: rows in the one big transaction.
    #[arg(long, default_value_t = 100_000)]
    pub bigtx_rows: usize,
    /// `bigtx`: rows in the backlog drained afterwards.
    #[arg(long, default_value_t = 1_000_000)]
    pub backlog_rows: usize,
    /// `retention`: old SENT rows each side retires.
    #[arg(long, default_value_t = 5_000_000)]
    pub retention_rows: usize,
    /// `retention`: payload size of the old rows and the load, bytes.
    #[arg(long, default_value_t = 256)]
    pub retention_body_bytes: usize,
    /// Relay setting `lanes.batch_size` (also the `raw` batch); the relay's default.
    #[arg(long, default_value_t = 128)]
    pub batch_size: usize,
    /// Relay setting `lanes.max_in_flight`.
    #[arg(long, default_value_t = 20_000)]
    pub max_in_flight: usize,
    /// Queues of the benchmark topic.
    #[arg(long, default_value_t = 8)]
    pub queues: u32,
    /// Extra relay settings, `OUTBOX_RELAY__SECTION__KEY=value` (repeatable), for A/B runs.
    #[arg(long = "relay-env", value_parser = parse_env)]
    pub relay_env: Vec<(String, String)>,
    /// A name for this run, carried in every JSON line.
    #[arg(long, default_value = "default")]
    pub label: String,
    /// The relay binary (default: `outbox-relay` beside this one).
    #[arg(long)]
    pub relay: Option<PathBuf>,
    /// Root URL of the stack's database (creates tables, inserts rows).
    #[arg(long, env = "OUTBOX_RELAY_TEST_DB_URL", default_value = "mysql://root@127.0.0.1:13306/app")]
    pub db_url: String,
    #[arg(
        long,
        env = "OUTBOX_RELAY_TEST_REPL_URL",
        default_value = "mysql://outbox_repl:repl-secret@127.0.0.1:13306/app"
    )]
    pub repl_url: String,
    #[arg(
        long,
        env = "OUTBOX_RELAY_TEST_WRITER_URL",
        default_value = "mysql://outbox_writer:writer-secret@127.0.0.1:13306/app"
    )]
    pub writer_url: String,
    /// Root URL of the replica the relay reads (`retention` waits until it applied the fill).
    #[arg(long, env = "OUTBOX_RELAY_TEST_REPLICA_ROOT_URL", default_value = "mysql://root@127.0.0.1:13307/app")]
    pub replica_root_url: String,
    #[arg(long, env = "OUTBOX_RELAY_TEST_NAMESRV", default_value = "127.0.0.1:19876")]
    pub namesrv: String,
    /// The stack's state directory, whose pid files name the MariaDB servers and the
    /// broker whose CPU each case reports (without it, only the relay's), and whose disk
    /// is checked for room before every case (without it, not checked).
    #[arg(long, env = "OUTBOX_RELAY_TEST_STACK")]
    pub stack_dir: Option<PathBuf>,
}

fn parse_env(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if key.starts_with("OUTBOX_RELAY__") => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?}: expected OUTBOX_RELAY__SECTION__KEY=value")),
    }
}
