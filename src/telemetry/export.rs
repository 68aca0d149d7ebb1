//! The OTLP exporter: installed as the process's tracer provider at start when
//! `traces.otlp_endpoint` is set, flushed and stopped at shutdown.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_otlp::{SpanExporter, WithExportConfig};
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;

use crate::config::TracesConfig;

/// Whether spans are exported: when not, sends build none.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// How long one export request may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// The trace exporter could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("traces.otlp_endpoint {endpoint:?}: cannot set up the OTLP exporter: {detail}; fix the URL (e.g. http://otel-collector:4318) or remove it to export no traces")]
pub struct TraceExportError {
    endpoint: String,
    detail: String,
}

/// The running exporter; [`TraceExport::shutdown`] sends what is buffered.
pub struct TraceExport {
    provider: SdkTracerProvider,
}

impl TraceExport {
    /// Starts exporting to `config.otlp_endpoint` (`/v1/traces` appended); `None`
    /// when no endpoint is set.
    pub fn start(config: &TracesConfig) -> Result<Option<Self>, TraceExportError> {
        let Some(endpoint) = config.otlp_endpoint.as_deref() else { return Ok(None) };
        let url = format!("{}/v1/traces", endpoint.trim_end_matches('/'));
        let exporter = SpanExporter::builder()
            .with_http()
            .with_endpoint(url)
            .with_timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| TraceExportError { endpoint: endpoint.to_owned(), detail: e.to_string() })?;
        let resource = Resource::builder().with_service_name(config.service_name.clone()).build();
        let provider = SdkTracerProvider::builder().with_batch_exporter(exporter).with_resource(resource).build();
        opentelemetry::global::set_tracer_provider(provider.clone());
        EXPORTING.store(true, Ordering::Release);
        tracing::info!(endpoint, service = %config.service_name, "exporting the spans of traced sends over OTLP/HTTP");
        Ok(Some(Self { provider }))
    }

    /// Exports the spans still buffered, then stops the exporter's thread.
    pub fn shutdown(self) {
        EXPORTING.store(false, Ordering::Release);
        if let Err(error) = self.provider.shutdown() {
            tracing::warn!(%error, "the last spans could not be exported");
        }
    }
}

/// Whether sends are traced.
pub(super) fn exporting() -> bool {
    EXPORTING.load(Ordering::Acquire)
}
