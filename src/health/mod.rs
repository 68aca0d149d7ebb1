//! What `/readyz` and `/healthz` answer: the relay's own account of whether each part
//! of the pipeline works, kept by the parts themselves.
//!
//! Every part that can stop working reports a [`Problem`] under its [`Part`] the moment
//! it sees one (a lost binlog connection, a send the broker did not confirm, a sweep
//! that cannot claim, a checkpoint that stopped moving) and clears it when it works
//! again. Readiness is "no part reports a problem"; its answer names the most
//! important one. Liveness is separate: the coordinator's loop beats on every turn,
//! and a loop that has not beaten for [`LIVENESS_STALL`] is wedged (a restart helps),
//! whatever the parts say.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde::Serialize;

mod dependencies;
mod systemd;

pub(crate) use dependencies::{Dependency, DependencyLog};
pub(crate) use systemd::{notify, Notifier};

/// A coordinator loop silent this long is reported dead by `/healthz`.
pub(crate) const LIVENESS_STALL: Duration = Duration::from_secs(60);

/// A part of the relay that can report a problem, in the order readiness names them.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Part {
    /// The relay is stopping (signal or a fatal error).
    Stopping,
    /// An operator paused publishing (`outbox-relay pause`).
    Paused,
    /// The leader lease: it cannot be taken or renewed (the primary does not answer).
    Lease,
    /// The binlog reader.
    BinlogSource,
    /// The replica the binlog reader reads is far behind its primary.
    ReplicaLag,
    /// The sweep (claims on the primary).
    Sweep,
    /// The route of a topic being looked up for its first event.
    Route(String),
    /// One lane: sends to (topic, broker name, queue id).
    Lane(String, String, i32),
    /// The checkpoint: not moving although transactions are in flight, or not writable.
    Checkpoint,
}

/// Why a part does not work, since when.
#[derive(Debug, Clone)]
struct Problem {
    reason: String,
    since: Instant,
}

#[derive(Debug)]
struct State {
    problems: BTreeMap<Part, Problem>,
    beat: Instant,
    role: Role,
}

impl State {
    /// The first report of an outage keeps its start time; later ones update the reason.
    fn report(&mut self, part: Part, reason: String) {
        self.problems
            .entry(part)
            .and_modify(|p| p.reason.clone_from(&reason))
            .or_insert(Problem { reason, since: Instant::now() });
    }

    /// No pipeline runs (yet, or any more): not ready until a new one's first sweep
    /// ran and, with a binlog source, its reader streams; those parts clear it.
    fn pipeline_not_running(&mut self, binlog: bool) {
        self.report(Part::Sweep, "sweep: no sweep yet (the pipeline is starting or stopped)".into());
        if binlog {
            self.report(
                Part::BinlogSource,
                "binlog source: not streaming (the pipeline is starting or stopped)".into(),
            );
        }
    }
}

/// Whether this instance publishes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Holds the lease and runs the pipeline.
    Leader,
    /// Waits for the lease, connections warm.
    Standby,
}

/// The shared health record; cheap to clone.
#[derive(Debug, Clone)]
pub struct Health {
    state: Arc<Mutex<State>>,
    dependencies: Arc<DependencyLog>,
}

