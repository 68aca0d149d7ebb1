//! The source's settings and what the relay makes of each: one verdict per setting,
//! so the start (which refuses on any FAIL and logs the warnings) and `outbox-relay
//! check` (which prints them all) judge the server the same way.
//!
//! The settings are read once as global variables (`SHOW GLOBAL VARIABLES`): the
//! session values of the relay's own connection say nothing about how the
//! applications' sessions write the binlog. A variable the server does not have is
//! simply absent, which is how versions and flavors differ here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::config::SourceConfig;
use crate::findings::{Finding, Group, Level};
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
    "replica_parallel_workers",
    "slave_parallel_workers",
    "replica_preserve_commit_order",
    "slave_preserve_commit_order",
    "slave_parallel_threads",
    "slave_parallel_mode",
    "gtid_slave_pos",
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
        commit_order(facts),
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

/// The relay takes its source's binlog order for the primary's commit order: one
/// key's events leave in that order, and the sweep waits for the binlog path to pass
/// a commit before it claims what committed earlier. A replica writes its binlog in
/// the order it commits, which its parallel applier may change.
fn commit_order(facts: &SourceFacts) -> Finding {
    let finding = match facts.flavor {
        Flavor::MySql => mysql_commit_order(facts),
        Flavor::MariaDb => mariadb_commit_order(facts),
    };
    only_on_a_replica(facts, finding)
}

/// MySQL applies with `replica_parallel_workers` threads (`slave_` before 8.0.26;
/// default 4 since 8.0.27, 0 before). One worker applies in the relay log's order, as
/// 0 did (MySQL deprecates 0 for 1 since 8.0.30); more commit in an order of their own
/// unless `replica_preserve_commit_order` is ON (the default since 8.0.27). A value
/// that is not a number counts as several workers: never read as safe. See
/// <https://dev.mysql.com/doc/refman/8.0/en/replication-features-transaction-inconsistencies.html>.
fn mysql_commit_order(facts: &SourceFacts) -> Finding {
    let (workers, preserve) = match facts.get("replica_parallel_workers") {
        Some(_) => ("replica_parallel_workers", "replica_preserve_commit_order"),
        None => ("slave_parallel_workers", "slave_preserve_commit_order"),
    };
    let count = facts.value(workers).trim();
    if let Ok(n @ 0..=1) = number_or_absent::<u64>(workers, count) {
        return Finding::ok(Group::Source, "commit order", format!("{workers} = {n}: one applier, in order"));
    }
    if facts.is_on(preserve) {
        return Finding::ok(Group::Source, "commit order", format!("{preserve} = ON ({workers} = {count})"));
    }
    Finding::fail(
        Group::Source,
        "commit order",
        format!("{workers} = {count} with {preserve} = OFF"),
        format!("on the replica run STOP REPLICA SQL_THREAD; SET PERSIST {preserve} = ON; START REPLICA SQL_THREAD (it needs replica_parallel_type = LOGICAL_CLOCK, the default since 8.0.27), or set {workers} = 1: otherwise its appliers commit, and write its binlog, out of the primary's order, and one key's events can reach the broker out of order"),
    )
}

