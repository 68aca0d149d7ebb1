//! The running relay: checks, start position, and the pipeline's tasks.
//!
//! ```text
//! binlog reader ──┐                                   ┌──> lane per queue ──SEND_OK──┐
//!                 ├─SourceTx─> coordinator ─LaneEvent─┤                              │
//! sweep (claims) ─┘   (permits: bounded in flight)    └<──────── LaneReport ─────────┘
//!                                │
//!                                ├──> checkpoint (RocksDB, after ack; binlog mode)
//!                                └──> SENT writer (primary, batched)
//! ```
//!
//! In poll mode there is no binlog reader and no checkpoint: the sweep alone feeds
//! the lanes, and the outbox table is the only state.
//!
//! The pipeline runs only while this instance holds the leader lease (see `leader`):
//! [`run`] checks the source and opens its connections once, then waits as a standby,
//! runs one pipeline per leader term, and waits again when a term is lost.

pub(crate) mod ack;
mod cleanup;
mod coordinator;
mod gauges;
pub mod route;
mod sent_writer;
mod start;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use mysql_async::prelude::Queryable;
use rocketmq_client_rust::ClientRuntime;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::backoff::Backoff;
use crate::checkpoint::{CheckpointWriter, Mirror};
use crate::config::{Config, Mode};
use crate::db::{self, DbError};
use crate::health::{Health, Part, Role};
use crate::http;
use crate::lanes::{HeldKeys, LaneSettings, Recorder};
use crate::leader::{keep, wait_for_lease, Keeper, Standby, Term, TermTiming};
use crate::metrics::RelayMetrics;
use crate::rocketmq::{ProducerSettings, PublishError, Publisher, QueueLayout, Resolved};
use crate::source::binlog::{Flavor, Reader, ReaderLinks, ReaderSettings};
use crate::source::sweep::{BinlogGuard, SweepSettings, Sweeper, Watermark};
use crate::source::{Budget, Handoff};
use crate::store::{check_migrated, ClaimStore, LeaseStore, Manual, SentStore, StatusStore, Unwritten, WriteBacks};
use crate::supervise::Supervisor;
use prometheus_client::metrics::gauge::Gauge;

pub use crate::error::RelayError;
use ack::AckTracker;
use coordinator::{Coordinator, Durable, Inputs};
use outbox_kit::OutboxTable;
use start::BinlogSource;

/// SENT write-backs that may wait for the primary before the pipeline slows down.
const SENT_BACKLOG: usize = 50_000;

/// Session setting for the relay's own writes. With the FULL image every SENT UPDATE
/// logs the whole row (payload included) twice, and the binlog path reads it back.
const MINIMAL_ROW_IMAGE: &str = "SET SESSION binlog_row_image = 'MINIMAL'";

/// This process's name in `owner` of the rows it claims: host, pid and start time,
/// so a restarted relay never mistakes a dead predecessor's leases for its own.
pub fn process_owner() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "relay".to_owned());
    let started =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis()).unwrap_or(0);
    format!("{host}:{}:{started}", std::process::id())
}

/// Runs the relay until `shutdown` is cancelled or a task fails; every task it
/// started has ended when it returns. The checks run and the connections open at
/// once; the pipeline runs only while this instance holds the leader lease. Its
/// producers run on `client`; running this future on that same runtime
/// (`ClientHost::run`) keeps one set of worker threads.
pub async fn run(config: &Config, client: Arc<ClientRuntime>, shutdown: CancellationToken) -> Result<(), RelayError> {
    let outbox = config.outbox_table();
    let Primary { shared: primary, write_backs } = open_primary(config).await?;
    let binlog = match config.mode {
        Mode::Binlog => Some(start::open(config, &outbox).await?),
        Mode::Poll => None,
    };
    check_migrated(&primary, &outbox)
        .await
        .map_err(|e| DbError::query("primary", &config.primary.url, e))?
        .map_err(|e| RelayError::Environment(e.to_string()))?;
    let lease = LeaseStore::new(primary.clone(), &outbox.schema, &config.lease_name());
    let holder = lease.holder().await.map_err(|e| DbError::query("primary", &config.primary.url, e))?;
    // Until a term is won, claims are fenced by a term no lease row has.
    let claims = ClaimStore::open(
        primary.clone(),
        outbox.clone(),
        process_owner(),
        Duration::from_millis(config.sweep.lease_ms),
        config.sweep.claim,
        config.retry.failed_key_policy,
        lease.unheld(),
    )
    .await
    .map_err(|e| DbError::query("primary", &config.primary.url, e))?;
    tracing::info!(mode = ?config.mode, owner = claims.owner(), claim = ?claims.method(), lease = %config.lease_name(), leader = ?holder.map(|h| h.holder), "starting");
    let publisher = Arc::new(
        Publisher::start(
            client,
            ProducerSettings {
                namesrv: config.rocketmq.namesrv.clone(),
                group: config.rocketmq.producer_group.clone(),
                send_timeout: Duration::from_millis(config.rocketmq.send_timeout_ms),
            },
            config.rocketmq.acl(),
        )
        .await?,
    );
    let warm = Warm { outbox, primary, write_backs, binlog, claims, publisher, lease };
    let result = serve(config, &warm, shutdown).await;
    shutdown_publisher(warm.publisher).await;
    result
}

