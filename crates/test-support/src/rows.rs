//! Outbox rows as a test or the benchmark writes them: one multi-row INSERT.

use mysql_async::{Params, Value};
use outbox_kit::OutboxTable;

/// One row to insert.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub event_id: String,
    pub biz_key: String,
    pub topic: String,
    pub payload: String,
}

/// The optional message columns, the same for every row of an INSERT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageColumns {
    pub tag: String,
    pub event_type: String,
    /// A JSON object of strings.
    pub headers: String,
}

/// A multi-row `INSERT` of `rows` into `table`, with its parameters.
pub fn insert_sql(table: &OutboxTable, rows: impl IntoIterator<Item = Row>) -> (String, Params) {
    insert_sql_with(table, rows, None)
}

/// As [`insert_sql`], every row with `columns` when given.
pub fn insert_sql_with(
    table: &OutboxTable,
    rows: impl IntoIterator<Item = Row>,
    columns: Option<&MessageColumns>,
) -> (String, Params) {
    let (names, extra) = match columns {
        Some(c) => (", tag, event_type, headers", vec![c.tag.clone(), c.event_type.clone(), c.headers.clone()]),
        None => ("", Vec::new()),
    };
    let per_row = 4 + extra.len();
    let params: Vec<Value> = rows
        .into_iter()
        .flat_map(|r| {
            [r.event_id, r.biz_key, r.topic, r.payload].into_iter().chain(extra.iter().cloned()).map(Value::from)
        })
        .collect();
    let group = format!("({})", vec!["?"; per_row].join(", "));
    let values = vec![group; params.len() / per_row].join(", ");
    let sql = format!("INSERT INTO {} (event_id, biz_key, topic, payload{names}) VALUES {values}", table.qualified());
    (sql, Params::Positional(params))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_placeholder_group_per_row() {
        let table = OutboxTable { schema: "app".into(), table: "o".into() };
        let row =
            |i: u8| Row { event_id: format!("e{i}"), biz_key: "k".into(), topic: "t".into(), payload: "{}".into() };
        let (sql, params) = insert_sql(&table, [row(1), row(2)]);
        assert_eq!(sql, "INSERT INTO `app`.`o` (event_id, biz_key, topic, payload) VALUES (?, ?, ?, ?), (?, ?, ?, ?)");
        assert!(matches!(params, Params::Positional(p) if p.len() == 8));
        let columns = MessageColumns { tag: "PAID".into(), event_type: "OrderPaid".into(), headers: "{}".into() };
        let (sql, params) = insert_sql_with(&table, [row(1)], Some(&columns));
        assert_eq!(sql, "INSERT INTO `app`.`o` (event_id, biz_key, topic, payload, tag, event_type, headers) VALUES (?, ?, ?, ?, ?, ?, ?)");
        assert!(matches!(params, Params::Positional(p) if p.len() == 7));
    }
}
