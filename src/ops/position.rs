//! The relay's binlog position as an operator sees and sets it (`position show`,
//! `position set`): the local RocksDB checkpoint, the mirror row on the primary and
//! who holds the leader lease.
//!
//! Setting it must survive how a relay chooses where to start: at the start of every
//! leader term it takes the newer of its local checkpoint and the mirror (the mirror
//! when they cannot be compared). So `set`:
//! - refuses while an instance holds an unexpired lease, unless forced: that leader
//!   keeps its position in memory and would overwrite the mirror at its next checkpoint;
//! - in one transaction with the lease row locked, ends the lease's current term (the
//!   term goes up by one, the lease runs out: every write fenced by an earlier term,
//!   a forced-out leader's late checkpoint included, changes nothing any more, and that
//!   leader steps down at its next renewal), overwrites the mirror row and writes the
//!   audit row;
//! - rewrites the local checkpoint too when one exists and no running relay holds it
//!   (it stays open, so locked, from before the transaction until it is rewritten),
//!   since a local checkpoint newer than the mirror would win otherwise;
//! - when a running relay on this host holds the local checkpoint, sets the mirror
//!   only if the new position is at least as far as that checkpoint (the relay takes
//!   it at its next term); an older one would be ignored, so it is refused, saying to
//!   stop that relay first.
//!
//! Set by GTID, the position has no file (empty) and offset 4: a GTID resume needs
//! neither, and the relay fills them in from the first event it reads. Set by file and
//! offset, it belongs to the server of the checkpoint it replaces.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use mysql_async::prelude::Queryable;
use mysql_async::{Pool, TxOpts};
use serde::Serialize;

use super::manual::{audit, AuditEntry, Operator};
use super::report::LeaderReport;
use crate::checkpoint::mirror::{self, MirrorRow};
use crate::checkpoint::{Checkpoint, CheckpointError, CheckpointStore, PositionReport};
use crate::config::{Config, DbUrl, Mode};
use crate::db::DbError;
use crate::source::binlog::GtidState;
use crate::source::BinlogPosition;
use crate::store::{LeaseHolder, LeaseStore, ReadFor};
use outbox_kit::OutboxTable;

/// The smallest binlog offset: the first event after the file's 4-byte magic number.
const FIRST_EVENT: u64 = 4;

/// Where an operator wants the relay to resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NewPosition {
    /// A MariaDB GTID list or a MySQL GTID set, as [`parse_gtid`] gives it.
    Gtid(String),
    /// A binlog file of the checkpoint's server ([`parse_binlog_file`]) and an offset of at least 4.
    File { file: String, pos: u64 },
}

/// A MariaDB GTID list (`domain-server-seq[,...]`, one per domain) or a MySQL GTID set
/// (`uuid:interval[:interval][,...]`), in the form the relay writes it.
pub fn parse_gtid(text: &str) -> Result<String, String> {
    let parts: Vec<&str> = text.split(',').map(str::trim).collect();
    let domains: BTreeSet<&str> = parts.iter().filter_map(|p| p.split('-').next()).collect();
    let mariadb = parts.iter().all(|p| is_mariadb_gtid(p)) && domains.len() == parts.len();
    let mysql = parts.iter().all(|p| is_mysql_gtid_set(p));
    (mariadb || mysql).then(|| GtidState::parse(text).render()).flatten().ok_or_else(|| {
        format!(
            "{text:?} is not a GTID position: give a MariaDB list like 0-1-100,1-2-7 (one per domain) or a MySQL set like 3e11fa47-71ca-11e1-9e33-c80aa9429562:1-100"
        )
    })
}

/// `domain-server-seq`: two 32-bit numbers and a 64-bit one.
fn is_mariadb_gtid(part: &str) -> bool {
    match part.split('-').collect::<Vec<_>>()[..] {
        [domain, server, seq] => {
            number::<u32>(domain).is_some() && number::<u32>(server).is_some() && number::<u64>(seq).is_some()
        }
        _ => false,
    }
}

