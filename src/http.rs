//! The metrics and health endpoint:
//! - `GET /metrics`: Prometheus text;
//! - `GET /readyz`: 200 when every part of the pipeline works, else 503; the JSON
//!   body names the reason (`{"ready":false,"reason":"binlog source: ..."}`);
//! - `GET /healthz`: liveness, 503 when the pipeline loop is wedged (a restart helps).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::health::Health;
use crate::metrics::RelayMetrics;
use outbox_kit::render_metrics as render;

/// What the endpoint serves.
#[derive(Clone)]
struct Served {
    registry: Arc<Registry>,
    metrics: RelayMetrics,
    health: Health,
}

/// Binds `listen`; returns the bound address and the server, which runs until `stop`.
pub async fn bind(
    listen: &str,
    registry: Arc<Registry>,
    metrics: RelayMetrics,
    health: Health,
    stop: CancellationToken,
) -> std::io::Result<(SocketAddr, impl Future<Output = std::io::Result<()>>)> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let address = listener.local_addr()?;
    let app = Router::new()
        .route("/metrics", get(render_metrics))
        .route("/readyz", get(readyz))
        .route("/healthz", get(healthz))
        .with_state(Served { registry, metrics, health });
    let server = async move { axum::serve(listener, app).with_graceful_shutdown(stop.cancelled_owned()).await };
    Ok((address, server))
}

async fn render_metrics(State(served): State<Served>) -> impl IntoResponse {
    served.metrics.refresh(served.health.readiness().ready);
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], render(&served.registry))
}

async fn readyz(State(served): State<Served>) -> impl IntoResponse {
    let readiness = served.health.readiness();
    let status = if readiness.ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(readiness))
}

async fn healthz(State(served): State<Served>) -> impl IntoResponse {
    match served.health.liveness() {
        Ok(()) => (StatusCode::OK, "ok\n".to_owned()),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, format!("{reason}\n")),
    }
}
