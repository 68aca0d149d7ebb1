//! An OTLP/HTTP trace receiver in the test process: it takes what an exporter posts to
//! `/v1/traces` (protobuf), keeps the spans, and answers as a collector does.

use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::trace::v1::{ExportTraceServiceRequest, ExportTraceServiceResponse};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

/// A running receiver and the spans it was sent.
pub struct OtlpReceiver {
    address: std::net::SocketAddr,
    spans: Arc<Mutex<Vec<Span>>>,
    server: tokio::task::JoinHandle<()>,
}

impl OtlpReceiver {
    /// Listens on a free loopback port.
    pub async fn start() -> Self {
        let spans = Arc::new(Mutex::new(Vec::new()));
        let app = Router::new().route("/v1/traces", post(receive)).with_state(Arc::clone(&spans));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind the OTLP receiver");
        let address = listener.local_addr().expect("its address");
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.expect("the OTLP receiver serves");
        });
        Self { address, spans, server }
    }

    /// The endpoint to configure an exporter with (`/v1/traces` is the exporter's to add).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The spans received so far whose trace id is `trace_id`.
    pub fn spans_of(&self, trace_id: &[u8]) -> Vec<Span> {
        self.spans.lock().expect("spans lock").iter().filter(|span| span.trace_id == trace_id).cloned().collect()
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn receive(State(spans): State<Arc<Mutex<Vec<Span>>>>, body: Bytes) -> Vec<u8> {
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP trace export");
    let received = request.resource_spans.into_iter().flat_map(|r| r.scope_spans).flat_map(|s| s.spans);
    spans.lock().expect("spans lock").extend(received);
    ExportTraceServiceResponse::default().encode_to_vec()
}
