//! From binlog events to committed transactions of outbox events.
//!
//! A synchronous state machine, fed one event at a time, so it can be tested on
//! recorded binlog files. It keeps the current file name (ROTATE), the GTID state,
//! the outbox table's table ids (TABLE_MAP), and the INSERTs of the open group
//! ([`OpenGroup`]); it releases them only at the transaction's XID / COMMIT, so a
//! transaction cut by a crash or a dropped connection is re-read whole, never half.
//!
//! Rows that can still be undone after they were read are never released early:
//! rows rolled back to a savepoint (`ROLLBACK TO` inside the group) are dropped, and
//! an XA transaction's rows, written at XA PREPARE, wait in [`PreparedXa`] until
//! `XA COMMIT` releases them or `XA ROLLBACK` drops them. While one waits, every
//! position reported stays at its start (see [`PreparedXa::cap`]). Rows held that way
//! are bounded: a group that would hold more than the limit is left to the sweep.
//!
//! Only WRITE_ROWS of the outbox table become events; row events of other tables are
//! skipped by table id without decoding their rows, and UPDATE / DELETE (including the
//! relay's own SENT write-back) are ignored. An event the relay cannot decode
//! (MariaDB compressed or encrypted events, unknown types) is an error: skipping it
//! could skip outbox rows, which is silent loss.

use std::collections::HashMap;

use bytes::Bytes;
use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent, TransactionPayloadEvent};
use mysql_async::binlog::row::BinlogRow;
use mysql_async::binlog::value::BinlogValue;
use mysql_async::Value;

use super::columns::ColumnMap;
use super::group::{Ending, OpenGroup};
use super::gtid::GtidState;
use super::mariadb;
use super::prepared::PreparedXa;
use super::statement::{Statement, XaStatement};
use super::xa::{XaPrepare, Xid};
use crate::event::{local_millis, OutboxEvent};
use crate::source::BinlogPosition;
use crate::source::SourceTx;

/// What one event meant.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Nothing to hand on.
    Nothing,
    /// A TABLE_MAP for the outbox whose column count differs from the column map:
    /// reload the map (information_schema), `set_columns`, and feed the event again.
    NeedColumns,
    /// A transaction committed.
    Commit(SourceTx),
    /// The first rows of a transaction too large to hold whole, which nothing later
    /// in it can undo: hand them on now; its end comes with its commit.
    Part(Vec<OutboxEvent>),
    /// A replication heartbeat: the server has nothing newer to send.
    Heartbeat,
}

/// HEARTBEAT_LOG_EVENT, and MySQL 8.0.26+'s HEARTBEAT_LOG_EVENT_V2.
const HEARTBEAT_CODES: [u8; 2] = [0x1B, 0x29];

/// An event the relay must not skip and cannot use.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("binlog event type {code:#04x} at {file}:{pos} is {what}; the relay stops rather than skip it (skipping could lose outbox rows): {fix}")]
    Unsupported { code: u8, file: String, pos: u64, what: &'static str, fix: &'static str },
    #[error("cannot decode binlog event at {file}:{pos}: {detail}")]
    Malformed { file: String, pos: u64, detail: String },
    #[error("outbox row at {file}:{pos} has an unusable `{column}` value: {detail}")]
    BadRow { file: String, pos: u64, column: &'static str, detail: String },
}

/// How an XA transaction was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Commit,
    Rollback,
}

/// The decoder's state between events.
pub struct Decoder {
    schema: String,
    table: String,
    columns: Option<ColumnMap>,
    file: String,
    gtid: GtidState,
    /// Table maps of the outbox table by table id.
    outbox_maps: HashMap<u64, TableMapEvent<'static>>,
    group: OpenGroup,
    prepared: PreparedXa,
    /// The size of a part of a large transaction, and the most rows held that cannot
    /// be handed on yet (undecided XA rows plus the open group's unsettled rows).
    hold_limit: usize,
    /// Where the last finished group ended: the start of the group being read.
    group_start: BinlogPosition,
    /// End of the enclosing TRANSACTION_PAYLOAD (MySQL compressed transactions):
    /// events inside it carry no position of their own.
    payload_end: u64,
    /// Header timestamp of the event being handled (the commit time at XID/COMMIT).
    event_time: u32,
}