/// Serves metrics and health while the instance leads or waits; stops them last.
async fn serve(config: &Config, warm: &Warm, shutdown: CancellationToken) -> Result<(), RelayError> {
    let health = Health::new();
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = RelayMetrics::register(&mut registry);
    crate::metrics::process::register(&mut registry, config.runtime.worker_threads);
    let http_stop = CancellationToken::new();
    let (address, server) =
        http::bind(&config.http.listen, Arc::new(registry), metrics.clone(), health.clone(), http_stop.clone())
            .await
            .map_err(|e| {
            RelayError::Environment(format!(
                "cannot listen on {} (http.listen): {e}; choose a free address",
                config.http.listen
            ))
        })?;
    // The endpoint outlives the pipeline (it answers "stopping" while the relay drains),
    // so it has a supervisor of its own, joined last; its failure stops the relay too.
    let endpoint = Supervisor::new(shutdown.clone(), health.clone());
    let stopped_on_purpose = http_stop.clone();
    endpoint.spawn("metrics endpoint", async move {
        let served = server.await.map_err(|e| RelayError::Internal(format!("the metrics endpoint failed: {e}")));
        match served {
            Ok(()) if !stopped_on_purpose.is_cancelled() => {
                Err(RelayError::Internal("the metrics endpoint stopped by itself".into()))
            }
            other => other,
        }
    });
    tracing::info!("metrics on http://{address}/metrics, readiness on http://{address}/readyz, liveness on http://{address}/healthz");
    let led = elect(config, warm, &metrics, &health, &shutdown).await;
    if !health.has_problem(&Part::Stopping) {
        health.problem(Part::Stopping, "stopping");
    }
    http_stop.cancel();
    let served = endpoint.join().await;
    led.and(served)
}

/// Waits as a standby, leads while the lease holds, and waits again when it is lost,
/// until shutdown or a failure. The lease is given back on the way out.
async fn elect(
    config: &Config,
    warm: &Warm,
    metrics: &RelayMetrics,
    health: &Health,
    shutdown: &CancellationToken,
) -> Result<(), RelayError> {
    let timing = TermTiming::new(
        Duration::from_millis(config.leader.lease_ms),
        Duration::from_millis(config.rocketmq.send_timeout_ms),
    );
    loop {
        health.set_role(Role::Standby);
        metrics.stand_down();
        let standby = Standby {
            lease: &warm.lease,
            holder: warm.claims.owner(),
            timing,
            source: warm.binlog.as_ref().map(|b| &b.pool),
            health,
        };
        let Some(term) = wait_for_lease(standby, shutdown).await else {
            return Ok(());
        };
        tracing::info!(term = term.number(), "took the leader lease: publishing");
        health.set_role(Role::Leader);
        metrics.leader.set(1);
        metrics.leader_term.set(i64::try_from(term.number()).unwrap_or(i64::MAX));
        let led = lead(config, warm, &term, timing, metrics, health, shutdown).await;
        if led.is_ok() && term.is_ended() && !shutdown.is_cancelled() {
            tracing::warn!(term = term.number(), "stepped down: standby again");
            continue;
        }
        metrics.stand_down();
        release_lease(&warm.lease, &term).await;
        return led;
    }
}

