//! Logging to stderr as text or JSON lines, and panics as one error line each.

use outbox_relay::config::LogFormat;
use tracing_subscriber::EnvFilter;

/// Set once logging writes to stderr: from then on errors are logged, not printed.
pub static LOGGING: std::sync::OnceLock<()> = std::sync::OnceLock::new();

pub fn init_logging(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
    let _ = LOGGING.set(());
    // A panic is one error line with its place, like every other failure.
    std::panic::set_hook(Box::new(|info| tracing::error!(target: "panic", "{info}")));
}
