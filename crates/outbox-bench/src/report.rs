//! Results: one [`Measurement`] per case and mode, printed as a table and as JSON lines
//! (so a script can compare runs), with throughput ratios against `raw` from the same run.

use serde::Serialize;

use crate::cases::retention::RetentionCost;
use crate::cpu::{CpuPerEvent, Role};

/// Latency percentiles, milliseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Percentiles {
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    /// From unsorted samples (milliseconds); `None` without samples.
    pub fn of(mut samples: Vec<f64>) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort_by(f64::total_cmp);
        let at = |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
        Some(Self { p50_ms: at(0.50), p90_ms: at(0.90), p99_ms: at(0.99), max_ms: at(1.0) })
    }
}

/// The `q` quantile of a histogram's cumulative buckets ((upper bound, count), the
/// last `+Inf`), interpolated inside its bucket as Prometheus' `histogram_quantile`
/// does; `None` without observations or when it falls in the `+Inf` bucket.
pub fn histogram_quantile(q: f64, buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    if total <= 0.0 {
        return None;
    }
    let rank = q * total;
    let at = buckets.iter().position(|&(_, count)| count >= rank)?;
    let (upper, count) = buckets[at];
    let (lower, below) = if at == 0 { (0.0, 0.0) } else { buckets[at - 1] };
    if upper.is_infinite() {
        return None;
    }
    Some(lower + (upper - lower) * (rank - below) / (count - below).max(f64::MIN_POSITIVE))
}

/// The upper bound of the first bucket that holds every observation: the largest
/// observation is at most this; `None` without observations or when one is in `+Inf`.
pub fn histogram_max_at_most(buckets: &[(f64, f64)]) -> Option<f64> {
    let total = buckets.last()?.1;
    let &(upper, _) = buckets.iter().find(|&&(_, count)| count >= total && total > 0.0)?;
    upper.is_finite().then_some(upper)
}

/// One result.
#[derive(Debug, Clone, Serialize)]
pub struct Measurement {
    pub bench: &'static str,
    /// `--label` of the run.
    pub label: String,
    pub case: &'static str,
    /// `binlog`, `poll`, or `broker` for `raw`.
    pub mode: &'static str,
    pub events: usize,
    pub seconds: f64,
    pub events_per_s: f64,
    /// Drains: when the last event got SEND_OK (the rest of `seconds` is the write-back
    /// and the checkpoint catching up).
    pub send_ok_seconds: Option<f64>,
    /// Drains: when the relay's `/readyz` first answered 200, seconds after its start
    /// (the drain is timed from the start; the relay sends before it is ready).
    pub ready_seconds: Option<f64>,
    /// Throughput over `raw`'s in the same run.
    pub vs_raw: Option<f64>,
    pub offered_per_s: Option<f64>,
    pub latency: Option<Percentiles>,
    /// The median of the relay's own `relay_commit_to_ack_seconds`, milliseconds, to
    /// set beside `latency.p50_ms` (latency runs).
    pub relay_p50_ms: Option<f64>,
    /// The bench's own median from each writer's INSERT start (the instant the row's
    /// `created_at` records, where `relay_commit_to_ack_seconds` starts) to SEND_OK,
    /// milliseconds (latency runs): `relay_p50_ms` must agree with it; `latency`
    /// starts later, at the COMMIT's return.
    pub from_insert_p50_ms: Option<f64>,
    /// The median of the relay's `relay_route_to_ack_seconds` (from routing to
    /// SEND_OK: the time inside the relay), milliseconds (latency runs): the rest of
    /// `latency.p50_ms` is spent before the relay reads the event.
    pub in_relay_p50_ms: Option<f64>,
    /// The 99th percentile of the same, milliseconds (latency runs).
    pub in_relay_p99_ms: Option<f64>,
    /// The bucket bound that the longest time inside the relay stayed within,
    /// milliseconds (latency runs).
    pub in_relay_max_at_most_ms: Option<f64>,
    /// The bucket bound that the longest send stayed within (`relay_send_seconds`:
    /// from handing the request to the client to the broker's answer), milliseconds
    /// (latency runs): beside `in_relay_max_at_most_ms`, whether a slow event waited
    /// in its send.
    pub send_max_at_most_ms: Option<f64>,
    /// The median of `relay_send_seconds`, milliseconds (latency runs): the part of
    /// `in_relay_p50_ms` that an event's own send takes (mostly the broker's answer;
    /// the rest is mostly the wait for the send before it on its queue).
    pub send_p50_ms: Option<f64>,
    /// Events per synchronous send (`relay_events_published_total` over
    /// `relay_send_batches_total`, both summed over their labels: every path, every
    /// answer and retry; latency runs): how full the lanes' batches were.
    pub events_per_send: Option<f64>,
    /// Latency runs: the transactions the primary binlogged per event beyond the
    /// writers' own (the relay's SENT write-backs, lease, mirror and claims).
    pub relay_commits_per_event: Option<f64>,
    /// CPU per event of each process over the case's window.
    pub cpu: Option<CpuPerEvent>,
    pub peak_rss_mib: Option<f64>,
    /// Retention runs: what retiring the old rows cost.
    pub retention: Option<RetentionCost>,
}