/// `uuid:interval[:interval...]`, each interval `n` or `first-last` with 1 <= first <= last.
fn is_mysql_gtid_set(part: &str) -> bool {
    let mut pieces = part.split(':');
    let uuid = pieces.next().is_some_and(|u| uuid::Uuid::parse_str(u).is_ok());
    let intervals: Vec<&str> = pieces.collect();
    uuid && !intervals.is_empty()
        && intervals.iter().all(|range| {
            let (first, last) = range.split_once('-').unwrap_or((range, range));
            matches!((number::<u64>(first), number::<u64>(last)), (Some(a), Some(b)) if (1..=b).contains(&a))
        })
}

/// `text` as a number written in plain decimal digits (no sign, no spaces).
fn number<T: std::str::FromStr>(text: &str) -> Option<T> {
    (!text.is_empty() && text.bytes().all(|b| b.is_ascii_digit())).then(|| text.parse().ok()).flatten()
}

/// A binlog file name: a base name and a numeric extension of at least six digits
/// (`mysql-bin.000123`), no directory.
pub fn parse_binlog_file(text: &str) -> Result<String, String> {
    let valid = text.rsplit_once('.').is_some_and(|(base, number)| {
        !base.is_empty()
            && base.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            && number.len() >= 6
            && number.bytes().all(|b| b.is_ascii_digit())
    });
    if valid {
        Ok(text.to_owned())
    } else {
        Err(format!("{text:?} is not a binlog file name: give one like mysql-bin.000123 (SHOW BINARY LOGS lists them)"))
    }
}

/// A saved position, as `position show` and `position set` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SavedPosition {
    pub file: String,
    pub pos: u64,
    pub gtid: Option<String>,
    /// The source server it belongs to (empty: not known yet; a GTID holds on any).
    pub server: String,
}

impl SavedPosition {
    fn of(checkpoint: &Checkpoint) -> Self {
        Self {
            file: checkpoint.position.file.clone(),
            pos: checkpoint.position.pos,
            gtid: checkpoint.position.gtid.clone(),
            server: checkpoint.server_identity.clone(),
        }
    }

    /// `file:pos gtid=G server=S` (no `file:pos` while a GTID alone says where), for
    /// the audit row and the log.
    fn describe(&self) -> String {
        let place = (!self.file.is_empty()).then(|| format!("{}:{}", self.file, self.pos));
        let gtid = self.gtid.as_deref().map(|g| format!("gtid={g}"));
        let server = (!self.server.is_empty()).then(|| format!("server={}", self.server));
        [place, gtid, server].into_iter().flatten().collect::<Vec<_>>().join(" ")
    }
}

/// The local checkpoint as found at `checkpoint.path`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum LocalState {
    /// No directory there: this host has no local checkpoint.
    Absent,
    /// A store without a checkpoint in it yet.
    Empty,
    Saved {
        position: SavedPosition,
    },
    Unreadable {
        error: String,
    },
}

/// The local checkpoint and where it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LocalView {
    pub path: PathBuf,
    #[serde(flatten)]
    pub state: LocalState,
}

/// Everything `position show` shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PositionView {
    pub local: LocalView,
    pub mirror: Option<PositionReport>,
    pub leader: Option<LeaderReport>,
}

/// What `position set` did to the local checkpoint (or, in a dry run, would do).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LocalOutcome {
    /// There is none at `checkpoint.path` on this host.
    NotPresent,
    Rewritten,
    /// A running relay holds it and it is not newer: left; that relay takes the mirror
    /// at its next leader term.
    InUse,
}

/// The lease term a `position set` ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EndedTerm {
    pub holder: String,
    pub term: u64,
    /// It held an unexpired lease (the set was forced): it steps down.
    pub was_leading: bool,
}

/// What `position set` changed (or, with `dry_run`, would change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PositionChange {
    pub before: Option<PositionReport>,
    pub after: SavedPosition,
    pub ended_term: Option<EndedTerm>,
    pub local: LocalOutcome,
    pub local_path: PathBuf,
    pub dry_run: bool,
}