/// Runs one term's pipeline until shutdown, a failure, or the loss of the lease. The
/// lease keeper runs until the pipeline has stopped (drain and final checkpoint
/// included), under a supervisor of its own: its panic stops the pipeline too.
async fn lead(
    config: &Config,
    warm: &Warm,
    term: &Term,
    timing: TermTiming,
    metrics: &RelayMetrics,
    health: &Health,
    shutdown: &CancellationToken,
) -> Result<(), RelayError> {
    // Not ready until the parts say they work: the first sweep ran, the reader streams.
    health.problem(Part::Sweep, "sweep: the first sweep has not run yet");
    if warm.binlog.is_some() {
        health.problem(Part::BinlogSource, "binlog source: not streaming yet (starting)");
    }
    let stop = shutdown.child_token();
    let kept = CancellationToken::new();
    let keeping = Supervisor::new(stop.clone(), health.clone());
    let keeper = Keeper {
        term: term.clone(),
        lease: warm.lease.clone(),
        timing,
        pipeline: stop.clone(),
        health: health.clone(),
    };
    keeping.spawn("lease keeper", ok(keep(keeper, kept.clone())));
    let claims = warm.claims.under(warm.lease.fence(term.number()));
    let supervisor = Supervisor::new(stop.clone(), health.clone());
    // A start that waits on a dead primary or broker gives way to a stop or a lost lease.
    let started = tokio::select! {
        started = start_pipeline(config, warm, &claims, term, &supervisor, metrics.clone(), health) => started,
        () = stop.cancelled() => Ok(()),
    };
    if started.is_ok() {
        stop.cancelled().await;
    }
    if shutdown.is_cancelled() && !health.has_problem(&Part::Stopping) {
        health.problem(Part::Stopping, "stopping: draining in-flight sends, then checkpointing");
    }
    stop.cancel();
    let joined = supervisor.join().await;
    release_claims(&claims).await;
    kept.cancel();
    let kept_ok = keeping.join().await;
    started.and(joined).and(kept_ok)
}

/// Checks a configured topic's route at the start of a term against its pinned
/// `layout` (if one is pinned) and count; `false` when it has no usable route.
/// A changed layout would move keys between queues: a person decides (the error stops
/// the relay). A topic without a route, or with only part of its queues while no
/// layout is pinned, is also what the NameServer answers while a broker is down (or
/// the NameServer itself is), so it is never a reason to exit: readiness names it,
/// and the coordinator holds the topic's events until it has one. A broker of the
/// pinned layout that is down holds only its own queues (its lanes report it).
async fn configured_topic_routed(
    publisher: &Publisher,
    topic: &str,
    pin: &TopicPin,
    health: &Health,
) -> Result<bool, RelayError> {
    let count = pin.count;
    match publisher.resolve(topic, pin.layout.as_ref(), Some(count)).await {
        Ok(Resolved::Ready { down, layout }) => {
            health.clear(&Part::Route(topic.to_owned()));
            coordinator::warn_brokers_down(topic, &layout, &down);
            Ok(true)
        }
        Ok(Resolved::Incomplete { live, pinned }) => {
            let problem = format!("broker: configured topic {topic} shows {} of its {pinned} queues ({live}) and no layout is pinned yet: a broker of the cluster is down, or the topic has fewer queues than rocketmq.topics.{topic}.queue_count; its events wait until the whole route is seen", live.len());
            tracing::error!(topic, %live, pinned, "a configured topic shows only part of its queues; its events are held until it shows them all");
            health.problem(Part::Route(topic.to_owned()), problem);
            Ok(false)
        }
        Err(error @ PublishError::LayoutChanged { .. }) => Err(error.into()),
        Err(error) => {
            let problem = format!("broker: configured topic {topic} has no usable route: the broker or the NameServer is down, or the topic is missing (create it with {count} queues): {error}");
            tracing::error!(topic, %error, "a configured topic has no route now; its events are held until it has one");
            health.problem(Part::Route(topic.to_owned()), problem);
            Ok(false)
        }
    }
}

/// What is pinned for a configured topic: its count, and its layout once known.
#[derive(Clone)]
struct TopicPin {
    count: u32,
    layout: Option<QueueLayout>,
}

/// Runs `task` until it ends or `stop` is cancelled.
async fn until_stopped(
    task: impl std::future::Future<Output = Result<(), RelayError>>,
    stop: CancellationToken,
) -> Result<(), RelayError> {
    tokio::select! {
        result = task => result,
        () = stop.cancelled() => Ok(()),
    }
}

