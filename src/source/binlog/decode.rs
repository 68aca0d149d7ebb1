//! From binlog events to committed transactions of outbox events.
//!
//! A synchronous state machine, fed one event at a time, so it can be tested on
//! recorded binlog files. It keeps the current file name (ROTATE), the GTID state,
//! the outbox table's table ids (TABLE_MAP), and the INSERTs of the open
//! transaction; it releases them only at the transaction's XID / COMMIT, so a
//! transaction cut by a crash or a dropped connection is re-read whole, never half.
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
use super::gtid::GtidState;
use super::mariadb;
use crate::event::OutboxEvent;
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

/// The decoder's state between events.
pub struct Decoder {
    schema: String,
    table: String,
    columns: Option<ColumnMap>,
    file: String,
    gtid: GtidState,
    /// Table maps of the outbox table by table id.
    outbox_maps: HashMap<u64, TableMapEvent<'static>>,
    open: Vec<OutboxEvent>,
    /// End of the enclosing TRANSACTION_PAYLOAD (MySQL compressed transactions):
    /// events inside it carry no position of their own.
    payload_end: u64,
    /// Header timestamp of the event being handled (the commit time at XID/COMMIT).
    event_time: u32,
}

impl Decoder {
    /// A decoder for `schema`.`table`, starting in binlog `file` with GTID state `gtid`.
    pub fn new(schema: &str, table: &str, file: &str, gtid: GtidState) -> Self {
        Self {
            schema: schema.to_owned(),
            table: table.to_owned(),
            columns: None,
            file: file.to_owned(),
            gtid,
            outbox_maps: HashMap::new(),
            open: Vec::new(),
            payload_end: 0,
            event_time: 0,
        }
    }

    /// Installs the column map (after `Decoded::NeedColumns` or at start).
    pub fn set_columns(&mut self, columns: ColumnMap) {
        self.columns = Some(columns);
    }

    /// Outbox events of the transaction read so far (not yet committed).
    pub fn open_events(&self) -> usize {
        self.open.len()
    }

