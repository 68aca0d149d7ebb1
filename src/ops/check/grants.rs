//! What the source and primary users may do, read from `SHOW GRANTS` (with the grants
//! of their roles where `SHOW GRANTS FOR role` answers), against what the relay's
//! statements need: one finding per need, naming the missing privileges and the
//! `GRANT` that adds them.
//!
//! A need the relay cannot run without is a FAIL; one that only a side feature uses
//! (the operator commands' audit and cleanup, the replica metrics, MINIMAL row images
//! for the relay's own updates) is a warning.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool};
use outbox_kit::OutboxTable;

use super::grant_parser::GrantSet;
use super::{one_line, Finding, Group};
use crate::config::{Config, Mode};
use crate::server::Flavor;

/// Role grants followed at most this deep (roles granted to roles).
const ROLE_DEPTH: usize = 4;

/// The grants of the user `pool` connects as.
async fn grants_of(pool: &Pool) -> Result<UserGrants, mysql_async::Error> {
    let mut conn = pool.get_conn().await?;
    UserGrants::read(&mut conn).await
}

/// The source user's grants against what tailing the binlog needs.
pub(super) async fn of_source(pool: &Pool, outbox: &OutboxTable) -> Vec<Finding> {
    let who = "source user";
    let user = match grants_of(pool).await {
        Ok(user) => user,
        Err(error) => return vec![unreadable_grants(who, &error)],
    };
    let (position, replica_status): (&'static [&'static str], &'static [&'static str]) = match user.flavor {
        Flavor::MariaDb => (&["REPLICATION CLIENT", "BINLOG MONITOR"], &["SLAVE MONITOR"]),
        Flavor::MySql => (&["REPLICATION CLIENT", "SUPER"], &["REPLICATION CLIENT", "SUPER"]),
    };
    let needs = [
        Need::on_server("replication", vec![&["REPLICATION SLAVE"]], Importance::Required, "to read the binlog"),
        Need::on_server(
            "binlog position",
            vec![position],
            Importance::Required,
            "to read the current binlog position (SHOW MASTER STATUS) at start",
        ),
        Need::on_server(
            "replica status",
            vec![replica_status],
            Importance::Recommended,
            "to tell a writable replica from a primary (SHOW SLAVE STATUS) and for the replication metrics",
        ),
        Need::on_table(
            "outbox table",
            outbox,
            &outbox.table,
            &[&["SELECT"]],
            Importance::Required,
            "to read the outbox table's columns",
        ),
    ];
    user.findings(who, &needs)
}

