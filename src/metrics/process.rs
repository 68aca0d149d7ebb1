//! What a process costs the machine, read from Linux's /proc: CPU seconds (every
//! thread's user and system time), resident memory now and at its peak, threads, and
//! open file descriptors against their limit; and when the relay started.
//!
//! The relay serves its own figures at /metrics as the usual `process_*` series beside
//! `relay_runtime_worker_threads`, so one expression shows how close its worker threads
//! are to the cores they may use (the figures also count the few threads beside them:
//! checkpoint writes, RocksDB's own). The benchmark tool reads the same figures of every
//! process it measures. Where /proc does not exist (not Linux) the series are left out.

use std::fmt;
use std::io;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;

use super::{gauge_value, FloatGauge};

/// One process's cost at one instant.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProcessStats {
    /// User plus system CPU time of every thread so far, seconds.
    pub cpu_seconds: f64,
    /// Resident memory now (VmRSS).
    pub resident_bytes: u64,
    /// The most resident memory so far (VmHWM).
    pub peak_resident_bytes: u64,
    /// Threads now.
    pub threads: u64,
}

impl ProcessStats {
    /// The figures of the calling process.
    pub fn of_self() -> io::Result<Self> {
        Self::read("self")
    }

    /// The figures of process `pid`.
    pub fn of_pid(pid: u32) -> io::Result<Self> {
        Self::read(&pid.to_string())
    }

    fn read(which: &str) -> io::Result<Self> {
        let stat = std::fs::read_to_string(format!("/proc/{which}/stat"))?;
        let status = std::fs::read_to_string(format!("/proc/{which}/status"))?;
        Self::parse(&stat, &status, clock_ticks_per_second()).ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, format!("/proc/{which}/stat or status has unexpected fields"))
        })
    }

    /// From the text of /proc/PID/stat (utime and stime are its 14th and 15th fields;
    /// they are counted from the end of the command name, the second field, which is
    /// in parentheses and may hold spaces) and of /proc/PID/status (sizes in kB).
    fn parse(stat: &str, status: &str, ticks_per_second: f64) -> Option<Self> {
        let after_name = &stat[stat.rfind(')')? + 1..];
        let mut fields = after_name.split_whitespace().skip(11);
        let utime: u64 = fields.next()?.parse().ok()?;
        let stime: u64 = fields.next()?.parse().ok()?;
        let field = |name: &str| -> Option<u64> {
            let value = status.lines().find_map(|line| line.strip_prefix(name))?;
            value.trim().trim_end_matches("kB").trim().parse().ok()
        };
        Some(Self {
            cpu_seconds: (utime + stime) as f64 / ticks_per_second,
            resident_bytes: field("VmRSS:")? * 1024,
            peak_resident_bytes: field("VmHWM:")? * 1024,
            threads: field("Threads:")?,
        })
    }
}

/// Open file descriptors of the calling process, and its soft limit on them.
fn open_fds() -> Option<(u64, u64)> {
    let open = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    Some((open, max_open_files(&limits)?))
}

/// The soft limit of the "Max open files" line of /proc/PID/limits ("unlimited": none).
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits.lines().find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// Registers the process series and the runtime's worker threads in `registry`; the
/// start time is now (the relay registers them as it starts).
pub(crate) fn register(registry: &mut Registry, worker_threads: usize) {
    let started = FloatGauge::default();
    started.set(crate::time::unix_millis_now() as f64 / 1_000.0);
    registry.register("process_start_time_seconds", "When the relay started, Unix time in seconds", started);
    let workers = Gauge::<i64>::default();
    workers.set(gauge_value(worker_threads));
    registry.register(
        "relay_runtime_worker_threads",
        "Worker threads of the runtime (runtime.worker_threads): about the cores the relay can use at once",
        workers,
    );
    registry.register_collector(Box::new(SelfCollector));
}

/// Reads the relay's own figures at every scrape.
#[derive(Debug)]
struct SelfCollector;

impl Collector for SelfCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> fmt::Result {
        let Ok(stats) = ProcessStats::of_self() else {
            return Ok(());
        };
        let cpu = ConstCounter::new(stats.cpu_seconds);
        cpu.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "User and system CPU time of every thread of the relay, seconds",
            None,
            cpu.metric_type(),
        )?)?;
        let (open_fds, max_fds) = open_fds().unwrap_or_default();
        let gauges = [
            ("process_resident_memory_bytes", "Resident memory of the relay, bytes", stats.resident_bytes),
            (
                "process_resident_memory_max_bytes",
                "The most resident memory the relay has had so far (VmHWM), bytes",
                stats.peak_resident_bytes,
            ),
            ("process_threads", "Threads of the relay", stats.threads),
            ("process_open_fds", "Open file descriptors of the relay", open_fds),
            ("process_max_fds", "The relay's limit on open file descriptors (soft)", max_fds),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATUS: &str = "Name:\tx\nVmHWM:\t   81920 kB\nVmRSS:\t   40960 kB\nThreads:\t9\n";

    #[test]
    fn cpu_time_is_read_after_a_command_name_with_spaces() {
        let stat = "4242 (tokio (worker) 1) S 1 4242 4242 0 -1 4194560 5000 0 0 0 700 55 0 0 20 0 9 0 1234 0 0";
        let stats = ProcessStats::parse(stat, STATUS, 100.0).expect("fields");
        assert_eq!(stats.cpu_seconds, 7.55);
        assert_eq!(stats.resident_bytes, 40 * 1024 * 1024);
        assert_eq!(stats.peak_resident_bytes, 80 * 1024 * 1024);
        assert_eq!(stats.threads, 9);
    }

    #[test]
    fn the_soft_limit_of_open_files_is_read() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units\n\
                      Max open files            1024                 524288               files\n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(max_open_files("Max open files            unlimited            unlimited            files"), None);
    }

    #[test]
    fn a_truncated_stat_line_is_refused() {
        assert_eq!(ProcessStats::parse("4242 (x) S 1", STATUS, 100.0), None);
        let stat = "1 (x) S 1 1 1 0 -1 0 0 0 0 0 700 55";
        assert_eq!(ProcessStats::parse(stat, "Name:\tx\n", 100.0), None);
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn this_process_can_be_read() {
        let stats = ProcessStats::of_self().expect("/proc/self");
        assert!(stats.resident_bytes > 0 && stats.peak_resident_bytes >= stats.resident_bytes, "{stats:?}");
        assert!(stats.threads >= 1, "{stats:?}");
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_series_are_served_under_their_usual_names() {
        let mut registry = Registry::default();
        register(&mut registry, 3);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encode");
        assert!(text.contains("\nrelay_runtime_worker_threads 3\n"), "{text}");
        let names = [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_resident_memory_max_bytes ",
            "process_threads ",
            "process_open_fds ",
            "process_max_fds ",
            "process_start_time_seconds ",
        ];
        for name in names {
            assert!(text.contains(&format!("\n{name}")), "{name} in {text}");
        }
    }
}
