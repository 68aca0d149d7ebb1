//! The values the relay reads out of a WRITE_ROWS event's row images.
//!
//! mysql_common's own row reader describes every column of every row in full (schema,
//! table and column names, flags, character set: several allocations per column) and
//! reads the TABLE_MAP's optional metadata again for each row, although the relay uses
//! five or six values of a row and none of those descriptions. This reader takes each
//! column's type, metadata and signedness from the TABLE_MAP once ([`RowLayout`]),
//! walks each row image with them and keeps only the values of the columns asked
//! for. The kept values are read by mysql_common, exactly as its reader does; a
//! column not kept is stepped over by its width when its type tells it (numbers,
//! dates and times, strings, BLOBs and JSON behind a length), without building or
//! checking its value.

use std::io;

use mysql_async::binlog::events::{OptionalMetaExtractor, RowsEventData, TableMapEvent};
use mysql_async::binlog::value::BinlogValue;
use mysql_async::Value;
use mysql_common::constants::ColumnType;
use mysql_common::io::ParseBuf;

/// How one column's value is written in a row image.
#[derive(Debug)]
struct ColumnLayout {
    kind: ColumnType,
    meta: Vec<u8>,
    unsigned: bool,
    /// The value is kept (others are read past).
    kept: bool,
    /// How a value of this column is stepped over.
    width: Width,
}

/// How many bytes a value takes in a row image, as far as the column's type says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Width {
    /// Always this many bytes.
    Fixed(usize),
    /// A little-endian length of this many bytes, then that many bytes.
    Prefixed(usize),
    /// Only reading the value tells (decimals, bits, CHAR, enums and the rest).
    Unknown,
}

impl Width {
    /// The width of a value of type `kind` with the TABLE_MAP's `meta`.
    fn of(kind: ColumnType, meta: &[u8]) -> Self {
        use ColumnType::*;
        // Fractional seconds: one byte per two digits of precision.
        let fraction = || match meta.first() {
            Some(1 | 2) => 1,
            Some(3 | 4) => 2,
            Some(5 | 6) => 3,
            _ => 0,
        };
        match kind {
            MYSQL_TYPE_TINY | MYSQL_TYPE_YEAR => Width::Fixed(1),
            MYSQL_TYPE_SHORT => Width::Fixed(2),
            MYSQL_TYPE_INT24 | MYSQL_TYPE_TIME | MYSQL_TYPE_NEWDATE => Width::Fixed(3),
            MYSQL_TYPE_LONG | MYSQL_TYPE_FLOAT | MYSQL_TYPE_TIMESTAMP => Width::Fixed(4),
            MYSQL_TYPE_LONGLONG | MYSQL_TYPE_DOUBLE | MYSQL_TYPE_DATETIME => Width::Fixed(8),
            MYSQL_TYPE_TIMESTAMP2 => Width::Fixed(4 + fraction()),
            MYSQL_TYPE_DATETIME2 => Width::Fixed(5 + fraction()),
            MYSQL_TYPE_TIME2 => Width::Fixed(3 + fraction()),
            MYSQL_TYPE_VARCHAR | MYSQL_TYPE_VAR_STRING => match meta {
                [low, high, ..] => Width::Prefixed(if u16::from_le_bytes([*low, *high]) < 256 { 1 } else { 2 }),
                _ => Width::Unknown,
            },
            MYSQL_TYPE_JSON => Width::Prefixed(4),
            MYSQL_TYPE_TINY_BLOB | MYSQL_TYPE_MEDIUM_BLOB | MYSQL_TYPE_LONG_BLOB | MYSQL_TYPE_BLOB => match meta {
                [bytes @ 1..=4, ..] => Width::Prefixed(usize::from(*bytes)),
                _ => Width::Unknown,
            },
            _ => Width::Unknown,
        }
    }
}

/// How to read the row images of one table, as one TABLE_MAP describes it.
#[derive(Debug)]
pub struct RowLayout {
    columns: Vec<ColumnLayout>,
    /// The positions of the kept columns, ascending, each once.
    kept: Vec<usize>,
}