    /// Takes the events read so far of the open transaction (a part of a large one).
    pub fn take_open(&mut self) -> Vec<OutboxEvent> {
        std::mem::take(&mut self.open)
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
                self.open.clear();
                self.gtid.set_mysql(gtid.sid(), gtid.gno());
                Ok(Decoded::Nothing)
            }
            Some(EventData::QueryEvent(query)) => Ok(self.handle_query(&query.query(), pos)),
            Some(EventData::TableMapEvent(tme)) => Ok(self.handle_table_map(tme)),
            Some(EventData::RowsEvent(rows)) => self.handle_rows(&rows, pos),
            Some(EventData::XidEvent(_)) => Ok(self.commit(pos)),
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
                self.open.clear();
                self.gtid.set_mariadb(gtid);
                Ok(Decoded::Nothing)
            }
            mariadb::Kind::Ignorable => Ok(Decoded::Nothing),
            mariadb::Kind::Unsupported { what, fix } => {
                Err(DecodeError::Unsupported { code, file: self.file.clone(), pos, what, fix })
            }
        }
    }

    fn handle_query(&mut self, query: &str, pos: u64) -> Decoded {
        let statement = query.trim();
        let first_word = statement.split_whitespace().next().unwrap_or_default().to_ascii_uppercase();
        match first_word.as_str() {
            "BEGIN" => {
                self.open.clear();
                Decoded::Nothing
            }
            "COMMIT" => self.commit(pos),
            // A rolled-back group (non-transactional tables involved): nothing committed.
            "ROLLBACK" if statement.len() == "ROLLBACK".len() => {
                self.open.clear();
                self.commit(pos)
            }
            "SAVEPOINT" | "ROLLBACK" | "RELEASE" => Decoded::Nothing,
            _ if !self.open.is_empty() => Decoded::Nothing,
            _ => {
                // DDL and other self-committing statements: a transaction boundary. An
                // ALTER of the outbox may move columns: re-read them at the next TABLE_MAP.
                if statement.to_ascii_lowercase().contains(&self.table.to_ascii_lowercase()) {
                    self.columns = None;
                }
                self.commit(pos)
            }
        }
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
        self.open.extend(decoded);
        Ok(Decoded::Nothing)
    }

    fn commit(&mut self, pos: u64) -> Decoded {
        let pos = if pos == 0 { self.payload_end } else { pos };
        let end = BinlogPosition {
            file: self.file.clone(),
            pos,
            gtid: self.gtid.render(),
            commit_time: Some(self.event_time),
        };
        Decoded::Commit(SourceTx::binlog(std::mem::take(&mut self.open), end))
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
        // The payload is the big value: taken, not copied.
        let payload = match convert(row.take(columns.payload).ok_or_else(|| missing("payload"))?, "payload")? {
            Value::Bytes(bytes) => Bytes::from(bytes),
            other => return Err(self.bad_row(pos, "payload", &format!("not text or JSON: {other:?}"))),
        };
        Ok(OutboxEvent { id, event_id, biz_key, topic, payload })
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
    //! (`../shared/fixtures/mysql-binlogs`, read-only test data beside the project).

    use std::io::BufReader;

    use mysql_common::binlog::consts::BinlogVersion;
    use mysql_common::binlog::BinlogFile;

    use super::*;

    fn fixture(name: &str) -> BinlogFile<BufReader<std::fs::File>> {
        let path = format!("{}/../shared/fixtures/mysql-binlogs/{name}", env!("CARGO_MANIFEST_DIR"));
        let file = std::fs::File::open(&path).unwrap_or_else(|e| panic!("fixture {path}: {e}"));
        BinlogFile::new(BinlogVersion::Version4, BufReader::new(file)).expect("binlog file header")
    }

    /// Feeds every event of `name` to `decoder`, answering `NeedColumns` with `columns`
    /// as the reader answers it from information_schema; returns the commits.
    fn decode_all(name: &str, decoder: &mut Decoder, columns: Option<ColumnMap>) -> Vec<SourceTx> {
        let mut commits = Vec::new();
        for event in fixture(name) {
            let event = event.expect("readable event");
            let mut decoded = decoder.handle(&event).expect("decodable event");
            if decoded == Decoded::NeedColumns {
                decoder.set_columns(columns.expect("a column map for the table"));
                decoded = decoder.handle(&event).expect("decodable event");
            }
            match decoded {
                Decoded::Commit(tx) => commits.push(tx),
                Decoded::NeedColumns => panic!("column map does not match the table map"),
                Decoded::Nothing | Decoded::Heartbeat => {}
            }
        }
        commits
    }

    #[test]
    fn mariadb_outbox_inserts_decode_with_gtids_and_commit_positions() {
        // toddy_test.outbox(id INT, name VARCHAR, n INT, payload JSON, created TIMESTAMP):
        // map every text field to the VARCHAR column and the payload to the JSON one.
        let mut decoder = Decoder::new("toddy_test", "outbox", "mariadb-bin.000001", GtidState::default());
        let columns = ColumnMap { id: 0, event_id: 1, biz_key: 1, topic: 1, payload: 3, count: 5 };
        let commits: Vec<SourceTx> = decode_all("mariadb-bin.000001", &mut decoder, Some(columns))
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
        let mut decoder = Decoder::new("toddy_test", "not_the_outbox", "mariadb-bin.000001", GtidState::default());
        let commits = decode_all("mariadb-bin.000001", &mut decoder, None);
        assert!(commits.iter().all(|tx| tx.events.is_empty()), "rows of another table became events");
        assert_eq!(commits.iter().map(|tx| tx.end().expect("a binlog transaction").pos).max(), Some(1074));
    }

    #[test]
    fn mysql_binary_json_is_published_as_json_text() {
        // mysql.t(id INT, json_col JSON, name VARCHAR AS (...), age INT AS (...)).
        let mut decoder = Decoder::new("mysql", "t", "json.binlog.000001", GtidState::default());
        let columns = ColumnMap { id: 0, event_id: 1, biz_key: 1, topic: 1, payload: 1, count: 4 };
        let events: Vec<OutboxEvent> = decode_all("json.binlog.000001", &mut decoder, Some(columns))
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
    fn mysql_gtids_are_tracked_as_uuid_and_number() {
        let mut decoder = Decoder::new("test", "none", "binlog.000001", GtidState::default());
        let commits = decode_all("binlog_transaction_with_GTID.000001", &mut decoder, None);
        let gtid = commits
            .last()
            .and_then(|tx| tx.end().expect("a binlog transaction").gtid.clone())
            .expect("a GTID after the last transaction");
        let (uuid, number) = gtid.split_once(':').expect("uuid:number");
        assert_eq!(uuid.len(), 36, "{gtid}");
        assert!(number.parse::<u64>().is_ok(), "{gtid}");
    }

    #[test]
    fn a_compressed_mysql_transaction_payload_is_accepted_not_skipped() {
        // The live stream decompresses TRANSACTION_PAYLOAD and yields its events; the
        // decoder checks the payload parses (mysql_async drops one it cannot parse).
        let mut decoder = Decoder::new("test", "none", "binlog.000001", GtidState::default());
        for event in fixture("transaction_compression.000001") {
            let event = event.expect("readable event");
            decoder.handle(&event).expect("a compressed transaction is decodable");
        }
    }
}
