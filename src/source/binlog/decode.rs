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
//!
//! Which value is which column: when a TABLE_MAP names its columns
//! (`binlog_row_metadata = FULL`), by those names, so rows written before an ALTER
//! TABLE map as they were written. Otherwise by the table's current columns, and only
//! while their count matches the TABLE_MAP's: a different count means the table
//! changed after these rows were written, and the decoder stops rather than guess.

use std::collections::HashMap;

use bytes::Bytes;
use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent, TransactionPayloadEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::Value;

use super::columns::{self, ColumnError, ColumnMap};
use super::group::{Ending, OpenGroup};
use super::gtid::GtidState;
use super::json;
use super::mariadb;
use super::prepared::PreparedXa;
use super::row_image::{RowLayout, RowValues};
use super::statement::{Statement, XaStatement};
use super::xa::{XaPrepare, Xid};
use crate::event::{local_micros, Extras, OutboxEvent};
use crate::source::BinlogPosition;
use crate::source::SourceTx;

/// What one event meant.
#[derive(Debug, PartialEq, Eq)]
pub enum Decoded {
    /// Nothing to hand on.
    Nothing,
    /// A TABLE_MAP for the outbox, without column names, whose column count differs
    /// from the column map: reload the map (information_schema), `set_columns`, and
    /// feed the event again.
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
    #[error("cannot read the binlog event at {file}:{pos} (the one after the last event read): {detail}; the binlog is cut short or damaged there: if it persists, repair or replace the source (or point source.url at another replica); the sweep delivers PENDING rows meanwhile")]
    Unreadable { file: String, pos: u64, detail: String },
    #[error("outbox rows at {file}:{pos} were written without a `{column}` column (their TABLE_MAP names the columns they had; the column was added or renamed later): the relay cannot publish them from the binlog. The sweep delivers them if they are still PENDING. Fix: move the relay past them with `outbox-relay position set` (to the position after the ALTER TABLE that added `{column}`)")]
    MissingColumn { file: String, pos: u64, column: &'static str },
    #[error("outbox rows at {file}:{pos} were written with {written} columns, but {table} has {now} now (an ALTER TABLE ran after them) and the binlog does not name its columns: the relay will not guess which value is which column. The sweep delivers these rows meanwhile, nothing is lost. Fix: set binlog_row_metadata = FULL on the source (MySQL 8.0.1+, MariaDB 10.5+) so row events name their columns, and move the relay past the ALTER with `outbox-relay position set` (to the position after the ALTER TABLE in the source's binlog)")]
    ColumnCountChanged { file: String, pos: u64, table: String, written: usize, now: usize },
}

/// How an XA transaction was decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Commit,
    Rollback,
}

/// A TABLE_MAP of the outbox table, which of its columns the relay reads, and how
/// to read them.
struct OutboxMap {
    table_map: TableMapEvent<'static>,
    columns: ColumnMap,
    layout: RowLayout,
}