/// One row's kept values.
#[derive(Debug)]
pub struct RowValues<'a> {
    /// The positions of the kept columns, ascending.
    kept: &'a [usize],
    /// The value of each kept column, in the same order; `None` for a column not
    /// in the row image.
    values: Vec<Option<BinlogValue<'a>>>,
}

impl RowLayout {
    /// The layout of `table_map`'s columns, keeping the values of the columns at
    /// positions `kept`.
    pub fn new(table_map: &TableMapEvent<'_>, kept: &[usize]) -> io::Result<Self> {
        let mut kept = kept.to_vec();
        kept.sort_unstable();
        kept.dedup();
        let optional = OptionalMetaExtractor::new(table_map.iter_optional_meta())?;
        // One flag per numeric column, in order, when the source writes it.
        let mut signedness = optional.iter_signedness();
        let count = usize::try_from(table_map.columns_count()).map_err(invalid)?;
        let columns = (0..count)
            .map(|i| {
                let kind = table_map.get_column_type(i).map_err(invalid)?.ok_or_else(|| invalid("no column type"))?;
                let meta = table_map.get_column_metadata(i).unwrap_or_default();
                Ok(ColumnLayout {
                    kind,
                    width: Width::of(kind, meta),
                    meta: meta.to_vec(),
                    unsigned: kind.is_numeric_type() && signedness.next().unwrap_or(false),
                    kept: kept.binary_search(&i).is_ok(),
                })
            })
            .collect::<io::Result<_>>()?;
        Ok(Self { columns, kept })
    }

    /// The kept values of every row of `rows`, an insert into this layout's table.
    pub fn rows<'a>(&'a self, rows: &'a RowsEventData<'a>) -> io::Result<Rows<'a>> {
        if rows.columns_before_image().is_some() {
            return Err(invalid("a row event with before images is not an insert"));
        }
        let present = rows.columns_after_image().ok_or_else(|| invalid("a WRITE_ROWS event without row images"))?;
        let in_image: Vec<bool> = present.iter().by_vals().collect();
        if in_image.len() != self.columns.len() {
            return Err(invalid(format!(
                "a row event of {} columns for a TABLE_MAP of {}",
                in_image.len(),
                self.columns.len()
            )));
        }
        let image_columns = in_image.iter().filter(|&&present| present).count();
        Ok(Rows { layout: self, in_image, image_columns, data: ParseBuf(rows.rows_data()) })
    }
}

/// The rows of one WRITE_ROWS event, read one at a time.
pub struct Rows<'a> {
    layout: &'a RowLayout,
    /// Which columns the row images hold.
    in_image: Vec<bool>,
    image_columns: usize,
    data: ParseBuf<'a>,
}

impl<'a> Iterator for Rows<'a> {
    type Item = io::Result<RowValues<'a>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.data.is_empty() {
            return None;
        }
        let row = self.row();
        if row.is_err() {
            // Nothing after a row that cannot be read can be found.
            self.data = ParseBuf(&[]);
        }
        Some(row)
    }
}

impl<'a> Rows<'a> {
    fn row(&mut self) -> io::Result<RowValues<'a>> {
        let nulls =
            self.data.checked_eat(self.image_columns.div_ceil(8)).ok_or_else(|| invalid("row image cut short"))?;
        let mut values = Vec::with_capacity(self.layout.kept.len());
        let mut image_index = 0;
        for (column, &present) in self.layout.columns.iter().zip(&self.in_image) {
            if !present {
                if column.kept {
                    values.push(None);
                }
                continue;
            }
            let null = nulls[image_index / 8] >> (image_index % 8) & 1 == 1;
            image_index += 1;
            match (null, column.kept) {
                (true, true) => values.push(Some(BinlogValue::Value(Value::NULL))),
                (false, true) => {
                    values.push(Some(self.data.parse((column.kind, column.meta.as_slice(), column.unsigned, false))?))
                }
                (true, false) => {}
                (false, false) => step_over(&mut self.data, column)?,
            }
        }
        Ok(RowValues { kept: &self.layout.kept, values })
    }
}

