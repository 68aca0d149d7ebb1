//! The `outbox-relay` command: parses arguments, sets up logging, calls the library,
//! and turns a failure into one readable line and an exit code (see `exit`).
#![recursion_limit = "512"]

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use outbox_relay::config::{self, Config, DbUrl, LogFormat};
use outbox_relay::relay;
use outbox_relay::rocketmq::ClientHost;
use outbox_relay::store;
use outbox_relay::{admin, db, exit};
use rocketmq_client_rust::ClientRuntime;
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// mimalloc instead of the system's allocator: the relay allocates a few small buffers
/// per event and frees them a batch at a time, more than glibc's per-thread cache
/// holds, so most of them would go through its slower shared bins. mimalloc costs the
/// relay a fifth less CPU per event; with transparent huge pages off (see
/// `without_huge_pages`) its resident memory is about what glibc's would be.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod operator;

#[derive(Parser)]
#[command(
    name = "outbox-relay",
    version,
    about = "Relays transactional-outbox events from the MySQL binlog to RocketMQ"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log line format, `text` or `json`, for every command; overrides the config's log.format.
    #[arg(long, global = true, value_parser = parse_log_format)]
    log_format: Option<LogFormat>,
}

#[derive(Args)]
struct ConfigArg {
    /// Configuration file (TOML); OUTBOX_RELAY__SECTION__KEY variables override it.
    #[arg(long, short, env = "OUTBOX_RELAY_CONFIG", default_value = "config/relay.toml")]
    config: PathBuf,
}

#[derive(Subcommand)]
enum Command {
    /// Run the relay.
    Run(ConfigArg),
    /// Create or upgrade the outbox table and the relay's tables (idempotent).
    Migrate {
        #[command(flatten)]
        config: ConfigArg,
        /// Run the DDL as this user instead of primary.url (one with CREATE and ALTER);
        /// it connects with primary.tls.
        #[arg(long)]
        admin_url: Option<String>,
    },
    /// Print the effective configuration (file + environment), passwords redacted.
    Config(ConfigArg),
    /// Broker operations that need no relay configuration.
    #[command(subcommand)]
    Admin(AdminCommand),
    /// Where the relay of the configured table stands: leader, position, rows, backlog.
    Status {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        json: bool,
    },
    /// Every start check in one report: source settings, grants, tables, broker and
    /// topics, one line each (ok, warn, FAIL with the fix); exits 4 on any FAIL.
    Check {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        json: bool,
    },
    /// FAILED rows.
    #[command(subcommand)]
    Failed(FailedCommand),
    /// Put FAILED rows back to PENDING, retries reset, so the relay sends them again (audited).
    Requeue {
        #[command(flatten)]
        config: ConfigArg,
        #[command(flatten)]
        which: operator::Which,
        #[command(flatten)]
        by: operator::ByWhom,
        #[arg(long)]
        json: bool,
    },
    /// Mark FAILED rows SKIPPED: never sent, and the events of their keys go on (audited).
    Skip {
        #[command(flatten)]
        config: ConfigArg,
        /// Row ids (the `id` column), one or more.
        #[arg(long = "id", required = true, num_args = 1..)]
        ids: Vec<u64>,
        #[command(flatten)]
        by: operator::ByWhom,
        #[arg(long)]
        json: bool,
    },
    /// Delete SENT rows older than the retention, by primary key in paced batches (audited).
    Cleanup {
        #[command(flatten)]
        config: ConfigArg,
        /// Keep SENT rows this long: 7d, 24h, 30m, 90s.
        #[arg(long, default_value = "7d", value_parser = operator::parse_retention)]
        retention: std::time::Duration,
        /// Rows per DELETE.
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// Pause between batches, milliseconds.
        #[arg(long, default_value_t = 50)]
        pace_ms: u64,
        #[command(flatten)]
        by: operator::ByWhom,
        #[arg(long)]
        json: bool,
    },
    /// Compare SENT outbox rows with the consumer kit's dedup table in a time window;
    /// lists events on one side only (reads only; exit 7 when there are any).
    Reconcile {
        #[command(flatten)]
        config: ConfigArg,
        #[command(flatten)]
        args: operator::ReconcileArgs,
        #[arg(long)]
        json: bool,
    },
    /// The relay's binlog position: local checkpoint, mirror and leader.
    #[command(subcommand)]
    Position(PositionCommand),
}

