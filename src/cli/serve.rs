//! `outbox-relay run`: the relay on the RocketMQ client's runtime, stopped by a signal.

use std::sync::Arc;

use anyhow::Context;
use outbox_relay::config::Config;
use outbox_relay::exit;
use outbox_relay::relay;
use outbox_relay::rocketmq::ClientHost;
use outbox_relay::telemetry::TraceExport;
use rocketmq_client_rust::ClientRuntime;
use tokio_util::sync::CancellationToken;

/// Runs the relay until a stop signal or a failure.
pub fn run(config: &Config) -> anyhow::Result<()> {
    without_huge_pages();
    // Outside the runtime: the exporter's HTTP client blocks on a thread of its own.
    let traces = TraceExport::start(&config.traces)?;
    // On the RocketMQ client's runtime, beside its producers (see `ClientHost::run`).
    let host = ClientHost::with_workers("relay", Some(config.runtime.worker_threads))
        .context("cannot start the async runtime")?;
    let client = host.runtime();
    let ran = host.run(run_relay(config, client));
    if let Some(traces) = traces {
        traces.shutdown();
    }
    ran
}

/// Turns transparent huge pages off for this process. mimalloc asks the kernel for huge
/// pages for its memory and gives memory back when it falls empty, so every region
/// touched again came back as a whole 2 MiB page for the kernel to zero: in a drain that
/// cost 5 to 9% more CPU and some 45 MiB more resident memory. Without it the relay
/// runs as before, with that cost.
#[cfg(target_os = "linux")]
fn without_huge_pages() {
    // SAFETY: PR_SET_THP_DISABLE takes integers only (as unsigned longs; zeros in the
    // last three ask for the plain setting) and sets a flag of this process.
    let (on, unused): (libc::c_ulong, libc::c_ulong) = (1, 0);
    if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, on, unused, unused, unused) } != 0 {
        let error = std::io::Error::last_os_error();
        tracing::warn!(%error, "transparent huge pages stay on: the relay may use more memory and CPU");
    }
}

#[cfg(not(target_os = "linux"))]
fn without_huge_pages() {}

async fn run_relay(config: &Config, client: Arc<ClientRuntime>) -> anyhow::Result<()> {
    let shutdown = CancellationToken::new();
    // The listener lives until the runtime stops, so a second signal still exits at
    // once while the client shuts down after the relay.
    tokio::spawn(stop_on_signal(shutdown.clone()));
    relay::run(config, client, shutdown).await?;
    tracing::info!("relay stopped");
    Ok(())
}

/// Cancels `shutdown` on SIGINT or SIGTERM: the relay drains, checkpoints, gives the
/// leader lease back and exits 0. A second signal exits at once (code 6): the next
/// leader resumes from the last checkpoint, so at most duplicates follow, never loss.
async fn stop_on_signal(shutdown: CancellationToken) {
    let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(signal) => Some(signal),
        Err(error) => {
            tracing::warn!(%error, "cannot listen for SIGTERM");
            None
        }
    };
    let mut signal = async || match terminate.as_mut() {
        Some(terminate) => tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = terminate.recv() => {}
        },
        None => {
            let _ = tokio::signal::ctrl_c().await;
        }
    };
    signal().await;
    tracing::info!("stop requested: draining in-flight sends, checkpointing, then releasing the leader lease (a second signal stops at once)");
    shutdown.cancel();
    signal().await;
    let code = exit::ExitClass::Interrupted.code();
    tracing::warn!(exit_code = code, "second stop signal: exiting at once without drain; the next leader resumes from the last checkpoint (duplicates at most)");
    std::process::exit(i32::from(code));
}