/// Re-checks a configured topic without a route until it has one, so readiness turns
/// green again even when none of its events arrives meanwhile.
async fn watch_configured_route(
    publisher: Arc<Publisher>,
    topic: String,
    pin: TopicPin,
    health: Health,
) -> Result<(), RelayError> {
    loop {
        tokio::time::sleep(ROUTE_RECHECK).await;
        if configured_topic_routed(&publisher, &topic, &pin, &health).await? {
            return Ok(());
        }
    }
}

/// How often a configured topic without a route is looked up again.
const ROUTE_RECHECK: Duration = Duration::from_secs(2);

/// Gives the lease back so a standby takes over at its next try (within 250 ms).
async fn release_lease(lease: &LeaseStore, term: &Term) {
    if !term.is_current() {
        return;
    }
    match lease.release(term.number()).await {
        Ok(true) => tracing::info!(term = term.number(), "leader lease released: a standby takes over now"),
        Ok(false) => tracing::warn!(term = term.number(), "the leader lease was no longer ours to release"),
        Err(error) => {
            tracing::warn!(%error, term = term.number(), "cannot release the leader lease; a standby takes over when it runs out")
        }
    }
}

/// Stops the relay's producers; every lane has ended, so nothing else holds them. The
/// client runtime they ran on is the caller's to stop.
async fn shutdown_publisher(publisher: Arc<Publisher>) {
    match Arc::try_unwrap(publisher) {
        Ok(publisher) => {
            publisher.shutdown().await;
            tracing::info!("RocketMQ producer shut down");
        }
        Err(_) => tracing::error!(
            "the RocketMQ producer is still in use after every task ended (a bug); it is not shut down cleanly"
        ),
    }
}

/// The primary's pools: the shared one, and the SENT writer's own (one connection per
/// write-back in flight).
struct Primary {
    shared: mysql_async::Pool,
    write_backs: mysql_async::Pool,
}

/// Opens the primary's pools; their connections log with MINIMAL row images when
/// allowed.
async fn open_primary(config: &Config) -> Result<Primary, RelayError> {
    let primary = &config.primary;
    let probed = db::connect_with("primary", &primary.url, &primary.tls, primary.pool_max, &[]).await?;
    let setup: &[&str] = if minimal_row_image_allowed(config, &probed).await { &[MINIMAL_ROW_IMAGE] } else { &[] };
    let shared = if setup.is_empty() {
        probed
    } else {
        // Best effort: the probe's pool is replaced by one whose every connection has the setting.
        let _ = probed.disconnect().await;
        db::connect_with("primary", &primary.url, &primary.tls, primary.pool_max, setup).await?
    };
    let write_backs = db::connect_with("primary", &primary.url, &primary.tls, sent_writer::CONCURRENT, setup).await?;
    Ok(Primary { shared, write_backs })
}

/// Whether the relay's own updates are to be logged with MINIMAL row images: asked for
/// in the configuration, and allowed to the primary's user.
async fn minimal_row_image_allowed(config: &Config, pool: &mysql_async::Pool) -> bool {
    if !config.primary.minimal_row_image {
        return false;
    }
    let probe = async { pool.get_conn().await?.query_drop(MINIMAL_ROW_IMAGE).await };
    if let Err(error) = probe.await {
        tracing::warn!(%error, "the primary user cannot set binlog_row_image = MINIMAL for the relay's own updates (grant BINLOG ADMIN on MariaDB or SESSION_VARIABLES_ADMIN on MySQL 8, or set primary.minimal_row_image = false): SENT write-backs are logged with full row images");
        return false;
    }
    true
}

/// What stays open for the whole process, leader or standby: the checked source,
/// the primary, the claim settings, the warm producer and the lease.
struct Warm {
    outbox: OutboxTable,
    primary: mysql_async::Pool,
    /// The SENT writer's own connections.
    write_backs: mysql_async::Pool,
    /// The binlog path (binlog mode only).
    binlog: Option<BinlogSource>,
    claims: ClaimStore,
    publisher: Arc<Publisher>,
    lease: LeaseStore,
}

