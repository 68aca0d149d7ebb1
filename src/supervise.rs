//! The owner of every task the relay spawns.
//!
//! Nothing is spawned loose: every task goes through [`Supervisor::spawn`], which
//! tracks it and watches how it ends. A task that returns an error or panics is
//! never ignored: the supervisor logs one line naming the task and the cause, marks
//! the relay not ready, keeps the first failure (it decides the exit code) and stops
//! the pipeline, which then drains and checkpoints like on SIGTERM. Tasks that can
//! recover by themselves (a lost binlog connection, a broker that does not answer)
//! do so inside and never return an error for it; see the supervision table of docs/design.md.
//! Shutdown waits for every tracked task before the process exits, and says every
//! [`STILL_RUNNING_EVERY`] which ones it still waits for.

use std::any::Any;
use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures_util::FutureExt;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::error::RelayError;
use crate::health::{Health, Part};

/// How often a shutdown that waits for tasks names the ones still running.
const STILL_RUNNING_EVERY: Duration = Duration::from_secs(10);

/// Tasks running now, by name (a name can run several times: lanes).
type Running = Arc<Mutex<BTreeMap<&'static str, usize>>>;

/// Spawns and owns tasks; cheap to clone (clones share the same tasks).
#[derive(Clone)]
pub(crate) struct Supervisor {
    tracker: TaskTracker,
    running: Running,
    /// Cancelled to stop the pipeline (a signal, or the first failure).
    stop: CancellationToken,
    failure: Arc<Mutex<Option<RelayError>>>,
    health: Health,
}

impl Supervisor {
    pub(crate) fn new(stop: CancellationToken, health: Health) -> Self {
        Self { tracker: TaskTracker::new(), running: Running::default(), stop, failure: Arc::default(), health }
    }

    /// The token that stops the pipeline.
    pub(crate) fn stop_token(&self) -> CancellationToken {
        self.stop.clone()
    }

    /// Runs `task` as the tracked task `name`; an error or a panic stops the pipeline.
    pub(crate) fn spawn<F>(&self, name: &'static str, task: F)
    where
        F: Future<Output = Result<(), RelayError>> + Send + 'static,
    {
        let supervisor = self.clone();
        let running = RunningTask::enter(&self.running, name);
        self.tracker.spawn(async move {
            let _running = running;
            match AssertUnwindSafe(task).catch_unwind().await {
                Ok(Ok(())) => tracing::debug!(task = name, "task finished"),
                Ok(Err(error)) => supervisor.fail(name, error),
                Err(panic) => supervisor.fail(name, RelayError::Panic { task: name, message: panic_text(&panic) }),
            }
        });
    }

    /// Records the first failure, says so, and stops the pipeline.
    fn fail(&self, task: &'static str, error: RelayError) {
        tracing::error!(task, "{error}; stopping: draining in-flight sends, then checkpointing");
        self.health.problem(Part::Stopping, format!("stopping: {task}: {error}"));
        self.failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(error);
        self.stop.cancel();
    }

    /// Waits until every task spawned so far, and every task they spawn, has ended;
    /// then returns the first failure, if any.
    pub(crate) async fn join(&self) -> Result<(), RelayError> {
        self.tracker.close();
        while tokio::time::timeout(STILL_RUNNING_EVERY, self.tracker.wait()).await.is_err() {
            let still = self.running.lock().unwrap_or_else(PoisonError::into_inner).clone();
            tracing::warn!(tasks = ?still, "stopping: still waiting for these tasks to end");
        }
        tracing::info!("every relay task has stopped");
        self.failure.lock().unwrap_or_else(PoisonError::into_inner).take().map_or(Ok(()), Err)
    }
}

/// One running task, counted under its name until it ends (or panics).
struct RunningTask {
    running: Running,
    name: &'static str,
}

impl RunningTask {
    fn enter(running: &Running, name: &'static str) -> Self {
        *running.lock().unwrap_or_else(PoisonError::into_inner).entry(name).or_default() += 1;
        Self { running: Arc::clone(running), name }
    }
}

impl Drop for RunningTask {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = running.get_mut(self.name) {
            *count -= 1;
            if *count == 0 {
                running.remove(self.name);
            }
        }
    }
}

/// The message a panic carried.
pub(crate) fn panic_text(panic: &Box<dyn Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_task_stops_the_pipeline_and_is_the_failure() {
        let stop = CancellationToken::new();
        let health = Health::new();
        let supervisor = Supervisor::new(stop.clone(), health.clone());
        let waiting = stop.clone();
        supervisor.spawn("waiter", async move {
            waiting.cancelled().await;
            Ok(())
        });
        supervisor.spawn("lane", async { panic!("injected") });
        let error = supervisor.join().await.expect_err("the panic is the failure");
        assert!(stop.is_cancelled());
        assert!(matches!(&error, RelayError::Panic { task: "lane", message } if message == "injected"), "{error}");
        assert!(!health.readiness().ready);
    }

    #[tokio::test]
    async fn the_tasks_still_running_are_known_by_name_until_they_end_or_panic() {
        let stop = CancellationToken::new();
        let supervisor = Supervisor::new(stop.clone(), Health::new());
        for _ in 0..2 {
            let waiting = stop.clone();
            supervisor.spawn("lane", async move {
                waiting.cancelled().await;
                Ok(())
            });
        }
        let running = |s: &Supervisor| s.running.lock().unwrap_or_else(PoisonError::into_inner).clone();
        assert_eq!(running(&supervisor), BTreeMap::from([("lane", 2)]));
        supervisor.spawn("sweep", async { panic!("injected") });
        assert!(supervisor.join().await.is_err(), "the panic stopped the lanes");
        assert!(running(&supervisor).is_empty(), "every task counted out, the panicked one too");
    }

    #[tokio::test]
    async fn only_the_first_failure_is_kept() {
        let supervisor = Supervisor::new(CancellationToken::new(), Health::new());
        supervisor.spawn("first", async { Err(RelayError::Internal("one".into())) });
        let error = supervisor.join().await.expect_err("failed");
        assert_eq!(error.to_string(), "one");
        supervisor.spawn("late", async { Ok(()) });
        assert!(supervisor.join().await.is_ok(), "the failure was taken");
    }
}
