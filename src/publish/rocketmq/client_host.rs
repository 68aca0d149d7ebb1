//! The runtime every RocketMQ client (producer or consumer) runs on.
//!
//! rocketmq-client-rust 1.0 needs an owned runtime and a `ClientRuntime`; both must
//! be shut down explicitly (dropping a Tokio runtime inside async code panics), so
//! they live together here with one `shutdown`.

use std::sync::Arc;

use rocketmq_client_rust::{ClientRuntime, ClientRuntimeConfig, TelemetryHandle};
use rocketmq_runtime::{RuntimeConfig, RuntimeOwner};

use super::{PublishError, Retry};

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
        let owner = RuntimeOwner::plan(RuntimeConfig { thread_name: name.to_owned(), ..Default::default() })
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
