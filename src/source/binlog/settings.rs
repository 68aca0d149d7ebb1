//! The source's settings and what the relay makes of each: one verdict per setting,
//! so the start (which refuses on any FAIL and logs the warnings) and `outbox-relay
//! check` (which prints them all) judge the server the same way.
//!
//! The settings are read once as global variables (`SHOW GLOBAL VARIABLES`): the
//! session values of the relay's own connection say nothing about how the
//! applications' sessions write the binlog. A variable the server does not have is
//! simply absent, which is how versions and flavors differ here.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::config::SourceConfig;
use crate::findings::{Finding, Group};
use crate::server::{Flavor, ServerInfo};

/// The global variables the verdicts read.
pub(crate) const VARIABLES: &[&str] = &[
    "version",
    "server_id",
    "server_uuid",
    "hostname",
    "port",
    "log_bin",
    "binlog_format",
    "binlog_row_image",
    "binlog_row_metadata",
    "sync_binlog",
    "log_bin_compress",
    "binlog_transaction_compression",
    "log_slave_updates",
    "log_replica_updates",
    "read_only",
    "super_read_only",
    "gtid_mode",
    "gtid_binlog_pos",
    "gtid_strict_mode",
    "binlog_expire_logs_seconds",
    "expire_logs_days",
];

/// What was read from the source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFacts {
    pub flavor: Flavor,
    /// Global variables by lower-case name; absent when the server does not have one.
    variables: BTreeMap<String, String>,
    /// Whether a replication channel is configured; `None` when the user may not see it.
    replicates: Option<bool>,
}

/// What the relay's configuration asks of the source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    /// The server_id the relay registers with.
    pub relay_server_id: u32,
    /// How long the relay may be down without its binlog position being purged.
    pub max_downtime: Duration,
}

impl Expected {
    pub fn of(source: &SourceConfig) -> Self {
        Self { relay_server_id: source.server_id, max_downtime: Duration::from_secs(source.max_downtime_secs) }
    }
}

impl SourceFacts {
    /// Facts from global variables (any case) and what `SHOW SLAVE STATUS` said.
    pub fn new(variables: impl IntoIterator<Item = (String, String)>, replicates: Option<bool>) -> Self {
        let variables: BTreeMap<String, String> =
            variables.into_iter().map(|(name, value)| (name.to_ascii_lowercase(), value)).collect();
        let flavor = Flavor::of_version(variables.get("version").map(String::as_str).unwrap_or_default());
        Self { flavor, variables, replicates }
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.variables.get(name).map(String::as_str)
    }

    /// The variable's value, or "" when the server does not have it.
    fn value(&self, name: &str) -> &str {
        self.get(name).unwrap_or_default()
    }

    fn is_on(&self, name: &str) -> bool {
        matches!(self.value(name).to_ascii_uppercase().as_str(), "1" | "ON")
    }

    /// Version and identity, as the relay keeps them: MySQL's `server_uuid`, or
    /// MariaDB's `server_id@hostname:port` (MariaDB has no uuid).
    pub fn server_info(&self) -> ServerInfo {
        let fallback = || format!("{}@{}:{}", self.value("server_id"), self.value("hostname"), self.value("port"));
        let identity = match self.flavor {
            Flavor::MariaDb => fallback(),
            Flavor::MySql => self.get("server_uuid").filter(|u| !u.is_empty()).map_or_else(fallback, str::to_owned),
        };
        ServerInfo { flavor: self.flavor, version: self.value("version").to_owned(), identity }
    }

    /// Whether the server replicates from another: read-only, or with a replication
    /// channel (when the user may see it). A primary promoted from a replica is neither.
    fn is_replica(&self) -> bool {
        self.is_on("read_only") || self.is_on("super_read_only") || self.replicates == Some(true)
    }
}

/// Every verdict on the source's settings, in report order.
pub fn verdicts(facts: &SourceFacts, expected: &Expected) -> Vec<Finding> {
    vec![
        log_bin(facts),
        binlog_format(facts),
        row_image(facts),
        row_metadata(facts),
        compression(facts),
        replica_logs_updates(facts),
        sync_binlog(facts),
        server_id(facts, expected),
        gtid(facts),
        binlog_expiry(facts, expected),
    ]
}