/// Moves `data` past one value of `column`, which is not kept.
fn step_over<'a>(data: &mut ParseBuf<'a>, column: &'a ColumnLayout) -> io::Result<()> {
    let width = match column.width {
        Width::Fixed(bytes) => bytes,
        Width::Prefixed(bytes) => {
            let length = data.checked_eat(bytes).ok_or_else(|| invalid("row image cut short"))?;
            length.iter().rev().fold(0, |width, &byte| width << 8 | usize::from(byte))
        }
        Width::Unknown => {
            let _: BinlogValue<'_> = data.parse((column.kind, column.meta.as_slice(), column.unsigned, false))?;
            return Ok(());
        }
    };
    data.checked_eat(width).map(drop).ok_or_else(|| invalid("row image cut short"))
}

impl<'a> RowValues<'a> {
    /// The value of the column at `position`, if kept and in the row image.
    pub fn get(&self, position: usize) -> Option<&BinlogValue<'a>> {
        self.values.get(self.slot(position)?)?.as_ref()
    }

    /// Takes the value of the column at `position` out of the row.
    pub fn take(&mut self, position: usize) -> Option<BinlogValue<'a>> {
        let slot = self.slot(position)?;
        self.values.get_mut(slot)?.take()
    }

    fn slot(&self, position: usize) -> Option<usize> {
        self.kept.binary_search(&position).ok()
    }
}

fn invalid(detail: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, detail.to_string())
}

#[cfg(test)]
mod tests {
    use super::super::fixtures::{inserts, keeping_every_column, own, published, rows_of};
    use super::*;

    /// Every readable fixture: MariaDB and MySQL, with and without column names and
    /// signedness in the TABLE_MAP, compressed transactions, JSON, BLOBs, temporal
    /// and numeric types.
    const FIXTURES: [(&str, bool); 12] = [
        ("binlog_transaction_with_GTID.000001", true),
        ("binlog_transaction_with_GTID_TAG.000001", true),
        ("binlog_transaction_with_anonymous_GTID.000001", true),
        ("json-opaque.binlog", true),
        ("json.binlog.000001", true),
        ("mariadb-bin.000001", true),
        ("mysql-8.0.31-compressed.000057", true),
        ("transaction_compression.000001", true),
        ("update-partial-row.binlog", true),
        ("write-full-row.binlog", true),
        ("mariadb-10.11-alter-full-metadata.000001", false),
        ("mariadb-10.11-xa-savepoint.000003", false),
    ];

    #[test]
    fn every_value_is_read_as_mysql_commons_own_row_reader_reads_it() {
        let mut rows_compared = 0;
        for (name, is_published) in FIXTURES {
            let path = if is_published { published(name) } else { own(name) };
            for (event, table_map) in inserts(&path) {
                let rows = rows_of(&event);
                let theirs: Vec<_> =
                    rows.rows(&table_map).map(|row| row.expect("their row").1.expect("an after image")).collect();
                rows_compared += theirs.len();
                // Every column kept, then each one alone: the others are stepped over,
                // before and after it.
                let (every, count) = keeping_every_column(&table_map);
                let alone = (0..count)
                    .map(|column| (RowLayout::new(&table_map, &[column]).expect("a row layout"), vec![column]));
                for (layout, kept) in std::iter::once((every, Vec::from_iter(0..count))).chain(alone) {
                    let ours: Vec<RowValues<'_>> =
                        layout.rows(&rows).expect("row images").collect::<io::Result<_>>().expect("our rows");
                    assert_eq!(ours.len(), theirs.len(), "{name}: rows in an event");
                    for (ours, theirs) in ours.iter().zip(&theirs) {
                        for &position in &kept {
                            assert_eq!(ours.get(position), theirs.as_ref(position), "{name}: column {position}");
                        }
                    }
                }
            }
        }
        assert!(rows_compared > 50, "the fixtures hold inserts: {rows_compared} rows compared");
    }

