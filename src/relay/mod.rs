//! The running relay: checks, connections, and the pipeline's tasks per leader term.
//!
//! [`run`] checks the source and opens its connections once, then waits as a standby,
//! runs one pipeline per leader term (`pipeline`), and waits again when a term is lost.
//! In poll mode there is no binlog reader and no checkpoint: the sweep alone feeds the
//! lanes, and the outbox table is the only state. This module wires: each stage lives
//! in its own module (`source`, `coordinator`, `lanes`, `rocketmq`, `write_back`,
//! `checkpoint`, `store`); besides the wiring it keeps only what a term starts from
//! (`start`: the checkpoint to resume at) and the leader's database pollers (`gauges`).

mod credentials;
mod gauges;
mod pipeline;
mod roll_call;
mod start;
mod term;

use std::sync::Arc;
use std::time::{Duration, Instant};

use mysql_async::prelude::Queryable;
use rocketmq_client_rust::ClientRuntime;
use tokio_util::sync::CancellationToken;

use crate::config::{Config, Mode};
use crate::db::{self, DbError};
use crate::health::{notify, Health, Notifier, Part};
use crate::http;
use crate::leader::{wait_for_lease, Standby, Term, TermTiming};
use crate::metrics::{gauge_value, RelayMetrics};
use crate::rocketmq::{ProducerSettings, Publisher};
use crate::store::{check_migrated, ClaimStore, Instances, LeaseStore, HANDOVER_GRACE};
use crate::supervise::Supervisor;
use crate::write_back;

pub use crate::error::RelayError;
use outbox_kit::OutboxTable;
use roll_call::{roll_call, RollCall};
use start::BinlogSource;
use term::{lead, Leading, TermEnd};

/// Session setting for the relay's own writes. With the FULL image every SENT UPDATE
/// logs the whole row (payload included) twice, and the binlog path reads it back.
const MINIMAL_ROW_IMAGE: &str = "SET SESSION binlog_row_image = 'MINIMAL'";

/// This process's name in `owner` of the rows it claims: host, pid and start time,
/// so a restarted relay never mistakes a dead predecessor's leases for its own.
pub(crate) fn process_owner() -> String {
    let started = crate::time::unix_millis_now();
    format!("{}:{}:{started}", hostname(), std::process::id())
}

/// This host's name, as other hosts would reach it.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "relay".to_owned())
}

/// Where the endpoints bound to `address` answer from another host: the host's name
/// in place of an unspecified address (0.0.0.0).
fn reachable(address: std::net::SocketAddr) -> String {
    if address.ip().is_unspecified() {
        format!("{}:{}", hostname(), address.port())
    } else {
        address.to_string()
    }
}

/// Runs the relay until `shutdown` is cancelled or a task fails; every task it
/// started has ended when it returns. The checks run and the connections open at
/// once; the pipeline runs only while this instance holds the leader lease. Its
/// producers run on `client`; running this future on that same runtime
/// (`ClientHost::run`) keeps one set of worker threads.
pub async fn run(config: &Config, client: Arc<ClientRuntime>, shutdown: CancellationToken) -> Result<(), RelayError> {
    let outbox = config.outbox_table();
    let Primary { shared: primary, write_backs, lease } = open_primary(config).await?;
    let binlog = match config.mode {
        Mode::Binlog => Some(start::open(config, &outbox).await?),
        Mode::Poll => None,
    };
    check_migrated(&primary, &outbox)
        .await
        .map_err(|e| DbError::query("primary", &config.primary.url, e))?
        .map_err(|e| RelayError::Environment(e.to_string()))?;
    let lease = LeaseStore::new(lease, &outbox.schema, &config.lease_name());
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
    credentials::check(&publisher, config).await?;
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
    let call = RollCall {
        instances: Instances::new(warm.primary.clone(), &warm.outbox.schema, &config.lease_name()),
        instance: warm.claims.owner().to_owned(),
        http: reachable(address),
        health: health.clone(),
        metrics: metrics.clone(),
    };
    endpoint.spawn("fleet roll call", ok(roll_call(call, http_stop.clone())));
    if let Some(notifier) = Notifier::from_env() {
        endpoint.spawn("systemd notifications", ok(notify(notifier, health.clone(), http_stop.clone())));
    }
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
    let mut not_before = None;
    loop {
        health.stand_by();
        metrics.stand_down();
        let standby = Standby {
            lease: &warm.lease,
            holder: warm.claims.owner(),
            timing,
            source: warm.binlog.as_ref().map(|b| &b.pool),
            health,
            not_before: not_before.take(),
        };
        let Some(term) = wait_for_lease(standby, shutdown).await else {
            return Ok(());
        };
        tracing::info!(term = term.number(), "took the leader lease: publishing");
        metrics.leader.set(1);
        metrics.leader_term.set(gauge_value(term.number()));
        health.lead(warm.binlog.is_some());
        let leading = Leading { config, warm, term: &term, timing, metrics, health, shutdown };
        let led = lead(&leading).await;
        match led {
            Ok(TermEnd::HandedOver) if !shutdown.is_cancelled() => {
                hand_over(&warm.lease, &term).await;
                not_before = Some(Instant::now() + HANDOVER_GRACE);
                continue;
            }
            Ok(_) if term.is_ended() && !shutdown.is_cancelled() => {
                tracing::warn!(term = term.number(), "stepped down: standby again");
                continue;
            }
            _ => {}
        }
        metrics.stand_down();
        release_lease(&warm.lease, &term).await;
        return led.map(|_| ());
    }
}

/// Gives the lease up on an operator's order: a standby takes it within a quarter
/// second; this instance leaves it to the others for a while.
async fn hand_over(lease: &LeaseStore, term: &Term) {
    release_lease(lease, term).await;
    term.end();
    tracing::info!(term = term.number(), "handed the leader lease over as ordered: a standby takes it; this instance waits {HANDOVER_GRACE:?} before it may take it back");
}

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
    /// The lease's own connections (renewals, standby tries, the leader's orders):
    /// a slow primary busy with failure writes, gauges and retention on the shared
    /// pool never starves a renewal, which would end the term without a drain.
    lease: mysql_async::Pool,
}

/// Connections of the lease's own pool: the keeper's renewal and the orders' reader.
const LEASE_CONNECTIONS: usize = 2;

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
    let write_backs = db::connect_with("primary", &primary.url, &primary.tls, write_back::CONCURRENT, setup).await?;
    let lease = db::connect_with("primary", &primary.url, &primary.tls, LEASE_CONNECTIONS, &[]).await?;
    Ok(Primary { shared, write_backs, lease })
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

/// A task that cannot fail, as a supervised one.
async fn ok(task: impl std::future::Future<Output = ()>) -> Result<(), RelayError> {
    task.await;
    Ok(())
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