#[derive(Subcommand)]
enum PositionCommand {
    /// The local RocksDB checkpoint, the mirrored one on the primary and who leads.
    Show {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long)]
        json: bool,
    },
    /// Set where the relay resumes (mirror and local checkpoint; audited).
    Set {
        #[command(flatten)]
        config: ConfigArg,
        #[command(flatten)]
        target: operator::PositionTarget,
        #[command(flatten)]
        by: operator::ByWhom,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum FailedCommand {
    /// FAILED rows, oldest first, with why they failed.
    List {
        #[command(flatten)]
        config: ConfigArg,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        topic: Option<String>,
        /// Only this biz_key.
        #[arg(long)]
        key: Option<String>,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Subcommand)]
enum AdminCommand {
    /// Create a topic with a pinned number of queues and wait until it is routable.
    CreateTopic {
        #[arg(long)]
        namesrv: String,
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
        #[arg(long)]
        namesrv: String,
        #[arg(long)]
        topic: String,
        /// The event_id (the relay puts it in KEYS).
        #[arg(long)]
        key: String,
    },
    /// Send one probe message to queue 0 of a topic; succeeds only on SEND_OK.
    Ping {
        #[arg(long)]
        namesrv: String,
        #[arg(long)]
        topic: String,
        #[arg(long)]
        queues: u32,
    },
}

/// Set once logging writes to stderr: from then on errors are logged, not printed.
static LOGGING: std::sync::OnceLock<()> = std::sync::OnceLock::new();

fn main() -> ExitCode {
    let cli = Cli::parse();
    let log_format = cli.log_format;
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            let code = exit::code_for(error.as_ref());
            // A failure before logging was set up (the configuration) is logged as
            // asked for on the command line; plain text needs no logger.
            if LOGGING.get().is_none() && log_format == Some(LogFormat::Json) {
                init_logging("error", LogFormat::Json);
            }
            if LOGGING.get().is_some() {
                tracing::error!(exit_code = code, "{error:#}");
            } else {
                eprintln!("outbox-relay: error: {error:#}");
            }
            ExitCode::from(code)
        }
    }
}

/// Turns transparent huge pages off for this process. mimalloc asks the kernel for huge
/// pages for its memory and gives memory back when it falls empty, so every region
/// touched again came back as a whole 2 MiB page for the kernel to zero: in a drain that
/// cost 5 to 9% more CPU and some 45 MiB more resident memory. Without it the relay
/// runs as before, with that cost.
#[cfg(target_os = "linux")]
fn without_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integers only (as unsigned longs; zeros in the
    // last three ask for the plain setting) and sets a flag of this process.
    let (on, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, unused, unused, unused) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(%error, "transparent huge pages stay on: the relay may use more memory and CPU");
    }
}

#[cfg(not(target_os = "linux"))]
fn without_huge_pages() {}

/// The runtime of every command but `run` (which runs on the RocketMQ client's).
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Runtime::new().context("cannot start the async runtime")
}

fn run(cli: Cli) -> anyhow::Result<()> {
    let load_config = |arg: &ConfigArg| load_config(arg, cli.log_format);
    match cli.command {
        Command::Config(arg) => print_config(&load_config(&arg)?),
        Command::Migrate { config, admin_url } => runtime()?.block_on(migrate(&load_config(&config)?, admin_url)),
        Command::Run(arg) => {
            let config = load_config(&arg)?;
            without_huge_pages();
            // On the RocketMQ client's runtime, beside its producers (see `ClientHost::run`).
            let host = ClientHost::with_workers("relay", Some(config.runtime.worker_threads))
                .context("cannot start the async runtime")?;
            let client = host.runtime();
            host.run(run_relay(&config, client))
        }
        Command::Admin(command) => {
            init_logging("warn", cli.log_format.unwrap_or(LogFormat::Text));
            runtime()?.block_on(run_admin(command))
        }
        Command::Status { config, json } => {
            runtime()?.block_on(operator::run(&load_config(&config)?, operator::Action::Status, json))
        }
        Command::Check { config, json } => runtime()?.block_on(operator::check(&load_config(&config)?, json)),
        Command::Failed(FailedCommand::List { config, limit, topic, key, json }) => {
            let action = operator::Action::List { limit, topic, key };
            runtime()?.block_on(operator::run(&load_config(&config)?, action, json))
        }
        Command::Requeue { config, which, by, json } => {
            runtime()?.block_on(operator::run(&load_config(&config)?, operator::Action::Requeue { which, by }, json))
        }
        Command::Skip { config, ids, by, json } => {
            runtime()?.block_on(operator::run(&load_config(&config)?, operator::Action::Skip { ids, by }, json))
        }
        Command::Cleanup { config, retention, batch, pace_ms, by, json } => {
            let action =
                operator::Action::Cleanup { retention, batch, pace: std::time::Duration::from_millis(pace_ms), by };
            runtime()?.block_on(operator::run(&load_config(&config)?, action, json))
        }
        Command::Reconcile { config, args, json } => {
            runtime()?.block_on(operator::run(&load_config(&config)?, operator::Action::Reconcile(args), json))
        }
        Command::Position(PositionCommand::Show { config, json }) => {
            runtime()?.block_on(operator::run(&load_config(&config)?, operator::Action::PositionShow, json))
        }
        Command::Position(PositionCommand::Set { config, target, by, json }) => {
            let action = operator::Action::PositionSet { target, by };
            runtime()?.block_on(operator::run(&load_config(&config)?, action, json))
        }
    }
}