impl Measurement {
    pub fn throughput(case: &'static str, mode: &'static str, events: usize, seconds: f64) -> Self {
        Self {
            bench: "outbox-relay",
            label: String::new(),
            case,
            mode,
            events,
            seconds,
            events_per_s: if seconds > 0.0 { events as f64 / seconds } else { 0.0 },
            send_ok_seconds: None,
            ready_seconds: None,
            vs_raw: None,
            offered_per_s: None,
            latency: None,
            relay_p50_ms: None,
            from_insert_p50_ms: None,
            in_relay_p50_ms: None,
            in_relay_p99_ms: None,
            in_relay_max_at_most_ms: None,
            send_max_at_most_ms: None,
            send_p50_ms: None,
            events_per_send: None,
            relay_commits_per_event: None,
            cpu: None,
            peak_rss_mib: None,
            retention: None,
        }
    }

    pub fn summary(&self) -> String {
        let ready = self.ready_seconds.map(|s| format!(", ready at {s:.2} s")).unwrap_or_default();
        let send_ok = self.send_ok_seconds.map(|s| format!(" (last SEND_OK at {s:.2} s{ready})")).unwrap_or_default();
        format!("{} {}: {} events in {:.2} s{send_ok}", self.case, self.mode, self.events, self.seconds)
    }
}

/// Sets `vs_raw` of the throughput cases from the `raw` result, if one ran.
pub fn add_ratios(results: &mut [Measurement]) {
    let Some(raw) = results.iter().find(|m| m.case == "raw").map(|m| m.events_per_s) else { return };
    for m in results.iter_mut().filter(|m| !["latency", "held", "retention"].contains(&m.case) && raw > 0.0) {
        m.vs_raw = Some(m.events_per_s / raw);
    }
}

/// The human table.
pub fn table(results: &[Measurement], setup: &str) -> String {
    let mut out = format!("\n{setup}\n\n");
    out.push_str(&format!(
        "{:<8} {:<7} {:>9} {:>8} {:>10} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>9} {:>12} {:>11} {:>12} {:>12} {:>14} {:>14} {:>13} {:>11}\n",
        "case",
        "mode",
        "events",
        "seconds",
        "events/s",
        "offered/s",
        "vs raw",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "max ms",
        "peak RSS",
        "relay p50 ms",
        "from INSERT",
        "in relay p50",
        "in relay p99",
        "in relay max<=",
        "send max<=",
        "send p50 ms",
        "events/send"
    ));
    for m in results {
        let ms = |f: fn(&Percentiles) -> f64| m.latency.as_ref().map(|p| format!("{:.1}", f(p))).unwrap_or_default();
        out.push_str(&format!(
            "{:<8} {:<7} {:>9} {:>8.2} {:>10.0} {:>9} {:>7} {:>8} {:>8} {:>8} {:>8} {:>9} {:>12} {:>11} {:>12} {:>12} {:>14} {:>14} {:>13} {:>11}\n",
            m.case,
            m.mode,
            m.events,
            m.seconds,
            m.events_per_s,
            m.offered_per_s.map(|r| format!("{r:.0}")).unwrap_or_default(),
            m.vs_raw.map(|r| format!("{r:.2}x")).unwrap_or_default(),
            ms(|p| p.p50_ms),
            ms(|p| p.p90_ms),
            ms(|p| p.p99_ms),
            ms(|p| p.max_ms),
            m.peak_rss_mib.map(|r| format!("{r:.0} MiB")).unwrap_or_default(),
            m.relay_p50_ms.map(|p| format!("{p:.1}")).unwrap_or_default(),
            m.from_insert_p50_ms.map(|p| format!("{p:.1}")).unwrap_or_default(),
            m.in_relay_p50_ms.map(|p| format!("{p:.1}")).unwrap_or_default(),
            m.in_relay_p99_ms.map(|p| format!("{p:.1}")).unwrap_or_default(),
            m.in_relay_max_at_most_ms.map(|p| format!("{p:.0}")).unwrap_or_default(),
            m.send_max_at_most_ms.map(|p| format!("{p:.0}")).unwrap_or_default(),
            m.send_p50_ms.map(|p| format!("{p:.1}")).unwrap_or_default(),
            m.events_per_send.map(|n| format!("{n:.2}")).unwrap_or_default(),
        ));
    }
    out.push('\n');
    out.push_str(&cpu_table(results));
    out.push_str(&retention_table(results));
    out
}

