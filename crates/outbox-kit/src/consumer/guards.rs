//! The seed's second line of defence, for use inside a handler's transaction:
//! a version guard (drop an update older than what is stored) and a state-machine
//! guard (only allowed transitions). Deduplication stops the same event twice; these
//! stop different events arriving out of order from undoing each other.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Transaction, Value};

/// Records `version` for (`entity`, `key`) if it is newer than the stored one.
/// Returns `true` when it is newer (apply the update), `false` when an equal or newer
/// version was already applied (drop it).
pub async fn advance_version(
    tx: &mut Transaction<'_>,
    entity: &str,
    key: &str,
    version: u64,
) -> Result<bool, mysql_async::Error> {
    // Affected rows: 1 inserted, 2 updated, 0 unchanged (the stored version is newer).
    tx.exec_drop(
        "INSERT INTO entity_version (entity, entity_key, version) VALUES (?, ?, ?) \
         ON DUPLICATE KEY UPDATE version = IF(VALUES(version) > version, VALUES(version), version)",
        (entity, key, version),
    )
    .await?;
    Ok(tx.affected_rows() > 0)
}

/// Allowed state transitions, e.g. `PENDING_PAYMENT -> PAID -> SHIPPED`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateMachine {
    transitions: Vec<(String, String)>,
}

/// What a guarded transition did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// The row moved to the new state.
    Applied,
    /// The row was not in a state the transition is allowed from (already there, or
    /// a stale or illegal event): nothing changed.
    Rejected,
}

/// A table or column name that is not a plain identifier.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a plain SQL identifier (letters, digits, _)")]
pub struct BadIdentifier(pub String);

impl StateMachine {
    /// A machine with the given allowed (from, to) transitions.
    pub fn new<S: Into<String>>(transitions: impl IntoIterator<Item = (S, S)>) -> Self {
        Self { transitions: transitions.into_iter().map(|(from, to)| (from.into(), to.into())).collect() }
    }

    /// States from which `to` may be entered.
    pub fn sources_of(&self, to: &str) -> Vec<&str> {
        self.transitions.iter().filter(|(_, t)| t == to).map(|(from, _)| from.as_str()).collect()
    }

    /// Whether `from -> to` is allowed.
    pub fn allows(&self, from: &str, to: &str) -> bool {
        self.transitions.iter().any(|(f, t)| f == from && t == to)
    }

    /// `UPDATE table SET state_column = to WHERE id_column = id AND state_column IN (sources of to)`.
    pub async fn apply(
        &self,
        tx: &mut Transaction<'_>,
        table: &str,
        id_column: &str,
        id: impl Into<Value>,
        state_column: &str,
        to: &str,
    ) -> Result<Result<Transition, BadIdentifier>, mysql_async::Error> {
        if let Some(bad) = [table, id_column, state_column].into_iter().find(|n| !is_identifier(n)) {
            return Ok(Err(BadIdentifier(bad.to_owned())));
        }
        let sources = self.sources_of(to);
        if sources.is_empty() {
            return Ok(Ok(Transition::Rejected));
        }
        let placeholders = vec!["?"; sources.len()].join(",");
        let sql = format!("UPDATE `{table}` SET `{state_column}` = ? WHERE `{id_column}` = ? AND `{state_column}` IN ({placeholders})");
        let mut params: Vec<Value> = vec![to.into(), id.into()];
        params.extend(sources.into_iter().map(Value::from));
        tx.exec_drop(sql, Params::Positional(params)).await?;
        Ok(Ok(if tx.affected_rows() == 1 { Transition::Applied } else { Transition::Rejected }))
    }
}

fn is_identifier(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_listed_transitions_are_allowed() {
        let machine = StateMachine::new([("PENDING_PAYMENT", "PAID"), ("PAID", "SHIPPED")]);
        assert!(machine.allows("PENDING_PAYMENT", "PAID"));
        assert!(!machine.allows("PAID", "PAID"), "a repeated PAID is not a transition");
        assert!(!machine.allows("SHIPPED", "PAID"));
        assert_eq!(machine.sources_of("SHIPPED"), ["PAID"]);
        assert!(machine.sources_of("REFUNDED").is_empty());
    }

    #[test]
    fn identifiers_are_checked() {
        assert!(is_identifier("orders_2026"));
        assert!(!is_identifier("orders; DROP TABLE x"));
        assert!(!is_identifier(""));
    }
}
