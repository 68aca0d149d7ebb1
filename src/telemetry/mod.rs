//! The relay's traces: when a row's headers carry a W3C trace context
//! (`traceparent`, `tracestate`), its send becomes a span of that trace, so a trace
//! that began in the application's request crosses the outbox instead of ending at
//! the commit. Spans are exported over OTLP/HTTP when an endpoint is configured, and
//! not even built otherwise.

mod export;
mod send_span;

pub use export::{TraceExport, TraceExportError};
pub(crate) use send_span::{record_send, SendOutcome};
