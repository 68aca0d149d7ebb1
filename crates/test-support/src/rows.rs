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

/// A multi-row `INSERT` of `rows` into `table`, with its parameters.
pub fn insert_sql(table: &OutboxTable, rows: impl IntoIterator<Item = Row>) -> (String, Params) {
    let params: Vec<Value> = rows
        .into_iter()
        .flat_map(|r| [r.event_id.into(), r.biz_key.into(), r.topic.into(), r.payload.into()])
        .collect();
    let values = vec!["(?, ?, ?, ?)"; params.len() / 4].join(", ");
    let sql = format!("INSERT INTO {} (event_id, biz_key, topic, payload) VALUES {values}", table.qualified());
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
    }
}
