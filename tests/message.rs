//! What a message carries from the outbox row's optional columns, against the real
//! stack: consumers select by tag (the broker filters), see the event type and the
//! headers (a W3C trace context among them) property by property, find the message by
//! its event id and by its business key (`mqadmin queryMsgByKey`), and a timed event
//! arrives at its time without holding its key back. A value the broker cannot take
//! fails its own event, with the column named, and its neighbours are sent. The send of
//! an event whose headers carry a trace context is exported as a span of that trace.
#![recursion_limit = "512"]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::collector::Collector;
use common::events::{all_sent, assert_per_key_order, consumed_all, Events};
use common::mqadmin::query_msg_by_key;
use common::otlp::OtlpReceiver;
use common::outbox::TestOutbox;
use common::relay::{RelayOptions, RelayProcess};
use common::{eventually, unique, Stack};
use mysql_async::prelude::Queryable;
use mysql_async::Value;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use outbox_kit::consumer::{Ack, Consumption, Delivery, StartFrom, Subscribe, Subscription};
use outbox_kit::RowStatus;

/// The tags the rows cycle through; the consumer asks for the last two.
const TAGS: [&str; 3] = ["CREATED", "PAID", "REFUNDED"];
const SELECTED: &str = "PAID || REFUNDED";

/// One outbox row with its optional columns.
#[derive(Clone)]
struct Tagged {
    event_id: String,
    biz_key: String,
    tag: Option<String>,
    event_type: Option<String>,
    headers: Option<String>,
    deliver_at: Option<String>,
}

impl Tagged {
    fn plain(events: &Events, key: &str, seq: usize) -> Self {
        Self {
            event_id: events.id(key, seq),
            biz_key: key.to_owned(),
            tag: None,
            event_type: None,
            headers: None,
            deliver_at: None,
        }
    }

    /// The row's `seq`th event of `key`: its tag from [`TAGS`], its own trace id.
    fn cycling(events: &Events, key: &str, seq: usize) -> Self {
        let tag = TAGS[seq % TAGS.len()];
        let headers = serde_json::json!({ "traceparent": traceparent(key, seq), "tenant": format!("tenant-{key}") });
        Self {
            tag: Some(tag.to_owned()),
            event_type: Some(format!("Order{tag}")),
            headers: Some(headers.to_string()),
            ..Self::plain(events, key, seq)
        }
    }

    fn headers_map(&self) -> BTreeMap<String, String> {
        self.headers.as_deref().map(|h| serde_json::from_str(h).expect("headers JSON")).unwrap_or_default()
    }
}

/// A W3C traceparent whose trace id names the event.
fn traceparent(key: &str, seq: usize) -> String {
    let key_number: u64 = key.trim_start_matches('k').parse().expect("keys are k<number>");
    format!("00-{:016x}{:016x}-{:016x}-01", 0x0af7_6519_16cd_43dd_u64, key_number * 1_000 + seq as u64, seq + 1)
}

