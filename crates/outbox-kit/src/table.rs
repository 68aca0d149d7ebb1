//! Which outbox table: its schema and name, quoted for SQL.

/// An outbox table (`schema`.`table`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxTable {
    pub schema: String,
    pub table: String,
}

impl OutboxTable {
    /// `` `schema`.`table` `` (names are validated identifiers).
    pub fn qualified(&self) -> String {
        format!("`{}`.`{}`", self.schema, self.table)
    }
}