fn log_bin(facts: &SourceFacts) -> Finding {
    if facts.is_on("log_bin") {
        return Finding::ok(Group::Source, "log_bin", "ON");
    }
    Finding::fail(
        Group::Source,
        "log_bin",
        "OFF",
        "start the server with --log-bin (binary logging) and a server_id; the relay reads the binlog",
    )
}

fn binlog_format(facts: &SourceFacts) -> Finding {
    must_be(facts, "binlog_format", "ROW", "set binlog_format = ROW (STATEMENT and MIXED do not carry row values)")
}

fn row_image(facts: &SourceFacts) -> Finding {
    must_be(facts, "binlog_row_image", "FULL", "set binlog_row_image = FULL (MINIMAL/NOBLOB can omit outbox columns)")
}

/// The variable `name` must read `expected` (any case); else a FAIL with `fix`.
fn must_be(facts: &SourceFacts, name: &'static str, expected: &'static str, fix: &'static str) -> Finding {
    let value = facts.value(name);
    if value.eq_ignore_ascii_case(expected) {
        return Finding::ok(Group::Source, name, expected);
    }
    Finding::fail(Group::Source, name, value, fix)
}

/// FULL makes every row event name its columns, and the relay maps them by name.
/// Without it the relay maps through information_schema, which is right unless an
/// ALTER TABLE ran after the rows being read; so anything else is only a warning.
fn row_metadata(facts: &SourceFacts) -> Finding {
    match facts.get("binlog_row_metadata") {
        None => Finding::ok(Group::Source, "binlog_row_metadata", "not a setting of this server version"),
        Some(full) if full.eq_ignore_ascii_case("FULL") => Finding::ok(Group::Source, "binlog_row_metadata", "FULL"),
        Some(other) => Finding::warn(
            Group::Source,
            "binlog_row_metadata",
            other,
            "set binlog_row_metadata = FULL (MySQL 8.0.1+, MariaDB 10.5+): row events then name their columns, so rows written before an ALTER TABLE of the outbox still map by name; without it, reading rows whose column count an ALTER changed stops the binlog path (the sweep delivers them)",
        ),
    }
}

/// MySQL's compressed transactions (TRANSACTION_PAYLOAD) are decoded; MariaDB's
/// compressed events are not.
fn compression(facts: &SourceFacts) -> Finding {
    match facts.flavor {
        Flavor::MariaDb if facts.is_on("log_bin_compress") => Finding::fail(
            Group::Source,
            "log_bin_compress",
            facts.value("log_bin_compress"),
            "set log_bin_compress = OFF (compressed events cannot be decoded)",
        ),
        Flavor::MariaDb => Finding::ok(Group::Source, "log_bin_compress", "OFF"),
        Flavor::MySql if facts.is_on("binlog_transaction_compression") => {
            Finding::ok(Group::Source, "binlog_transaction_compression", "ON (compressed transactions are decoded)")
        }
        Flavor::MySql => Finding::ok(Group::Source, "binlog_transaction_compression", "OFF"),
    }
}

/// A replica writes what it replicates to its own binlog only with
/// `log_slave_updates` (MySQL 8.0.26+: `log_replica_updates`); without it the relay
/// would see none of the primary's outbox rows and every one would arrive late, by
/// the sweep.
fn replica_logs_updates(facts: &SourceFacts) -> Finding {
    let name = if facts.get("log_replica_updates").is_some() { "log_replica_updates" } else { "log_slave_updates" };
    if facts.is_on(name) {
        return Finding::ok(Group::Source, "log_slave_updates", "ON");
    }
    if facts.is_replica() {
        return Finding::fail(
            Group::Source,
            "log_slave_updates",
            "OFF on a replica",
            "set log_slave_updates = ON (MySQL: log_replica_updates = ON) on the replica and restart it, or point source.url at a server that writes what it replicates to its binlog",
        );
    }
    let why = match facts.replicates {
        Some(_) => "OFF (not a replica: writable, no replication channel)",
        None => "OFF (not read-only; whether it has a replication channel is not visible to this user)",
    };
    Finding::ok(Group::Source, "log_slave_updates", why)
}