/// Inserts `rows` into `outbox` in one committed transaction, every column given.
async fn insert(outbox: &TestOutbox, topic: &str, rows: &[Tagged]) {
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    let mut tx = conn.start_transaction(Default::default()).await.expect("begin");
    let sql = format!(
        "INSERT INTO {} (event_id, biz_key, topic, payload, tag, event_type, headers, deliver_at) \
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        outbox.table.qualified()
    );
    for row in rows {
        let payload = format!(r#"{{"event":"{}"}}"#, row.event_id);
        let params: Vec<Value> = vec![
            row.event_id.as_str().into(),
            row.biz_key.as_str().into(),
            topic.into(),
            payload.into(),
            row.tag.clone().into(),
            row.event_type.clone().into(),
            row.headers.clone().into(),
            row.deliver_at.clone().into(),
        ];
        tx.exec_drop(&sql, params).await.expect("insert outbox row");
    }
    tx.commit().await.expect("commit");
}

async fn relay(stack: &Stack, outbox: &TestOutbox, mode: &str) -> RelayProcess {
    let options = RelayOptions::new(outbox.name())
        .env("OUTBOX_RELAY__MODE", mode)
        .env("OUTBOX_RELAY__SWEEP__INTERVAL_MS", 500)
        .env("OUTBOX_RELAY__SWEEP__GRACE_MS", 500);
    let mut relay = RelayProcess::start(stack, &options);
    relay.wait_ready().await;
    relay
}

/// Six keys of nine events each, tags cycling so each key ends on a selected one; a
/// consumer of `PAID || REFUNDED` gets exactly those, in each key's order, with every
/// property of the row; mqadmin finds a message by its event id and by its key.
async fn a_tag_subscription_gets_its_events_with_every_column(mode: &str) {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "tagged").await;
    let collector = Collector::start_tagged(&stack.namesrv, &events.topic, &unique("tagged"), SELECTED).await;
    let relay = relay(&stack, &outbox, mode).await;
    let rows: Vec<Tagged> = (0..9)
        .flat_map(|seq| (0..6).map(move |k| (k, seq)))
        .map(|(k, seq)| Tagged::cycling(&events, &format!("k{k}"), seq))
        .collect();
    insert(&outbox, &events.topic, &rows).await;
    all_sent(&outbox, rows.len(), Duration::from_secs(60)).await;

    let wanted: Vec<&Tagged> = rows.iter().filter(|row| row.tag.as_deref() != Some(TAGS[0])).collect();
    let got = consumed_all(&collector, &events, wanted.len(), Duration::from_secs(60)).await;
    // Each queue's last event is a selected one, so the consumer has pulled past every
    // CREATED event of its queue by now: one it was given would be here already.
    let got_ids: HashSet<&str> = got.iter().map(|d| d.event_id.as_str()).collect();
    let wanted_ids: HashSet<&str> = wanted.iter().map(|row| row.event_id.as_str()).collect();
    assert_eq!(got_ids, wanted_ids, "exactly the events tagged PAID or REFUNDED");
    for row in &wanted {
        let delivery = got.iter().find(|d| d.event_id == row.event_id).expect("delivered");
        assert_eq!(delivery.tag, row.tag, "{}: tag", row.event_id);
        assert_eq!(delivery.event_type, row.event_type, "{}: event type", row.event_id);
        assert_eq!(delivery.headers, row.headers_map(), "{}: headers, property by property", row.event_id);
        assert_eq!(delivery.traceparent(), row.headers_map().get("traceparent").map(String::as_str));
        assert_eq!(delivery.keys, format!("{} {}", row.event_id, row.biz_key), "KEYS");
    }
    assert_per_key_order(&stack, &events.topic, &got).await;

    let statuses = outbox.statuses().await;
    let key_msg_ids: HashSet<String> = rows
        .iter()
        .filter(|row| row.biz_key == "k2")
        .map(|row| statuses[&row.event_id].1.clone().expect("msg_id"))
        .collect();
    let one = rows.iter().find(|row| row.biz_key == "k2").expect("a k2 row");
    let by_event_id = eventually("mqadmin to find the event by its event id", Duration::from_secs(30), || async {
        Some(query_msg_by_key(&events.topic, &one.event_id)).filter(|found| !found.is_empty())
    })
    .await;
    assert_eq!(by_event_id.len(), 1, "one message of event {}", one.event_id);
    assert!(key_msg_ids.contains(&by_event_id[0].msg_id), "the row's msg_id");
    let by_key =
        eventually("mqadmin to find every k2 message by its business key", Duration::from_secs(30), || async {
            let found: HashSet<String> = query_msg_by_key(&events.topic, "k2").into_iter().map(|f| f.msg_id).collect();
            (found.len() >= key_msg_ids.len()).then_some(found)
        })
        .await;
    assert_eq!(by_key, key_msg_ids, "the business key finds each of its messages (CREATED ones too)");
    collector.shutdown().await;
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_subscription_gets_its_events_with_every_column_from_the_binlog() {
    a_tag_subscription_gets_its_events_with_every_column("binlog").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tag_subscription_gets_its_events_with_every_column_from_the_sweep() {
    a_tag_subscription_gets_its_events_with_every_column("poll").await;
}

/// A consumer that notes when each message arrived.
struct Arrivals {
    subscription: Subscription,
    seen: Arc<Mutex<Vec<(Delivery, SystemTime)>>>,
}

impl Arrivals {
    async fn start(stack: &Stack, topic: &str) -> Self {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let record = move |d: &Delivery| {
            sink.lock().expect("arrivals lock").push((d.clone(), SystemTime::now()));
            Ack::Done
        };
        let since = chrono::Local::now() - chrono::Duration::seconds(60);
        let group = unique("timed");
        let spec = Subscribe {
            consumption: Consumption::Concurrent,
            ..Subscribe::new(&stack.namesrv, &group, topic, StartFrom::Since(since))
        };
        Self { subscription: Subscription::start(spec, record).await.expect("consumer starts"), seen }
    }

    fn arrival_of(&self, event_id: &str) -> Option<SystemTime> {
        self.seen.lock().expect("arrivals lock").iter().find(|(d, _)| d.event_id == event_id).map(|(_, at)| *at)
    }
}

/// How late after its time the broker's timer may deliver: its precision (Apache's
/// `timerPrecisionMs`, 1 s) and the consumer's pull.
const TIMER_LATENESS: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_event_arrives_at_its_time_and_its_keys_next_event_does_not_wait_for_it() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "timed").await;
    let arrivals = Arrivals::start(&stack, &events.topic).await;
    let relay = relay(&stack, &outbox, "binlog").await;

    let deliver_at = SystemTime::now() + Duration::from_secs(10);
    let deliver_at_text = chrono::DateTime::<chrono::Utc>::from(deliver_at).format("%Y-%m-%d %H:%M:%S%.3f").to_string();
    let timed = Tagged { deliver_at: Some(deliver_at_text), ..Tagged::plain(&events, "k1", 0) };
    let next = Tagged::plain(&events, "k1", 1);
    insert(&outbox, &events.topic, &[timed, next]).await;
    all_sent(&outbox, 2, Duration::from_secs(30)).await;
    assert!(SystemTime::now() < deliver_at, "both rows SENT before the timed one's time: the send did not wait for it");

    let next_at = eventually("the key's next event to arrive", Duration::from_secs(30), || async {
        arrivals.arrival_of(&events.id("k1", 1))
    })
    .await;
    assert!(next_at < deliver_at, "the key's next event arrived before the timed one's time");
    let timed_at = eventually("the timed event to arrive", Duration::from_secs(40), || async {
        arrivals.arrival_of(&events.id("k1", 0))
    })
    .await;
    let early = deliver_at.duration_since(timed_at).ok();
    assert!(early.is_none(), "the timed event arrived {early:?} before its deliver_at");
    let late = timed_at.duration_since(deliver_at).expect("not early");
    assert!(late <= TIMER_LATENESS, "the timed event arrived {late:?} after its deliver_at");
    arrivals.subscription.shutdown().await;
    drop(relay);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_value_the_broker_cannot_take_fails_its_event_alone_naming_the_column() {
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "bad").await;
    let relay = relay(&stack, &outbox, "binlog").await;
    let far = chrono::Utc::now() + chrono::Duration::days(4);
    let big = serde_json::json!({ "big": "x".repeat(40_000) }).to_string();
    let bad = |key: &str, change: fn(Tagged, String) -> Tagged, value: String, problem: &'static str| {
        (change(Tagged::plain(&events, key, 0), value), problem)
    };
    let bad_rows = [
        bad(
            "k1",
            |row, v| Tagged { headers: Some(v), ..row },
            "[1,2]".into(),
            "column `headers`: not a JSON object of strings",
        ),
        bad(
            "k2",
            |row, v| Tagged { headers: Some(v), ..row },
            r#"{"retries":3}"#.into(),
            r#"column `headers`: the value of "retries" is 3, not a string"#,
        ),
        bad(
            "k3",
            |row, v| Tagged { headers: Some(v), ..row },
            r#"{"KEYS":"x"}"#.into(),
            r#"column `headers`: "KEYS" is a property name RocketMQ or the relay reserves"#,
        ),
        bad(
            "k4",
            |row, v| Tagged { headers: Some(v), ..row },
            big,
            "over the broker's 32767: make the `headers` column smaller",
        ),
        bad(
            "k5",
            |row, v| Tagged { deliver_at: Some(v), ..row },
            far.format("%Y-%m-%d %H:%M:%S").to_string(),
            "column `deliver_at`: ",
        ),
        bad(
            "k6",
            |row, v| Tagged { tag: Some(v), ..row },
            "PAID||REFUNDED".into(),
            "column `tag`: \"PAID||REFUNDED\" holds `||`",
        ),
    ];
    // Each bad row between good ones of other keys, in one transaction (one batch).
    let mut rows = Vec::new();
    for (i, (row, _)) in bad_rows.iter().enumerate() {
        rows.push(Tagged::cycling(&events, &format!("k{}", 10 + i), 0));
        rows.push(row.clone());
    }
    rows.push(Tagged::cycling(&events, "k99", 0));
    insert(&outbox, &events.topic, &rows).await;

    let sent = rows.len() - bad_rows.len();
    let failed = eventually("every bad row FAILED and every other SENT", Duration::from_secs(60), || async {
        let statuses = outbox.statuses().await;
        let count = |status: RowStatus| statuses.values().filter(|(s, _)| *s == status.code()).count();
        (count(RowStatus::Sent) == sent && count(RowStatus::Failed) == bad_rows.len()).then_some(statuses)
    })
    .await;
    for (row, problem) in &bad_rows {
        assert_eq!(failed[&row.event_id].0, RowStatus::Failed.code(), "{}", row.event_id);
        let last_error = last_error(&outbox, &row.event_id).await;
        assert!(last_error.contains(problem), "{}: last_error {last_error:?} does not say {problem:?}", row.event_id);
    }
    drop(relay);
}