/// MariaDB's parallel replication commits in the primary's order within a
/// replication domain, in every `slave_parallel_mode`; transactions of different
/// domains (`gtid_domain_id`, set per session on the primary, or one per primary of a
/// multi-source replica) may commit in either order, unless the mode is `minimal` or
/// `none` or no worker runs (`slave_parallel_threads`, alias `slave_parallel_workers`
/// since 10.5, is 0). Which domain writes the outbox is the primary's sessions'
/// choice, not a setting: what can be read is whether the replica has applied more
/// than one domain (`gtid_slave_pos` holds one GTID per domain). That is a warning,
/// not a FAIL: several domains declare their transactions independent (MariaDB's own
/// contract), their usual uses (an ALTER in a domain of its own, other primaries'
/// streams) leave the outbox in one domain, and a domain once used stays listed.
/// See <https://mariadb.com/kb/en/parallel-replication/>.
fn mariadb_commit_order(facts: &SourceFacts) -> Finding {
    let threads =
        if facts.get("slave_parallel_threads").is_some() { "slave_parallel_threads" } else { "slave_parallel_workers" };
    let count = facts.value(threads).trim();
    if let Ok(0) = number_or_absent::<u64>(threads, count) {
        return Finding::ok(Group::Source, "commit order", format!("{threads} = 0: the SQL thread applies in order"));
    }
    let mode = facts.value("slave_parallel_mode");
    if ["minimal", "none"].iter().any(|m| mode.eq_ignore_ascii_case(m)) {
        return Finding::ok(Group::Source, "commit order", format!("slave_parallel_mode = {mode}: in order"));
    }
    let applied = format!("{threads} = {count}, slave_parallel_mode = {mode}");
    let domains = gtid_domains(facts.value("gtid_slave_pos"));
    if domains.len() <= 1 {
        return Finding::ok(
            Group::Source,
            "commit order",
            format!(
                "{applied}: in the primary's order within a replication domain, and gtid_slave_pos lists at most one"
            ),
        );
    }
    Finding::warn(
        Group::Source,
        "commit order",
        format!("{applied}, gtid_slave_pos has domains {}", domains.join(", ")),
        "make the primary write the outbox in one replication domain (no SET SESSION gtid_domain_id in transactions that insert outbox rows), or set slave_parallel_mode = minimal on the replica (between STOP ALL SLAVES and START ALL SLAVES, and in its configuration): otherwise the replica may commit two domains' transactions in another order than the primary, and one key's events written in both can reach the broker out of order",
    )
}

/// The replication domains of a MariaDB GTID position (`domain-server-sequence`, comma-separated).
fn gtid_domains(position: &str) -> Vec<&str> {
    let domains: BTreeSet<&str> =
        position.split(',').filter_map(|gtid| gtid.trim().split('-').next()).filter(|d| !d.is_empty()).collect();
    domains.into_iter().collect()
}