/// Spawns every task of the pipeline under `supervisor`.
async fn start_pipeline(
    config: &Config,
    warm: &Warm,
    claims: &ClaimStore,
    term: &Term,
    supervisor: &Supervisor,
    metrics: RelayMetrics,
    health: &Health,
) -> Result<(), RelayError> {
    let (outbox, primary, publisher) = (warm.outbox.clone(), warm.primary.clone(), Arc::clone(&warm.publisher));
    let fence = warm.lease.fence(term.number());
    let mirror = Mirror::new(primary.clone(), outbox.clone(), fence.clone());
    let binlog = match &warm.binlog {
        Some(source) => Some((source, source.start(config, &mirror).await?)),
        None => None,
    };
    let shutdown = supervisor.stop_token();
    let configured: HashMap<String, u32> =
        config.rocketmq.topics.iter().map(|(t, c)| (t.clone(), c.queue_count)).collect();
    let layouts = binlog.as_ref().map(|(_, b)| b.checkpoint.queue_layouts.clone()).unwrap_or_default();
    for (topic, &count) in &configured {
        let pin = TopicPin { count, layout: layouts.get(topic).cloned() };
        if !configured_topic_routed(&publisher, topic, &pin, health).await? {
            let watch = watch_configured_route(Arc::clone(&publisher), topic.clone(), pin, health.clone());
            supervisor.spawn("configured topic route", until_stopped(watch, shutdown.clone()));
        }
    }
    supervisor.spawn("broker probe", ok(Arc::clone(&publisher).probe(shutdown.clone())));
    let held = held_at_start(claims).await.map_err(|e| DbError::query("primary", &config.primary.url, e))?;
    let policy = config.retry.failed_key_policy;
    let budget = Budget { events: config.lanes.max_in_flight, bytes: config.lanes.max_in_flight_bytes };
    let backoff = Backoff::new(config.retry.backoff_initial(), config.retry.backoff_max());
    let status = StatusStore::new(primary.clone(), outbox.clone(), fence.clone());
    let sent = SentStore::new(warm.write_backs.clone(), outbox.clone(), fence.clone(), db::CONNECTION_LIFETIME);
    let (source_tx, source_rx) = mpsc::channel(64);
    let handoff = Handoff::new(budget, source_tx);
    let (reports_tx, reports_rx) = mpsc::unbounded_channel();
    let (write_backs, sent_rx) = WriteBacks::channel(SENT_BACKLOG);
    let unwritten = Unwritten::default();
    let misses = sent_writer::Misses { metrics: metrics.clone(), unwritten: unwritten.clone() };
    supervisor.spawn("status writer", sent_writer::run(sent, sent_rx, misses));
    supervisor.spawn("outbox gauges", ok(gauges::watch_outbox(status.clone(), metrics.clone(), shutdown.clone())));
    if config.cleanup.interval_ms > 0 {
        let manual = Manual::fenced(primary.clone(), outbox.clone(), fence.clone());
        let instance = claims.owner().to_owned();
        let cleaning = cleanup::run_scheduled(manual, config.cleanup.clone(), instance, shutdown.clone());
        supervisor.spawn("scheduled cleanup", ok(cleaning));
    }

    let watermark = Arc::new(Watermark::new(binlog.as_ref().and_then(|(_, b)| b.checkpoint.position.commit_time)));
    let (sweeps_tx, sweeps_rx) = mpsc::channel(4);
    let sweeper = Sweeper {
        claims: claims.clone(),
        handoff: handoff.clone(),
        settings: SweepSettings {
            interval: config.sweep.interval(config.mode),
            batch: config.sweep.batch,
            binlog: binlog.as_ref().map(|_| BinlogGuard {
                watermark: Arc::clone(&watermark),
                grace: Duration::from_millis(config.sweep.grace_ms),
                takeover_after: Duration::from_millis(config.sweep.takeover_after_ms),
            }),
        },
        requests: sweeps_rx,
        metrics: metrics.clone(),
        health: health.clone(),
        status: status.clone(),
        held: held.clone(),
        fence: None,
        write_backs: write_backs.clone(),
        unwritten,
    };
    supervisor.spawn("sweep", ok(sweeper.run(shutdown.child_token())));

    let (pins, durable) = match binlog {
        Some((source, binlog)) => {
            let pins = binlog.checkpoint.queue_counts.clone();
            metrics.lag.saved_through(binlog.checkpoint.position.commit_time);
            let lag = Arc::clone(&metrics.lag);
            let (writer, writing, mirroring) =
                CheckpointWriter::start(Arc::clone(&source.store), mirror, term.clone(), lag);
            supervisor.spawn("checkpoint writer", async move { writing.await.map_err(RelayError::from) });
            supervisor.spawn("checkpoint mirror", ok(mirroring));
            let reader = Reader::new(
                reader_settings(config, &outbox, source.server.flavor)?,
                ReaderLinks {
                    pool: source.pool.clone(),
                    handoff,
                    sweeps: sweeps_tx,
                    watermark: Arc::clone(&watermark),
                    metrics: metrics.clone(),
                    health: health.clone(),
                    term: term.clone(),
                },
            );
            supervisor.spawn("binlog reader", ok(reader.run(binlog.start, shutdown.child_token())));
            let lag_limit = Duration::from_millis(config.sweep.grace_ms);
            let watching =
                gauges::watch_source(source.pool.clone(), metrics.clone(), health.clone(), lag_limit, shutdown.clone());
            supervisor.spawn("source gauges", ok(watching));
            (pins, Some(Durable { writer, checkpoint: binlog.checkpoint }))
        }
        None => {
            // Poll mode: no checkpoint; topics not in the config are pinned per process.
            drop((sweeps_tx, handoff));
            (configured.iter().map(|(t, c)| (t.clone(), *c)).collect(), None)
        }
    };

    let coordinator = Coordinator {
        tracker: AckTracker::new(0),
        pins,
        layouts,
        durable,
        watermark,
        checkpoint_every: Duration::from_millis(config.checkpoint.interval_ms),
        publisher,
        hash: config.rocketmq.hash,
        configured,
        lane_settings: Arc::new(LaneSettings {
            batch_size: config.lanes.batch_size,
            linger: Duration::from_millis(config.lanes.linger_ms),
            max_message_bytes: config.rocketmq.max_message_bytes,
            max_retry: config.retry.max_retry,
            backoff,
            failed_key_policy: policy,
        }),
        held,
        recorder: Recorder {
            status,
            claims: claims.clone(),
            backoff,
            reports: reports_tx,
            shutdown: shutdown.clone(),
            metrics: metrics.clone(),
            inflight: Gauge::default(),
        },
        sent: write_backs,
        metrics,
        health: health.clone(),
        progress_at: std::time::Instant::now(),
        supervisor: supervisor.clone(),
        term: term.clone(),
        shutdown,
    };
    supervisor.spawn("coordinator", coordinator.run(Inputs { source: source_rx, reports: reports_rx }));
    Ok(())
}

