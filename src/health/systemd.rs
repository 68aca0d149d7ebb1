//! systemd's service notifications, for `Type=notify` units: `READY=1` once the relay
//! serves its endpoints (leader or standby), `STATUS=` lines as its role changes, and
//! with `WatchdogSec=` a `WATCHDOG=1` at half the interval, sent only while the
//! pipeline loop is alive (the check `/healthz` makes): a wedged relay stops feeding
//! the watchdog and systemd restarts it, as an orchestrator does on `/healthz`.
//! `STOPPING=1` when it stops. Not under systemd (no `NOTIFY_SOCKET`), nothing is sent.

#[cfg(target_os = "linux")]
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{Health, Role};

/// Where systemd listens, and the watchdog's interval if it has one.
pub(crate) struct Notifier {
    socket: UnixDatagram,
    address: SocketAddr,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// The notifier systemd's environment asks for; `None` when not under `Type=notify`.
    pub(crate) fn from_env() -> Option<Self> {
        let path = std::env::var("NOTIFY_SOCKET").ok()?;
        let watchdog = std::env::var("WATCHDOG_USEC").ok().and_then(|usec| watchdog_interval(&usec));
        match Self::new(&path, watchdog) {
            Ok(notifier) => Some(notifier),
            Err(error) => {
                tracing::warn!(%error, socket = %path, "cannot reach systemd's NOTIFY_SOCKET: readiness and the watchdog are not reported to systemd");
                None
            }
        }
    }

    /// A notifier for the socket at `path` (`@name`: Linux's abstract namespace).
    pub(crate) fn new(path: &str, watchdog: Option<Duration>) -> std::io::Result<Self> {
        Ok(Self { socket: UnixDatagram::unbound()?, address: address(path)?, watchdog })
    }

    fn send(&self, state: &str) {
        if let Err(error) = self.socket.send_to_addr(state.as_bytes(), &self.address) {
            tracing::debug!(%error, state, "cannot notify systemd");
        }
    }
}

/// The socket address of `path`; `@name` is in Linux's abstract namespace.
fn address(path: &str) -> std::io::Result<SocketAddr> {
    #[cfg(target_os = "linux")]
    if let Some(name) = path.strip_prefix('@') {
        return SocketAddr::from_abstract_name(name.as_bytes());
    }
    SocketAddr::from_pathname(path)
}

/// systemd's `WATCHDOG_USEC` as an interval (`None` for 0 or garbage).
fn watchdog_interval(usec: &str) -> Option<Duration> {
    usec.trim().parse::<u64>().ok().filter(|usec| *usec > 0).map(Duration::from_micros)
}

/// Tells systemd the relay is ready, then its role and the watchdog's beats until
/// `stop`; then that it stops.
pub(crate) async fn notify(notifier: Notifier, health: Health, stop: CancellationToken) {
    notifier.send("READY=1\nSTATUS=started");
    let beat_every = notifier.watchdog.map_or(Duration::from_secs(5), |interval| interval / 2);
    let mut tick = tokio::time::interval(beat_every);
    let mut said = None;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            _ = tick.tick() => {}
        }
        let role = health.readiness().role;
        if said != Some(role) {
            said = Some(role);
            notifier.send(match role {
                Role::Leader => "STATUS=leader: publishing",
                Role::Standby => "STATUS=standby: waiting for the leader lease",
            });
        }
        if notifier.watchdog.is_some() && health.liveness().is_ok() {
            notifier.send("WATCHDOG=1");
        }
    }
    notifier.send("STOPPING=1\nSTATUS=stopping");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_interval_is_read_in_microseconds() {
        assert_eq!(watchdog_interval("30000000"), Some(Duration::from_secs(30)));
        assert_eq!(watchdog_interval("0"), None);
        assert_eq!(watchdog_interval("soon"), None);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn ready_then_beats_while_alive_then_stopping() {
        let dir = std::env::temp_dir().join(format!("notify-{}", uuid::Uuid::now_v7().simple()));
        std::fs::create_dir_all(&dir).expect("a directory");
        let path = dir.join("notify.sock");
        let systemd = UnixDatagram::bind(&path).expect("bind");
        systemd.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
        let notifier =
            Notifier::new(path.to_str().expect("a path"), Some(Duration::from_millis(100))).expect("notifier");
        let stop = CancellationToken::new();
        let task = tokio::spawn(notify(notifier, Health::new(), stop.clone()));
        let mut buffer = [0u8; 256];
        let mut received = Vec::new();
        while !received.iter().any(|m: &String| m == "WATCHDOG=1") {
            let n = systemd.recv(&mut buffer).expect("a notification");
            received.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
        }
        stop.cancel();
        task.await.expect("the notifier ends");
        let n = systemd.recv(&mut buffer).expect("the last notification");
        received.push(String::from_utf8_lossy(&buffer[..n]).into_owned());
        assert!(received[0].starts_with("READY=1"), "{received:?}");
        assert!(received.iter().any(|m| m.contains("standby")), "{received:?}");
        assert!(received.last().is_some_and(|m| m.starts_with("STOPPING=1")), "{received:?}");
        std::fs::remove_dir_all(&dir).ok();
    }
}
