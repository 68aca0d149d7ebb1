//! Real binlog files for the tests: those written by MariaDB and MySQL servers that
//! other projects published (`tests/fixtures/mysql-binlogs`, their source and licence
//! in its README) and this project's own (`tests/fixtures/binlog`), read event by
//! event as the relay's binlog stream yields them.

use std::fs::File;
use std::io::{self, BufReader, Cursor};

use mysql_async::binlog::events::{Event, EventData, RowsEventData, TableMapEvent, TransactionPayloadEvent};
use mysql_common::binlog::consts::{BinlogVersion, EventType};
use mysql_common::binlog::{BinlogFileHeader, EventStreamReader};

use super::row_image::RowLayout;

/// The path of a fixture another project published.
pub fn published(name: &str) -> String {
    format!("{}/tests/fixtures/mysql-binlogs/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The path of one of this project's fixtures.
pub fn own(name: &str) -> String {
    format!("{}/tests/fixtures/binlog/{name}", env!("CARGO_MANIFEST_DIR"))
}

/// The events of a binlog file as the relay's binlog stream yields them: a
/// compressed transaction (TRANSACTION_PAYLOAD) is followed by the events inside
/// it, read the way mysql_async's stream reads them.
pub struct FixtureEvents {
    reader: EventStreamReader,
    input: BufReader<File>,
    payload: Option<Cursor<Vec<u8>>>,
}

impl Iterator for FixtureEvents {
    type Item = io::Result<Event>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(payload) = self.payload.as_mut() {
            match self.reader.read_decompressed(payload).transpose() {
                Some(event) => return Some(event),
                None => self.payload = None,
            }
        }
        let event = match self.reader.read(&mut self.input).transpose()? {
            Ok(event) => event,
            Err(error) => return Some(Err(error)),
        };
        if event.header().event_type_raw() == EventType::TRANSACTION_PAYLOAD_EVENT as u8 {
            if let Ok(payload) = event.read_event::<TransactionPayloadEvent<'_>>() {
                self.payload = Some(Cursor::new(payload.danger_decompress()));
            }
        }
        Some(Ok(event))
    }
}

/// The events of the binlog file at `path`.
pub fn fixture(path: &str) -> FixtureEvents {
    let mut input = BufReader::new(File::open(path).unwrap_or_else(|e| panic!("fixture {path}: {e}")));
    BinlogFileHeader::read(&mut input).expect("binlog file header");
    FixtureEvents { reader: EventStreamReader::new(BinlogVersion::Version4), input, payload: None }
}

/// Every insert (WRITE_ROWS event) of the binlog file at `path`, with the TABLE_MAP
/// it refers to.
pub fn inserts(path: &str) -> Vec<(Event, TableMapEvent<'static>)> {
    let mut found = Vec::new();
    let mut events = fixture(path);
    while let Some(event) = events.next() {
        let event = event.unwrap_or_else(|e| panic!("{path}: unreadable event: {e}"));
        let Ok(Some(EventData::RowsEvent(rows))) = event.read_data() else { continue };
        if !matches!(rows, RowsEventData::WriteRowsEvent(_) | RowsEventData::WriteRowsEventV1(_)) {
            continue;
        }
        let table_map = events.reader.get_tme(rows.table_id()).expect("a TABLE_MAP before its rows").clone();
        found.push((event, table_map.into_owned()));
    }
    found
}

/// The rows of an insert found by [`inserts`].
pub fn rows_of(event: &Event) -> RowsEventData<'_> {
    match event.read_data() {
        Ok(Some(EventData::RowsEvent(rows))) => rows,
        _ => panic!("not a row event"),
    }
}

/// A row layout of `table_map` that keeps every column, and how many there are.
pub fn keeping_every_column(table_map: &TableMapEvent<'_>) -> (RowLayout, usize) {
    let count = usize::try_from(table_map.columns_count()).expect("a column count");
    (RowLayout::new(table_map, &Vec::from_iter(0..count)).expect("a row layout"), count)
}