/// The answer of `/readyz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Readiness {
    pub ready: bool,
    pub role: Role,
    /// The most important problem, when not ready.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Every problem, each with how long it has lasted.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    pub fn new() -> Self {
        let state = State { problems: BTreeMap::new(), beat: Instant::now(), role: Role::Standby };
        Self { state: Arc::new(Mutex::new(state)), dependencies: Arc::default() }
    }

    /// The log of the dependencies' ups and downs.
    pub(crate) fn dependencies(&self) -> &DependencyLog {
        &self.dependencies
    }

    /// `part` does not work, because of `reason`. The first report of an outage keeps
    /// its start time; later ones update the reason.
    pub(crate) fn problem(&self, part: Part, reason: impl Into<String>) {
        self.lock().report(part, reason.into());
    }

    /// `part` works again.
    pub(crate) fn clear(&self, part: &Part) {
        let mut state = self.lock();
        if !state.problems.is_empty() {
            state.problems.remove(part);
        }
    }

    /// Whether `part` reports a problem now.
    pub(crate) fn has_problem(&self, part: &Part) -> bool {
        self.lock().problems.contains_key(part)
    }

    /// This instance is a standby. It runs no pipeline, so every problem of the last
    /// term's parts is forgotten (the lease's own stays).
    pub(crate) fn stand_by(&self) {
        let mut state = self.lock();
        state.role = Role::Standby;
        state.problems.retain(|part, _| matches!(part, Part::Lease | Part::Stopping));
    }

    /// This instance took the lease. In the same instant it is not ready until its
    /// pipeline has started: a leader whose pipeline has not yet saved its start
    /// position or run its first sweep must not look ready.
    pub(crate) fn lead(&self, binlog: bool) {
        let mut state = self.lock();
        state.role = Role::Leader;
        state.pipeline_not_running(binlog);
    }

    /// The term's pipeline stopped (paused, handing over, failed): the problems of its
    /// parts are forgotten (the lease's, a pause and a stop stay), and in the same
    /// instant the leader says no pipeline runs, until one starts again.
    pub(crate) fn forget_pipeline(&self, binlog: bool) {
        let mut state = self.lock();
        state.problems.retain(|part, _| matches!(part, Part::Lease | Part::Stopping | Part::Paused));
        state.pipeline_not_running(binlog);
    }

    /// The coordinator's loop turned.
    pub(crate) fn beat(&self) {
        self.lock().beat = Instant::now();
    }

    /// Runs `work`, beating the liveness clock while it waits: a loop waiting on a
    /// dependency (the primary, the NameServer) is slow, not wedged, and a restart
    /// would not help it.
    pub(crate) async fn alive_while<F: std::future::Future>(&self, work: F) -> F::Output {
        let mut beat = tokio::time::interval(LIVENESS_STALL / 4);
        tokio::pin!(work);
        loop {
            tokio::select! {
                output = &mut work => return output,
                _ = beat.tick() => self.beat(),
            }
        }
    }

    /// Ready when no part reports a problem.
    pub fn readiness(&self) -> Readiness {
        let state = self.lock();
        let problems: Vec<String> =
            state.problems.values().map(|p| format!("{} (for {}s)", p.reason, p.since.elapsed().as_secs())).collect();
        let reason = state.problems.values().next().map(|p| p.reason.clone());
        Readiness { ready: problems.is_empty(), role: state.role, reason, problems }
    }

    /// `Err` with the reason when the coordinator's loop is wedged.
    pub fn liveness(&self) -> Result<(), String> {
        let silent = self.lock().beat.elapsed();
        if silent > LIVENESS_STALL {
            return Err(format!(
                "the pipeline loop has not turned for {}s (limit {}s): it is wedged; restart the relay",
                silent.as_secs(),
                LIVENESS_STALL.as_secs()
            ));
        }
        Ok(())
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_until_a_part_reports_and_again_once_it_clears() {
        let health = Health::new();
        assert!(health.readiness().ready);
        health.problem(Part::Lane("t".into(), "broker-a".into(), 3), "broker: not confirmed");
        health.problem(Part::BinlogSource, "binlog source: REPLICATION SLAVE missing");
        let readiness = health.readiness();
        assert!(!readiness.ready);
        assert_eq!(readiness.reason.as_deref(), Some("binlog source: REPLICATION SLAVE missing"), "the source first");
        assert_eq!(readiness.problems.len(), 2);
        health.clear(&Part::BinlogSource);
        health.clear(&Part::Lane("t".into(), "broker-a".into(), 3));
        assert!(health.readiness().ready);
    }

    #[test]
    fn a_repeated_report_keeps_the_outage_start_and_takes_the_new_reason() {
        let health = Health::new();
        health.problem(Part::Sweep, "first");
        let since = health.lock().problems[&Part::Sweep].since;
        health.problem(Part::Sweep, "second");
        let state = health.lock();
        assert_eq!(state.problems[&Part::Sweep].since, since);
        assert_eq!(state.problems[&Part::Sweep].reason, "second");
    }

    #[test]
    fn the_json_names_the_reason() {
        let health = Health::new();
        health.problem(Part::Stopping, "stopping: SIGTERM");
        let json = serde_json::to_string(&health.readiness()).expect("json");
        assert!(json.starts_with(r#"{"ready":false,"role":"standby","reason":"stopping: SIGTERM""#), "{json}");
    }

    #[test]
    fn a_standby_forgets_the_problems_of_its_last_term() {
        let health = Health::new();
        health.lead(true);
        health.problem(Part::BinlogSource, "binlog source: connection lost");
        health.problem(Part::Lease, "lease: the primary does not answer");
        health.stand_by();
        let readiness = health.readiness();
        assert_eq!(readiness.role, Role::Standby);
        assert_eq!(readiness.problems.len(), 1, "{readiness:?}");
        assert!(readiness.problems[0].starts_with("lease:"));
    }

    #[test]
    fn a_new_leader_is_not_ready_until_its_pipeline_says_it_started() {
        let health = Health::new();
        health.lead(true);
        let readiness = health.readiness();
        assert_eq!((readiness.ready, readiness.role), (false, Role::Leader), "{readiness:?}");
        health.clear(&Part::Sweep);
        assert!(!health.readiness().ready, "the reader does not stream yet");
        health.clear(&Part::BinlogSource);
        assert!(health.readiness().ready);
        health.lead(false);
        health.clear(&Part::Sweep);
        assert!(health.readiness().ready, "poll mode: the sweep alone");
        health.problem(Part::Lane("t".into(), "broker-a".into(), 3), "broker: not confirmed");
        health.forget_pipeline(false);
        let readiness = health.readiness();
        assert!(!readiness.ready, "a stopped pipeline is not ready either");
        assert_eq!(readiness.problems.len(), 1, "the lane's problem went with its pipeline: {readiness:?}");
    }

    #[test]
    fn a_loop_that_beat_recently_is_alive() {
        let health = Health::new();
        health.beat();
        assert!(health.liveness().is_ok());
        health.lock().beat = Instant::now() - LIVENESS_STALL - Duration::from_secs(1);
        assert!(health.liveness().expect_err("wedged").contains("wedged"));
    }
}