/// The primary user's grants against the relay's writes (statuses, claims, lease,
/// mirror) and the operator commands.
pub(super) async fn of_primary(pool: &Pool, config: &Config, outbox: &OutboxTable) -> Vec<Finding> {
    let who = "primary user";
    let user = match grants_of(pool).await {
        Ok(user) => user,
        Err(error) => return vec![unreadable_grants(who, &error)],
    };
    let write: &[&[&str]] = &[&["SELECT"], &["INSERT"], &["UPDATE"]];
    let mut needs = vec![
        Need::on_table(
            "outbox table",
            outbox,
            &outbox.table,
            &[&["SELECT"], &["UPDATE"]],
            Importance::Required,
            "status write-back and sweep claims",
        ),
        Need::on_table(
            "cleanup",
            outbox,
            &outbox.table,
            &[&["DELETE"]],
            // The leader's scheduled cleanup cannot work without it.
            if config.cleanup.interval_ms > 0 { Importance::Required } else { Importance::Recommended },
            "`outbox-relay cleanup` and the scheduled cleanup (cleanup.interval_ms) delete SENT rows",
        ),
        Need::on_table("lease table", outbox, "outbox_relay_lease", write, Importance::Required, "the leader lease"),
        Need::on_table(
            "migrations table",
            outbox,
            "outbox_relay_migrations",
            &[&["SELECT"]],
            Importance::Required,
            "the start checks that the relay's tables are migrated",
        ),
        Need::on_table(
            "audit table",
            outbox,
            "outbox_relay_audit",
            &[&["SELECT"], &["INSERT"]],
            Importance::Recommended,
            "the audit rows of requeue, skip and cleanup",
        ),
        Need::on_table(
            "roll call table",
            outbox,
            "outbox_relay_instances",
            &[&["SELECT"], &["INSERT"], &["UPDATE"], &["DELETE"]],
            Importance::Recommended,
            "the fleet's roll call that `outbox-relay status` lists",
        ),
    ];
    if config.outbox.partition.is_some() {
        needs.push(Need::on_table(
            "partition upkeep",
            outbox,
            &outbox.table,
            &[&["ALTER"], &["DROP"], &["LOCK TABLES"]],
            Importance::Required,
            "outbox.partition: the leader adds partitions ahead and drops expired ones under LOCK TABLES",
        ));
    }
    if config.mode == Mode::Binlog {
        needs.push(Need::on_table(
            "checkpoint table",
            outbox,
            "outbox_relay_checkpoint",
            write,
            Importance::Required,
            "the checkpoint mirror",
        ));
    }
    if config.primary.minimal_row_image {
        let alternatives: &[&str] = match user.flavor {
            Flavor::MariaDb => &["BINLOG ADMIN", "SUPER"],
            Flavor::MySql => &["SESSION_VARIABLES_ADMIN", "SYSTEM_VARIABLES_ADMIN", "SUPER"],
        };
        needs.push(Need::on_server(
            "minimal row image",
            vec![alternatives],
            Importance::Recommended,
            "primary.minimal_row_image: the relay's own updates logged with binlog_row_image = MINIMAL; or set primary.minimal_row_image = false",
        ));
    }
    user.findings(who, &needs)
}

fn unreadable_grants(who: &str, error: &mysql_async::Error) -> Finding {
    Finding::fail(
        Group::Grants,
        format!("{who}: grants"),
        format!("SHOW GRANTS failed: {}", one_line(error)),
        "make sure the server answers SHOW GRANTS for the configured user, then run the check again",
    )
}

/// What a missing privilege means: the relay cannot run (FAIL), or a side feature
/// does without it (warn).
#[derive(Clone, Copy)]
enum Importance {
    Required,
    Recommended,
}

/// Where a need applies.
enum On {
    Server,
    Table { database: String, table: String },
}

impl On {
    /// As written in a GRANT statement.
    fn sql(&self) -> String {
        match self {
            On::Server => "*.*".to_owned(),
            On::Table { database, table } => format!("`{database}`.`{table}`"),
        }
    }
}

/// One thing a user needs: each entry of `privileges` is met by any of its
/// alternatives (the first is the one the fix grants).
struct Need {
    name: &'static str,
    on: On,
    privileges: Vec<&'static [&'static str]>,
    missing: Importance,
    why: &'static str,
}

impl Need {
    fn on_server(
        name: &'static str,
        privileges: Vec<&'static [&'static str]>,
        missing: Importance,
        why: &'static str,
    ) -> Self {
        Self { name, on: On::Server, privileges, missing, why }
    }

    fn on_table(
        name: &'static str,
        outbox: &OutboxTable,
        table: &str,
        privileges: &[&'static [&'static str]],
        missing: Importance,
        why: &'static str,
    ) -> Self {
        let on = On::Table { database: outbox.schema.clone(), table: table.to_owned() };
        Self { name, on, privileges: privileges.to_vec(), missing, why }
    }
}

/// A user's grants: their own and those of the roles that could be read.
struct UserGrants {
    /// `'user'@'host'`, as a GRANT names the user.
    user: String,
    flavor: Flavor,
    grants: GrantSet,
    /// Roles whose grants were read and counted.
    expanded: Vec<String>,
    /// Roles whose grants could not be read, with why.
    unread: Vec<(String, String)>,
}

