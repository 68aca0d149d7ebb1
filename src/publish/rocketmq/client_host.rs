//! The runtime every RocketMQ client (producer or consumer) runs on.
//!
//! rocketmq-client-rust 1.0 needs an owned runtime and a `ClientRuntime`; both must
//! be shut down explicitly (dropping a Tokio runtime inside async code panics), so
//! they live together here with one `shutdown`.

use std::sync::Arc;

use rocketmq_client_rust::{ClientRuntime, ClientRuntimeConfig, TelemetryHandle};
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use super::{PublishError, Retry};

/// Handler calls that may wait for a blocking thread (see `ClientHost::start`).
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
    /// Builds the runtime; `name` prefixes its thread names.
    pub fn start(name: &str) -> Result<Self, PublishError> {
        let internal = |operation: &'static str, detail: String| PublishError::Client {
            operation,
            code: None,
            detail,
            retry: Retry::NonRetryable,
        };
        let mut config = RuntimeConfig { thread_name: name.to_owned(), ..Default::default() }
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
        .map_err(|e| PublishError::from_client("create client runtime", &e))?;
        Ok(Self { owner, runtime })
    }

    /// The client runtime to build producers and consumers on.
    pub fn runtime(&self) -> Arc<ClientRuntime> {
        Arc::clone(&self.runtime)
    }

    /// Stops every client task, then the runtime; safe to call from async code.
    pub async fn shutdown(self) {
        self.runtime.shutdown().await;
        self.owner.shutdown_tasks().await;
        self.owner.shutdown_background();
    }
}