/// `sync_binlog = 1`: the binlog is on disk before a commit returns. Any other value
/// lets a crash of the source lose the binlog's tail, which the relay may have read.
fn sync_binlog(facts: &SourceFacts) -> Finding {
    let value = facts.value("sync_binlog");
    if value.trim() == "1" {
        return Finding::ok(Group::Source, "sync_binlog", "1");
    }
    Finding::warn(
        Group::Source,
        "sync_binlog",
        format!("{value}, not 1"),
        "set sync_binlog = 1 on the source: otherwise after a crash of the source its binlog can lack transactions the relay already published (then rolled back on the source) or that stayed committed (left to the sweep)",
    )
}

fn server_id(facts: &SourceFacts, expected: &Expected) -> Finding {
    let own = facts.value("server_id");
    if own.trim() == expected.relay_server_id.to_string() {
        return Finding::fail(
            Group::Source,
            "server_id",
            format!("{own} for both the source and source.server_id"),
            "give source.server_id a value unique among the source's replicas and different from the source's server_id",
        );
    }
    Finding::ok(Group::Source, "server_id", format!("{} (the source is {own})", expected.relay_server_id))
}

/// GTIDs let the relay resume on another server of the topology without a sweep.
fn gtid(facts: &SourceFacts) -> Finding {
    match facts.flavor {
        Flavor::MariaDb => {
            let position = match facts.value("gtid_binlog_pos") {
                "" => "empty (nothing logged yet)",
                position => position,
            };
            let strict = if facts.is_on("gtid_strict_mode") { "ON" } else { "OFF" };
            Finding::ok(Group::Source, "gtid", format!("gtid_binlog_pos {position}, gtid_strict_mode {strict}"))
        }
        Flavor::MySql if facts.value("gtid_mode").eq_ignore_ascii_case("ON") => {
            Finding::ok(Group::Source, "gtid_mode", "ON")
        }
        Flavor::MySql => Finding::warn(
            Group::Source,
            "gtid_mode",
            facts.value("gtid_mode"),
            "set gtid_mode = ON (with enforce_gtid_consistency = ON): without GTIDs the relay resumes by file and position, so pointing source.url at another server costs a full sweep",
        ),
    }
}

/// A relay down longer than the source keeps its binlogs finds its position purged
/// and falls back to a full sweep: `source.max_downtime_secs` says how long it must
/// survive.
fn binlog_expiry(facts: &SourceFacts, expected: &Expected) -> Finding {
    let allowed = expected.max_downtime.as_secs();
    let expiry = match expiry_secs(facts) {
        Ok(Some(expiry)) => expiry,
        Ok(None) => return Finding::ok(Group::Source, "binlog expiry", "never (binlogs are not purged automatically)"),
        Err(unreadable) => {
            return Finding::fail(
                Group::Source,
                "binlog expiry",
                format!("cannot be read: {unreadable}"),
                "check the source's binlog_expire_logs_seconds and expire_logs_days (SELECT @@GLOBAL...): the relay cannot tell how long it may be down",
            )
        }
    };
    if expiry >= allowed {
        return Finding::ok(
            Group::Source,
            "binlog expiry",
            format!("{expiry} s, at least source.max_downtime_secs ({allowed} s)"),
        );
    }
    Finding::fail(
        Group::Source,
        "binlog expiry",
        format!("{expiry} s, shorter than source.max_downtime_secs ({allowed} s): a relay down that long finds its position purged"),
        format!("set binlog_expire_logs_seconds = {allowed} or more on the source, or lower source.max_downtime_secs"),
    )
}

