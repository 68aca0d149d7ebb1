//! Logging to stderr as text or JSON lines, and panics as one error line each.
//!
//! Text has colours only on a terminal, and not when `NO_COLOR` is set: a file,
//! journald or `docker logs` gets plain lines. JSON lines carry the event's fields at
//! the top level (`{"level":"WARN","fields.x"…}` is not what log shippers index). The
//! RocketMQ client library's repeated lines are thinned (see [`LibraryRepeats`]).

use std::io::IsTerminal;

use outbox_relay::config::LogFormat;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

use super::library_repeats::LibraryRepeats;

/// Set once logging writes to stderr: from then on errors are logged, not printed.
pub static LOGGING: std::sync::OnceLock<()> = std::sync::OnceLock::new();

pub fn init_logging(level: &str, format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(level));
    let lines = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter).with(LibraryRepeats::default());
    match format {
        LogFormat::Json => registry.with(lines.json().flatten_event(true)).init(),
        LogFormat::Text => registry.with(lines.with_ansi(colours())).init(),
    }
    let _ = LOGGING.set(());
    // A panic is one error line with its place, like every other failure.
    std::panic::set_hook(Box::new(|info| tracing::error!(target: "panic", "{info}")));
}

/// Whether text lines get colours: on a terminal, unless `NO_COLOR` is set to anything
/// but the empty string (the convention terminal programs share).
fn colours() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|value| !value.is_empty());
    std::io::stderr().is_terminal() && !no_color
}