/// The decoder's state between events.
pub struct Decoder {
    schema: String,
    table: String,
    /// The table's current columns (information_schema), for TABLE_MAPs without names.
    columns: Option<ColumnMap>,
    /// `columns` was installed after the last TABLE_MAP used it: reloading it again
    /// cannot help a TABLE_MAP it does not match.
    columns_fresh: bool,
    file: String,
    /// The end of the last event read: where the next one starts.
    read_to: u64,
    gtid: GtidState,
    /// Table maps of the outbox table by table id.
    outbox_maps: HashMap<u64, OutboxMap>,
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
            columns_fresh: false,
            file: start.file.clone(),
            read_to: start.pos,
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
        self.columns_fresh = true;
    }

    /// The error for an event that cannot be read (a cut or damaged binlog): it names
    /// where the unreadable event starts.
    pub fn unreadable(&self, detail: impl std::fmt::Display) -> DecodeError {
        DecodeError::Unreadable { file: self.file.clone(), pos: self.read_to, detail: detail.to_string() }
    }

    /// Where the next event starts, as `file:pos`.
    pub fn reading_at(&self) -> String {
        format!("{}:{}", self.file, self.read_to)
    }

    /// Outbox events of the open group read so far and not handed on.
    pub fn open_events(&self) -> usize {
        self.group.len()
    }

    /// Feeds one event.
    pub fn handle(&mut self, event: &Event) -> Result<Decoded, DecodeError> {
        let header = event.header();
        let code = header.event_type_raw();
        if HEARTBEAT_CODES.contains(&code) {
            return Ok(Decoded::Heartbeat);
        }
        // Events inside a compressed transaction carry no position: theirs is the
        // end of the payload event that held them.
        let pos = match u64::from(header.log_pos()) {
            0 => self.payload_end,
            pos => {
                self.read_to = pos;
                pos
            }
        };
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
            Some(EventData::AnonymousGtidEvent(_)) => {
                self.group.start(Ending::Commits);
                Ok(Decoded::Nothing)
            }
            Some(EventData::GtidEvent(gtid)) => {
                self.group.start(Ending::Commits);
                self.gtid.set_mysql(gtid.sid(), gtid.tag().map_or("", |tag| tag.as_str()), gtid.gno());
                Ok(Decoded::Nothing)
            }
            Some(EventData::QueryEvent(query)) => self.handle_query(&query.query(), pos),
            Some(EventData::TableMapEvent(tme)) => self.handle_table_map(tme, pos),
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
                if !gtid.standalone {
                    self.group.begin();
                }
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
                self.group.begin();
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
                    self.outbox_maps.clear();
                }
                self.commit(pos)
            }
        })
    }

    fn handle_table_map(&mut self, tme: TableMapEvent<'_>, pos: u64) -> Result<Decoded, DecodeError> {
        let table_id = tme.table_id();
        let is_outbox = tme.database_name() == self.schema.as_str() && tme.table_name() == self.table.as_str();
        if !is_outbox {
            self.outbox_maps.remove(&table_id);
            return Ok(Decoded::Nothing);
        }
        // Every transaction repeats its TABLE_MAP: the same map means the same columns.
        if self.outbox_maps.get(&table_id).is_some_and(|known| known.table_map == tme) {
            return Ok(Decoded::Nothing);
        }
        let columns = match columns::names_in(&tme).map_err(|e| self.malformed(pos, e))? {
            Some(names) => ColumnMap::from_names(&self.qualified(), &names).map_err(|error| match error {
                ColumnError::Missing { column, .. } => {
                    DecodeError::MissingColumn { file: self.file.clone(), pos, column }
                }
                ColumnError::NoTable { .. } => self.malformed(pos, "a TABLE_MAP that names no columns"),
            })?,
            None => match self.current_columns(&tme, pos)? {
                Some(columns) => columns,
                None => return Ok(Decoded::NeedColumns),
            },
        };
        let layout = RowLayout::new(&tme, &columns.positions()).map_err(|e| self.malformed(pos, e))?;
        self.outbox_maps.insert(table_id, OutboxMap { table_map: tme.into_owned(), columns, layout });
        Ok(Decoded::Nothing)
    }

    /// The current column map if it fits a TABLE_MAP without names; `None` to have it
    /// reloaded; an error when a map just reloaded still does not fit.
    fn current_columns(&mut self, tme: &TableMapEvent<'_>, pos: u64) -> Result<Option<ColumnMap>, DecodeError> {
        let written = usize::try_from(tme.columns_count()).unwrap_or(usize::MAX);
        match self.columns {
            Some(columns) if columns.count == written => {
                self.columns_fresh = false;
                Ok(Some(columns))
            }
            Some(columns) if self.columns_fresh => Err(DecodeError::ColumnCountChanged {
                file: self.file.clone(),
                pos,
                table: self.qualified(),
                written,
                now: columns.count,
            }),
            _ => Ok(None),
        }
    }

    fn handle_rows(&mut self, rows: &RowsEventData<'_>, pos: u64) -> Result<Decoded, DecodeError> {
        let is_insert = matches!(rows, RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_));
        let Some(outbox) = self.outbox_maps.get(&rows.table_id()).filter(|_| is_insert) else {
            return Ok(Decoded::Nothing);
        };
        let mut decoded = Vec::new();
        for row in outbox.layout.rows(rows).map_err(|e| self.malformed(pos, e))? {
            decoded.push(self.to_event(row.map_err(|e| self.malformed(pos, e))?, &outbox.columns, pos)?);
        }
        self.group.push(decoded);
        Ok(self.after_rows(pos))
    }

    fn qualified(&self) -> String {
        format!("{}.{}", self.schema, self.table)
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
        let end = BinlogPosition {
            file: self.file.clone(),
            pos,
            gtid: self.gtid.render(),
            commit_time: Some(self.event_time),
        };
        self.group_start = end.clone();
        Decoded::Commit(SourceTx::binlog(events, self.prepared.cap(end)))
    }

    fn to_event(&self, mut row: RowValues<'_>, columns: &ColumnMap, pos: u64) -> Result<OutboxEvent, DecodeError> {
        let missing = |column: &'static str| {
            self.bad_row(pos, column, "column missing from the row image (binlog_row_image must be FULL)")
        };
        let convert = |value: BinlogValue<'_>, column: &'static str| {
            Value::try_from(value).map_err(|e| self.bad_row(pos, column, &e.to_string()))
        };
        // Values are moved out of the row, which is dropped afterwards, unless a map
        // reads one column for several fields (only maps made by hand do): then copied.
        let once = columns.reads_each_column_once();
        let mut value_at = |index: usize| if once { row.take(index) } else { row.get(index).cloned() };
        let mut taken = |index: usize, column: &'static str| {
            value_at(index).ok_or_else(|| missing(column)).and_then(|v| convert(v, column))
        };
        let id = match taken(columns.id, "id")? {
            Value::Int(v) => u64::try_from(v).ok(),
            Value::UInt(v) => Some(v),
            _ => None,
        };
        let id = id.ok_or_else(|| self.bad_row(pos, "id", "not a positive integer"))?;
        let text = |value: Value, column: &'static str| match value {
            Value::Bytes(bytes) => String::from_utf8(bytes).map_err(|_| self.bad_row(pos, column, "not UTF-8")),
            other => Err(self.bad_row(pos, column, &format!("not a string: {other:?}"))),
        };
        let event_id = text(taken(columns.event_id, "event_id")?, "event_id")?;
        let biz_key = text(taken(columns.biz_key, "biz_key")?, "biz_key")?;
        let topic = text(taken(columns.topic, "topic")?, "topic")?;
        let created_local_us =
            columns.created_at.and_then(&mut value_at).and_then(|value| local_micros(&Value::try_from(value).ok()?));
        // An optional column absent from the row image (a MINIMAL image leaves out
        // columns the statement did not set) or unreadable is no value: whether the
        // broker takes the rest is decided when the message is built.
        let extras = Extras::from_values(
            columns
                .extras
                .map(|at| at.and_then(&mut value_at).and_then(|value| as_value(value).ok()).unwrap_or(Value::NULL)),
        );
        let payload = self.payload(row.take(columns.payload).ok_or_else(|| missing("payload"))?, pos)?;
        Ok(OutboxEvent { id, event_id, biz_key, topic, payload, created_local_us, extras: extras.boxed() })
    }

    /// The payload's bytes: text as it is, MySQL's binary JSON as the text MySQL prints.
    fn payload(&self, value: BinlogValue<'_>, pos: u64) -> Result<Bytes, DecodeError> {
        match as_value(value).map_err(|detail| self.bad_row(pos, "payload", &detail))? {
            Value::Bytes(bytes) => Ok(Bytes::from(bytes)),
            other => Err(self.bad_row(pos, "payload", &format!("not text or JSON: {other:?}"))),
        }
    }

    fn bad_row(&self, pos: u64, column: &'static str, detail: &str) -> DecodeError {
        DecodeError::BadRow { file: self.file.clone(), pos, column, detail: detail.to_owned() }
    }

    fn malformed(&self, pos: u64, detail: impl std::fmt::Display) -> DecodeError {
        DecodeError::Malformed { file: self.file.clone(), pos, detail: detail.to_string() }
    }
}