impl Decoder {
    /// A decoder for `schema`.`table`, reading from `start`, that hands a transaction
    /// on in parts of `hold_limit` rows and holds at most that many rows it cannot
    /// hand on yet.
    pub fn new(schema: &str, table: &str, start: &BinlogPosition, hold_limit: usize) -> Self {
        Self {
            schema: schema.to_owned(),
            table: table.to_owned(),
            columns: None,
            file: start.file.clone(),
            gtid: GtidState::parse(start.gtid.as_deref().unwrap_or_default()),
            outbox_maps: HashMap::new(),
            group: OpenGroup::default(),
            prepared: PreparedXa::default(),
            hold_limit,
            group_start: start.clone(),
            payload_end: 0,
            event_time: 0,
        }
    }

    /// Installs the column map (after `Decoded::NeedColumns` or at start).
    pub fn set_columns(&mut self, columns: ColumnMap) {
        self.columns = Some(columns);
    }

    /// Outbox events of the open group read so far and not handed on.
    pub fn open_events(&self) -> usize {
        self.group.len()
    }

    /// Feeds one event.
    pub fn handle(&mut self, event: &Event) -> Result<Decoded, DecodeError> {
        let header = event.header();
        let pos = u64::from(header.log_pos());
        let code = header.event_type_raw();
        if HEARTBEAT_CODES.contains(&code) {
            return Ok(Decoded::Heartbeat);
        }
        if header.event_type().is_err() {
            return self.handle_mariadb(event, code, pos);
        }
        self.event_time = header.timestamp();
        let data = event.read_data().map_err(|e| self.malformed(pos, e))?;
        match data {
            Some(EventData::RotateEvent(rotate)) => {
                self.file = mariadb::clean_binlog_name(&rotate.name());
                Ok(Decoded::Nothing)
            }
            Some(EventData::GtidEvent(gtid)) => {
                self.group.start(Ending::Commits);
                self.gtid.set_mysql(gtid.sid(), gtid.gno());
                Ok(Decoded::Nothing)
            }
            Some(EventData::QueryEvent(query)) => self.handle_query(&query.query(), pos),
            Some(EventData::TableMapEvent(tme)) => Ok(self.handle_table_map(tme)),
            Some(EventData::RowsEvent(rows)) => self.handle_rows(&rows, pos),
            Some(EventData::XidEvent(_)) => Ok(self.commit(pos)),
            Some(EventData::XaPrepareLogEvent(body)) => {
                let prepare =
                    XaPrepare::parse(&body).ok_or_else(|| self.malformed(pos, "short XA_PREPARE_LOG event"))?;
                Ok(if prepare.one_phase { self.commit(pos) } else { self.prepare(prepare.xid, pos) })
            }
            Some(EventData::TransactionPayloadEvent(_)) => {
                // mysql_async decompresses the payload and yields its events next; it
                // drops a payload it cannot parse, so check it parses here.
                event.read_event::<TransactionPayloadEvent<'_>>().map_err(|e| self.malformed(pos, e))?;
                self.payload_end = pos;
                Ok(Decoded::Nothing)
            }
            _ => Ok(Decoded::Nothing),
        }
    }

    fn handle_mariadb(&mut self, event: &Event, code: u8, pos: u64) -> Result<Decoded, DecodeError> {
        match mariadb::classify(code) {
            mariadb::Kind::Gtid => {
                let gtid = mariadb::parse_gtid(event.data(), event.header().server_id())
                    .ok_or_else(|| self.malformed(pos, "short MariaDB GTID event"))?;
                self.group.start(match gtid.prepared_xa {
                    Some(xid) => Ending::Xa(xid),
                    None if gtid.transactional => Ending::Commits,
                    None => Ending::MayRollBack,
                });
                self.gtid.set_mariadb(gtid.gtid);
                Ok(Decoded::Nothing)
            }
            mariadb::Kind::Ignorable => Ok(Decoded::Nothing),
            mariadb::Kind::Unsupported { what, fix } => {
                Err(DecodeError::Unsupported { code, file: self.file.clone(), pos, what, fix })
            }
        }
    }