/// An applier's settings matter only on a replica: a primary's binlog is its commit
/// order. A server that is surely none passes; when the user may not see whether it
/// replicates, a FAIL becomes a warning.
fn only_on_a_replica(facts: &SourceFacts, finding: Finding) -> Finding {
    if finding.level == Level::Ok || facts.is_replica() {
        return finding;
    }
    match facts.replicates {
        Some(_) => Finding::ok(
            Group::Source,
            finding.name,
            format!("{} (not a replica: writable, no replication channel)", finding.found),
        ),
        None => Finding {
            level: Level::Warn,
            found: format!("{} (whether it is a replica is not visible to this user)", finding.found),
            ..finding
        },
    }
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
            ("slave_parallel_threads", "4"),
            ("slave_parallel_mode", "optimistic"),
            ("gtid_slave_pos", "0-1-42"),
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

    /// A MySQL 8.0 replica with its defaults: 4 workers that preserve commit order.
    fn mysql_replica(changes: &[(&'static str, &'static str)], replicates: Option<bool>) -> SourceFacts {
        let mut variables: BTreeMap<&str, &str> = [
            ("version", "8.0.36"),
            ("log_bin", "ON"),
            ("binlog_format", "ROW"),
            ("binlog_row_image", "FULL"),
            ("log_replica_updates", "ON"),
            ("super_read_only", "ON"),
            ("replica_parallel_workers", "4"),
            ("slave_parallel_workers", "4"),
            ("replica_preserve_commit_order", "ON"),
            ("slave_preserve_commit_order", "ON"),
        ]
        .into_iter()
        .collect();
        variables.extend(changes.iter().copied());
        SourceFacts::new(variables.into_iter().map(|(k, v)| (k.to_owned(), v.to_owned())), replicates)
    }

    fn commit_order_of(facts: &SourceFacts) -> Finding {
        let all = verdicts(facts, &EXPECTED);
        all.iter().find(|f| f.name == "commit order").cloned().unwrap_or_else(|| panic!("no commit order in {all:?}"))
    }

    #[test]
    fn a_mysql_replica_with_parallel_workers_that_do_not_preserve_commit_order_fails() {
        let off =
            mysql_replica(&[("replica_preserve_commit_order", "OFF"), ("slave_preserve_commit_order", "OFF")], None);
        assert_eq!(failed(&off), ["commit order"]);
        let text = commit_order_of(&off).to_string();
        for part in ["replica_parallel_workers = 4", "replica_preserve_commit_order = OFF", "STOP REPLICA SQL_THREAD"] {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert!(text.contains("SET PERSIST replica_preserve_commit_order = ON"), "{text}");
        let old_names = SourceFacts::new(
            [("version", "5.7.44-log"), ("read_only", "ON"), ("slave_parallel_workers", "8")]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            Some(true),
        );
        let text = commit_order_of(&old_names).to_string();
        assert!(text.contains("slave_parallel_workers = 8 with slave_preserve_commit_order = OFF"), "{text}");
        let unreadable =
            mysql_replica(&[("replica_parallel_workers", "many"), ("replica_preserve_commit_order", "OFF")], None);
        assert_eq!(failed(&unreadable), ["commit order"], "not a number is never read as one worker");
    }

    #[test]
    fn a_mysql_replica_passes_with_commit_order_preserved_or_a_single_applier() {
        assert_eq!(commit_order_of(&mysql_replica(&[], None)).level, Level::Ok, "the 8.0.27+ defaults");
        for workers in ["0", "1"] {
            let single =
                mysql_replica(&[("replica_parallel_workers", workers), ("replica_preserve_commit_order", "OFF")], None);
            let finding = commit_order_of(&single);
            assert_eq!(finding.level, Level::Ok, "{finding}");
            assert!(finding.found.contains("one applier"), "{finding}");
        }
    }

    #[test]
    fn a_mysql_primary_passes_whatever_its_applier_settings_and_an_unknown_role_only_warns() {
        let off = [("super_read_only", "OFF"), ("replica_preserve_commit_order", "OFF")];
        assert_eq!(commit_order_of(&mysql_replica(&off, Some(false))).level, Level::Ok, "writable, no channel");
        let unknown = commit_order_of(&mysql_replica(&off, None));
        assert_eq!(unknown.level, Level::Warn, "{unknown}");
        assert!(unknown.found.contains("not visible"), "{unknown}");
    }

    #[test]
    fn a_mariadb_replica_commits_in_order_within_a_domain_and_warns_on_several() {
        let one_domain = commit_order_of(&with(&[]));
        assert_eq!(one_domain.level, Level::Ok, "optimistic, 4 threads, one domain: {one_domain}");
        let two = [("gtid_slave_pos", "0-1-42,1-1-7")];
        let warned = commit_order_of(&with(&two));
        assert_eq!(warned.level, Level::Warn, "{warned}");
        let text = warned.to_string();
        for part in ["slave_parallel_threads = 4", "slave_parallel_mode = optimistic", "domains 0, 1", "gtid_domain_id"]
        {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert!(text.contains("set slave_parallel_mode = minimal"), "{text}");
        assert!(failed(&with(&two)).is_empty(), "never a FAIL: the outbox may well be written in one domain");
        for mode in ["conservative", "aggressive"] {
            assert_eq!(commit_order_of(&with(&[two[0], ("slave_parallel_mode", mode)])).level, Level::Warn, "{mode}");
        }
    }

    #[test]
    fn a_mariadb_replica_without_out_of_order_apply_passes_with_several_domains() {
        let two = ("gtid_slave_pos", "0-1-42,1-1-7");
        for in_order in
            [("slave_parallel_mode", "minimal"), ("slave_parallel_mode", "none"), ("slave_parallel_threads", "0")]
        {
            let finding = commit_order_of(&with(&[two, in_order]));
            assert_eq!(finding.level, Level::Ok, "{in_order:?}: {finding}");
        }
        let alias = SourceFacts::new(
            good()
                .into_iter()
                .filter(|(k, _)| *k != "slave_parallel_threads")
                .chain([("slave_parallel_workers", "8"), two])
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            Some(true),
        );
        assert_eq!(commit_order_of(&alias).level, Level::Warn, "slave_parallel_workers is the 10.5+ alias");
    }

    #[test]
    fn gtid_domains_are_read_once_each_from_a_position() {
        assert_eq!(gtid_domains("0-1-42, 1-2-7,0-3-9"), ["0", "1"]);
        assert!(gtid_domains("").is_empty());
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