    /// A value of `kind` as a row image holds it: `width` bytes, or a length of
    /// `width` bytes and a small value (JSON's: a null).
    fn value_bytes(kind: ColumnType, width: Width) -> Vec<u8> {
        match (kind, width) {
            (ColumnType::MYSQL_TYPE_JSON, _) => vec![2, 0, 0, 0, 0x04, 0x00],
            (_, Width::Fixed(bytes)) => vec![0x80; bytes],
            (_, Width::Prefixed(bytes)) => [vec![3], vec![0; bytes - 1], b"abc".to_vec()].concat(),
            (_, Width::Unknown) => panic!("{kind:?} has no width"),
        }
    }

    #[test]
    fn every_width_is_what_mysql_commons_reader_consumes() {
        use ColumnType::*;
        let mut cases: Vec<(ColumnType, Vec<u8>)> = [
            MYSQL_TYPE_TINY,
            MYSQL_TYPE_SHORT,
            MYSQL_TYPE_INT24,
            MYSQL_TYPE_LONG,
            MYSQL_TYPE_LONGLONG,
            MYSQL_TYPE_FLOAT,
            MYSQL_TYPE_DOUBLE,
            MYSQL_TYPE_YEAR,
            MYSQL_TYPE_TIME,
            MYSQL_TYPE_NEWDATE,
            MYSQL_TYPE_DATETIME,
            MYSQL_TYPE_TIMESTAMP,
        ]
        .into_iter()
        .map(|kind| (kind, vec![]))
        .collect();
        for precision in 0..=6 {
            for kind in [MYSQL_TYPE_TIMESTAMP2, MYSQL_TYPE_DATETIME2, MYSQL_TYPE_TIME2] {
                cases.push((kind, vec![precision]));
            }
        }
        for length_bytes in 1..=4 {
            cases.push((MYSQL_TYPE_BLOB, vec![length_bytes]));
        }
        cases.extend([
            (MYSQL_TYPE_VARCHAR, 255u16.to_le_bytes().to_vec()),
            (MYSQL_TYPE_VARCHAR, 256u16.to_le_bytes().to_vec()),
            (MYSQL_TYPE_JSON, vec![4]),
        ]);
        for (kind, meta) in cases {
            let width = Width::of(kind, &meta);
            let row = [value_bytes(kind, width), b"rest".to_vec()].concat();
            let mut theirs = ParseBuf(&row);
            let _: BinlogValue<'_> = theirs.parse((kind, meta.as_slice(), false, false)).expect("their value");
            let column = ColumnLayout { kind, meta: meta.clone(), unsigned: false, kept: false, width };
            let mut ours = ParseBuf(&row);
            step_over(&mut ours, &column).expect("stepped over");
            assert_eq!(ours.0, theirs.0, "{kind:?} with metadata {meta:?}: {width:?}");
            assert_eq!(ours.0, b"rest");
        }
    }

    #[test]
    fn only_the_kept_columns_are_kept_and_taken_once() {
        let (event, table_map) = inserts(&own("mariadb-10.11-xa-savepoint.000003")).remove(0);
        let rows = rows_of(&event);
        let layout = RowLayout::new(&table_map, &[0, 4]).expect("a row layout");
        let mut row = layout.rows(&rows).expect("row images").next().expect("a row").expect("readable");
        assert!(matches!(row.get(0), Some(BinlogValue::Value(Value::Int(_) | Value::UInt(_)))), "{row:?}");
        assert_eq!(row.get(1), None, "not kept");
        assert!(row.take(4).is_some());
        assert_eq!(row.take(4), None, "taken once");
        assert_eq!(row.get(99), None, "no such column");
    }

    #[test]
    fn a_row_image_cut_short_is_an_error_and_ends_the_rows() {
        let (event, table_map) = inserts(&own("mariadb-10.11-xa-savepoint.000003")).remove(0);
        let rows = rows_of(&event);
        let layout = RowLayout::new(&table_map, &[0]).expect("a row layout");
        let mut cut = layout.rows(&rows).expect("row images");
        let whole = cut.data.0.len();
        cut.data = ParseBuf(&cut.data.0[..whole - 3]);
        let results: Vec<_> = cut.collect();
        let (last, earlier) = results.split_last().expect("rows");
        assert!(last.is_err(), "the cut row is an error, and nothing is read after it");
        assert!(earlier.iter().all(Result::is_ok), "the rows before it are read");
    }
}
