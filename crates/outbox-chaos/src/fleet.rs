//! The relay processes of a run: up to three slots, each with its own checkpoint
//! directory, replica server id and log files, all reading the current source
//! replica. The fleet finds the leader through `/readyz`, and starts, kills,
//! pauses and restarts relays for the faults.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use outbox_test_support::relay::RelayProcess;

/// The most relays running at once.
pub const SLOTS: usize = 3;
/// How long a relay may take to drain and stop on SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// A relay that exited without being told to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnplannedExit {
    pub slot: usize,
    pub code: Option<i32>,
    pub log: PathBuf,
}

struct Slot {
    process: Option<RelayProcess>,
    checkpoint: PathBuf,
    server_id: u32,
}

/// The relays and how to start them.
pub struct Fleet {
    binary: PathBuf,
    config: PathBuf,
    dir: PathBuf,
    /// Extra environment of every relay (the test-only fault switches).
    env: Vec<(String, String)>,
    sources: Vec<String>,
    source: usize,
    slots: Vec<Slot>,
    baseline: usize,
    starts: usize,
}

impl Fleet {
    /// A fleet whose `baseline` relays read `sources[0]`, logging under `dir`.
    pub fn new(
        binary: &Path,
        config: &Path,
        dir: &Path,
        env: Vec<(String, String)>,
        sources: Vec<String>,
        baseline: usize,
    ) -> Self {
        let slots = (0..SLOTS)
            .map(|i| Slot { process: None, checkpoint: dir.join(format!("checkpoint-{i}")), server_id: 7100 + i as u32 })
            .collect();
        Self {
            binary: binary.to_owned(),
            config: config.to_owned(),
            dir: dir.to_owned(),
            env,
            sources,
            source: 0,
            slots,
            baseline: baseline.clamp(1, SLOTS),
            starts: 0,
        }
    }

    pub fn start(&mut self, slot: usize) -> anyhow::Result<()> {
        self.starts += 1;
        let log = self.dir.join(format!("relay-{slot}-{}.log", self.starts));
        let state = &self.slots[slot];
        let mut env = vec![
            ("OUTBOX_RELAY__SOURCE__URL".to_owned(), self.sources[self.source].clone()),
            ("OUTBOX_RELAY__SOURCE__SERVER_ID".to_owned(), state.server_id.to_string()),
            ("OUTBOX_RELAY__CHECKPOINT__PATH".to_owned(), state.checkpoint.display().to_string()),
        ];
        env.extend(self.env.iter().cloned());
        let process = RelayProcess::start(&self.binary, &self.config, &env, &log)?;
        self.slots[slot].process = Some(process);
        Ok(())
    }

    /// Starts idle slots until the baseline number of relays runs.
    pub fn start_baseline(&mut self) -> anyhow::Result<()> {
        let idle = (0..SLOTS).filter(|s| self.slots[*s].process.is_none());
        let missing: Vec<usize> = idle.take(self.baseline.saturating_sub(self.running().len())).collect();
        missing.into_iter().try_for_each(|slot| self.start(slot))
    }

    /// Starts every idle slot at the same instant; the slots started.
    pub fn start_idle(&mut self) -> anyhow::Result<Vec<usize>> {
        let idle: Vec<usize> = (0..SLOTS).filter(|s| self.slots[*s].process.is_none()).collect();
        for slot in &idle {
            self.start(*slot)?;
        }
        Ok(idle)
    }

    /// SIGKILL of `slot`.
    pub fn kill(&mut self, slot: usize) -> anyhow::Result<()> {
        if let Some(mut process) = self.slots[slot].process.take() {
            process.kill().context("kill a relay")?;
        }
        Ok(())
    }

    pub fn kill_all(&mut self) -> anyhow::Result<()> {
        (0..SLOTS).try_for_each(|slot| self.kill(slot))
    }

    /// SIGTERM of `slot`, waiting for its drain.
    pub fn stop(&mut self, slot: usize) -> anyhow::Result<()> {
        if let Some(mut process) = self.slots[slot].process.take() {
            process.terminate(STOP_DEADLINE)?;
        }
        Ok(())
    }

    /// Sends `signal` (STOP, CONT) to `slot`.
    pub fn signal(&self, slot: usize, signal: &str) -> anyhow::Result<()> {
        match &self.slots[slot].process {
            Some(process) => process.signal(signal),
            None => Ok(()),
        }
    }

    /// Deletes `slot`'s RocksDB checkpoint directory.
    pub fn delete_checkpoint(&self, slot: usize) -> anyhow::Result<()> {
        let dir = &self.slots[slot].checkpoint;
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("delete {}", dir.display()))?;
        }
        Ok(())
    }

    /// Moves every relay to the next source: each running relay is stopped (drained),
    /// then started again on the new source.
    pub fn switch_source(&mut self) -> anyhow::Result<()> {
        let running = self.running();
        for slot in &running {
            self.stop(*slot)?;
        }
        self.source = (self.source + 1) % self.sources.len();
        running.into_iter().try_for_each(|slot| self.start(slot))
    }

    /// The source index relays read now.
    pub fn source(&self) -> usize {
        self.source
    }

    pub fn running(&self) -> Vec<usize> {
        (0..SLOTS).filter(|s| self.slots[*s].process.is_some()).collect()
    }

    pub fn baseline(&self) -> usize {
        self.baseline
    }

    /// The slot whose `/readyz` says it leads, if any.
    pub fn leader(&self) -> Option<usize> {
        self.running().into_iter().find(|slot| self.readiness(*slot).is_some_and(|r| r.contains(r#""role":"leader""#)))
    }

    /// The slots running as standbys.
    pub fn standbys(&self) -> Vec<usize> {
        let leader = self.leader();
        self.running().into_iter().filter(|slot| Some(*slot) != leader).collect()
    }

    fn readiness(&self, slot: usize) -> Option<String> {
        self.slots[slot].process.as_ref()?.get("/readyz").ok()
    }

    /// Relays that exited on their own since the last call; their slots become idle.
    pub fn reap(&mut self) -> Vec<UnplannedExit> {
        let mut exits = Vec::new();
        for (slot, state) in self.slots.iter_mut().enumerate() {
            let Some(process) = state.process.as_mut() else { continue };
            if let Ok(Some(code)) = process.exited() {
                exits.push(UnplannedExit { slot, code, log: process.log_path().to_owned() });
                state.process = None;
            }
        }
        exits
    }

    /// Waits until one relay leads and is ready; how long that took. Relays that exit
    /// meanwhile are restarted (and returned) so that a crash cannot stall the run.
    pub async fn wait_ready_leader(&mut self, deadline: Duration) -> (Option<Duration>, Vec<UnplannedExit>) {
        let started = Instant::now();
        let mut exits = Vec::new();
        while started.elapsed() < deadline {
            let reaped = self.reap();
            if !reaped.is_empty() {
                exits.extend(reaped);
                if let Err(error) = self.start_baseline() {
                    eprintln!("outbox-chaos: restarting a relay failed: {error:#}");
                }
            }
            let ready_leader = self.running().into_iter().any(|slot| {
                self.readiness(slot).is_some_and(|r| r.starts_with("HTTP/1.0 200") && r.contains(r#""role":"leader""#))
            });
            if ready_leader {
                return (Some(started.elapsed()), exits);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (None, exits)
    }
}