impl UserGrants {
    async fn read(conn: &mut Conn) -> Result<Self, mysql_async::Error> {
        let [current, version] =
            <[String; 2]>::try_from(text_column(conn, "SELECT CURRENT_USER() UNION ALL SELECT VERSION()").await?)
                .unwrap_or_default();
        let user = match current.rsplit_once('@') {
            Some((name, host)) => format!("'{name}'@'{host}'"),
            None => format!("'{current}'"),
        };
        let lines = text_column(conn, "SHOW GRANTS").await?;
        let mut grants = GrantSet::parse(lines.iter().map(String::as_str));
        let (mut expanded, mut unread) = (Vec::new(), Vec::new());
        let mut pending = std::mem::take(&mut grants.roles);
        for _ in 0..ROLE_DEPTH {
            let mut next = Vec::new();
            let unseen: Vec<String> = pending.drain(..).filter(|r| !expanded.contains(r)).collect();
            for role in unseen {
                match text_column(conn, &format!("SHOW GRANTS FOR {role}")).await {
                    Ok(lines) => {
                        let mut of_role = GrantSet::parse(lines.iter().map(String::as_str));
                        next.append(&mut of_role.roles);
                        grants.absorb(of_role);
                        expanded.push(role);
                    }
                    Err(error) => unread.push((role, one_line(error))),
                }
            }
            pending = next;
        }
        Ok(Self { user, flavor: Flavor::of_version(&version), grants, expanded, unread })
    }

    /// One finding per need, then what could not be taken into account.
    fn findings(&self, who: &str, needs: &[Need]) -> Vec<Finding> {
        let mut findings: Vec<Finding> = needs.iter().map(|need| self.judge(who, need)).collect();
        if !self.expanded.is_empty() {
            findings.push(Finding::ok(
                Group::Grants,
                format!("{who}: roles"),
                format!(
                    "{} read and counted (their privileges apply while the role is active, e.g. as the default role)",
                    self.expanded.join(", ")
                ),
            ));
        }
        if !self.unread.is_empty() {
            let roles: Vec<String> = self.unread.iter().map(|(role, why)| format!("{role} ({why})")).collect();
            findings.push(Finding::warn(
                Group::Grants,
                format!("{who}: roles"),
                format!("granted but not expanded: {}", roles.join(", ")),
                "a privilege reported missing above may come with these roles; check them with SHOW GRANTS FOR role as an administrator, or grant the privileges to the user directly",
            ));
        }
        if !self.grants.unreadable.is_empty() {
            findings.push(Finding::warn(
                Group::Grants,
                format!("{who}: grant lines"),
                format!("not evaluated: {}", self.grants.unreadable.join(" | ")),
                "read these lines yourself: they may add or take away privileges the lines above judged",
            ));
        }
        findings
    }

    fn judge(&self, who: &str, need: &Need) -> Finding {
        let held = |privilege: &str| match &need.on {
            On::Server => self.grants.allows_on_server(privilege),
            On::Table { database, table } => self.grants.allows_on_table(privilege, database, table),
        };
        let (mut granted, mut missing) = (Vec::new(), Vec::new());
        for alternatives in &need.privileges {
            match alternatives.iter().find(|p| held(p)) {
                Some(privilege) => granted.push(*privilege),
                None => missing.push(alternatives.first().copied().unwrap_or_default()),
            }
        }
        let name = format!("{who}: {}", need.name);
        let on = need.on.sql();
        if missing.is_empty() {
            return Finding::ok(Group::Grants, name, format!("{} on {on}", granted.join(", ")));
        }
        let found = format!("{} missing on {on}", missing.join(", "));
        let fix = format!("GRANT {} ON {on} TO {} ({})", missing.join(", "), self.user, need.why);
        match need.missing {
            Importance::Recommended => Finding::warn(Group::Grants, name, found, fix),
            Importance::Required => Finding::fail(Group::Grants, name, found, fix),
        }
    }
}

/// The first column of every row of `sql`, as text.
async fn text_column(conn: &mut Conn, sql: &str) -> Result<Vec<String>, mysql_async::Error> {
    let rows: Vec<mysql_async::Row> = conn.query(sql).await?;
    Ok(rows
        .into_iter()
        .map(|row| match row.unwrap_raw().into_iter().next().flatten() {
            Some(mysql_async::Value::Bytes(bytes)) => String::from_utf8_lossy(&bytes).into_owned(),
            _ => String::new(),
        })
        .collect())
}