/// Seconds after which the source purges binlogs; `None` when it never does.
fn expiry_secs(facts: &SourceFacts) -> Result<Option<u64>, String> {
    expiry_from(facts.value("binlog_expire_logs_seconds"), facts.value("expire_logs_days"))
}

/// The expiry the two settings give, as the server reads them: seconds where set
/// (MySQL 8, MariaDB 10.6+), else days (fractions on MariaDB); `None`: never. A
/// setting the server lacks is empty; one that is not a number is an error naming it,
/// never read as "never purges".
pub(crate) fn expiry_from(seconds: &str, days: &str) -> Result<Option<u64>, String> {
    let seconds = number_or_absent::<u64>("binlog_expire_logs_seconds", seconds)?;
    let days = number_or_absent::<f64>("expire_logs_days", days)?;
    let from_days = (days * 86_400.0).round() as u64;
    Ok([seconds, from_days].into_iter().find(|&s| s > 0))
}

/// `value` as a number; 0 when the server has no such setting (empty).
fn number_or_absent<T: std::str::FromStr + Default>(name: &str, value: &str) -> Result<T, String> {
    let value = value.trim();
    if value.is_empty() {
        return Ok(T::default());
    }
    value.parse().map_err(|_| format!("{name} = {value:?} is not a number"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::findings::Level;

    #[test]
    fn an_expiry_that_is_not_a_number_is_an_error_never_never() {
        assert_eq!(expiry_from("604800", ""), Ok(Some(604_800)));
        assert_eq!(expiry_from("0", "0.5"), Ok(Some(43_200)));
        assert_eq!(expiry_from("0", "0"), Ok(None));
        assert_eq!(expiry_from("", ""), Ok(None), "a server without either setting never purges");
        let error = expiry_from("a week", "").expect_err("not a number");
        assert!(error.contains("binlog_expire_logs_seconds") && error.contains("a week"), "{error}");
    }

    /// A MariaDB replica set up as the relay wants it.
    fn good() -> Vec<(&'static str, &'static str)> {
        vec![
            ("version", "10.11.6-MariaDB-log"),
            ("server_id", "2"),
            ("hostname", "replica"),
            ("port", "3306"),
            ("log_bin", "ON"),
            ("binlog_format", "ROW"),
            ("binlog_row_image", "FULL"),
            ("binlog_row_metadata", "FULL"),
            ("sync_binlog", "1"),
            ("log_bin_compress", "OFF"),
            ("log_slave_updates", "ON"),
            ("read_only", "ON"),
            ("gtid_binlog_pos", "0-1-42"),
            ("gtid_strict_mode", "OFF"),
            ("binlog_expire_logs_seconds", "864000"),
            ("expire_logs_days", "10.000000"),
        ]
    }

    fn with(changes: &[(&'static str, &'static str)]) -> SourceFacts {
        let mut variables: BTreeMap<&str, &str> = good().into_iter().collect();
        variables.extend(changes.iter().copied());
        SourceFacts::new(variables.into_iter().map(|(k, v)| (k.to_uppercase(), v.to_owned())), Some(true))
    }

    const EXPECTED: Expected = Expected { relay_server_id: 4242, max_downtime: Duration::from_secs(86_400) };

    fn level_of(facts: &SourceFacts, name: &str) -> Level {
        let all = verdicts(facts, &EXPECTED);
        all.iter().find(|f| f.name == name).unwrap_or_else(|| panic!("no verdict {name} in {all:?}")).level
    }

    fn failed(facts: &SourceFacts) -> Vec<String> {
        verdicts(facts, &EXPECTED).into_iter().filter(|f| f.level == Level::Fail).map(|f| f.name).collect()
    }

    #[test]
    fn a_well_set_replica_passes_every_check() {
        let facts = with(&[]);
        let verdicts = verdicts(&facts, &EXPECTED);
        assert!(verdicts.iter().all(|f| f.level == Level::Ok && f.fix.is_none()), "{verdicts:?}");
        assert_eq!(facts.server_info().identity, "2@replica:3306");
    }

    #[test]
    fn statement_format_and_minimal_image_fail_together_with_their_fixes() {
        let facts = with(&[("binlog_format", "STATEMENT"), ("binlog_row_image", "MINIMAL")]);
        assert_eq!(failed(&facts), ["binlog_format", "binlog_row_image"]);
        let text: Vec<String> = verdicts(&facts, &EXPECTED).iter().map(ToString::to_string).collect();
        assert!(text.iter().any(|t| t.contains("STATEMENT") && t.contains("set binlog_format = ROW")), "{text:?}");
        assert!(text.iter().any(|t| t.contains("MINIMAL") && t.contains("set binlog_row_image = FULL")), "{text:?}");
    }

    #[test]
    fn a_replica_without_binlog_or_log_slave_updates_fails_on_both() {
        let facts = with(&[("log_bin", "OFF"), ("log_slave_updates", "OFF")]);
        assert_eq!(failed(&facts), ["log_bin", "log_slave_updates"]);
        let writable_primary = SourceFacts::new(
            good().into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())).chain([
                ("log_slave_updates".to_owned(), "OFF".to_owned()),
                ("read_only".to_owned(), "OFF".to_owned()),
            ]),
            Some(false),
        );
        assert_eq!(level_of(&writable_primary, "log_slave_updates"), Level::Ok, "not a replica");
    }

    #[test]
    fn mysql_names_log_replica_updates_and_decodes_compressed_transactions() {
        let facts = SourceFacts::new(
            [
                ("version", "8.0.36"),
                ("log_replica_updates", "OFF"),
                ("log_slave_updates", "ON"),
                ("super_read_only", "ON"),
                ("binlog_transaction_compression", "ON"),
                ("gtid_mode", "OFF"),
                ("server_uuid", "3e11fa47-71ca-11e1-9e33-c80aa9429562"),
            ]
            .map(|(k, v)| (k.to_owned(), v.to_owned())),
            None,
        );
        assert_eq!(facts.flavor, Flavor::MySql);
        assert_eq!(level_of(&facts, "log_slave_updates"), Level::Fail, "the new name wins");
        assert_eq!(level_of(&facts, "binlog_transaction_compression"), Level::Ok);
        assert_eq!(level_of(&facts, "gtid_mode"), Level::Warn);
        assert_eq!(level_of(&facts, "binlog_row_metadata"), Level::Ok, "absent: an older server");
        assert_eq!(facts.server_info().identity, "3e11fa47-71ca-11e1-9e33-c80aa9429562");
    }

    #[test]
    fn mariadb_compression_fails_and_minimal_metadata_or_sync_binlog_only_warn() {
        let facts = with(&[("log_bin_compress", "ON"), ("binlog_row_metadata", "MINIMAL"), ("sync_binlog", "0")]);
        assert_eq!(failed(&facts), ["log_bin_compress"]);
        assert_eq!(level_of(&facts, "binlog_row_metadata"), Level::Warn);
        assert_eq!(level_of(&facts, "sync_binlog"), Level::Warn);
    }

    #[test]
    fn the_relay_may_not_share_the_sources_server_id() {
        assert_eq!(failed(&with(&[("server_id", "4242")])), ["server_id"]);
    }

    #[test]
    fn binlogs_purged_sooner_than_the_allowed_downtime_fail() {
        let short = with(&[("binlog_expire_logs_seconds", "3600"), ("expire_logs_days", "0.041667")]);
        assert_eq!(failed(&short), ["binlog expiry"]);
        let days_only = with(&[("binlog_expire_logs_seconds", "0"), ("expire_logs_days", "0.5")]);
        assert_eq!(failed(&days_only), ["binlog expiry"], "MySQL 5.7 / old MariaDB: days only");
        let never = with(&[("binlog_expire_logs_seconds", "0"), ("expire_logs_days", "0")]);
        assert_eq!(level_of(&never, "binlog expiry"), Level::Ok);
        let exactly = with(&[("binlog_expire_logs_seconds", "86400")]);
        assert_eq!(level_of(&exactly, "binlog expiry"), Level::Ok);
    }
}
