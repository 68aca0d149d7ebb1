//! The metrics and health endpoint: `GET /metrics` (Prometheus text) and
//! `GET /healthz` (200 while the relay runs its pipeline).

use std::net::SocketAddr;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use tokio_util::sync::CancellationToken;

use crate::metrics::render;

/// Binds `listen` and serves until `shutdown`; returns the bound address.
pub async fn serve(listen: &str, registry: Arc<Registry>, shutdown: CancellationToken) -> std::io::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    let address = listener.local_addr()?;
    let app = Router::new().route("/metrics", get(metrics)).route("/healthz", get(healthz)).with_state(registry);
    tokio::spawn(async move {
        let served = axum::serve(listener, app).with_graceful_shutdown(async move { shutdown.cancelled().await }).await;
        if let Err(error) = served {
            tracing::error!(%error, "metrics endpoint stopped");
        }
    });
    Ok(address)
}

async fn metrics(State(registry): State<Arc<Registry>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], render(&registry))
}

async fn healthz() -> &'static str {
    "ok\n"
}
