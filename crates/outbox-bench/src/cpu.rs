//! CPU time per process over a case's window, read from /proc (utime + stime of every
//! thread), so each result says what one event cost the relay, the MariaDB servers and
//! the broker, and how many events per second those costs allow when they all share
//! this machine's cores (the co-located ceiling): a reader sees which process limits a
//! drain and how close the drain came to what the machine allows.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::Context;
use outbox_relay::ProcessStats;
use serde::Serialize;

/// The processes a case loads, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Relay,
    /// The primary: the application's inserts, the relay's write-backs and claims.
    Primary,
    /// Every replica of the stack (the relay's source and the others): what applying
    /// the primary's binlog costs.
    Replicas,
    /// Every broker process: broker-a, its slave and broker-b.
    Broker,
}

/// The stack's pid files of each role (under `scripts/stack`'s state directory).
const STACK_PIDS: [(Role, &str); 7] = [
    (Role::Primary, "mariadb.pid"),
    (Role::Replicas, "replica.pid"),
    (Role::Replicas, "replica2.pid"),
    (Role::Replicas, "bare.pid"),
    (Role::Broker, "broker.pid"),
    (Role::Broker, "broker-a-slave.pid"),
    (Role::Broker, "broker-b.pid"),
];

/// Which processes to read.
#[derive(Debug, Clone)]
pub struct Processes {
    pids: Vec<(Role, u32)>,
}

/// CPU seconds of each role at one instant.
#[derive(Debug, Clone, Default)]
pub struct Reading(BTreeMap<Role, f64>);

impl Reading {
    /// The CPU seconds `role` had used (0 when not read).
    pub fn seconds(&self, role: Role) -> f64 {
        self.0.get(&role).copied().unwrap_or(0.0)
    }
}

/// What one event cost each role, and the ceiling those costs allow.
#[derive(Debug, Clone, Serialize)]
pub struct CpuPerEvent {
    pub us_per_event: BTreeMap<Role, f64>,
    /// Events per second the machine's cores allow at these costs.
    pub ceiling_per_s: f64,
}

impl Processes {
    /// The relay's process and the stack's named by pid files in `stack_dir` (those
    /// missing are left out).
    pub fn new(relay_pid: u32, stack_dir: Option<&Path>) -> Self {
        let mut pids = vec![(Role::Relay, relay_pid)];
        if let Some(dir) = stack_dir {
            pids.extend(STACK_PIDS.iter().filter_map(|(role, file)| Some((*role, read_pid(&dir.join(file))?))));
        }
        Self { pids }
    }

    pub fn read(&self) -> anyhow::Result<Reading> {
        let mut reading = Reading::default();
        for (role, pid) in &self.pids {
            *reading.0.entry(*role).or_default() += cpu_seconds(*pid)?;
        }
        Ok(reading)
    }
}

impl CpuPerEvent {
    /// The cost per event between two readings; `None` without events.
    pub fn between(before: &Reading, after: &Reading, events: usize) -> Option<Self> {
        if events == 0 {
            return None;
        }
        let us_per_event: BTreeMap<Role, f64> = after
            .0
            .iter()
            .map(|(role, secs)| (*role, (secs - before.0.get(role).copied().unwrap_or(0.0)) * 1e6 / events as f64))
            .collect();
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        let total: f64 = us_per_event.values().sum();
        let ceiling_per_s = if total > 0.0 { cores * 1e6 / total } else { f64::INFINITY };
        Some(Self { us_per_event, ceiling_per_s })
    }

    pub fn of(&self, role: Role) -> Option<f64> {
        self.us_per_event.get(&role).copied()
    }
}

fn read_pid(file: &Path) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.trim().parse().ok()
}

/// CPU seconds of every thread of `pid` so far.
fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stats = ProcessStats::of_pid(pid).with_context(|| format!("read /proc/{pid} (has the process exited?)"))?;
    Ok(stats.cpu_seconds)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ceiling_is_the_cores_over_the_total_cost() {
        let before = Reading(BTreeMap::from([(Role::Relay, 1.0), (Role::Broker, 2.0)]));
        let after = Reading(BTreeMap::from([(Role::Relay, 3.0), (Role::Broker, 4.0)]));
        let cost = CpuPerEvent::between(&before, &after, 100_000).expect("events");
        assert_eq!(cost.of(Role::Relay), Some(20.0));
        assert_eq!(cost.of(Role::Broker), Some(20.0));
        let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
        assert!((cost.ceiling_per_s - cores * 25_000.0).abs() < 1e-6);
        assert!(CpuPerEvent::between(&before, &after, 0).is_none());
    }
}