/// Loads the configuration and sets up logging: `log_format` (from the command line)
/// over the file's `log.format`.
fn load_config(arg: &ConfigArg, log_format: Option<LogFormat>) -> anyhow::Result<Config> {
    let config = config::load(&arg.config)?;
    init_logging(&config.log.level, log_format.unwrap_or(config.log.format));
    Ok(config)
}

/// `--log-format`: `text` or `json`.
fn parse_log_format(text: &str) -> Result<LogFormat, String> {
    match text {
        "text" => Ok(LogFormat::Text),
        "json" => Ok(LogFormat::Json),
        _ => Err(format!("{text:?}: give text or json")),
    }
}

fn print_config(config: &Config) -> anyhow::Result<()> {
    print!("{}", toml::to_string_pretty(config).context("cannot render the configuration")?);
    Ok(())
}

async fn migrate(config: &Config, admin_url: Option<String>) -> anyhow::Result<()> {
    let url = admin_url.map_or_else(|| config.primary.url.clone(), DbUrl::new);
    let pool = db::connect_with("primary", &url, &config.primary.tls, 1, &[]).await?;
    let outbox = config.outbox_table();
    let report =
        store::migrate(&pool, &outbox).await.map_err(|e| db::DbError::query("primary", &url, e)).with_context(
            || format!("migrating {} failed (the user needs CREATE and ALTER; see --admin-url)", outbox.qualified()),
        )?;
    tracing::info!(outbox_created = report.outbox_created, applied = ?report.applied, added = ?report.added, table = %outbox.qualified(), "migrate finished");
    pool.disconnect().await.ok();
    Ok(())
}

async fn run_relay(config: &Config, client: Arc<ClientRuntime>) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    // The listener lives until the runtime stops, so a second signal still exits at
    // once while the client shuts down after the relay.
    tokio::spawn(stop_on_signal(shutdown.clone()));
    relay::run(config, client, shutdown).await?;
    tracing::info!("relay stopped");
    Ok(())
}

/// Cancels `shutdown` on SIGINT or SIGTERM: the relay drains, checkpoints, gives the
/// leader lease back and exits 0. A second signal exits at once (code 6): the next
/// leader resumes from the last checkpoint, so at most duplicates follow, never loss.
async fn stop_on_signal(shutdown: CancellationToken) {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM");
            None
        }
    };
    let mut signal = async || match terminate.as_mut() {
        Some(terminate) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        },
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    };
    signal().await;
    tracing::info!("stop requested: draining in-flight sends, checkpointing, then releasing the leader lease (a second signal stops at once)");
    shutdown.cancel();
    signal().await;
    let code = exit::ExitClass::Interrupted.code();
    tracing::warn!(exit_code = code, "second stop signal: exiting at once without drain; the next leader resumes from the last checkpoint (duplicates at most)");
    std::process::exit(i32::from(code));
}

async fn run_admin(command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::CreateTopic { namesrv, cluster, topic, queues, brokers } => {
            admin::create_topic(&namesrv, &cluster, &topic, queues, brokers)
                .await
                .with_context(|| format!("create topic {topic} via {namesrv}"))?;
            println!("topic {topic} ready with {queues} queues");
        }
        AdminCommand::Find { namesrv, topic, key } => {
            let found = admin::find(&namesrv, &topic, &key)
                .await
                .with_context(|| format!("find {key} in {topic} via {namesrv}"))?;
            for line in &found {
                println!("{line}");
            }
            anyhow::ensure!(!found.is_empty(), "no message with key {key} in topic {topic}");
        }
        AdminCommand::Ping { namesrv, topic, queues } => {
            let receipt =
                admin::ping(&namesrv, &topic, queues).await.with_context(|| format!("ping {topic} via {namesrv}"))?;
            println!("SEND_OK msg_id={}", receipt.msg_ids.join(","));
        }
    }
    Ok(())
}

fn init_logging(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let _ = LOGGING.set(());
    // A panic is one error line with its place, like every other failure.
    std::panic::set_hook(Box::new(|info| tracing::error!(target: "panic", "{info}")));
}
