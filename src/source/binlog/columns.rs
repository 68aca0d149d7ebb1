//! Which binlog column holds which outbox field.
//!
//! Row events carry values by position only. The names come from the TABLE_MAP
//! before them when the source writes full row metadata; otherwise from
//! information_schema (read at start and again whenever a TABLE_MAP shows a
//! different column count, i.e. after an ALTER TABLE).

use mysql_async::binlog::events::{OptionalMetadataField, TableMapEvent};
use mysql_async::prelude::Queryable;

use crate::event::EXTRA_COLUMNS;

/// Positions of the columns the relay reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ColumnMap {
    pub id: usize,
    pub event_id: usize,
    pub biz_key: usize,
    pub topic: usize,
    pub payload: usize,
    /// `created_at`, when the table has it: the start of the commit-to-ack latency.
    pub created_at: Option<usize>,
    /// The optional message columns the table has, in `EXTRA_COLUMNS` order.
    pub extras: [Option<usize>; 4],
    /// How many columns the table had when this map was made.
    pub count: usize,
}

/// The outbox table does not have what the relay needs.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ColumnError {
    #[error("outbox table {table} has no column `{column}`; run `outbox-relay migrate` or fix outbox.table")]
    Missing { table: String, column: &'static str },
    #[error("outbox table {table} does not exist or is not visible to the replication user (grant SELECT on it)")]
    NoTable { table: String },
}

/// The columns the relay needs, by name.
const REQUIRED: [&str; 5] = ["id", "event_id", "biz_key", "topic", "payload"];

impl ColumnMap {
    /// Builds the map from the table's column names in ordinal order.
    pub fn from_names(table: &str, names: &[String]) -> Result<Self, ColumnError> {
        if names.is_empty() {
            return Err(ColumnError::NoTable { table: table.to_owned() });
        }
        let position = |column: &'static str| {
            names
                .iter()
                .position(|n| n.eq_ignore_ascii_case(column))
                .ok_or(ColumnError::Missing { table: table.to_owned(), column })
        };
        let [id, event_id, biz_key, topic, payload] = REQUIRED;
        Ok(Self {
            id: position(id)?,
            event_id: position(event_id)?,
            biz_key: position(biz_key)?,
            topic: position(topic)?,
            payload: position(payload)?,
            created_at: position("created_at").ok(),
            extras: EXTRA_COLUMNS.map(|column| position(column).ok()),
            count: names.len(),
        })
    }

    /// The positions of the columns the relay reads.
    pub fn positions(&self) -> Vec<usize> {
        self.fields().into_iter().flatten().collect()
    }

    /// Whether every field is read from a column of its own, as in every map made
    /// from names.
    pub fn reads_each_column_once(&self) -> bool {
        let fields = self.fields();
        fields.iter().enumerate().all(|(i, field)| field.is_none() || !fields[i + 1..].contains(field))
    }

    fn fields(&self) -> [Option<usize>; 10] {
        let [tag, event_type, headers, deliver_at] = self.extras;
        [
            Some(self.id),
            Some(self.event_id),
            Some(self.biz_key),
            Some(self.topic),
            Some(self.payload),
            self.created_at,
            tag,
            event_type,
            headers,
            deliver_at,
        ]
    }

    /// The optional message columns the table has, by name.
    pub fn extra_names(&self) -> Vec<&'static str> {
        EXTRA_COLUMNS.iter().zip(self.extras).filter_map(|(name, at)| at.map(|_| *name)).collect()
    }

    /// Reads the table's columns from information_schema.
    ///
    /// See [`names_in`] for the names a TABLE_MAP may carry itself.
    pub async fn load(
        conn: &mut mysql_async::Conn,
        schema: &str,
        table: &str,
    ) -> Result<Result<Self, ColumnError>, mysql_async::Error> {
        let names: Vec<String> = conn
            .exec(
                "SELECT COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = ? AND TABLE_NAME = ? ORDER BY ORDINAL_POSITION",
                (schema, table),
            )
            .await?;
        Ok(Self::from_names(&format!("{schema}.{table}"), &names))
    }
}

/// The column names a TABLE_MAP carries (`binlog_row_metadata = FULL`), or `None`
/// when it carries none.
pub fn names_in(table_map: &TableMapEvent<'_>) -> std::io::Result<Option<Vec<String>>> {
    for field in table_map.iter_optional_meta() {
        if let OptionalMetadataField::ColumnName(names) = field? {
            let names: std::io::Result<Vec<String>> =
                names.iter_names().map(|name| name.map(|n| n.name().into_owned())).collect();
            return names.map(Some);
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn maps_by_name_in_any_order() {
        let map = ColumnMap::from_names("app.o", &names(&["payload", "ID", "topic", "x", "biz_key", "event_id"]))
            .expect("map");
        assert_eq!((map.id, map.event_id, map.biz_key, map.topic, map.payload, map.count), (1, 5, 4, 2, 0, 6));
        assert_eq!(map.created_at, None, "optional");
        assert_eq!(map.extras, [None; 4], "optional");
    }

    #[test]
    fn finds_the_optional_message_columns_the_table_has() {
        let map = ColumnMap::from_names(
            "app.o",
            &names(&["id", "event_id", "biz_key", "topic", "payload", "deliver_at", "TAG", "headers"]),
        )
        .expect("map");
        assert_eq!(map.extras, [Some(6), None, Some(7), Some(5)]);
        assert_eq!(map.extra_names(), ["tag", "headers", "deliver_at"]);
        assert!(map.reads_each_column_once());
        assert_eq!(map.positions(), [0, 1, 2, 3, 4, 6, 7, 5]);
    }

    #[test]
    fn a_map_made_from_names_reads_each_column_once_and_one_made_by_hand_may_not() {
        let map =
            ColumnMap::from_names("app.o", &names(&["id", "event_id", "biz_key", "topic", "payload", "created_at"]))
                .expect("map");
        assert!(map.reads_each_column_once());
        assert_eq!(map.positions(), [0, 1, 2, 3, 4, 5]);
        assert!(!ColumnMap { topic: 1, ..map }.reads_each_column_once(), "event_id and topic share column 1");
        assert!(!ColumnMap { created_at: Some(0), ..map }.reads_each_column_once(), "created_at is the id's column");
        assert!(ColumnMap { created_at: None, ..map }.reads_each_column_once());
    }

    #[test]
    fn names_the_missing_column() {
        let error =
            ColumnMap::from_names("app.o", &names(&["id", "event_id", "topic", "payload"])).expect_err("missing");
        assert_eq!(error, ColumnError::Missing { table: "app.o".into(), column: "biz_key" });
        assert!(error.to_string().contains("`biz_key`"));
    }

    #[test]
    fn no_columns_means_no_table() {
        assert!(matches!(ColumnMap::from_names("app.o", &[]), Err(ColumnError::NoTable { .. })));
    }
}