    fn handle_query(&mut self, query: &str, pos: u64) -> Result<Decoded, DecodeError> {
        let statement = Statement::parse(query).map_err(|e| self.malformed(pos, e))?;
        Ok(match statement {
            Statement::Begin => {
                self.group.restart();
                Decoded::Nothing
            }
            Statement::Commit | Statement::Xa(XaStatement::Commit { one_phase: true, .. }) => self.commit(pos),
            // A rolled-back group (non-transactional tables involved): nothing committed.
            Statement::Rollback => {
                self.group.finish();
                self.end_group(pos, Vec::new())
            }
            Statement::Savepoint(name) => {
                self.group.savepoint(name);
                Decoded::Nothing
            }
            Statement::RollbackTo(name) => {
                self.group.rollback_to(&name);
                Decoded::Nothing
            }
            Statement::Release(name) => {
                self.group.release(&name);
                Decoded::Nothing
            }
            Statement::Xa(XaStatement::Start(xid)) => {
                self.group.start(Ending::Xa(xid));
                Decoded::Nothing
            }
            Statement::Xa(XaStatement::End) => Decoded::Nothing,
            Statement::Xa(XaStatement::Prepare(xid)) => self.prepare(xid, pos),
            Statement::Xa(XaStatement::Commit { xid, one_phase: false }) => self.decide(&xid, Decision::Commit, pos),
            Statement::Xa(XaStatement::Rollback(xid)) => self.decide(&xid, Decision::Rollback, pos),
            Statement::Other if !self.group.is_idle() => Decoded::Nothing,
            Statement::Other => {
                // DDL and other self-committing statements: a transaction boundary. An
                // ALTER of the outbox may move columns: re-read them at the next TABLE_MAP.
                if query.to_ascii_lowercase().contains(&self.table.to_ascii_lowercase()) {
                    self.columns = None;
                }
                self.commit(pos)
            }
        })
    }

    fn handle_table_map(&mut self, tme: TableMapEvent<'_>) -> Decoded {
        let table_id = tme.table_id();
        let is_outbox = tme.database_name() == self.schema.as_str() && tme.table_name() == self.table.as_str();
        if !is_outbox {
            self.outbox_maps.remove(&table_id);
            return Decoded::Nothing;
        }
        let count = usize::try_from(tme.columns_count()).unwrap_or(usize::MAX);
        if self.columns.is_none_or(|c| c.count != count) {
            return Decoded::NeedColumns;
        }
        self.outbox_maps.insert(table_id, tme.into_owned());
        Decoded::Nothing
    }

