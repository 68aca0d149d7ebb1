//! The consumer kit's dedup table as configuration and `--consumer-table` name it:
//! the table whose rows say which events a consumer handled, which the relay's
//! reconciliation compares SENT rows with.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The consumer kit's dedup table (`event_dedup` unless the consumer renamed it).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(try_from = "String", into = "String")]
pub struct DedupTable {
    schema: Option<String>,
    table: String,
}

impl DedupTable {
    /// `table` or `schema.table`, of letters, digits, `_` and `$`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let plain =
            |name: &str| !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || "_$".contains(c));
        match text.split_once('.') {
            Some((schema, table)) if plain(schema) && plain(table) => {
                Ok(Self { schema: Some(schema.to_owned()), table: table.to_owned() })
            }
            None if plain(text) => Ok(Self { schema: None, table: text.to_owned() }),
            _ => Err(format!("{text:?}: give a table name, or schema.table, of letters, digits and _")),
        }
    }

    /// The same table, in `schema` unless it names its own.
    pub fn in_schema(self, schema: &str) -> Self {
        Self { schema: self.schema.or_else(|| Some(schema.to_owned())), ..self }
    }

    /// `` `schema`.`table` ``, or `` `table` `` in the connection's database.
    pub fn qualified(&self) -> String {
        match &self.schema {
            Some(schema) => format!("`{schema}`.`{}`", self.table),
            None => format!("`{}`", self.table),
        }
    }
}

impl fmt::Display for DedupTable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.schema {
            Some(schema) => write!(f, "{schema}.{}", self.table),
            None => f.write_str(&self.table),
        }
    }
}

impl TryFrom<String> for DedupTable {
    type Error = String;

    fn try_from(text: String) -> Result<Self, Self::Error> {
        Self::parse(&text)
    }
}

impl From<DedupTable> for String {
    fn from(table: DedupTable) -> Self {
        table.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dedup_table_names_are_plain_identifiers() {
        assert_eq!(DedupTable::parse("event_dedup").map(|t| t.qualified()).as_deref(), Ok("`event_dedup`"));
        let in_app = DedupTable::parse("event_dedup").expect("plain").in_schema("app");
        assert_eq!(in_app.qualified(), "`app`.`event_dedup`");
        let own = DedupTable::parse("orders.event_dedup").expect("qualified").in_schema("app");
        assert_eq!(own.qualified(), "`orders`.`event_dedup`", "its own schema stays");
        assert!(DedupTable::parse("x`; DROP TABLE y").is_err() && DedupTable::parse("a.b.c").is_err());
    }
}