/// Why a position could not be shown or set.
#[derive(Debug, thiserror::Error)]
pub enum PositionError {
    #[error("position set refused: {holder} leads (term {term}, its lease runs {:.1} s more); stop the relay first (it then resumes from the new position), or pass --force to end its term now (it steps down and starts again from the newer of its local checkpoint and the new position)", *remaining_ms as f64 / 1e3)]
    LeaderRunning { holder: String, term: u64, remaining_ms: i64 },
    #[error("position set refused: a running relay holds the local checkpoint at {path} (checkpoint.path) at {local}, which is further than {wanted}; it resumes from the newer of the two and would ignore the new position: stop the relay on this host (or point --config at its checkpoint.path once it is stopped) and run `position set` again")]
    LocalIsNewer { path: PathBuf, local: String, wanted: String },
    #[error("position set by --file/--pos needs the source server the file belongs to, but no checkpoint (local or mirrored) names one: set it by --gtid, or start the relay once so it records its source")]
    NoServer,
    #[error("mode = \"poll\" keeps no binlog position, so there is none to set: set mode = \"binlog\" first")]
    PollMode,
    #[error("the mirror was set (audited), but the local checkpoint could not be rewritten, and the relay would resume from it if it is newer: {0}; move the directory aside so the relay starts from the mirror")]
    LocalNotRewritten(#[source] CheckpointError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error(transparent)]
    Db(#[from] DbError),
}

/// The position of one outbox table's relay.
pub struct Positions {
    pool: Pool,
    url: DbUrl,
    outbox: OutboxTable,
    lease: LeaseStore,
    local: PathBuf,
    /// Pinned queue counts for a checkpoint that has none to carry over.
    pins: BTreeMap<String, u32>,
    mode: Mode,
}

impl Positions {
    /// The position of the relay of `outbox` as `config` runs it, over `pool` on the primary.
    pub fn new(config: &Config, outbox: OutboxTable, pool: Pool) -> Self {
        Self {
            lease: LeaseStore::new(pool.clone(), &outbox.schema, &config.lease_name()),
            pool,
            url: config.primary.url.clone(),
            outbox,
            local: config.checkpoint.path.clone(),
            pins: config.rocketmq.topics.iter().map(|(topic, c)| (topic.clone(), c.queue_count)).collect(),
            mode: config.mode,
        }
    }

    fn failed(&self, error: mysql_async::Error) -> DbError {
        DbError::query("primary", &self.url, error)
    }

    /// The local checkpoint, the mirror row and the lease holder; reads only.
    pub async fn show(&self) -> Result<PositionView, PositionError> {
        let state = if self.local.exists() {
            match CheckpointStore::open_read_only(&self.local).and_then(|store| store.load()) {
                Ok(Some(checkpoint)) => LocalState::Saved { position: SavedPosition::of(&checkpoint) },
                Ok(None) => LocalState::Empty,
                Err(error) => LocalState::Unreadable { error: error.to_string() },
            }
        } else {
            LocalState::Absent
        };
        let mut conn = self.pool.get_conn().await.map_err(|e| self.failed(e))?;
        let mirror = mirror::read_row(&mut conn, &self.outbox, ReadFor::Show).await.map_err(|e| self.failed(e))?;
        let leader = self.lease.holder().await.map_err(|e| self.failed(e))?.and_then(LeaderReport::of);
        Ok(PositionView {
            local: LocalView { path: self.local.clone(), state },
            mirror: mirror.map(|row| row.columns),
            leader,
        })
    }

    /// Sets the position the relay resumes from (see the module's rules), audited as
    /// done by `by`; `force` ends a running leader's term, `dry_run` changes nothing.
    pub async fn set(
        &self,
        to: &NewPosition,
        by: &Operator,
        force: bool,
        dry_run: bool,
    ) -> Result<PositionChange, PositionError> {
        if self.mode == Mode::Poll {
            return Err(PositionError::PollMode);
        }
        let local = Local::open(&self.local)?;
        let mut conn = self.pool.get_conn().await.map_err(|e| self.failed(e))?;
        let mut tx = conn.start_transaction(TxOpts::default()).await.map_err(|e| self.failed(e))?;
        let plan = match self.plan(&mut tx, &local, to, force).await {
            Ok(plan) => plan,
            Err(error) => {
                tx.rollback().await.map_err(|e| self.failed(e))?;
                return Err(error);
            }
        };
        let change = plan.change(&self.local, dry_run);
        if dry_run {
            tx.rollback().await.map_err(|e| self.failed(e))?;
            return Ok(change);
        }
        let term = match &plan.lease {
            Some(lease) => {
                self.lease.end_term(&mut tx).await.map_err(|e| self.failed(e))?;
                lease.term + 1
            }
            None => 0,
        };
        mirror::overwrite(&mut tx, &self.outbox, &plan.after, term).await.map_err(|e| self.failed(e))?;
        audit(&mut tx, &self.outbox, by, &plan.audit_entry(&change)).await.map_err(|e| self.failed(e))?;
        tx.commit().await.map_err(|e| self.failed(e))?;
        if let Local::Idle(store, _) = &local {
            store.save(&plan.after).map_err(PositionError::LocalNotRewritten)?;
        }
        tracing::info!(position = %change.after.describe(), local = ?change.local, "position set");
        Ok(change)
    }

    /// Inside `tx`: locks the lease and mirror rows, checks that the set may go ahead,
    /// and works out the new checkpoint.
    async fn plan(
        &self,
        tx: &mut impl Queryable,
        local: &Local,
        to: &NewPosition,
        force: bool,
    ) -> Result<Plan, PositionError> {
        let lease = self.lease.holder_for_update(tx).await.map_err(|e| self.failed(e))?;
        let leading = lease.as_ref().is_some_and(|l| !l.holder.is_empty() && l.remaining_ms > 0);
        if let Some(l) = lease.as_ref().filter(|_| leading && !force) {
            return Err(PositionError::LeaderRunning {
                holder: l.holder.clone(),
                term: l.term,
                remaining_ms: l.remaining_ms,
            });
        }
        let before = mirror::read_row(tx, &self.outbox, ReadFor::Update).await.map_err(|e| self.failed(e))?;
        let on_disk = local.checkpoint();
        let mirrored = before.as_ref().and_then(|row| row.checkpoint.as_ref());
        // The one the relay would start from: the newer, the mirror when they cannot be compared.
        let current = match (on_disk, mirrored) {
            (Some(on_disk), Some(mirrored)) if !on_disk.is_at_least(mirrored) => Some(mirrored),
            (Some(on_disk), _) => Some(on_disk),
            (None, mirrored) => mirrored,
        };
        let after = self.checkpoint_at(to, current)?;
        let outcome = match local {
            Local::Absent => LocalOutcome::NotPresent,
            Local::Idle(..) => LocalOutcome::Rewritten,
            Local::InUse(Some(running)) if !after.is_at_least(running) => {
                return Err(PositionError::LocalIsNewer {
                    path: self.local.clone(),
                    local: SavedPosition::of(running).describe(),
                    wanted: SavedPosition::of(&after).describe(),
                })
            }
            Local::InUse(_) => LocalOutcome::InUse,
        };
        Ok(Plan { before, after, lease, leading, outcome, target: self.target() })
    }

    /// The checkpoint at `to`, carrying over the server and pinned queue counts and layouts of
    /// `current` (the configured pins when there is none).
    fn checkpoint_at(&self, to: &NewPosition, current: Option<&Checkpoint>) -> Result<Checkpoint, PositionError> {
        let position = match to {
            NewPosition::Gtid(gtid) => {
                BinlogPosition { file: String::new(), pos: FIRST_EVENT, gtid: Some(gtid.clone()), commit_time: None }
            }
            NewPosition::File { file, pos } => {
                BinlogPosition { file: file.clone(), pos: *pos, gtid: None, commit_time: None }
            }
        };
        let server_identity = match (current, to) {
            (Some(current), _) => current.server_identity.clone(),
            (None, NewPosition::Gtid(_)) => String::new(),
            (None, NewPosition::File { .. }) => return Err(PositionError::NoServer),
        };
        let queue_counts = current.map_or_else(|| self.pins.clone(), |c| c.queue_counts.clone());
        let queue_layouts = current.map(|c| c.queue_layouts.clone()).unwrap_or_default();
        // Where the binlog path will not read again is unknown after a move: the next
        // start holds every key with an unsent row until the sweep has sent it.
        Ok(Checkpoint::at(position, server_identity, queue_counts, queue_layouts))
    }

    /// The mirror row, as the audit row names it.
    fn target(&self) -> String {
        format!("{}.outbox_relay_checkpoint of {}", self.outbox.schema, self.outbox.qualified())
    }
}

/// The local checkpoint as `position set` finds it.
enum Local {
    Absent,
    /// Open for writing (so locked against a relay starting meanwhile) with what it holds.
    Idle(CheckpointStore, Option<Checkpoint>),
    /// A running relay has it open; what it held when read.
    InUse(Option<Checkpoint>),
}

impl Local {
    fn open(path: &Path) -> Result<Self, CheckpointError> {
        if !path.exists() {
            return Ok(Local::Absent);
        }
        match CheckpointStore::open_unless_in_use(path)? {
            Some(store) => {
                let saved = store.load()?;
                Ok(Local::Idle(store, saved))
            }
            None => Ok(Local::InUse(CheckpointStore::open_read_only(path)?.load()?)),
        }
    }

    fn checkpoint(&self) -> Option<&Checkpoint> {
        match self {
            Local::Absent => None,
            Local::Idle(_, saved) | Local::InUse(saved) => saved.as_ref(),
        }
    }
}

/// A checked `position set`, before it is written.
struct Plan {
    before: Option<MirrorRow>,
    after: Checkpoint,
    lease: Option<LeaseHolder>,
    leading: bool,
    outcome: LocalOutcome,
    target: String,
}

impl Plan {
    fn change(&self, local_path: &Path, dry_run: bool) -> PositionChange {
        PositionChange {
            before: self.before.as_ref().map(|row| row.columns.clone()),
            after: SavedPosition::of(&self.after),
            ended_term: self.lease.as_ref().map(|l| EndedTerm {
                holder: l.holder.clone(),
                term: l.term,
                was_leading: self.leading,
            }),
            local: self.outcome,
            local_path: local_path.to_owned(),
            dry_run,
        }
    }

    fn audit_entry(&self, change: &PositionChange) -> AuditEntry {
        let old_state = change.before.as_ref().map_or_else(
            || "none".to_owned(),
            |b| {
                let saved = SavedPosition {
                    file: b.file.clone(),
                    pos: b.pos,
                    gtid: b.gtid.clone(),
                    server: b.server.clone().unwrap_or_default(),
                };
                format!("{} term={}", saved.describe(), b.term)
            },
        );
        let ended = change.ended_term.as_ref().map_or_else(String::new, |t| {
            let forced = if t.was_leading { ", forced while it led" } else { "" };
            format!("; ended lease term {} of {}{forced}", t.term, t.holder)
        });
        let local = match change.local {
            LocalOutcome::NotPresent => "none on this host",
            LocalOutcome::Rewritten => "rewritten after this commit",
            LocalOutcome::InUse => "held by a running relay and not newer: left",
        };
        AuditEntry {
            action: "position set",
            target: self.target.clone(),
            old_state,
            new_state: change.after.describe(),
            result: format!("mirror set{ended}; local checkpoint {}: {local}", change.local_path.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gtids_of_either_family_are_accepted_in_the_form_the_relay_writes() {
        assert_eq!(parse_gtid("0-1-100, 1-2-7").as_deref(), Ok("0-1-100,1-2-7"));
        let mysql = "3e11fa47-71ca-11e1-9e33-c80aa9429562:1-5:7";
        assert_eq!(parse_gtid(mysql).as_deref(), Ok(mysql));
        for bad in
            ["", "0-1", "0-1-x", "0-1-+5", "0-1-5,0-2-7", "3e11fa47:1-5", "3e11fa47-71ca-11e1-9e33-c80aa9429562:5-1"]
        {
            assert!(parse_gtid(bad).is_err(), "{bad:?} accepted");
        }
        assert!(parse_gtid("0-1-100,3e11fa47-71ca-11e1-9e33-c80aa9429562:1").is_err(), "mixed families");
    }

    #[test]
    fn binlog_files_have_a_base_and_a_numbered_extension() {
        assert_eq!(parse_binlog_file("mysql-bin.000123").as_deref(), Ok("mysql-bin.000123"));
        assert!(parse_binlog_file("mariadb-bin.1000000").is_ok());
        for bad in ["mysql-bin", "mysql-bin.12", ".000001", "../x/mysql-bin.000001", "mysql-bin.00001a"] {
            assert!(parse_binlog_file(bad).is_err(), "{bad:?} accepted");
        }
    }
}
