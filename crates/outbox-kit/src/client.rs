//! What every RocketMQ client (the relay's producer, the kit's consumer) shares: the
//! runtime it runs on, its settings, and readable errors.
//!
//! rocketmq-client-rust 1.0 needs an owned runtime and a `ClientRuntime`; both must
//! be shut down explicitly (dropping a Tokio runtime inside async code panics), so
//! they live together here, stopped by `shutdown`, or by `run` for a process that
//! runs its own work on them. The client's own error `Display`
//! hides the detail; [`full_message`] walks the sources for it.

use std::sync::Arc;

use rocketmq_client_rust::{ClientRuntime, ClientRuntimeConfig, TelemetryHandle};
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

/// A RocketMQ client operation that failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("RocketMQ {operation} failed{}: {detail}", code.map(|c| format!(" (broker code {c})")).unwrap_or_default())]
pub struct ClientError {
    pub operation: &'static str,
    /// The broker's response code, when the broker answered.
    pub code: Option<i32>,
    pub detail: String,
}

impl ClientError {
    /// The failure of `operation`, with the client error's whole chain of causes.
    pub fn from_client(operation: &'static str, error: &rocketmq_client_rust::ClientError) -> Self {
        Self { operation, code: error.broker_response_code(), detail: full_message(error) }
    }

    fn internal(operation: &'static str, detail: String) -> Self {
        Self { operation, code: None, detail }
    }
}

/// Client settings shared by producers and consumers: the NameServer list, and no
/// VIP channel (it would dial listenPort-2, which a minimal broker may not serve).
pub fn client_config(namesrv: &str) -> rocketmq_client_rust::ClientConfig {
    rocketmq_client_rust::ClientConfig {
        namesrv_addr: Some(namesrv.to_owned().into()),
        vip_channel_enabled: false,
        ..Default::default()
    }
}

/// The error and all its sources, joined: the client's own Display hides the detail.
pub fn full_message(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(inner) = source {
        let text = inner.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = inner.source();
    }
    parts.join(": ")
}

/// Handler calls that may wait for a blocking thread (see `ClientHost::with_workers`).
const CONSUME_QUEUE_DEPTH: usize = 65_536;
/// Handler calls running at once (the Java client's default consumeThreadMin).
const CONSUME_THREADS: usize = 20;
/// Blocking threads of the client runtime: room for the handler calls and the rest.
const BLOCKING_THREADS: usize = 32;
/// How long a handler call may wait for a blocking thread.
const CONSUME_QUEUE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// An owned client runtime; hand [`ClientHost::runtime`] to producer and consumer builders.
pub struct ClientHost {
    owner: RuntimeOwner,
    runtime: Arc<ClientRuntime>,
}

impl ClientHost {
    /// Builds the runtime, a worker thread per core; `name` prefixes its thread names.
    pub fn start(name: &str) -> Result<Self, ClientError> {
        Self::with_workers(name, None)
    }

    /// Builds the runtime with `workers` worker threads (`None`: one per core).
    pub fn with_workers(name: &str, workers: Option<usize>) -> Result<Self, ClientError> {
        let internal = ClientError::internal;
        let defaults = RuntimeConfig::default();
        let worker_threads = workers.unwrap_or(defaults.worker_threads);
        let mut config = RuntimeConfig { thread_name: name.to_owned(), worker_threads, ..defaults }
            .with_max_blocking_threads(BLOCKING_THREADS)
            .map_err(|e| internal("plan client runtime", e.to_string()))?;
        // Push consumers run every handler call on the metadata-io blocking lane. Its
        // default queue (8 x cores) overflows under a backlog, and a rejected call is
        // sent back to the retry topic (redelivered 10 s+ later): give it room instead.
        let lane = &mut config.blocking_lane_policies.metadata_io;
        lane.max_queue_depth = lane.max_queue_depth.max(CONSUME_QUEUE_DEPTH);
        lane.max_concurrency = lane.max_concurrency.max(CONSUME_THREADS);
        lane.queue_timeout = lane.queue_timeout.max(CONSUME_QUEUE_TIMEOUT);
        let owner = RuntimeOwner::plan(config)
            .map_err(|e| internal("plan client runtime", e.to_string()))?
            .build()
            .map_err(|e| internal("build client runtime", e.to_string()))?;
        let runtime = ClientRuntime::try_new(
            owner.root_context().component("client"),
            ClientRuntimeConfig::default(),
            TelemetryHandle::noop(),
        )
        .map_err(|e| ClientError::from_client("create client runtime", &e))?;
        Ok(Self { owner, runtime })
    }

    /// Runs `future` to its end on this host's runtime, then stops every client task
    /// and the runtime. A process that runs its own work here, beside its producers,
    /// keeps one set of worker threads: a send hands over to the client's tasks on the
    /// same threads instead of waking a second set and waiting for it to answer.
    pub fn run<F: std::future::Future>(self, future: F) -> F::Output {
        let output = self.owner.block_on(future);
        self.owner.block_on(self.stop_tasks());
        self.owner.shutdown_background();
        output
    }

    /// The client runtime to build producers and consumers on.
    pub fn runtime(&self) -> Arc<ClientRuntime> {
        Arc::clone(&self.runtime)
    }

    /// Stops every client task, then the runtime; safe to call from async code.
    pub async fn shutdown(self) {
        self.stop_tasks().await;
        self.owner.shutdown_background();
    }

    async fn stop_tasks(&self) {
        // Boxed: the client's shutdown future, nested once more, is too deep for the
        // compiler's layout query limit.
        Box::pin(self.runtime.shutdown()).await;
        self.owner.shutdown_tasks().await;
    }
}

#[cfg(test)]
mod tests {
    use super::ClientHost;

    #[test]
    fn run_drives_the_future_and_the_tasks_it_spawns_on_the_hosts_threads() {
        let host = ClientHost::start("kit-host").expect("client runtime");
        let answered = host.run(async {
            let task = tokio::spawn(async { std::thread::current().name().map(str::to_owned) });
            task.await.expect("the spawned task ran")
        });
        assert!(answered.as_deref().is_some_and(|name| name.starts_with("kit-host")), "ran on {answered:?}");
    }
}