/// A column's value, MySQL's binary JSON as the text MySQL prints (in bytes, as a
/// JSON column reads over the protocol); why not, when it cannot be read.
fn as_value(value: BinlogValue<'_>) -> Result<Value, String> {
    match value {
        BinlogValue::Jsonb(value) => {
            json::to_text(&value).map(|text| Value::Bytes(text.into_bytes())).map_err(|e| e.to_string())
        }
        other => Value::try_from(other).map_err(|e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    //! Decoding real binlog files written by MariaDB and MySQL servers
    //! (`tests/fixtures/mysql-binlogs`, published by other projects, and this
    //! project's own `tests/fixtures/binlog`).

    use super::super::fixtures::{fixture, inserts, keeping_every_column, own, published, rows_of};
    use super::*;
    use crate::source::Origin;

    /// Large enough that no fixture transaction is handed on in parts.
    const NO_PARTS: usize = 1_000_000;

    /// A decoder for `schema`.`table` starting at the beginning of binlog `file`.
    fn decoder(schema: &str, table: &str, file: &str, hold_limit: usize) -> Decoder {
        let start = BinlogPosition { file: file.to_owned(), pos: 4, gtid: None, commit_time: None };
        Decoder::new(schema, table, &start, hold_limit)
    }

    /// As [`decoder`], for a MySQL server that had executed the GTID set `gtid` before
    /// the file began.
    fn decoder_after(schema: &str, table: &str, gtid: &str) -> Decoder {
        let start = BinlogPosition { file: "binlog.000001".into(), pos: 4, gtid: Some(gtid.into()), commit_time: None };
        Decoder::new(schema, table, &start, NO_PARTS)
    }

    /// Feeds every event of the file at `path` to `decoder`, answering `NeedColumns`
    /// with `columns` as the reader answers it from information_schema; returns what
    /// it hands on, as the reader does: commits and parts.
    fn decode_all(path: &str, decoder: &mut Decoder, columns: Option<ColumnMap>) -> Vec<SourceTx> {
        decode_from(path, 0, decoder, columns)
    }

    /// As [`decode_all`], for the events from position `from` on (a stream resumed there).
    fn decode_from(path: &str, from: u64, decoder: &mut Decoder, columns: Option<ColumnMap>) -> Vec<SourceTx> {
        try_decode_from(path, from, decoder, columns).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    /// As [`decode_from`], stopping at the first error as the reader does: an event
    /// that cannot be read, or one the decoder refuses.
    fn try_decode_from(
        path: &str,
        from: u64,
        decoder: &mut Decoder,
        columns: Option<ColumnMap>,
    ) -> Result<Vec<SourceTx>, DecodeError> {
        let mut handed_on = Vec::new();
        // Events inside a compressed transaction have no position: they are at the
        // position of the payload event before them.
        let mut at = 0;
        for event in fixture(path) {
            let event = event.map_err(|e| decoder.unreadable(e))?;
            at = match event.header().log_pos() {
                0 => at,
                pos => u64::from(pos),
            };
            if at <= from {
                continue;
            }
            let mut decoded = decoder.handle(&event)?;
            if decoded == Decoded::NeedColumns {
                decoder.set_columns(columns.expect("a column map for the table"));
                decoded = decoder.handle(&event)?;
            }
            match decoded {
                Decoded::Commit(tx) => handed_on.push(tx),
                Decoded::Part(events) => handed_on.push(SourceTx { events, origin: Origin::BinlogPart }),
                Decoded::NeedColumns => panic!("column map does not match the table map"),
                Decoded::Nothing | Decoded::Heartbeat => {}
            }
        }
        Ok(handed_on)
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
    const XA_COLUMNS: ColumnMap = ColumnMap {
        id: 0,
        event_id: 1,
        biz_key: 2,
        topic: 3,
        payload: 4,
        created_at: None,
        extras: [None; 4],
        count: 5,
    };

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

    /// `tests/fixtures/binlog/mariadb-10.11-alter-full-metadata.000001`: rows of
    /// `app.alter_fixture_outbox` written with `binlog_row_metadata = FULL` around two
    /// ALTERs, by the script beside it: a column added before `payload`, then that
    /// column dropped and another added after `id` (same count, every column moved).
    const ALTER_FIXTURE: &str = "mariadb-10.11-alter-full-metadata.000001";

    #[test]
    fn with_full_row_metadata_rows_map_by_the_names_they_were_written_with() {
        // No column map from information_schema at all: the TABLE_MAPs name their columns.
        let mut decoder = decoder("app", "alter_fixture_outbox", "mariadb-bin.000001", NO_PARTS);
        let events: Vec<OutboxEvent> =
            decode_all(&own(ALTER_FIXTURE), &mut decoder, None).into_iter().flat_map(|tx| tx.events).collect();
        let fields: Vec<(&str, &str, &str, &str, Option<i64>)> = events
            .iter()
            .map(|e| {
                let payload = std::str::from_utf8(&e.payload).unwrap_or("not UTF-8");
                (e.event_id.as_str(), e.biz_key.as_str(), e.topic.as_str(), payload, e.created_local_us)
            })
            .collect();
        // 2026-12-01 10:00:00 UTC is 1_796_119_200 s after the epoch.
        assert_eq!(
            fields,
            [
                ("before-1", "order-1", "orders", r#"{"n": 1}"#, Some(1_796_119_200_125_000)),
                ("before-2", "order-2", "orders", r#"{"n": 2}"#, Some(1_796_119_200_250_000)),
                ("after-1", "order-1", "orders", r#"{"n": 3}"#, Some(1_796_119_201_500_000)),
                ("moved-1", "order-3", "payments", r#"{"n": 4}"#, Some(1_796_119_202_750_000)),
            ]
        );
        assert_eq!(events.iter().map(|e| e.id).collect::<Vec<_>>(), [1, 2, 3, 4]);
    }

    #[test]
    fn without_column_names_a_changed_column_count_is_refused_not_guessed() {
        // The table "now" has a sixth column the rows were not written with.
        let now = ColumnMap { count: 6, ..XA_COLUMNS };
        let mut decoder = decoder("app", "xa_fixture_outbox", "mariadb-bin.000003", NO_PARTS);
        decoder.set_columns(now);
        let error = try_decode_from(&own(XA_FIXTURE), 0, &mut decoder, Some(now)).expect_err("refused");
        let DecodeError::ColumnCountChanged { ref file, pos, written, now, .. } = error else {
            panic!("not a column count refusal: {error}")
        };
        // The first TABLE_MAP of the outbox ends there (mariadb-binlog shows it so).
        assert_eq!((file.as_str(), pos, written, now), ("mariadb-bin.000003", 14518767, 5, 6));
        let text = error.to_string();
        for needed in ["app.xa_fixture_outbox", "binlog_row_metadata = FULL", "position set", "nothing is lost"] {
            assert!(text.contains(needed), "{needed} missing from: {text}");
        }
    }

    /// Each transaction handed on: where it ends and its GTID position after it.
    fn ends(handed_on: &[SourceTx]) -> Vec<(u64, Option<&str>)> {
        handed_on.iter().filter_map(SourceTx::end).map(|end| (end.pos, end.gtid.as_deref())).collect()
    }

    /// Every inserted row of `schema`.`table` in the file at `path`, each handed to
    /// `take` with the decoder's state and the row's position.
    fn each_inserted_row(
        path: &str,
        schema: &str,
        table: &str,
        mut take: impl FnMut(&Decoder, RowValues<'_>, usize, u64),
    ) {
        let reader = decoder(schema, table, "binlog.000001", NO_PARTS);
        for (event, table_map) in inserts(path) {
            if table_map.database_name() != schema || table_map.table_name() != table {
                continue;
            }
            let rows = rows_of(&event);
            let (layout, count) = keeping_every_column(&table_map);
            for row in layout.rows(&rows).expect("row images") {
                take(&reader, row.expect("decodable row"), count, u64::from(event.header().log_pos()));
            }
        }
    }

    /// The payload the relay publishes for each JSON value of the inserted rows of a
    /// table whose rows cannot be outbox rows (a lone JSON column).
    fn json_payloads(path: &str, schema: &str, table: &str) -> Vec<String> {
        let mut texts = Vec::new();
        each_inserted_row(path, schema, table, |decoder, mut row, count, pos| {
            for index in 0..count {
                if let Some(value @ BinlogValue::Jsonb(_)) = row.take(index) {
                    let payload = decoder.payload(value, pos).expect("a JSON payload");
                    texts.push(String::from_utf8(payload.to_vec()).expect("UTF-8"));
                }
            }
        });
        texts
    }

    #[test]
    fn mysql_binary_json_becomes_the_text_mysql_prints_and_json_updates_publish_nothing() {
        // mysql.t(id INT, json_col JSON, name VARCHAR AS (json_col->>'$.name'), age INT
        // AS (json_col->'$.age')), without column names: the map says which is which.
        let columns = ColumnMap {
            id: 0,
            event_id: 2,
            biz_key: 2,
            topic: 2,
            payload: 1,
            created_at: None,
            extras: [None; 4],
            count: 4,
        };
        let mut decoder = decoder("mysql", "t", "json.binlog.000001", NO_PARTS);
        let handed_on = decode_all(&published("json.binlog.000001"), &mut decoder, Some(columns));
        let joe = r#"{"age": 24, "data": "xxxxxxxxxx", "name": "Joe"}"#;
        let sue = r#"{"age": 32, "data": "yyyyyyyyyy", "name": "Sue"}"#;
        let pete = r#"{"age": 40, "data": "zzzzzzzzzz", "name": "Pete"}"#;
        let rows: Vec<Vec<(u64, &str, &str)>> = handed_on
            .iter()
            .map(|tx| {
                tx.events
                    .iter()
                    .map(|e| (e.id, e.event_id.as_str(), std::str::from_utf8(&e.payload).unwrap_or("not UTF-8")))
                    .collect()
            })
            .collect();
        assert_eq!(
            rows,
            [
                vec![],
                vec![],
                vec![(1, "Joe", joe)],
                vec![(2, "Sue", sue)],
                vec![(3, "Pete", pete)],
                vec![(4, "Joe", joe), (5, "Sue", sue), (6, "Pete", pete)],
                // An UPDATE, then a partial JSON update (PARTIAL_UPDATE_ROWS): not events.
                vec![],
                vec![],
            ]
        );
        let positions: Vec<u64> = ends(&handed_on).into_iter().map(|(pos, _)| pos).collect();
        assert_eq!(positions, [491, 845, 1195, 1545, 1897, 2389, 3527, 4011]);
    }

    #[test]
    fn mysql_only_json_values_print_as_mysql_prints_them() {
        // foo.test(a JSON): opaque values (a VARCHAR, temporal types, decimals) inside JSON.
        assert_eq!(
            json_payloads(&published("json-opaque.binlog"), "foo", "test"),
            [
                r#"{"a": "base64:type15:VQ=="}"#,
                r#"{"b": "2012-03-18"}"#,
                r#"{"c": "2012-03-18 11:30:45.000000"}"#,
                r#"{"c": "87:31:46.654321"}"#,
                r#"{"d": 123.456}"#,
                r#"{"e": 9.00}"#,
                r#"{"e": [0, 1, true, false]}"#,
                r#"{"e": null}"#,
            ]
        );
    }

    #[test]
    fn rows_inside_compressed_mysql_transactions_decode_field_by_field() {
        // a.test_table_3 (20 columns, no names) gets row 6666 in the second compressed
        // transaction; map the outbox fields onto some of its columns.
        let columns = ColumnMap {
            id: 0,
            event_id: 1,
            biz_key: 4,
            topic: 10,
            payload: 9,
            created_at: Some(2),
            extras: [None; 4],
            count: 20,
        };
        let mut test_table = decoder_after("a", "test_table_3", "76f3e7be-6720-11ed-9cad-0242ac110002:1-10");
        let handed_on = decode_all(&published("mysql-8.0.31-compressed.000057"), &mut test_table, Some(columns));
        assert_eq!(
            ends(&handed_on),
            [
                (378, Some("76f3e7be-6720-11ed-9cad-0242ac110002:1-11")),
                (651, Some("76f3e7be-6720-11ed-9cad-0242ac110002:1-12")),
                (1283, Some("76f3e7be-6720-11ed-9cad-0242ac110002:1-13")),
            ],
            "a compressed transaction ends where its payload event ends"
        );
        let events: Vec<&OutboxEvent> = handed_on.iter().flat_map(|tx| &tx.events).collect();
        let [event] = events.as_slice() else { panic!("one inserted row: {events:?}") };
        assert_eq!(
            (event.id, event.event_id.as_str(), event.biz_key.as_str(), event.topic.as_str(), &event.payload[..]),
            (6666, "product_item_value_2", "description_1", "product_item_2_value", &br#"{"c": 1}"#[..])
        );
        // 2022-11-20 (a DATE column) as midnight UTC.
        assert_eq!(event.created_local_us, Some(1_668_902_400_000_000));

        // MySQL 8.0.32's compressed transaction: test.tb1 (one INT column) gets the row
        // (1). Read through as another table's; as the outbox, its value reaches the
        // row decoding, at the payload's position, and an integer is no event id.
        let mut compressed = decoder("test", "none", "binlog.000001", NO_PARTS);
        let handed_on = decode_all(&published("transaction_compression.000001"), &mut compressed, None);
        assert_eq!(ends(&handed_on), [(431, None)]);
        let one_int = ColumnMap {
            id: 0,
            event_id: 0,
            biz_key: 0,
            topic: 0,
            payload: 0,
            created_at: None,
            extras: [None; 4],
            count: 1,
        };
        let mut as_outbox = decoder("test", "tb1", "binlog.000001", NO_PARTS);
        let error = try_decode_from(&published("transaction_compression.000001"), 0, &mut as_outbox, Some(one_int))
            .expect_err("an integer is no event id");
        assert_eq!(
            error,
            DecodeError::BadRow {
                file: "binlog.000001".into(),
                pos: 431,
                column: "event_id",
                detail: "not a string: Int(1)".into()
            }
        );
    }

    #[test]
    fn mysql_gtids_grow_the_executed_set_transaction_by_transaction() {
        // MySQL 5.6: a DDL, an INSERT ended by a COMMIT query (no XID), a DROP.
        let mut decoder = decoder_after("test", "none", "00000000-0000-0000-0000-000000000001:1-5");
        let handed_on = decode_all(&published("binlog_transaction_with_GTID.000001"), &mut decoder, None);
        assert_eq!(
            ends(&handed_on),
            [
                (297, Some("00000000-0000-0000-0000-000000000001:1-5,006c2cf2-b1ea-11e4-9057-8c705a3d3e78:1")),
                (603, Some("00000000-0000-0000-0000-000000000001:1-5,006c2cf2-b1ea-11e4-9057-8c705a3d3e78:1-2")),
                (766, Some("00000000-0000-0000-0000-000000000001:1-5,006c2cf2-b1ea-11e4-9057-8c705a3d3e78:1-3")),
            ]
        );
    }

    #[test]
    fn tagged_mysql_gtids_give_positions_with_their_tag() {
        // MySQL 9.6: one transaction tagged `mytag` after `uuid:1-13:mytag:1-2`.
        let mut decoder = decoder_after("test", "none", "55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-2");
        let handed_on = decode_all(&published("binlog_transaction_with_GTID_TAG.000001"), &mut decoder, None);
        assert_eq!(ends(&handed_on), [(541, Some("55778904-0299-11f1-b1b8-4ef0c4956feb:1-13:mytag:1-3"))]);
    }

    #[test]
    fn anonymous_gtids_give_positions_without_a_gtid() {
        let mut decoder = decoder("test", "none", "binlog.000001", NO_PARTS);
        let handed_on = decode_all(&published("binlog_transaction_with_anonymous_GTID.000001"), &mut decoder, None);
        assert_eq!(ends(&handed_on), [(316, None), (590, None)]);
    }

    #[test]
    fn ndb_row_events_of_other_tables_and_partial_column_updates_are_read_through() {
        for (file, end) in [("write-full-row.binlog", 527), ("update-partial-row.binlog", 562)] {
            let mut decoder = decoder("test", "none", "binlog.000001", NO_PARTS);
            let handed_on = decode_all(&published(file), &mut decoder, None);
            assert_eq!(ends(&handed_on).last(), Some(&(end, None)), "{file}");
            assert!(handed_on.iter().all(|tx| tx.events.is_empty()), "{file}: rows of another table");
        }
        // The same rows as the outbox's: integer columns where text is needed are refused.
        let columns = ColumnMap {
            id: 0,
            event_id: 1,
            biz_key: 1,
            topic: 1,
            payload: 2,
            created_at: None,
            extras: [None; 4],
            count: 3,
        };
        let mut decoder = decoder("test", "ba", "binlog.000001", NO_PARTS);
        let error = try_decode_from(&published("write-full-row.binlog"), 0, &mut decoder, Some(columns))
            .expect_err("integers are not event ids");
        // The WRITE_ROWS of test.ba ends at 428.
        assert!(matches!(&error, DecodeError::BadRow { column: "event_id", pos: 428, .. }), "{error}");
    }

    #[test]
    fn mariadb_full_row_metadata_names_the_columns_and_a_table_without_outbox_columns_is_refused() {
        let mut first_map = None;
        for event in fixture(&published("mariadb-bin.000001")) {
            if let Ok(Some(EventData::TableMapEvent(table_map))) = event.expect("readable event").read_data() {
                first_map.get_or_insert(columns::names_in(&table_map).expect("readable metadata"));
            }
        }
        let names = ["id", "topic", "event_type", "event", "created"].map(String::from);
        assert_eq!(first_map, Some(Some(names.to_vec())), "toddy_test.outbox as MariaDB 10.5 names it");

        let mut outbox = decoder("toddy_test", "outbox", "mariadb-bin.000001", NO_PARTS);
        let error = try_decode_from(&published("mariadb-bin.000001"), 0, &mut outbox, None).expect_err("no event_id");
        let DecodeError::MissingColumn { ref file, pos, column } = error else {
            panic!("not a missing column: {error}")
        };
        // The first TABLE_MAP of toddy_test.outbox ends at 612.
        assert_eq!((file.as_str(), pos, column), ("mariadb-bin.000001", 612, "event_id"));

        // Its rows, mapped by hand onto the outbox's fields (id, topic as the text
        // fields, the BLOB `event` as the payload), decode as the relay decodes rows;
        // also when `created_at` is read from the payload's column, which leaves the
        // payload to read.
        for created_at in [None, Some(3)] {
            let by_hand = ColumnMap {
                id: 0,
                event_id: 1,
                biz_key: 1,
                topic: 1,
                payload: 3,
                created_at,
                extras: [None; 4],
                count: 5,
            };
            let mut rows = Vec::new();
            each_inserted_row(&published("mariadb-bin.000001"), "toddy_test", "outbox", |decoder, row, _, pos| {
                let event = decoder.to_event(row, &by_hand, pos).expect("an outbox row");
                rows.push((event.id, event.event_id, event.payload, pos));
            });
            let foo = || ("foo".to_owned(), Bytes::from_static(br#"{"foo":1}"#));
            assert_eq!(rows, [(62, foo().0, foo().1, 671), (63, foo().0, foo().1, 1043)], "created_at {created_at:?}");
        }

        // Another table's rows are read through, with MariaDB GTIDs and commit positions.
        let mut other_table = decoder("toddy_test", "not_the_outbox", "mariadb-bin.000001", NO_PARTS);
        let handed_on = decode_all(&published("mariadb-bin.000001"), &mut other_table, None);
        let with_gtid: Vec<(u64, Option<&str>)> = ends(&handed_on).into_iter().filter(|(_, g)| g.is_some()).collect();
        assert_eq!(with_gtid.last(), Some(&(1074, Some("0-1-2"))));
        assert!(with_gtid.contains(&(702, Some("0-1-1"))), "{with_gtid:?}");
    }

    #[test]
    fn a_truncated_file_is_an_error_naming_where_the_unreadable_event_starts() {
        // The file header and 10 bytes of the first event's 19-byte header.
        let mut decoder = decoder("test", "none", "binlog_truncated_event.000001", NO_PARTS);
        let error = try_decode_from(&published("binlog_truncated_event.000001"), 0, &mut decoder, None)
            .expect_err("a cut event is never skipped");
        let DecodeError::Unreadable { ref file, pos, .. } = error else { panic!("not unreadable: {error}") };
        assert_eq!((file.as_str(), pos), ("binlog_truncated_event.000001", 4));
        assert!(error.to_string().contains("binlog_truncated_event.000001:4"), "{error}");
    }

    #[test]
    fn a_corrupt_event_is_an_error_naming_its_position_never_a_skip() {
        // A MySQL 5.0 relay log: a QUERY event whose body holds parts of other events.
        // Positions in a relay log are those of the source's binlog, as the relay
        // addresses them: the bad event ends at the source's position 199.
        let mut decoder = decoder("test", "none", "corrupt-relay-bin.000624", NO_PARTS);
        let error = try_decode_from(&published("corrupt-relay-bin.000624"), 0, &mut decoder, None)
            .expect_err("a corrupt event is never skipped");
        let DecodeError::Malformed { ref file, pos, .. } = error else { panic!("not malformed: {error}") };
        // The relay log's ROTATE names the source's file (mariadb-binlog shows it so).
        assert_eq!((file.as_str(), pos), ("mysql-bin.010260", 199), "{error}");
    }
}