/// The keys the last leader held, from the table, before this term routes anything:
/// a restart, a new term or a standby taking over holds exactly the same keys.
async fn held_at_start(claims: &ClaimStore) -> Result<HeldKeys, mysql_async::Error> {
    let held = HeldKeys::default();
    held.hold_all(claims.held_keys().await?);
    if !held.is_empty() {
        tracing::info!(keys = held.len(), "holding the keys the table says wait behind a FAILED row or a booked retry");
    }
    Ok(held)
}

/// A task that cannot fail, as a supervised one.
async fn ok(task: impl std::future::Future<Output = ()>) -> Result<(), RelayError> {
    task.await;
    Ok(())
}

fn reader_settings(config: &Config, outbox: &OutboxTable, flavor: Flavor) -> Result<ReaderSettings, RelayError> {
    let source = config.source()?;
    Ok(ReaderSettings {
        url: source.url.clone(),
        tls: source.tls.clone(),
        server_id: source.server_id,
        heartbeat: Duration::from_millis(source.heartbeat_ms),
        schema: outbox.schema.clone(),
        table: outbox.table.clone(),
        flavor,
        reconnect: Backoff::new(Duration::from_millis(200), Duration::from_secs(10)),
        part_events: (config.lanes.max_in_flight / 2).max(1),
    })
}

/// Claimed rows this process did not finish go back to PENDING for the next sweeper.
async fn release_claims(claims: &ClaimStore) {
    match claims.release_own().await {
        Ok(0) => {}
        Ok(rows) => tracing::info!(rows, "released unfinished claims back to PENDING"),
        Err(error) => {
            tracing::warn!(%error, "cannot release unfinished claims; their lease expires and another sweeper takes them")
        }
    }
}
