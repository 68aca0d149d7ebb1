//! One span per traced event of a send: a child of the trace context the row's
//! headers carry, from the send's start to the broker's answer, a PRODUCER span named
//! `send TOPIC` with the messaging attributes tracing back-ends group producers by.

use std::collections::HashMap;
use std::time::SystemTime;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{SpanKind, Status, TraceContextExt, Tracer};
use opentelemetry::{global, Array, Context, KeyValue, Value};
use opentelemetry_sdk::propagation::TraceContextPropagator;

use super::export::exporting;
use crate::event::OutboxEvent;

/// The header that names the trace and the parent span.
const TRACEPARENT: &str = "traceparent";
/// The headers a trace context travels in: the parent, and vendors' state beside it.
const TRACE_HEADERS: [&str; 2] = [TRACEPARENT, "tracestate"];

/// How a send ended, for its spans.
pub(crate) enum SendOutcome<'a> {
    /// SEND_OK: each event's message id.
    Sent(&'a [String]),
    /// Not confirmed, for this reason (the events are sent again or failed later).
    Failed(&'a dyn std::fmt::Display),
}

/// Records the span of each of `events` that carries a trace context, for one send
/// to `topic` that began at `started` and ended now as `outcome` says.
pub(crate) fn record_send<'a>(
    events: impl Iterator<Item = &'a OutboxEvent>,
    topic: &str,
    started: SystemTime,
    outcome: SendOutcome<'_>,
) {
    if !exporting() {
        return;
    }
    let ended = SystemTime::now();
    let tracer = global::tracer("outbox-relay");
    for (index, event) in events.enumerate() {
        let Some(parent) = parent_of(event) else { continue };
        let mut attributes = vec![
            KeyValue::new("messaging.system", "rocketmq"),
            KeyValue::new("messaging.operation.type", "send"),
            KeyValue::new("messaging.destination.name", topic.to_owned()),
            KeyValue::new("messaging.rocketmq.message.keys", keys(event)),
            KeyValue::new("outbox.event_id", event.event_id.clone()),
            KeyValue::new("outbox.row_id", i64::try_from(event.id).unwrap_or(i64::MAX)),
        ];
        if let SendOutcome::Sent(ids) = &outcome {
            if let Some(id) = ids.get(index) {
                attributes.push(KeyValue::new("messaging.message.id", id.clone()));
            }
        }
        let span = tracer
            .span_builder(format!("send {topic}"))
            .with_kind(SpanKind::Producer)
            .with_start_time(started)
            .with_attributes(attributes)
            .start_with_context(&tracer, &parent);
        let context = Context::current_with_span(span);
        let span = context.span();
        if let SendOutcome::Failed(reason) = &outcome {
            span.set_status(Status::error(reason.to_string()));
        }
        span.end_with_timestamp(ended);
    }
}

/// The message's keys, as the attribute's string array.
fn keys(event: &OutboxEvent) -> Value {
    Value::Array(Array::String(vec![event.event_id.clone().into(), event.biz_key.clone().into()]))
}

/// The trace context in `event`'s headers, if it carries a valid one.
fn parent_of(event: &OutboxEvent) -> Option<Context> {
    let headers = event.extras().headers.as_deref()?;
    if !headers.contains(TRACEPARENT) {
        return None;
    }
    let object: serde_json::Map<String, serde_json::Value> = serde_json::from_str(headers).ok()?;
    let carrier: HashMap<String, String> = TRACE_HEADERS
        .iter()
        .filter_map(|name| Some(((*name).to_owned(), object.get(*name)?.as_str()?.to_owned())))
        .collect();
    let context = TraceContextPropagator::new().extract(&carrier);
    context.span().span_context().is_valid().then_some(context)
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanId, TraceId};

    use super::*;
    use crate::event::Extras;

    fn with_headers(headers: &str) -> OutboxEvent {
        let extras = Extras { headers: Some(headers.to_owned()), ..Extras::NONE };
        OutboxEvent { extras: extras.boxed(), ..OutboxEvent::for_test(1) }
    }

    #[test]
    fn the_parent_is_the_rows_trace_context() {
        let event = with_headers(
            r#"{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","tracestate":"rojo=00f067aa0ba902b7"}"#,
        );
        let parent = parent_of(&event).expect("a trace context");
        let span = parent.span();
        let context = span.span_context();
        assert_eq!(context.trace_id(), TraceId::from_hex("0af7651916cd43dd8448eb211c80319c").expect("hex"));
        assert_eq!(context.span_id(), SpanId::from_hex("b7ad6b7169203331").expect("hex"));
        assert!(context.is_remote() && context.is_sampled());
        assert_eq!(context.trace_state().get("rojo"), Some("00f067aa0ba902b7"));
    }

    #[test]
    fn no_or_an_invalid_trace_context_is_no_parent() {
        assert!(parent_of(&OutboxEvent::for_test(1)).is_none());
        assert!(parent_of(&with_headers(r#"{"tenant":"t-1"}"#)).is_none());
        assert!(parent_of(&with_headers(
            r#"{"traceparent":"00-00000000000000000000000000000000-b7ad6b7169203331-01"}"#
        ))
        .is_none());
        assert!(parent_of(&with_headers(r#"{"traceparent":"not a trace"}"#)).is_none());
    }
}
