//! The relay processes of a run: up to three slots, each with its own checkpoint
//! directory, replica server id and log files, all reading the current source
//! replica. The fleet finds the leader through `/readyz`, and starts, kills,
//! pauses and restarts relays for the faults.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Context;
use outbox_test_support::relay::{RelayProcess, Signal};
use tokio::task::block_in_place;

/// The most relays running at once.
pub(crate) const SLOTS: usize = 3;
/// The replica server id of slot 0 (slot n uses this + n).
const FIRST_SERVER_ID: u32 = 7100;
/// How long a relay may take to drain and stop on SIGTERM.
const STOP_DEADLINE: Duration = Duration::from_secs(60);

/// A relay that exited without being told to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnplannedExit {
    pub(crate) slot: usize,
    pub(crate) code: Option<i32>,
    pub(crate) log: PathBuf,
}

struct Slot {
    process: Option<RelayProcess>,
    checkpoint: PathBuf,
    server_id: u32,
}

/// The relays and how to start them.
pub(crate) struct Fleet {
    binary: PathBuf,
    config: PathBuf,
    /// The outbox table the relays serve, as `schema.table` (its mirror row's key).
    table: String,
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
    /// A fleet whose `baseline` relays of outbox `table` (`schema.table`) read
    /// `sources[0]`, logging under `dir`.
    pub(crate) fn new(
        binary: &Path,
        config: &Path,
        table: &str,
        dir: &Path,
        env: Vec<(String, String)>,
        sources: Vec<String>,
        baseline: usize,
    ) -> Self {
        let slots = (0..SLOTS)
            .map(|i| Slot {
                process: None,
                checkpoint: dir.join(format!("checkpoint-{i}")),
                server_id: FIRST_SERVER_ID + i as u32,
            })
            .collect();
        Self {
            binary: binary.to_owned(),
            config: config.to_owned(),
            table: table.to_owned(),
            dir: dir.to_owned(),
            env,
            sources,
            source: 0,
            slots,
            baseline: baseline.clamp(1, SLOTS),
            starts: 0,
        }
    }

    pub(crate) fn start(&mut self, slot: usize) -> anyhow::Result<()> {
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
    pub(crate) fn start_baseline(&mut self) -> anyhow::Result<()> {
        let idle = (0..SLOTS).filter(|s| self.slots[*s].process.is_none());
        let missing: Vec<usize> = idle.take(self.baseline.saturating_sub(self.running().len())).collect();
        missing.into_iter().try_for_each(|slot| self.start(slot))
    }

    /// Starts every idle slot at the same instant.
    pub(crate) fn start_idle(&mut self) -> anyhow::Result<()> {
        let idle: Vec<usize> = (0..SLOTS).filter(|s| self.slots[*s].process.is_none()).collect();
        idle.into_iter().try_for_each(|slot| self.start(slot))
    }

    /// SIGKILL of `slot`.
    pub(crate) fn kill(&mut self, slot: usize) -> anyhow::Result<()> {
        if let Some(mut process) = self.slots[slot].process.take() {
            block_in_place(|| process.kill()).context("kill a relay")?;
        }
        Ok(())
    }

    pub(crate) fn kill_all(&mut self) -> anyhow::Result<()> {
        (0..SLOTS).try_for_each(|slot| self.kill(slot))
    }

    /// SIGTERM of `slot`, waiting for its drain.
    pub(crate) fn stop(&mut self, slot: usize) -> anyhow::Result<()> {
        if let Some(mut process) = self.slots[slot].process.take() {
            block_in_place(|| process.terminate(STOP_DEADLINE))?;
        }
        Ok(())
    }

    /// Freezes or continues `slot`.
    pub(crate) fn signal(&self, slot: usize, signal: Signal) -> anyhow::Result<()> {
        match &self.slots[slot].process {
            Some(process) => process.signal(signal),
            None => anyhow::bail!("no relay runs in slot {slot} to send {signal:?}"),
        }
    }

    /// Deletes `slot`'s RocksDB checkpoint directory.
    pub(crate) fn delete_checkpoint(&self, slot: usize) -> anyhow::Result<()> {
        let dir = &self.slots[slot].checkpoint;
        if dir.exists() {
            std::fs::remove_dir_all(dir).with_context(|| format!("delete {}", dir.display()))?;
        }
        Ok(())
    }

    /// Moves every relay to the next source: each running relay is stopped (drained),
    /// then started again on the new source.
    pub(crate) fn switch_source(&mut self) -> anyhow::Result<()> {
        let running = self.running();
        for slot in &running {
            self.stop(*slot)?;
        }
        self.source = (self.source + 1) % self.sources.len();
        running.into_iter().try_for_each(|slot| self.start(slot))
    }

    /// Runs the operator command `args` of the relay binary against the fleet's
    /// table, signed by the harness; fails unless it exits 0.
    pub(crate) async fn operator(&self, args: &[&str]) -> anyhow::Result<()> {
        let output = tokio::process::Command::new(&self.binary)
            .arg("--config")
            .arg(&self.config)
            .args(args)
            .args(["--operator", "outbox-chaos", "--reason", "fault harness"])
            .output()
            .await
            .with_context(|| format!("run outbox-relay {}", args.join(" ")))?;
        anyhow::ensure!(
            output.status.success(),
            "outbox-relay {} exited {}: {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
        Ok(())
    }

    /// The fleet's outbox table as `schema.table`.
    pub(crate) fn table(&self) -> &str {
        &self.table
    }

    /// The source index relays read now.
    pub(crate) fn source(&self) -> usize {
        self.source
    }

    pub(crate) fn running(&self) -> Vec<usize> {
        (0..SLOTS).filter(|s| self.slots[*s].process.is_some()).collect()
    }

    pub(crate) fn baseline(&self) -> usize {
        self.baseline
    }

    /// The slot whose `/readyz` says it leads, if any.
    pub(crate) fn leader(&self) -> Option<usize> {
        self.running().into_iter().find(|slot| self.asks(*slot, RelayProcess::leads))
    }

    /// The slots running as standbys.
    pub(crate) fn standbys(&self) -> Vec<usize> {
        let leader = self.leader();
        self.running().into_iter().filter(|slot| Some(*slot) != leader).collect()
    }

    /// Asks `slot`'s HTTP endpoint (a blocking call, off the async workers).
    fn asks(&self, slot: usize, question: fn(&RelayProcess) -> bool) -> bool {
        self.slots[slot].process.as_ref().is_some_and(|process| block_in_place(|| question(process)))
    }

    /// Relays that exited on their own since the last call; their slots become idle.
    pub(crate) fn reap(&mut self) -> Vec<UnplannedExit> {
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
    pub(crate) async fn wait_ready_leader(&mut self, deadline: Duration) -> (Option<Duration>, Vec<UnplannedExit>) {
        let started = Instant::now();
        let mut exits = Vec::new();
        while started.elapsed() < deadline {
            let reaped = self.reap();
            if !reaped.is_empty() {
                exits.extend(reaped);
                if let Err(error) = self.start_baseline() {
                    tracing::error!("restarting a relay failed: {error:#}");
                }
            }
            if self.running().into_iter().any(|slot| self.asks(slot, RelayProcess::ready_leader)) {
                return (Some(started.elapsed()), exits);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        (None, exits)
    }
}