async fn last_error(outbox: &TestOutbox, event_id: &str) -> String {
    let sql = format!("SELECT last_error FROM {} WHERE event_id = ?", outbox.table.qualified());
    let mut conn = outbox.pool.get_conn().await.expect("conn");
    conn.exec_first::<Option<String>, _, _>(sql, (event_id,)).await.expect("last_error").flatten().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_send_of_a_traced_event_is_exported_as_a_span_of_the_rows_trace() {
    let receiver = OtlpReceiver::start().await;
    let stack = Stack::from_env();
    let outbox = TestOutbox::create(&stack).await;
    let events = Events::new(&stack, "traced").await;
    let options = RelayOptions::new(outbox.name()).env("OUTBOX_RELAY__TRACES__OTLP_ENDPOINT", receiver.endpoint());
    let mut relay = RelayProcess::start(&stack, &options);
    relay.wait_ready().await;
    let traced = Tagged::cycling(&events, "k7", 3);
    let plain = Tagged::plain(&events, "k7", 4);
    insert(&outbox, &events.topic, &[traced.clone(), plain]).await;
    all_sent(&outbox, 2, Duration::from_secs(30)).await;

    let traceparent = traceparent("k7", 3);
    let [_, trace_id, parent_id, _] =
        <[&str; 4]>::try_from(traceparent.split('-').collect::<Vec<_>>()).expect("4 fields");
    let (trace_id, parent_id) = (hex(trace_id), hex(parent_id));
    let spans = eventually("the send's span to be exported", Duration::from_secs(30), || async {
        Some(receiver.spans_of(&trace_id)).filter(|spans| !spans.is_empty())
    })
    .await;
    assert_eq!(spans.len(), 1, "one span for the one traced event: {spans:?}");
    let span = &spans[0];
    assert_eq!(span.parent_span_id, parent_id, "a child of the row's traceparent");
    assert_eq!(span.name, format!("send {}", events.topic));
    let attribute = |key: &str| {
        span.attributes.iter().find(|kv| kv.key == key).and_then(|kv| kv.value.clone()).and_then(|v| v.value)
    };
    let msg_id = outbox.statuses().await[&traced.event_id].1.clone().expect("msg_id");
    assert_eq!(attribute("messaging.message.id"), Some(Any::StringValue(msg_id)));
    assert_eq!(attribute("outbox.event_id"), Some(Any::StringValue(traced.event_id.clone())));
    drop(relay);
}

/// The bytes a hex string spells.
fn hex(text: &str) -> Vec<u8> {
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).expect("hex")).collect()
}