/// What retiring the old rows cost each method.
fn retention_table(results: &[Measurement]) -> String {
    let mut out = String::new();
    for m in results {
        let Some(r) = &m.retention else { continue };
        if out.is_empty() {
            out = format!(
                "\n{:<8} {:>10} {:>9} {:>12} {:>13} {:>13} {:>11} {:>15} {:>12} {:>12}\n",
                "method",
                "rows",
                "seconds",
                "convert s",
                "primary cpu",
                "replicas cpu",
                "relay cpu",
                "binlog MiB+",
                "load p50 ms",
                "load p99 ms"
            );
        }
        let ms = |f: fn(&Percentiles) -> f64| m.latency.as_ref().map(|p| format!("{:.1}", f(p))).unwrap_or_default();
        out.push_str(&format!(
            "{:<8} {:>10} {:>9.1} {:>12} {:>13.1} {:>13.1} {:>11.1} {:>15.1} {:>12} {:>12}\n",
            m.mode,
            r.rows_retired,
            m.seconds,
            r.convert_seconds.map(|s| format!("{s:.1}")).unwrap_or_default(),
            r.primary_cpu_s,
            r.replicas_cpu_s,
            r.relay_cpu_s,
            r.binlog_mib_beyond_load,
            ms(|p| p.p50_ms),
            ms(|p| p.p99_ms),
        ));
    }
    out
}

/// CPU per event of each process, and the throughput those costs allow on this
/// machine's cores beside the throughput measured.
fn cpu_table(results: &[Measurement]) -> String {
    if results.iter().all(|m| m.cpu.is_none()) {
        return String::new();
    }
    let mut out = format!(
        "{:<8} {:<7} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>12} {:>16}\n",
        "case",
        "mode",
        "relay us/ev",
        "primary",
        "replicas",
        "broker",
        "total",
        "ceiling/s",
        "vs ceiling",
        "relay commits/ev"
    );
    for m in results {
        let Some(cpu) = &m.cpu else { continue };
        let us = |role| cpu.of(role).map(|us| format!("{us:.1}")).unwrap_or_default();
        out.push_str(&format!(
            "{:<8} {:<7} {:>12} {:>12} {:>12} {:>12} {:>12.1} {:>12.0} {:>11.2}x {:>16}\n",
            m.case,
            m.mode,
            us(Role::Relay),
            us(Role::Primary),
            us(Role::Replicas),
            us(Role::Broker),
            cpu.us_per_event.values().sum::<f64>(),
            cpu.ceiling_per_s,
            m.events_per_s / cpu.ceiling_per_s,
            m.relay_commits_per_event.map(|c| format!("{c:.3}")).unwrap_or_default(),
        ));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let p = Percentiles::of((1..=100).map(f64::from).collect()).expect("samples");
        assert_eq!((p.p50_ms, p.p90_ms, p.p99_ms, p.max_ms), (50.0, 90.0, 99.0, 100.0));
        assert!(Percentiles::of(Vec::new()).is_none());
    }

    #[test]
    fn histogram_quantiles_interpolate_inside_the_bucket() {
        let buckets = [(0.001, 0.0), (0.002, 40.0), (0.004, 80.0), (f64::INFINITY, 100.0)];
        assert_eq!(histogram_quantile(0.5, &buckets), Some(0.0025));
        assert_eq!(histogram_quantile(0.2, &buckets), Some(0.0015));
        assert_eq!(histogram_quantile(0.9, &buckets), None, "in the +Inf bucket");
        assert_eq!(histogram_quantile(0.5, &[(f64::INFINITY, 0.0)]), None, "no observations");
    }

    #[test]
    fn the_largest_observation_is_bounded_by_the_first_bucket_holding_all() {
        let buckets = [(0.001, 0.0), (0.002, 40.0), (0.004, 100.0), (f64::INFINITY, 100.0)];
        assert_eq!(histogram_max_at_most(&buckets), Some(0.004));
        assert_eq!(histogram_max_at_most(&[(0.001, 1.0), (f64::INFINITY, 2.0)]), None, "one in +Inf");
        assert_eq!(histogram_max_at_most(&[(0.001, 0.0), (f64::INFINITY, 0.0)]), None, "no observations");
    }

    #[test]
    fn ratios_are_against_raw_of_the_same_run() {
        let mut results = vec![
            Measurement::throughput("raw", "broker", 1_000, 1.0),
            Measurement::throughput("drain", "binlog", 1_000, 2.0),
        ];
        add_ratios(&mut results);
        assert_eq!(results[1].vs_raw, Some(0.5));
    }
}