    fn handle_rows(&mut self, rows: &RowsEventData<'_>, pos: u64) -> Result<Decoded, DecodeError> {
        let Some(tme) = self.outbox_maps.get(&rows.table_id()) else {
            return Ok(Decoded::Nothing);
        };
        let is_insert = matches!(rows, RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_));
        let Some(columns) = self.columns.filter(|_| is_insert) else {
            return Ok(Decoded::Nothing);
        };
        let mut decoded = Vec::new();
        for row in rows.rows(tme) {
            let (_, after) = row.map_err(|e| self.malformed(pos, e))?;
            if let Some(after) = after {
                decoded.push(self.to_event(after, &columns, pos)?);
            }
        }
        self.group.push(decoded);
        Ok(self.after_rows(pos))
    }

    /// Keeps what is held within the limit, and hands on a part once enough rows
    /// have settled.
    fn after_rows(&mut self, pos: u64) -> Decoded {
        if self.group.held() + self.prepared.events() > self.hold_limit {
            let dropped = self.group.spill();
            tracing::warn!(
                file = %self.file, pos, dropped, limit = self.hold_limit, held_for = %self.group.ending(),
                "an event group holds more outbox rows that may still be undone than the relay keeps in memory: its rows are left to the sweep, which sends them once they are committed (after sweep.grace_ms); raise lanes.max_in_flight to keep such groups on the binlog path"
            );
        }
        if self.group.settled() >= self.hold_limit {
            return Decoded::Part(self.group.take_settled());
        }
        Decoded::Nothing
    }

    /// The group ends committed (XID, COMMIT, one-phase XA, DDL).
    fn commit(&mut self, pos: u64) -> Decoded {
        let events = self.group.finish();
        self.end_group(pos, events)
    }

    /// An XA PREPARE ends the group: its rows wait for the decision, keyed by `xid`.
    fn prepare(&mut self, xid: Xid, pos: u64) -> Decoded {
        let events = self.group.finish();
        if !events.is_empty() {
            self.prepared.hold(xid, events, self.group_start.clone());
        }
        self.end_group(pos, Vec::new())
    }

    /// The group of an `XA COMMIT` or `XA ROLLBACK`: releases or drops what the
    /// prepare left. Nothing is held for a prepare without outbox rows, one that was
    /// left to the sweep, or one read before this reader started (the sweep finds
    /// its rows once they are committed).
    fn decide(&mut self, xid: &Xid, decision: Decision, pos: u64) -> Decoded {
        self.group.finish();
        let held = self.prepared.decide(xid);
        if held.is_none() {
            tracing::debug!(%xid, ?decision, file = %self.file, pos, "XA decision without outbox rows held for it");
        }
        let events = held.filter(|_| decision == Decision::Commit).unwrap_or_default();
        self.end_group(pos, events)
    }

    /// A group ended at `pos`: hands on `events` as a transaction ending there, or at
    /// the oldest undecided prepare's start while one waits.
    fn end_group(&mut self, pos: u64, events: Vec<OutboxEvent>) -> Decoded {
        let pos = if pos == 0 { self.payload_end } else { pos };
        let end = BinlogPosition {
            file: self.file.clone(),
            pos,
            gtid: self.gtid.render(),
            commit_time: Some(self.event_time),
        };
        self.group_start = end.clone();
        Decoded::Commit(SourceTx::binlog(events, self.prepared.cap(end)))
    }

    fn to_event(&self, mut row: BinlogRow, columns: &ColumnMap, pos: u64) -> Result<OutboxEvent, DecodeError> {
        let missing = |column: &'static str| {
            self.bad_row(pos, column, "column missing from the row image (binlog_row_image must be FULL)")
        };
        let convert = |value: BinlogValue<'_>, column: &'static str| {
            Value::try_from(value).map_err(|e| self.bad_row(pos, column, &e.to_string()))
        };
        let cloned = |row: &BinlogRow, index: usize, column: &'static str| {
            row.as_ref(index).cloned().ok_or_else(|| missing(column)).and_then(|v| convert(v, column))
        };
        let id = match cloned(&row, columns.id, "id")? {
            Value::Int(v) => u64::try_from(v).ok(),
            Value::UInt(v) => Some(v),
            _ => None,
        };
        let id = id.ok_or_else(|| self.bad_row(pos, "id", "not a positive integer"))?;
        let text = |value: Value, column: &'static str| match value {
            Value::Bytes(bytes) => String::from_utf8(bytes).map_err(|_| self.bad_row(pos, column, "not UTF-8")),
            other => Err(self.bad_row(pos, column, &format!("not a string: {other:?}"))),
        };
        let event_id = text(cloned(&row, columns.event_id, "event_id")?, "event_id")?;
        let biz_key = text(cloned(&row, columns.biz_key, "biz_key")?, "biz_key")?;
        let topic = text(cloned(&row, columns.topic, "topic")?, "topic")?;
        let created_local_ms = columns.created_at.and_then(|index| row.as_ref(index)).and_then(|value| {
            let value = Value::try_from(value.clone()).ok()?;
            local_millis(&value)
        });
        // The payload is the big value: taken, not copied.
        let payload = match convert(row.take(columns.payload).ok_or_else(|| missing("payload"))?, "payload")? {
            Value::Bytes(bytes) => Bytes::from(bytes),
            other => return Err(self.bad_row(pos, "payload", &format!("not text or JSON: {other:?}"))),
        };
        Ok(OutboxEvent { id, event_id, biz_key, topic, payload, created_local_ms })
    }

    fn bad_row(&self, pos: u64, column: &'static str, detail: &str) -> DecodeError {
        DecodeError::BadRow { file: self.file.clone(), pos, column, detail: detail.to_owned() }
    }

    fn malformed(&self, pos: u64, detail: impl std::fmt::Display) -> DecodeError {
        DecodeError::Malformed { file: self.file.clone(), pos, detail: detail.to_string() }
    }
}

#[cfg(test)]
mod tests {
    //! Decoding real binlog files written by MariaDB and MySQL servers
    //! (`../shared/fixtures/mysql-binlogs`, read-only test data beside the project,
    //! and this project's own `tests/fixtures/binlog`).

    use std::io::BufReader;

    use mysql_common::binlog::consts::BinlogVersion;
    use mysql_common::binlog::BinlogFile;

    use super::*;
    use crate::source::Origin;

    /// Large enough that no fixture transaction is handed on in parts.
    const NO_PARTS: usize = 1_000_000;

    fn shared(name: &str) -> String {
        format!("{}/../shared/fixtures/mysql-binlogs/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    fn own(name: &str) -> String {
        format!("{}/tests/fixtures/binlog/{name}", env!("CARGO_MANIFEST_DIR"))
    }

    fn fixture(path: &str) -> BinlogFile<BufReader<std::fs::File>> {
        let file = std::fs::File::open(path).unwrap_or_else(|e| panic!("fixture {path}: {e}"));
        BinlogFile::new(BinlogVersion::Version4, BufReader::new(file)).expect("binlog file header")
    }

    /// A decoder for `schema`.`table` starting at the beginning of binlog `file`.
    fn decoder(schema: &str, table: &str, file: &str, hold_limit: usize) -> Decoder {
        let start = BinlogPosition { file: file.to_owned(), pos: 4, gtid: None, commit_time: None };
        Decoder::new(schema, table, &start, hold_limit)
    }

    /// Feeds every event of the file at `path` to `decoder`, answering `NeedColumns`
    /// with `columns` as the reader answers it from information_schema; returns what
    /// it hands on, as the reader does: commits and parts.
    fn decode_all(path: &str, decoder: &mut Decoder, columns: Option<ColumnMap>) -> Vec<SourceTx> {
        decode_from(path, 0, decoder, columns)
    }

    /// As [`decode_all`], for the events from position `from` on (a stream resumed there).
    fn decode_from(path: &str, from: u64, decoder: &mut Decoder, columns: Option<ColumnMap>) -> Vec<SourceTx> {
        let mut handed_on = Vec::new();
        for event in fixture(path) {
            let event = event.expect("readable event");
            if u64::from(event.header().log_pos()) <= from {
                continue;
            }
            let mut decoded = decoder.handle(&event).expect("decodable event");
            if decoded == Decoded::NeedColumns {
                decoder.set_columns(columns.expect("a column map for the table"));
                decoded = decoder.handle(&event).expect("decodable event");
            }
            match decoded {
                Decoded::Commit(tx) => handed_on.push(tx),
                Decoded::Part(events) => handed_on.push(SourceTx { events, origin: Origin::BinlogPart }),
                Decoded::NeedColumns => panic!("column map does not match the table map"),
                Decoded::Nothing | Decoded::Heartbeat => {}
            }
        }
        handed_on
    }

    /// The event ids of each transaction (or part) with rows, and where it ends
    /// (`None` for a part).
    fn summary(handed_on: &[SourceTx]) -> Vec<(Vec<&str>, Option<u64>)> {
        handed_on
            .iter()
            .filter(|tx| !tx.events.is_empty())
            .map(|tx| (tx.events.iter().map(|e| e.event_id.as_str()).collect(), tx.end().map(|end| end.pos)))
            .collect()
    }

    /// `tests/fixtures/binlog/mariadb-10.11-xa-savepoint.000003`: XA transactions and
    /// savepoints on MariaDB 10.11, written by the script beside it into
    /// `app.xa_fixture_outbox` (id, event_id, biz_key, topic, payload).
    const XA_FIXTURE: &str = "mariadb-10.11-xa-savepoint.000003";
    const XA_COLUMNS: ColumnMap =
        ColumnMap { id: 0, event_id: 1, biz_key: 2, topic: 3, payload: 4, created_at: None, count: 5 };

    #[test]
    fn xa_rows_wait_for_xa_commit_and_positions_stay_before_an_undecided_prepare() {
        let mut decoder = decoder("app", "xa_fixture_outbox", "mariadb-bin.000003", NO_PARTS);
        let handed_on = decode_all(&own(XA_FIXTURE), &mut decoder, Some(XA_COLUMNS));
        // xa-rb-1/2 were prepared, then rolled back; xa-c-1 prepared, then committed.
        // Transactions read while a prepare waits end at that prepare's start: 14518871
        // (xa-rb's group) and 14519971 (xa-c's group, once xa-rb was rolled back).
        let expected: Vec<(Vec<&str>, Option<u64>)> = vec![
            (vec!["plain-1"], Some(14518871)),
            (vec!["between-1"], Some(14518871)),
            (vec!["between-2"], Some(14519971)),
            (vec!["xa-c-1"], Some(14521067)),
            (vec!["xa-1p-1"], Some(14521419)),
            (vec!["sp-keep", "sp-after"], Some(14522133)),
            (vec!["spm-keep", "spm-after"], Some(14523535)),
            (vec!["sp0-keep"], Some(14524606)),
            (vec!["spn-keep", "spn-a", "spn-a2"], Some(14526334)),
            (vec!["xa-g-1"], Some(14526926)),
            (vec!["plain-end"], Some(14527286)),
        ];
        assert_eq!(summary(&handed_on), expected);
        let ends: Vec<u64> = handed_on.iter().filter_map(|tx| tx.end()).map(|end| end.pos).collect();
        assert!(ends.windows(2).all(|w| w[0] <= w[1]), "reported positions never go back: {ends:?}");
        let before_decision = ends.iter().filter(|&&pos| pos > 14518871 && pos < 14521067).copied().collect::<Vec<_>>();
        assert!(before_decision.iter().all(|&pos| pos == 14519971), "only xa-c's start while it waits: {ends:?}");
    }

    #[test]
    fn a_checkpoint_at_a_held_position_reads_the_prepare_again() {
        let mut first = decoder("app", "xa_fixture_outbox", "mariadb-bin.000003", NO_PARTS);
        let handed_on = decode_all(&own(XA_FIXTURE), &mut first, Some(XA_COLUMNS));
        let held = handed_on
            .iter()
            .find(|tx| tx.events.iter().any(|e| e.event_id == "between-2"))
            .and_then(SourceTx::end)
            .expect("between-2 was handed on");
        // A restart there: the stream resumes at the held position, so the prepare of
        // xa-c is read again and its XA COMMIT releases it; between-2 is sent again.
        let mut restarted = Decoder::new("app", "xa_fixture_outbox", held, NO_PARTS);
        let after = decode_from(&own(XA_FIXTURE), held.pos, &mut restarted, Some(XA_COLUMNS));
        let ids: Vec<&str> = after.iter().flat_map(|tx| &tx.events).map(|e| e.event_id.as_str()).collect();
        assert_eq!(ids.get(..2), Some(&["between-2", "xa-c-1"][..]), "the prepared rows are not lost: {ids:?}");
    }

    #[test]
    fn rows_that_may_be_undone_are_never_handed_on_in_parts_and_beyond_the_limit_go_to_the_sweep() {
        // One row per part: committing transactions go ahead row by row; a group
        // holding two rows that may still be undone is left to the sweep.
        let mut decoder = decoder("app", "xa_fixture_outbox", "mariadb-bin.000003", 1);
        let handed_on = decode_all(&own(XA_FIXTURE), &mut decoder, Some(XA_COLUMNS));
        let expected: Vec<(Vec<&str>, Option<u64>)> = vec![
            (vec!["plain-1"], None),
            (vec!["between-1"], None),
            (vec!["between-2"], None),
            (vec!["xa-c-1"], Some(14521067)),
            (vec!["xa-1p-1"], None),
            (vec!["sp-keep"], None),
            (vec!["sp-after"], Some(14522133)),
            (vec!["sp0-keep"], Some(14524606)),
            (vec!["xa-g-1"], Some(14526926)),
            (vec!["plain-end"], None),
        ];
        assert_eq!(summary(&handed_on), expected);
    }

    #[test]
    fn mariadb_outbox_inserts_decode_with_gtids_and_commit_positions() {
        // toddy_test.outbox(id INT, name VARCHAR, n INT, payload JSON, created TIMESTAMP):
        // map every text field to the VARCHAR column and the payload to the JSON one.
        let mut decoder = decoder("toddy_test", "outbox", "mariadb-bin.000001", NO_PARTS);
        let columns = ColumnMap { id: 0, event_id: 1, biz_key: 1, topic: 1, payload: 3, created_at: None, count: 5 };
        let commits: Vec<SourceTx> = decode_all(&shared("mariadb-bin.000001"), &mut decoder, Some(columns))
            .into_iter()
            .filter(|tx| !tx.events.is_empty())
            .collect();
        let summary: Vec<(u64, &str, u64, Option<&str>)> = commits
            .iter()
            .map(|tx| {
                (
                    tx.events[0].id,
                    std::str::from_utf8(&tx.events[0].payload).unwrap_or("?"),
                    tx.end().expect("a binlog transaction").pos,
                    tx.end().expect("a binlog transaction").gtid.as_deref(),
                )
            })
            .collect();
        assert_eq!(summary, [(62, r#"{"foo":1}"#, 702, Some("0-1-1")), (63, r#"{"foo":1}"#, 1074, Some("0-1-2"))]);
        assert!(commits
            .iter()
            .all(|tx| tx.end().expect("a binlog transaction").file == "mariadb-bin.000001" && tx.events.len() == 1));
    }

    #[test]
    fn other_tables_are_skipped_and_their_transactions_still_advance_the_position() {
        let mut decoder = decoder("toddy_test", "not_the_outbox", "mariadb-bin.000001", NO_PARTS);
        let commits = decode_all(&shared("mariadb-bin.000001"), &mut decoder, None);
        assert!(commits.iter().all(|tx| tx.events.is_empty()), "rows of another table became events");
        assert_eq!(commits.iter().map(|tx| tx.end().expect("a binlog transaction").pos).max(), Some(1074));
    }

    #[test]
    fn mysql_binary_json_is_published_as_json_text() {
        // mysql.t(id INT, json_col JSON, name VARCHAR AS (...), age INT AS (...)).
        let mut decoder = decoder("mysql", "t", "json.binlog.000001", NO_PARTS);
        let columns = ColumnMap { id: 0, event_id: 1, biz_key: 1, topic: 1, payload: 1, created_at: None, count: 4 };
        let events: Vec<OutboxEvent> = decode_all(&shared("json.binlog.000001"), &mut decoder, Some(columns))
            .into_iter()
            .flat_map(|tx| tx.events)
            .collect();
        assert!(!events.is_empty(), "the fixture's INSERTs were not decoded");
        let parsed: Vec<serde_json::Value> = events
            .iter()
            .map(|event| {
                serde_json::from_slice(&event.payload)
                    .unwrap_or_else(|e| panic!("row {}: not JSON text ({e})", event.id))
            })
            .collect();
        assert!(parsed.iter().any(|v| v.get("name").is_some()), "binary JSON objects decoded: {parsed:?}");
    }

    #[test]
    fn mysql_gtids_grow_the_executed_set_transaction_by_transaction() {
        // Started where the server had executed transactions of another source.
        let start = BinlogPosition {
            file: "binlog.000001".into(),
            pos: 4,
            gtid: Some("00000000-0000-0000-0000-000000000001:1-5".into()),
            commit_time: None,
        };
        let mut decoder = Decoder::new("test", "none", &start, NO_PARTS);
        let commits = decode_all(&shared("binlog_transaction_with_GTID.000001"), &mut decoder, None);
        let gtids: Vec<String> = commits.iter().filter_map(|tx| tx.end().and_then(|end| end.gtid.clone())).collect();
        assert_eq!(
            gtids.last().map(String::as_str),
            Some("00000000-0000-0000-0000-000000000001:1-5,006c2cf2-b1ea-11e4-9057-8c705a3d3e78:1-3"),
            "{gtids:?}"
        );
        let sets: Vec<GtidState> = gtids.iter().map(|g| GtidState::parse(g)).collect();
        assert!(sets.windows(2).all(|w| w[1].covers(&w[0])), "each set includes the one before: {gtids:?}");
    }

    #[test]
    fn a_compressed_mysql_transaction_payload_is_accepted_not_skipped() {
        // The live stream decompresses TRANSACTION_PAYLOAD and yields its events; the
        // decoder checks the payload parses (mysql_async drops one it cannot parse).
        let mut decoder = decoder("test", "none", "binlog.000001", NO_PARTS);
        for event in fixture(&shared("transaction_compression.000001")) {
            let event = event.expect("readable event");
            decoder.handle(&event).expect("a compressed transaction is decodable");
        }
    }
}
